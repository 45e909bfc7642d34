"""Requirements -> measures (dpql.plan.requirements): expansion, values, delta-method errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_iproj_support import DOMAIN, make_table

from dpql.diagnostics import DiagnosticError
from dpql.domain import EncodedTable
from dpql.ir.exact import answer_all, per_row
from dpql.ir.queries import (
    CatIn,
    CentredProduct,
    CorrRequirement,
    Count,
    CountRequirement,
    MeanRequirement,
    ModelRequirement,
    Moment,
    NumCmp,
    Tolerance,
    TruePred,
    joint_l2_sensitivity,
)
from dpql.plan.estimates import (
    PLANNING_SD,
    delta_method_sd,
    predicted_error,
    requirement_value,
    smallest_epsilon_for,
    uniform_prior_probability,
)
from dpql.plan.requirements import expand_requirements, product_query

TOL = Tolerance(within=0.05)
BOUND = Tolerance(op=">=", bound=0.7)
TABLE = make_table(4000, seed=1)


def exact_map(reqs: list, table: EncodedTable = TABLE) -> dict:
    rm = expand_requirements(reqs, table.domain)
    return rm.answer_map(np.concatenate(answer_all(rm.queries, table)))


def test_corr_expands_to_five_moments_and_dedups() -> None:
    rm = expand_requirements(
        [CorrRequirement("age", "hours", TOL), CorrRequirement("age", "x", TOL)], DOMAIN
    )
    assert len(rm.index[0]) == 5 and len(rm.index[1]) == 5
    assert len(rm.queries) == 8  # E age and E age^2 shared
    age, hours = ("age", None), ("hours", None)
    assert CentredProduct(hours, age) in rm.queries and CentredProduct(age, age) in rm.queries
    assert all(q.cells(DOMAIN) == 1 for q in rm.queries)


def test_model_measures_are_first_and_second_moments_without_reference_levels() -> None:
    """A model without a pilot (here a logistic with a bound; a ``within`` one is measured by
    its pilot alone, tests/test_iproj_pilot.py) is measured by its moments."""
    req = ModelRequirement("logistic", "income", ("age", "sex", "job"), BOUND)
    rm = expand_requirements([req], DOMAIN)
    # factors: age, sex=Male, job=b, job=c, income=>50K -> 5 first moments + 15 pairs,
    # minus job=b*job=c (linear in the first moments) and 4 indicator squares (constant 1/4)
    assert len(rm.queries) == 5 + 15 - 1 - 4
    assert CentredProduct(("income", 1), ("age", None)) in rm.queries
    assert Count(CatIn("job", frozenset({0}))) not in rm.queries  # reference level
    firsts = [q for q in rm.queries if isinstance(q, Count | Moment)]
    assert len(firsts) == 5 and all(isinstance(q, CentredProduct) for q in rm.queries[5:])
    lin = ModelRequirement("linear", "hours", ("age", "x"), TOL)
    assert len(expand_requirements([lin], DOMAIN).queries) == 3 + 6


def test_values_match_direct_computation() -> None:
    female_hours = MeanRequirement("hours", CatIn("sex", frozenset({0})), Tolerance(within=1.0))
    reqs = [
        CorrRequirement("age", "hours", TOL),
        CorrRequirement("age", "sex", TOL),
        female_hours,
        MeanRequirement("age", TruePred(), TOL),
        CountRequirement(NumCmp("age", ">", 0.5), TOL),
    ]
    m = exact_map(reqs)
    age = 17 + 73 * TABLE.scaled["age"]
    hours = 1 + 98 * TABLE.scaled["hours"]
    sex = TABLE.codes["sex"]
    assert requirement_value(reqs[0], m, DOMAIN) == pytest.approx(np.corrcoef(age, hours)[0, 1])
    assert requirement_value(reqs[1], m, DOMAIN) == pytest.approx(np.corrcoef(age, sex)[0, 1])
    assert requirement_value(reqs[2], m, DOMAIN) == pytest.approx(hours[sex == 0].mean())
    assert requirement_value(reqs[3], m, DOMAIN) == pytest.approx(age.mean())
    assert requirement_value(reqs[4], m, DOMAIN) == pytest.approx(
        np.mean(TABLE.scaled["age"] > 0.5)
    )


def test_undefined_and_unsupported_are_clear_errors() -> None:
    const = EncodedTable(DOMAIN, dict(TABLE.codes), {**TABLE.scaled, "x": np.full(TABLE.n, 0.25)})
    req = CorrRequirement("age", "x", TOL, text="corr(age, x)")
    with pytest.raises(DiagnosticError) as e:
        requirement_value(req, exact_map([req], const), DOMAIN)
    assert e.value.codes == ["E502"] and "corr(age, x)" in str(e.value)
    for bad in (
        CorrRequirement("age", "job", TOL),  # 3 categories
        ModelRequirement("logistic", "hours", ("age",), TOL),  # numeric label
        ModelRequirement("linear", "income", ("age",), TOL),  # categorical label
        MeanRequirement("nope", TruePred(), TOL),
    ):
        with pytest.raises(DiagnosticError) as e:
            expand_requirements([bad], DOMAIN)
        assert e.value.codes == ["E501"]


def test_uniform_prior_probability() -> None:
    assert uniform_prior_probability(TruePred(), DOMAIN) == 1.0
    assert uniform_prior_probability(CatIn("job", frozenset({0, 1})), DOMAIN) == pytest.approx(
        2 / 3, abs=0.01
    )
    assert uniform_prior_probability(NumCmp("x", "<=", 0.25), DOMAIN) == pytest.approx(
        0.25, abs=0.01
    )


def _prior_table(n: int, seed: int, triangular: bool = True) -> EncodedTable:
    """Independent columns; numeric ones symmetric triangular on their bounds (the planning
    reference, PLANNING_SD) or uniform, categorical ones uniform."""
    rng = np.random.default_rng(seed)
    scaled = {
        c.name: (rng.random(n) + rng.random(n)) / 2 if triangular else rng.random(n)
        for c in DOMAIN.numeric
    }
    codes = {c.name: c.bin_of(c.lo + scaled[c.name] * c.span) for c in DOMAIN.numeric}
    codes.update({c.name: rng.integers(0, c.card, n).astype(np.int32) for c in DOMAIN.categorical})
    return EncodedTable(DOMAIN, codes, scaled)


def _noisy_sd(req, table: EncodedTable, sigma: float) -> float:
    """The sd of the value over repeated Gaussian noise on the table's exact answers."""
    rm = expand_requirements([req], DOMAIN)
    exact = np.concatenate(answer_all(rm.queries, table))
    rng = np.random.default_rng(4)
    vals = [
        requirement_value(req, rm.answer_map(exact + rng.normal(0, sigma, exact.size)), DOMAIN)
        for _ in range(2000)
    ]
    return float(np.std(vals))


@pytest.mark.parametrize(
    "req",
    [
        CorrRequirement("age", "hours", TOL),
        MeanRequirement("hours", CatIn("job", frozenset({2})), TOL),
        CountRequirement(CatIn("job", frozenset({2})), TOL),
    ],
)
def test_predicted_error_matches_monte_carlo_under_the_planning_prior(req) -> None:
    """Delta method vs the sd of the value over repeated Gaussian noise on exact answers of a
    table drawn from the planning prior itself: numeric columns symmetric triangular on their
    bounds; a mean's numerator centred at the table's conditional mean, as compile centres it
    (``dpql.postprocess.centre``). 2000 draws: the sd's relative standard error is
    1/sqrt(2 * 2000) = 1.6%, so 10% is over 6 of them."""
    from dpql.postprocess.centre import centred_requirement

    assert PLANNING_SD == pytest.approx(1 / math.sqrt(24))
    sigma = 2e-3
    table = _prior_table(200_000, seed=3)
    measured = centred_requirement(req, table) if isinstance(req, MeanRequirement) else req
    sd = _noisy_sd(measured, table, sigma)
    assert predicted_error(req, sigma, DOMAIN) == pytest.approx(sd, rel=0.1)


def test_a_centred_mean_has_less_noise_than_the_plain_ratio() -> None:
    """Centred at its conditional mean, a mean's numerator carries (almost) all of the value's
    noise and the count none, so the sd falls from ``sqrt(1 + ratio^2) sigma / P`` to about
    ``sigma / P``: here (ratio 1/2) by a factor sqrt(1.25) = 1.12; the value itself is the
    same (exact answers)."""
    from dpql.postprocess.centre import centred_requirement

    req = MeanRequirement("hours", CatIn("job", frozenset({2})), TOL)
    table = _prior_table(200_000, seed=5)
    centred = centred_requirement(req, table)
    assert centred.centre is not None and abs(centred.centre - 0.5) < 0.01
    plain, recentred = (_noisy_sd(r, table, 2e-3) for r in (req, centred))
    assert plain / recentred == pytest.approx(math.sqrt(1.25), rel=0.06)
    exact = [requirement_value(r, expand_requirements([r], DOMAIN).answer_map(
        np.concatenate(answer_all(expand_requirements([r], DOMAIN).queries, table))), DOMAIN)
        for r in (req, centred)]  # fmt: skip
    assert exact[0] == pytest.approx(exact[1], rel=1e-9)


def test_a_correlation_is_planned_at_the_triangular_spread_not_the_uniform() -> None:
    """The planner's corr sd was the delta method at the *uniform* spread, half the sd
    of a correlation between triangular-spread columns (its derivative is 1 / (sd_a sd_b): 12
    against 24). The planning spread is now the triangular one, so a table spread uniformly has
    a smaller sd than planned (the plan errs on the safe side) and a triangular one the planned
    sd."""
    req = CorrRequirement("age", "hours", TOL)
    sigma = 2e-3
    pred = predicted_error(req, sigma, DOMAIN)
    uniform = _noisy_sd(req, _prior_table(200_000, seed=5, triangular=False), sigma)
    triangular = _noisy_sd(req, _prior_table(200_000, seed=5), sigma)
    assert triangular == pytest.approx(2 * uniform, rel=0.1)
    assert pred == pytest.approx(triangular, rel=0.1)
    assert pred > 1.5 * uniform  # the uniform spread's prediction (12 sigma) was this sd


def test_smallest_epsilon_for_bisects_the_planner_accounting() -> None:
    req = CorrRequirement("age", "hours", TOL)

    def sd_of_eps(eps: float) -> float:
        return predicted_error(req, 1e-3 / eps, DOMAIN)

    eps = smallest_epsilon_for(sd_of_eps, 0.05)
    assert 2 * sd_of_eps(eps) <= 0.05 + 1e-9
    assert 2 * sd_of_eps(eps * 0.99) > 0.05
    assert smallest_epsilon_for(sd_of_eps, 0.01) > eps
    assert math.isinf(smallest_epsilon_for(sd_of_eps, 1e-12))
    assert smallest_epsilon_for(sd_of_eps, 0.05, z=1.0) < eps
    model = ModelRequirement("logistic", "income", ("age",), Tolerance(within=0.02))
    with pytest.raises(TypeError):  # a model's error is its acceptance test's (dpql.postprocess.accept)
        predicted_error(model, 1e-3, DOMAIN)


def test_delta_method_sd_is_the_linearised_sd() -> None:
    def ratio(m):
        return m[0] / m[1]

    sd = delta_method_sd(ratio, [0.2, 0.5], [1e-3, 2e-3])
    assert sd == pytest.approx(math.hypot(1e-3 / 0.5, 0.2 * 2e-3 / 0.25), rel=1e-6)
    assert delta_method_sd(ratio, [0.2, 0.5], [0.0, 0.0]) == 0.0


def test_constant_column_correlation_is_undefined_not_rounding_noise() -> None:
    """On one distinct row, E a^2 - (E a)^2 is rounding error; the corr must not be its ratio."""
    one = EncodedTable(
        DOMAIN,
        {k: np.repeat(v[:1], 50) for k, v in TABLE.codes.items()},
        {k: np.repeat(v[:1] * 0 + 0.67123288, 50) for k, v in TABLE.scaled.items()},
    )
    req = CorrRequirement("age", "hours", TOL, text="corr(age, hours)")
    with pytest.raises(DiagnosticError) as e:
        requirement_value(req, exact_map([req], one), DOMAIN)
    assert e.value.codes == ["E502"]


def test_centred_products_span_the_raw_ones_and_have_the_smaller_sensitivity() -> None:
    age, hours, male, job_b = ("age", None), ("hours", None), ("sex", 1), ("job", 1)
    n = TABLE.n
    for f, g in [(age, hours), (age, age), (age, male), (male, job_b), (hours, job_b)]:
        q = CentredProduct(f, g)
        v = per_row(q, TABLE)[:, 0]
        width = 0.25 if f == g else 0.5
        assert q.sensitivity(n).l2 == q.sensitivity(n).l1 == pytest.approx(width / n)
        # every record's value, and 0 (a record outside the kept rows), lies in one interval
        # of that width: the replace-one change of the sum is at most the width
        lo = 0.0 if f == g else -0.25
        assert v.min() >= lo and v.max() <= lo + width
        # E fg = E(f - 1/2)(g - 1/2) + (E f + E g) / 2 - 1/4: the same information as the raw one
        raw, ef, eg = (
            float(np.mean(per_row(product_query(x), TABLE))) for x in ([f, g], [f], [g])
        )
        assert float(v.mean()) == pytest.approx(raw - (ef + eg) / 2 + 0.25, abs=1e-12)
    assert CentredProduct(hours, age) == CentredProduct(age, hours)  # canonical order
    with pytest.raises(ValueError, match="constant 1/4"):
        CentredProduct(male, male)
    with pytest.raises(ValueError, match="linear in the first moments"):
        CentredProduct(job_b, ("job", 2))


def test_centring_cuts_the_release_sensitivity_of_first_and_second_moments() -> None:
    cols = ("age", "hours", "x", "sex")
    reqs = [CorrRequirement(a, b, TOL) for i, a in enumerate(cols) for b in cols[i + 1 :]]
    rm = expand_requirements(reqs, DOMAIN)
    k = len(rm.queries)
    assert k == 4 + 6 + 3  # the binary column's centred square is the constant 1/4
    # 4 first moments (1/n), 6 centred products (1/(2n)), 3 centred squares (1/(4n)); raw
    # moments would have sqrt(k)/n
    expected = math.sqrt(4 + 6 / 4 + 3 / 16) / TABLE.n
    assert joint_l2_sensitivity(rm.queries, TABLE.n) == pytest.approx(expected)
    assert expected < 0.7 * math.sqrt(k) / TABLE.n
