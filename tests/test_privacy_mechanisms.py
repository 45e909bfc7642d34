"""Statistical tests of the noise source and the mechanisms' calibration.

Every statistical check fails with probability about 1e-6 when the code is right (two-sided
bounds at P = 5e-7 each side, or p-value > 1e-6), with fixed seeds so a run is reproducible.
"""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest
from scipy import stats

from dpql.privacy.ledger import Ledger
from dpql.privacy.mechanisms import gaussian_mechanism, gaussian_sigma, gumbel_beta, gumbel_top_k
from dpql.privacy.noise import NoiseSource, default_noise

TAIL = 5e-7  # per side
Z = float(stats.norm.isf(TAIL))
P_MIN = 1e-6


def _mech_kwargs(seed: int, ledger: Ledger | None = None) -> dict:
    return {
        "noise": NoiseSource.for_testing(seed),
        "ledger": ledger if ledger is not None else Ledger(),
        "phase": "test",
        "label": "q",
    }


def test_gaussian_mechanism_has_calibrated_sigma_and_logs_one_event() -> None:
    size, l2, rho, unit = 200_000, 0.01, 0.05, 2000.0
    kwargs = _mech_kwargs(1)
    # one block of integer sums 600, released in units of 1/unit: sd sigma * unit steps
    (out,) = gaussian_mechanism([np.full(size, 600.0)], [unit], l2, rho, **kwargs)
    sigma = l2 / math.sqrt(2 * rho)
    assert out.dtype == np.int64
    resid = (out - 600) / unit
    # at sigma * unit = 44.7 steps the discrete Gaussian's variance is sigma^2 to 1e-300;
    # (n-1) s^2 / sigma^2 ~ chi2(n-1) to within the (negligible) kurtosis difference
    chi = (size - 1) * resid.var(ddof=1) / sigma**2
    assert stats.chi2.ppf(TAIL, size - 1) < chi < stats.chi2.isf(TAIL, size - 1)
    assert abs(resid.mean()) < Z * sigma / math.sqrt(size)
    (event,) = kwargs["ledger"].events
    assert event.mechanism == "gaussian" and event.count == size
    assert event.noise_scale == pytest.approx(sigma, rel=1e-15) and event.rho == rho


def test_gaussian_mechanism_gives_each_block_its_own_scale_and_refuses_fractions() -> None:
    kwargs = _mech_kwargs(4)
    a, b = gaussian_mechanism(
        [np.zeros(50_000), np.zeros(50_000)], [100.0, 1000.0], 0.1, 0.5, **kwargs
    )
    # sigma = 0.1: sd 10 and 100 steps
    assert a.std() == pytest.approx(10, rel=0.03) and b.std() == pytest.approx(100, rel=0.03)
    with pytest.raises(ValueError, match="integer sums"):
        gaussian_mechanism([np.array([0.5])], [1.0], 1.0, 0.5, **_mech_kwargs(0))


def test_gaussian_sigma_matches_zcdp_definition() -> None:
    # Rényi divergence of N(0, s^2) vs N(D, s^2) at order alpha is alpha D^2 / (2 s^2) = rho alpha.
    sigma = gaussian_sigma(math.sqrt(2) / 1000, 0.01)
    assert (math.sqrt(2) / 1000) ** 2 / (2 * sigma**2) == pytest.approx(0.01, rel=1e-14)


def test_gumbel_noise_has_calibrated_moments_and_distribution() -> None:
    size, beta = 200_000, 0.37
    x = NoiseSource.for_testing(2).gumbel(size, beta)
    mean, var = np.euler_gamma * beta, math.pi**2 * beta**2 / 6
    assert abs(x.mean() - mean) < Z * math.sqrt(var / size)
    # sd of the sample variance ~ var * sqrt((kurtosis_excess + 2) / n), Gumbel excess = 12/5
    assert abs(x.var(ddof=1) - var) < Z * var * math.sqrt((12 / 5 + 2) / size)
    assert stats.kstest(x, "gumbel_r", args=(0.0, beta)).pvalue > P_MIN


def test_gumbel_top1_pick_probability_is_logistic_in_score_gap_over_beta() -> None:
    # argmax of u_i + Gumbel(beta) picks i w.p. exp(u_i/beta)/sum: here 1/(1 + exp(-gap/beta)).
    du, rho, gap, trials = 0.01, 0.01**2 / 2, 1.0, 20_000  # beta = du sqrt(1/(2 rho)) = 1
    assert gumbel_beta(du, 1, rho) == pytest.approx(1.0)
    kwargs = _mech_kwargs(3)
    wins = sum(
        int(gumbel_top_k(np.array([0.0, gap]), du, 1, rho, **kwargs)[0] == 1) for _ in range(trials)
    )
    p = 1 / (1 + math.exp(-gap))
    assert abs(wins / trials - p) < Z * math.sqrt(p * (1 - p) / trials)
    assert len(kwargs["ledger"]) == trials


def test_gumbel_top2_order_follows_peeling_probabilities() -> None:
    # One-shot top-k == k peels of the exponential mechanism (Durfee & Rogers 2019); beta includes
    # sqrt(k). Chi-square goodness of fit over the 6 ordered pairs out of 3 candidates.
    du, k, trials = 0.01, 2, 12_000
    rho = k * du**2 / 2  # beta = 1
    scores = np.array([0.0, 0.5, 1.0])
    kwargs = _mech_kwargs(4)
    counts: dict[tuple[int, int], int] = {}
    for _ in range(trials):
        first, second = gumbel_top_k(scores, du, k, rho, **kwargs)
        counts[(int(first), int(second))] = counts.get((int(first), int(second)), 0) + 1
    w = np.exp(scores)
    pairs = [(i, j) for i in range(3) for j in range(3) if i != j]
    expected = [trials * w[i] / w.sum() * w[j] / (w.sum() - w[i]) for i, j in pairs]
    observed = [counts.get(pair, 0) for pair in pairs]
    assert stats.chisquare(observed, expected).pvalue > P_MIN


def test_gumbel_top_k_picks_the_true_top_k_at_huge_rho() -> None:
    rng = np.random.default_rng(5)
    scores = rng.permutation(np.arange(50) / 100)  # gaps 0.01 >> beta ~ 1e-6
    top = gumbel_top_k(scores, 1e-3, 5, 1e6, **_mech_kwargs(5))
    assert top.tolist() == np.argsort(-scores)[:5].tolist()


def test_gumbel_top_k_is_near_uniform_at_tiny_rho() -> None:
    scores, trials = np.array([0.0, 0.25, 0.5, 0.75, 1.0]), 10_000
    kwargs = _mech_kwargs(6)  # beta ~ 7e3: selection probabilities within 1e-4 of uniform
    firsts = [int(gumbel_top_k(scores, 1.0, 1, 1e-8, **kwargs)[0]) for _ in range(trials)]
    assert stats.chisquare(np.bincount(firsts, minlength=5)).pvalue > P_MIN


def test_gumbel_top_k_never_picks_excluded_and_clips_k() -> None:
    ledger = Ledger()
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    for seed in range(50):
        top = gumbel_top_k(scores, 0.5, 4, 0.1, exclude=[0, 2, 3], **_mech_kwargs(seed, ledger))
        assert sorted(top.tolist()) == [1, 4]
    event = ledger.events[-1]
    assert event.count == 2 and event.rho == 0.1
    assert event.noise_scale == pytest.approx(gumbel_beta(0.5, 2, 0.1))
    with pytest.raises(ValueError, match="no eligible"):
        gumbel_top_k(scores, 0.5, 1, 0.1, exclude=range(5), **_mech_kwargs(0))


def test_noise_source_seeding_and_secrecy() -> None:
    a, b = NoiseSource.for_testing(11), NoiseSource.for_testing(11)
    assert a.reproducible
    assert np.array_equal(a.discrete_gaussian(3.0, 4), b.discrete_gaussian(3.0, 4))
    prod = default_noise()
    assert not prod.reproducible
    # production bits come from the OS CSPRNG, with no seed or generator state to leak
    assert not hasattr(prod, "_generator")
    assert not np.array_equal(prod.discrete_gaussian(1e6, 4), NoiseSource().discrete_gaussian(1e6, 4))
    seed = 987654321987654321
    assert str(seed) not in repr(NoiseSource.for_testing(seed))
    for leak in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError):
            leak(prod)
    with pytest.raises(ValueError):
        prod.discrete_gaussian(0.0, 3)
    with pytest.raises(ValueError):
        prod.discrete_gaussian(float("nan"), 3)


def test_jax_key_is_fresh_and_reproducible_only_for_testing() -> None:
    import jax

    def bits(source: NoiseSource) -> list[int]:
        return jax.random.key_data(source.jax_key()).tolist()

    assert bits(NoiseSource.for_testing(7)) == bits(NoiseSource.for_testing(7))
    assert len(bits(NoiseSource.for_testing(7))) == 4  # 128 key bits (rbg)
    prod = NoiseSource()
    assert bits(prod) != bits(prod)
    assert jax.random.normal(prod.jax_key(), (3,)).shape == (3,)
