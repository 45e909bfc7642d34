"""Accountant: zCDP conversions, dp_accounting agreement, DP-SGD against the DP-auto-GAN tables."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import GaussianDpEvent
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from dpql.privacy.accountant import (
    DEFAULT_ORDERS,
    calibrate_dpsgd_noise,
    dpsgd_epsilon,
    dpsgd_rdp,
    eps_and_order_from_rho,
    eps_from_rho,
    epsilon_from_events,
    epsilon_from_rdp,
    rho_from_eps_delta,
    rho_from_eps_delta_simple,
)
from dpql.privacy.ledger import Ledger, PrivacyEvent
from dpql.privacy.mechanisms import gaussian_sigma, gumbel_beta

rhos = st.floats(1e-7, 10.0)
deltas = st.floats(1e-14, 1e-2)


def _tight(rho: float, delta: float, alpha: np.ndarray) -> np.ndarray:
    return rho * alpha + np.log1p(-1 / alpha) - np.log(delta * alpha) / (alpha - 1)


@settings(max_examples=60, deadline=None)
@given(rhos, deltas)
def test_eps_from_rho_is_the_minimum_over_alpha(rho: float, delta: float) -> None:
    eps, alpha = eps_and_order_from_rho(rho, delta)
    if math.isinf(alpha):  # rho below the KL bound delta^2 >= 1 - exp(-rho): epsilon is 0
        assert eps == 0 and delta**2 >= -math.expm1(-rho)
        return
    grid = np.geomspace(1 + 1e-6, 1e9, 200_001)
    brute = _tight(rho, delta, grid).min()
    brute = max(0.0, brute)  # a negative bound means (0, delta)-DP
    assert eps <= brute + 1e-12
    assert eps >= brute - 1e-6 * max(1.0, brute)  # the grid is fine enough to be that close
    # neighbours of the optimal order are no better (a negative bound also means epsilon 0)
    assert max(0.0, _tight(rho, delta, np.array([alpha * 0.999, alpha * 1.001])).min()) >= eps - 1e-12
    assert eps <= rho + 2 * math.sqrt(rho * math.log(1 / delta))  # tighter than Bun-Steinke


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-3, 20.0), deltas)
def test_rho_from_eps_delta_round_trips(epsilon: float, delta: float) -> None:
    rho = rho_from_eps_delta(epsilon, delta)
    assert eps_from_rho(rho, delta) <= epsilon
    assert eps_from_rho(rho, delta) == pytest.approx(epsilon, abs=1e-9)
    assert eps_from_rho(math.nextafter(rho, math.inf) * (1 + 1e-12), delta) > epsilon
    assert rho > rho_from_eps_delta_simple(epsilon, delta)


def test_rap_pp_worked_rho_uses_the_simple_conversion() -> None:
    # rap_pp.md §4.2 table: NY income (n = 80,410), delta = 1/n^2, eps = 1 -> rho = 1.0829e-02.
    delta = 1 / 80_410**2
    assert rho_from_eps_delta_simple(1.0, delta) == pytest.approx(1.0829e-02, rel=1e-4)
    assert rho_from_eps_delta(1.0, delta) > 1.2 * 1.0829e-02


@st.composite
def zcdp_events(draw: st.DrawFn) -> list[PrivacyEvent]:
    events = []
    for i in range(draw(st.integers(1, 12))):
        rho = draw(st.floats(1e-6, 0.5))
        if draw(st.booleans()):
            l2 = draw(st.floats(1e-5, 1.0))
            sigma = gaussian_sigma(l2, rho)
            events.append(PrivacyEvent("p", "gaussian", f"g{i}", 3, l2, noise_scale=sigma, rho=rho))
        else:
            du, k = draw(st.floats(1e-5, 1.0)), draw(st.integers(1, 20))
            beta = gumbel_beta(du, k, rho)
            events.append(
                PrivacyEvent("p", "gumbel_top_k", f"s{i}", k, None, du, noise_scale=beta, rho=rho)
            )
    return events


@settings(max_examples=40, deadline=None)
@given(zcdp_events(), deltas)
def test_dp_accounting_matches_eps_from_total_rho(events: list[PrivacyEvent], delta: float) -> None:
    ledger = Ledger(events)
    result = epsilon_from_events(ledger.events, delta)
    assert result.epsilon == pytest.approx(eps_from_rho(ledger.total_rho(), delta), abs=1e-9)
    assert ledger.epsilon(delta) == result.epsilon
    # Independent check: a plain dp_accounting Gaussian of the same rho on its default grid can
    # only be looser (its grid misses the optimum).
    plain = RdpAccountant()
    plain.compose(GaussianDpEvent(1 / math.sqrt(2 * ledger.total_rho())))
    assert result.epsilon <= plain.get_epsilon(delta) + 1e-12


def test_external_tables_add_by_basic_composition() -> None:
    sigma = gaussian_sigma(1.0, 0.1)
    events = [
        PrivacyEvent("iproj.measure", "gaussian", "m", 1, 1.0, noise_scale=sigma, rho=0.1),
        PrivacyEvent.external(
            "accept.test", "holdout", epsilon=0.5, delta=1e-7, neighbouring="replace_one"
        ),
    ]
    result = epsilon_from_events(events, 1e-6)
    assert result.epsilon == pytest.approx(eps_from_rho(0.1, 1e-6 - 1e-7) + 0.5, abs=1e-9)
    with pytest.raises(ValueError):
        epsilon_from_events(events, 1e-7)


# DP-auto-GAN (dp_auto_gan.md §4.4): the paper converts RDP with the classic formula under
# add/remove. Its optimal orders are <= 77 (ADULT) or fractional (MIMIC eps = 2.70 is at 9.8), so
# dp_accounting's default grid plus the integers 2..256 reproduces every value.
PAPER_ORDERS = tuple(sorted(set(DEFAULT_ORDERS) | {float(a) for a in range(2, 257)}))
ADULT_M = 32_561


def _paper_eps(phases: list[tuple[float, float, int]], delta: float) -> tuple[float, float]:
    curve = sum(dpsgd_rdp(q, z, t, PAPER_ORDERS, neighbouring="add_remove") for q, z, t in phases)
    return epsilon_from_rdp(PAPER_ORDERS, curve, delta, conversion="classic")


@pytest.mark.parametrize(
    ("paper_eps", "z_ae", "z_d", "composed", "order", "ae_alone", "d_alone"),
    [
        (0.36, 5.0, 8.0, 0.3503, 67, 0.1980, 0.3011),
        (0.51, 2.5, 7.5, 0.5084, 47, 0.4123, 0.3215),
        (1.01, 1.5, 3.5, 1.0062, 24, 0.7734, 0.7078),
    ],
)
def test_dpsgd_reproduces_dp_auto_gan_adult(
    paper_eps: float,
    z_ae: float,
    z_d: float,
    composed: float,
    order: int,
    ae_alone: float,
    d_alone: float,
) -> None:
    ae = (64 / ADULT_M, z_ae, 10_000)
    disc = (128 / ADULT_M, z_d, 15_000)
    eps, alpha = _paper_eps([ae, disc], 1e-5)
    assert eps == pytest.approx(composed, abs=5e-5) and alpha == order
    assert math.ceil(eps * 100) / 100 == paper_eps  # "rounded up to guarantee validity"
    assert _paper_eps([ae], 0.5e-5)[0] == pytest.approx(ae_alone, abs=5e-5)
    assert _paper_eps([disc], 0.5e-5)[0] == pytest.approx(d_alone, abs=5e-5)


@pytest.mark.parametrize(
    ("z", "steps_d", "composed"), [(3.5, 6000, 0.8076), (2.3, 7000, 1.3216), (1.3, 7000, 2.6970)]
)
def test_dpsgd_reproduces_dp_auto_gan_mimic(z: float, steps_d: int, composed: float) -> None:
    m = 27_912
    eps, _ = _paper_eps([(100 / m, z, 15_000), (128 / m, z, steps_d)], 1e-5)
    assert eps == pytest.approx(composed, abs=5e-5)


def test_dpsgd_single_step_rdp_and_tight_conversion_match_the_digest() -> None:
    rdp = dpsgd_rdp(0.01, 1.1, 1, (2.0, 8.0, 32.0), neighbouring="add_remove")
    assert rdp == pytest.approx([1.2851e-4, 5.8407e-4, 8.4694], rel=1e-4)
    phases = [(64 / ADULT_M, 2.5, 10_000), (128 / ADULT_M, 7.5, 15_000)]
    curve = sum(dpsgd_rdp(q, z, t, PAPER_ORDERS, neighbouring="add_remove") for q, z, t in phases)
    assert epsilon_from_rdp(PAPER_ORDERS, curve, 1e-5)[0] == pytest.approx(0.394, abs=5e-4)


def test_replace_one_dpsgd_costs_more_than_add_remove() -> None:
    q, z, steps, delta = 128 / ADULT_M, 7.5, 15_000, 1e-5
    add_remove = dpsgd_epsilon(q, z, steps, delta, neighbouring="add_remove")
    replace_one = dpsgd_epsilon(q, z, steps, delta)
    assert add_remove < replace_one < 4 * add_remove


def test_calibrate_dpsgd_noise_recovers_the_paper_multiplier() -> None:
    q, steps, delta = 128 / ADULT_M, 15_000, 0.5e-5
    z = calibrate_dpsgd_noise(
        q,
        steps,
        0.3011,
        delta,
        neighbouring="add_remove",
        conversion="classic",
        orders=tuple(float(a) for a in range(2, 129)),  # the optimum is alpha = 77
    )
    assert z == pytest.approx(8.0, rel=2e-3)  # 0.3011 is itself rounded to 4 decimals


def test_calibrate_dpsgd_noise_with_other_events_fits_the_ledger() -> None:
    q, steps, delta, target = 128 / ADULT_M, 15_000, 1e-5, 1.0
    sigma = gaussian_sigma(1e-3, 0.02)
    measure = PrivacyEvent("iproj.measure", "gaussian", "m", 10, 1e-3, noise_scale=sigma, rho=0.02)
    rtol = 1e-3
    z = calibrate_dpsgd_noise(q, steps, target, delta, other_events=[measure], rtol=rtol)
    ledger = Ledger([measure])
    ledger.append(
        PrivacyEvent.dpsgd("gan.critic", "critic", sampling_rate=q, noise_multiplier=z, steps=steps)
    )
    eps = ledger.epsilon(delta)
    assert eps <= target
    assert eps > 0.99 * target
    less_noise = Ledger([measure])
    less_noise.append(
        PrivacyEvent.dpsgd(
            "gan.critic", "c", sampling_rate=q, noise_multiplier=z / (1 + 2 * rtol), steps=steps
        )
    )
    assert less_noise.epsilon(delta) > target
