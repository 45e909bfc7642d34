"""Ledger events, JSON round trips, the rho cap, and exact budget splitting."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpql.privacy.accountant import eps_from_rho
from dpql.privacy.budget import (
    BudgetExceeded,
    BudgetLine,
    BudgetTable,
    divide_rho,
    split_rho,
)
from dpql.privacy.ledger import Ledger, PrivacyEvent
from dpql.privacy.mechanisms import gaussian_mechanism, gaussian_sigma, gumbel_top_k
from dpql.privacy.noise import NoiseSource


def _release(ledger: Ledger, seed: int = 0) -> None:
    noise = NoiseSource.for_testing(seed)
    kw = {"noise": noise, "ledger": ledger}
    gumbel_top_k(np.arange(10.0), 2e-3, 3, 0.004, phase="rap.select", label="round 1", **kw)
    gaussian_mechanism(
        [np.zeros(12)], [1000.0], math.sqrt(2) * 1e-3, 0.003, phase="rap.measure", label="m", **kw
    )
    ledger.append(
        PrivacyEvent.dpsgd(
            "gan.critic", "critic", sampling_rate=0.004, noise_multiplier=7.5, steps=10
        )
    )
    ledger.append(
        PrivacyEvent.external(
            "accept.test", "public holdout", epsilon=0.1, delta=1e-9, neighbouring="replace_one"
        )
    )


def test_ledger_json_round_trip_and_recomputed_epsilon() -> None:
    ledger = Ledger(rho_budget=0.01)
    _release(ledger)
    restored = Ledger.from_json(json.loads(json.dumps(ledger.to_json())))
    assert restored.events == ledger.events and restored.rho_budget == 0.01
    assert restored.epsilon(1e-8) == ledger.epsilon(1e-8)
    assert ledger.total_rho() == pytest.approx(0.007, rel=1e-15)
    zcdp_only = Ledger(e for e in ledger.events if e.rho is not None)
    assert zcdp_only.epsilon(1e-8) == pytest.approx(eps_from_rho(0.007, 1e-8), abs=1e-9)
    # DP-SGD and the external table can only add to the zCDP part.
    assert ledger.epsilon(1e-8) > zcdp_only.epsilon(1e-8) + 0.1


def test_events_are_checked_against_their_noise_parameters() -> None:
    sigma = gaussian_sigma(1.0, 0.5)
    PrivacyEvent("p", "gaussian", "ok", l2_sensitivity=1.0, noise_scale=sigma, rho=0.5)
    with pytest.raises(ValueError, match="noise parameters give"):
        PrivacyEvent("p", "gaussian", "lie", l2_sensitivity=1.0, noise_scale=sigma, rho=0.1)
    with pytest.raises(ValueError, match="no field 'rho'"):
        PrivacyEvent(
            "p",
            "dpsgd",
            "x",
            noise_scale=1.0,
            sampling_rate=0.1,
            noise_multiplier=1.0,
            steps=1,
            rho=0.1,
        )
    with pytest.raises(ValueError, match="unknown mechanism"):
        PrivacyEvent("p", "laplace", "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PrivacyEvent.from_json({"phase": "p", "mechanism": "external", "label": "x", "seed": 1})


def test_rho_cap_refuses_before_anything_is_released() -> None:
    ledger = Ledger(rho_budget=0.3)
    part = divide_rho(0.3, 3)
    noise = NoiseSource.for_testing(0)
    for _ in range(3):
        gaussian_mechanism(
            [np.zeros(2)], [1.0], 1.0, part, noise=noise, ledger=ledger, phase="p", label="q"
        )
    with pytest.raises(BudgetExceeded, match=r"requested rho=.*remaining rho=") as err:
        gaussian_mechanism(
            [np.zeros(2)], [1.0], 1.0, 1e-12, noise=noise, ledger=ledger, phase="p", label="q"
        )
    assert len(ledger) == 3 and err.value.requested == 1e-12 and err.value.remaining < 1e-12


shares_lists = st.lists(st.integers(0, 10**6), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0.0, 1e6, allow_subnormal=True), shares_lists, st.integers(0, 10**6), st.booleans()
)
def test_split_rho_never_exceeds_the_total(
    total: float, weights: list[int], slack: int, exact: bool
) -> None:
    denominator = sum(weights) + (0 if exact else slack) or 1
    shares = {f"phase{i}": Fraction(w, denominator) for i, w in enumerate(weights)}
    parts = split_rho(total, shares)
    assert list(parts) == list(shares)
    assert sum(Fraction(p) for p in parts.values()) <= Fraction(total)
    assert math.fsum(parts.values()) <= total and sum(parts.values()) <= total
    for name, part in parts.items():
        exact_part = Fraction(total) * shares[name]
        assert Fraction(part) <= exact_part
        assert part >= float(exact_part) * (1 - 1e-14) - 1e-300  # a few ulps below at most


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-300, 1e6), st.integers(1, 10**6))
def test_divide_rho_is_the_largest_exact_share(total: float, parts: int) -> None:
    r = divide_rho(total, parts)
    assert Fraction(r) * parts <= Fraction(total)
    assert Fraction(math.nextafter(r, math.inf)) * parts > Fraction(total)


def test_naive_division_can_overspend_but_divide_rho_cannot() -> None:
    # The reason for exact arithmetic: some float totals divided naively overspend when summed.
    overspent = [
        (t, k)
        for t in np.linspace(0.01, 1.0, 200)
        for k in (3, 7, 10, 50)
        if math.fsum([t / k] * k) > t
    ]
    assert overspent
    assert all(math.fsum([divide_rho(t, k)] * k) <= t for t, k in overspent)


def test_budget_table_lines_and_errors() -> None:
    n, rho = 32_561, divide_rho(0.02, 50)
    sigma = gaussian_sigma(math.sqrt(2) / n, rho)
    line = BudgetLine("rap.measure", "gaussian", 50, rho, noise_scale=sigma, n=n)
    assert line.noise_count == pytest.approx(sigma * n)
    assert line.expected_abs_error == pytest.approx(stats.halfnorm(scale=sigma).mean())
    table = BudgetTable((line, BudgetLine("gan.critic", "dpsgd", 1, None, 7.5)), rho_budget=0.02)
    assert table.total_rho <= 0.02
    assert BudgetTable.from_json(json.loads(json.dumps(table.to_json()))) == table
    with pytest.raises(BudgetExceeded, match="requested rho="):
        BudgetTable((line, line), rho_budget=0.02)
