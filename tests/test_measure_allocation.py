"""Noise spread over the post-processing measures (``postprocess.allocation.allocation_scales``) and the
scaled Gaussian release that carries it (``PrivateMeasurer.measure(scales=...)``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_iproj_support import DOMAIN, ExactOracle

from dpql.ir.exact import answer_all
from dpql.ir.queries import (
    CentredProduct,
    CorrRequirement,
    CountRequirement,
    MeanRequirement,
    ModelRequirement,
    NumCmp,
    Tolerance,
    TruePred,
    joint_l2_sensitivity,
)
from dpql.plan.estimates import value_sd
from dpql.plan.requirements import expand_requirements, parts_and_fn
from dpql.postprocess import iproj
from dpql.postprocess.allocation import (
    ALLOCATION_FLOOR,
    DENOMINATOR_RSD,
    allocation_scales,
)
from dpql.privacy.mechanisms import gaussian_sigma

TOL = Tolerance(within=0.05)
# a model measured by its moments (a logistic `within` one is measured by its pilot alone)
BOUND = Tolerance(op=">=", bound=0.6)


def _answers(measures, table):
    return measures.answer_map(np.concatenate(answer_all(measures.queries, table)))


def _quiet(measures) -> list[float]:
    """Release sds so small that no denominator's bound (``DENOMINATOR_RSD``) binds: the
    objective's own optimum."""
    return [1e-9] * len(measures.releases)


def _delta2(measures, cells=None) -> np.ndarray:
    """Squared sensitivity of each measure (n = 1): the weights of the budget constraint."""
    qs = measures.queries if cells is None else [measures.queries[k] for k in cells]
    return np.array([q.sensitivity(1).l2 ** 2 for q in qs])


def _objective(reqs, measures, answers, scales) -> float:
    """sum_r sd_r / t_r with measure k at sd 1 / c_k (the quantity the allocation minimises)."""
    sigma = dict(zip(measures.queries, 1 / scales, strict=True))
    return sum(value_sd(r, answers, sigma, DOMAIN) / r.tolerance.within for r in reqs)


def test_scaled_release_has_the_scaled_sensitivity_and_per_query_noise(real) -> None:
    queries = expand_requirements([CorrRequirement("age", "hours", TOL)], DOMAIN).queries[:2]
    oracle, c, rho, draws = ExactOracle(real, seed=3), np.array([1.0, 4.0]), 0.5, 4000
    exact = np.concatenate(answer_all(queries, real))
    noise = np.array(
        [
            np.concatenate(oracle.measure(queries, rho, phase="p", label="x", scales=c)) - exact
            for _ in range(draws)
        ]
    )
    event = oracle.ledger.events[0]
    assert event.l2_sensitivity == pytest.approx(math.sqrt(1 + 16) / real.n)
    assert event.rho == rho and len(oracle.ledger.events) == draws
    sd = gaussian_sigma(event.l2_sensitivity, rho) / c
    # the sample sd of N draws has relative standard error 1 / sqrt(2 (N - 1)); allow 5 of them
    assert np.abs(noise.std(axis=0, ddof=1) / sd - 1).max() < 5 / math.sqrt(2 * (draws - 1))
    assert np.abs(noise.mean(axis=0) / sd).max() < 5 / math.sqrt(draws)
    with pytest.raises(Exception, match="scales"):
        oracle.measure(queries, rho, phase="p", label="x", scales=[1.0, 0.0])


def test_allocation_keeps_model_cells_and_the_release_sensitivity(real, syn) -> None:
    logit = ModelRequirement("logistic", "income", ("age", "job"), BOUND)
    reqs = [logit, CorrRequirement("age", "hours", TOL), MeanRequirement("x", TruePred(), TOL)]
    m = expand_requirements(reqs, DOMAIN)
    (c,) = allocation_scales(m, reqs, _answers(m, syn), DOMAIN, _quiet(m))
    model = set(m.index[0])
    free = [k for k in range(len(m.queries)) if k not in model]
    assert (c[list(model)] == 1).all()
    d2 = _delta2(m, free)
    assert d2 @ c[free] ** 2 == pytest.approx(d2.sum())  # the release's sigma is unchanged
    assert joint_l2_sensitivity(m.queries, real.n, c) == pytest.approx(
        joint_l2_sensitivity(m.queries, real.n)
    )
    assert np.ptp(c[free]) > 0.1  # the corr's and the mean's cells do not need equal noise


def test_allocation_minimises_the_summed_relative_sd(syn) -> None:
    reqs = [
        CorrRequirement("age", "hours", TOL),
        CorrRequirement("age", "x", Tolerance(within=0.2)),
        CountRequirement(NumCmp("age", ">=", 0.65), Tolerance(within=0.01)),
    ]
    m = expand_requirements(reqs, DOMAIN)
    at = _answers(m, syn)
    (c,) = allocation_scales(m, reqs, at, DOMAIN, _quiet(m))
    d2 = _delta2(m)
    best = _objective(reqs, m, at, c)
    uniform = _objective(reqs, m, at, np.ones_like(c))
    assert best < 0.95 * uniform
    rng = np.random.default_rng(0)
    for _ in range(50):  # a stationary point: no nearby spread of the same budget does better
        p = c**2 * np.exp(0.05 * rng.normal(size=c.size))
        p *= d2.sum() / (d2 @ p)  # the same release sensitivity
        assert _objective(reqs, m, at, np.sqrt(p)) >= best * (1 - 1e-9)


def test_symmetric_requirements_get_equal_noise() -> None:
    a = CountRequirement(NumCmp("age", ">=", 0.5), TOL)
    b = CountRequirement(NumCmp("hours", ">=", 0.5), TOL)
    m = expand_requirements([a, b], DOMAIN)
    (c,) = allocation_scales(m, [a, b], {q: 0.3 for q in m.queries}, DOMAIN, _quiet(m))
    assert c == pytest.approx([1.0, 1.0])


def test_measure_with_scales_reports_each_cells_sd_and_spends_the_same_rho(real, syn) -> None:
    reqs = [CorrRequirement("age", "hours", TOL), CorrRequirement("hours", "x", TOL)]
    m = expand_requirements(reqs, DOMAIN)
    (c,) = allocation_scales(m, reqs, _answers(m, syn), DOMAIN, _quiet(m))
    oracle = ExactOracle(real, seed=5)
    out = iproj.measure(m.queries, oracle, 0.3, label="r", releases=m.releases, scales=[c])
    (event,) = oracle.ledger.events
    assert event.rho == 0.3 and event.label == "r"
    sigma = gaussian_sigma(joint_l2_sensitivity(m.queries, real.n, c), 0.3)
    assert out.sigma == pytest.approx(sigma / c)
    assert sigma == pytest.approx(gaussian_sigma(joint_l2_sensitivity(m.queries, real.n), 0.3))


def test_a_weighted_release_is_spread_where_only_another_release_holds_a_model(real, syn) -> None:
    logit = ModelRequirement("logistic", "income", ("age", "hours"), BOUND, weight=1.0)
    corr = CorrRequirement("age", "hours", TOL, weight=1.0)
    m = expand_requirements([logit, corr], DOMAIN)
    c_logit, c_corr = allocation_scales(m, [logit, corr], _answers(m, syn), DOMAIN, _quiet(m))
    assert set(m.index[1]) < set(m.index[0])  # the logistic's release holds the corr's moments
    assert (c_logit == 1).all()  # ... and keeps equal noise there, for the model
    d2 = _delta2(m, m.index[1])
    assert d2 @ c_corr**2 == pytest.approx(d2.sum()) and np.ptp(c_corr) > 0.1
    oracle = ExactOracle(real, seed=6)
    out = iproj.measure(
        m.queries, oracle, 0.4, label="r", releases=m.releases, scales=(c_logit, c_corr)
    )
    assert [e.rho for e in oracle.ledger.events] == pytest.approx([0.2, 0.2])
    s_logit = gaussian_sigma(joint_l2_sensitivity(m.queries, real.n), 0.2)
    part = [m.queries[k] for k in m.index[1]]
    s_corr = gaussian_sigma(joint_l2_sensitivity(part, real.n), 0.2) / c_corr
    combined = (s_logit**-2 + s_corr**-2) ** -0.5  # the inverse-variance average of both
    assert out.sigma[list(m.index[1])] == pytest.approx(combined)


def test_a_measure_the_requirements_do_not_move_still_gets_floor_precision() -> None:
    corr = CorrRequirement("age", "hours", TOL)
    m = expand_requirements([corr], DOMAIN)
    # uncorrelated on the synthetic table: the correlation does not move with the squares
    mean = {"age": 0.5, "hours": 0.4}
    square = {"age": 0.03, "hours": 0.05}  # E(u - 1/2)^2
    at = {}
    for q in m.queries:
        if isinstance(q, CentredProduct) and q.square:
            at[q] = square[q.left[0]]
        elif isinstance(q, CentredProduct):
            at[q] = (mean[q.left[0]] - 0.5) * (mean[q.right[0]] - 0.5)
        else:
            at[q] = mean[q.columns[0]]
    (c,) = allocation_scales(m, [corr], at, DOMAIN, _quiet(m))
    p, d2 = c**2, _delta2(m)
    assert p.min() >= 0.9 * ALLOCATION_FLOOR and p.min() <= 1.1 * ALLOCATION_FLOOR
    assert d2 @ p == pytest.approx(d2.sum())


def _near_zero_corr(corr, measures, variance):
    """The answers of ``corr``'s measures where both columns sit at their centres (1/2) with
    the given variances, uncorrelated: the correlation's gradient in the variances is 0."""
    at = {}
    for q in measures.queries:
        if isinstance(q, CentredProduct):
            at[q] = variance[q.left[0]] if q.square else 0.0
        else:
            at[q] = 0.5
    return at


CORR = CorrRequirement("age", "hours", Tolerance(within=0.25))
RARE = NumCmp("age", ">=", 0.9)
MEAN = MeanRequirement("x", RARE, TOL, centre=0.25)


def _case(name):
    """(requirement, measures, answers, the denominator's measure, its value): a corr of 0
    (its variance's gradient vanishes) and a mean of a rare group at its centre (its count's)."""
    if name == "corr":
        m = expand_requirements([CORR], DOMAIN)
        at = _near_zero_corr(CORR, m, {"age": 0.03, "hours": 0.05})
        square = next(q for q in m.queries if isinstance(q, CentredProduct) and q.square
                      and q.left[0] == "age")  # fmt: skip
        return CORR, m, at, square, 0.03
    m = expand_requirements([MEAN], DOMAIN)
    num, count = m.queries
    return MEAN, m, {num: 0.0, count: 0.02}, count, 0.02


@pytest.mark.parametrize("name", ["corr", "mean"])
def test_a_denominator_keeps_its_relative_noise_where_its_gradient_vanishes(name) -> None:
    """The first-order objective alone leaves the variance (the count) at the floor, noise
    1 / sqrt(ALLOCATION_FLOOR) = 4.5x the equal-noise sd (here 5% of its value), where the
    delta-method sd is no longer the noisy value's (docs/postprocess.md). Each measure of a
    denominator keeps its sd within DENOMINATOR_RSD of the denominator's value, the release's
    sensitivity unchanged."""
    req, m, at, denominator, value = _case(name)
    sigma = 0.05 * value  # equal noise: 5% of the denominator
    (c,) = allocation_scales(m, [req], at, DOMAIN, [sigma])
    k = m.queries.index(denominator)
    assert sigma / c[k] <= DENOMINATOR_RSD * value * (1 + 1e-9)
    d2 = _delta2(m)
    assert d2 @ c**2 == pytest.approx(d2.sum())
    assert c.max() > 1.05  # the rest still goes where the value is sensitive


def test_a_near_zero_correlation_keeps_its_promised_sd() -> None:
    """Seeded draws of the measurement noise at the allocation's sds (continuous Gaussian, as
    the discrete one at these scales): z = (noisy value - value) / delta-method sd is beyond 2
    (or the value undefined) about as often as a normal's 4.55%, within 4 binomial standard
    errors of the draws. Equal noise gives a variance 10% relative noise here, the floor
    alone 4.5 times that."""
    m = expand_requirements([CORR], DOMAIN)
    at = _near_zero_corr(CORR, m, {"age": 0.03, "hours": 0.05})
    sigma = 0.1 * 0.03
    (c,) = allocation_scales(m, [CORR], at, DOMAIN, [sigma])
    sds = sigma / c
    parts, fn, _ = parts_and_fn(CORR, DOMAIN)
    true = np.array([at[q] for q in parts])
    value = fn(true)
    sd = value_sd(CORR, at, dict(zip(m.queries, sds, strict=True)), DOMAIN)
    part_sd = np.array([sds[m.queries.index(q)] for q in parts])
    draws = 4000
    noisy = true + np.random.default_rng(11).normal(size=(draws, len(parts))) * part_sd
    z = np.array([(fn(y) - value) / sd for y in noisy])
    beyond = np.mean(~(np.abs(z) <= 2))  # an undefined value (NaN) counts as beyond
    nominal = math.erfc(2 / math.sqrt(2))
    assert beyond <= nominal + 4 * math.sqrt(nominal * (1 - nominal) / draws)
