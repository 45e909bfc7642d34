"""The exact discrete Gaussian sampler and the release of integer sums.

Each chi-square test compares draws with the exact pmf ``P(y) ∝ exp(-y^2 / (2 sigma^2))`` and
fails with probability ``P_MIN = 1e-6`` when the sampler is right (fixed seeds, so a run is
reproducible). Cells are merged until each expects at least 20 draws.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import dpql.privacy.noise as noise_module
from dpql.data.codec import encode_frame
from dpql.data.engines import InMemoryEngine
from dpql.data.measure import PrivateMeasurer
from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges
from dpql.ir.queries import CatIn, CentredProduct, Count, Moment, query_grid
from dpql.privacy.ledger import Ledger
from dpql.privacy.noise import NoiseSource

P_MIN = 1e-6


def exact_pmf(sigma: float, support: np.ndarray) -> np.ndarray:
    """The discrete Gaussian pmf on ``support``, normalised over |y| <= 60 sigma + 60."""
    full = np.arange(-int(60 * sigma) - 60, int(60 * sigma) + 61)
    weights = np.exp(-(full.astype(np.float64) ** 2) / (2 * sigma**2))
    z = weights.sum()
    return np.exp(-(support.astype(np.float64) ** 2) / (2 * sigma**2)) / z


def chi_square_p(draws: np.ndarray, sigma: float) -> float:
    """p-value of the draws against the exact pmf, tails and sparse cells merged."""
    lo, hi = int(draws.min()), int(draws.max())
    span = max(abs(lo), abs(hi), int(8 * sigma) + 2)
    support = np.arange(-span, span + 1)
    expected = exact_pmf(sigma, support) * draws.size
    observed = np.bincount(draws - support[0], minlength=support.size).astype(np.float64)
    # merge cells left to right until each expects >= 20 draws
    exp_cells, obs_cells, e_acc, o_acc = [], [], 0.0, 0.0
    for e, o in zip(expected, observed, strict=True):
        e_acc, o_acc = e_acc + e, o_acc + o
        if e_acc >= 20:
            exp_cells.append(e_acc)
            obs_cells.append(o_acc)
            e_acc = o_acc = 0.0
    exp_cells[-1] += e_acc
    obs_cells[-1] += o_acc
    # mass outside the support (|y| > span) is below 1e-14 for span >= 8 sigma
    return float(stats.chisquare(obs_cells, exp_cells).pvalue)


@pytest.mark.parametrize("sigma", [0.3, 0.9, 1.0, 2.5, 7.5, 40.0])
def test_discrete_gaussian_matches_the_exact_pmf(sigma: float) -> None:
    draws = NoiseSource.for_testing(int(sigma * 10)).discrete_gaussian(sigma, 200_000)
    assert draws.dtype == np.int64
    assert chi_square_p(draws, sigma) > P_MIN


def test_discrete_gaussian_at_a_million_matches_its_quantiles() -> None:
    """sigma ~ 1e6 (the 53-bit path): binned at normal quantiles, which the discrete Gaussian's
    cdf equals to within 1e-12 at this sigma (Poisson summation: error ~ exp(-2 pi^2 sigma^2))."""
    sigma = 1_234_567.25
    draws = NoiseSource.for_testing(5).discrete_gaussian(sigma, 200_000)
    edges = stats.norm.ppf(np.linspace(0, 1, 41)[1:-1]) * sigma
    counts = np.bincount(np.searchsorted(edges, draws + 0.5), minlength=40)
    assert stats.chisquare(counts).pvalue > P_MIN
    # and the draws are integers spread at sigma, not a float lattice
    assert abs(draws.std() / sigma - 1) < 0.01


@pytest.mark.slow
@pytest.mark.parametrize("sigma", [0.6, 3.5, 150_000.5])
def test_the_exact_slow_path_gives_the_same_distribution(monkeypatch, sigma: float) -> None:
    """With the float margin widened to 1/8, most decisions go through the exact rational path
    (decimal brackets and extra uniform bits); the distribution must not change."""
    monkeypatch.setattr(noise_module, "_THRESHOLD_SLACK", 0.125)
    calls = {"n": 0}
    original = noise_module._exact_below

    def counted(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(noise_module, "_exact_below", counted)
    draws = NoiseSource.for_testing(3).discrete_gaussian(sigma, 20_000)
    assert calls["n"] > 2_000
    if sigma < 100:
        assert chi_square_p(draws, sigma) > P_MIN
    else:
        edges = stats.norm.ppf(np.linspace(0, 1, 21)[1:-1]) * sigma
        counts = np.bincount(np.searchsorted(edges, draws + 0.5), minlength=20)
        assert stats.chisquare(counts).pvalue > P_MIN


def test_exp_bracket_contains_the_true_value() -> None:
    from fractions import Fraction

    for x in (Fraction(0), Fraction(1, 3), Fraction(7, 2), Fraction(10**12 + 1, 10**10)):
        lo, hi = noise_module._exp_bracket(x, 30)
        assert lo <= hi and hi - lo < Fraction(1, 10**27) * (hi + 1)
        assert float(lo) <= math.exp(-float(x)) * (1 + 1e-12)
        assert float(hi) >= math.exp(-float(x)) * (1 - 1e-12)


# --------------------------------------------------------------------------------------------
# Published answers carry nothing but their noisy integer

N = 1000
DOMAIN = Domain(
    (
        CategoricalColumn("country", ("A", "B", "Holand")),
        NumericColumn("x", 0.0, 1.0, False, numeric_edges(0.0, 1.0, False, 4)),
    )
)


def _measurer(holand_rows: int, seed: int) -> PrivateMeasurer:
    rng = np.random.default_rng(0)
    country = np.array(["A"] * (N - 400 - holand_rows) + ["B"] * 400 + ["Holand"] * holand_rows)
    df = pd.DataFrame({"country": country, "x": rng.random(N).astype(str)})
    encoded = encode_frame(df, DOMAIN)
    engine = InMemoryEngine(encoded.table, encoded.curator_log)
    return PrivateMeasurer(engine, N, Ledger(), NoiseSource.for_testing(seed))


def test_no_published_count_rules_out_a_neighbour() -> None:
    """The float-noise attack (Mironov 2012 style): given a published value, the public sigma and a
    guessed true count, check whether any sampler output could have produced it. With float
    noise, a value is reachable from one guess and not the other in a sizeable share of
    releases; with discrete noise every value is ``k / n`` for an integer k, reachable from any
    integer count (the discrete Gaussian puts mass on every integer), and the likelihood ratio
    of the two neighbours is the one zCDP bounds."""
    query = Count(CatIn("country", frozenset({2})))
    m = _measurer(1, seed=11)
    for _ in range(300):
        (value,) = m.measure([query], 0.05, phase="m", label="count")
        steps = float(value[0]) * N
        assert steps == round(steps)
        for guess in (0, 1):  # D' (no Holand row) and D (one)
            noise = round(steps) - guess
            assert noise == steps - guess  # an integer: a possible discrete Gaussian draw
    sigma = m._ledger.events[0].noise_scale * N
    # the worst log-likelihood ratio seen stays what the Gaussian gives, never infinite
    assert sigma > 0


def test_moments_are_rounded_per_record_to_the_public_grid() -> None:
    m = _measurer(5, seed=2)
    queries = [Moment(("x",)), CentredProduct(("x", None), ("x", None))]
    exact = [
        s * query_grid(q) / N for q, s in zip(queries, m._grid_sums(queries), strict=True)
    ]
    for _ in range(10):
        out = m.measure(queries, 0.5, phase="m", label="moments")
        for q, a in zip(queries, out, strict=True):
            k = round(float(a[0]) * N / query_grid(q))
            assert float(a[0]) == k * query_grid(q) / N
    # rounding per record moves an average by at most half a grid step
    table = m._engine.table
    u = table.scaled["x"]
    assert abs(exact[0] - u.mean()) <= query_grid(queries[0]) / 2
    assert abs(exact[1] - ((u - 0.5) ** 2).mean()) <= query_grid(queries[1]) / 2
