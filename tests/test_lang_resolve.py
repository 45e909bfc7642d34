"""Semantic resolution of DSL trees against the adult schema: IR, semantics, diagnostics."""

from __future__ import annotations

import math
from collections import Counter
from itertools import combinations

import numpy as np
import pytest
from adult_domain import adult_domain, adult_rows, adult_spec

from dpql.diagnostics import DiagnosticError, DiagnosticSink, SourcePos
from dpql.domain import EncodedTable, NumericColumn
from dpql.ir.exact import answer
from dpql.ir.queries import (
    CatIn,
    CorrRequirement,
    Count,
    Halfspace,
    Marginal,
    MeanRequirement,
    ModelRequirement,
    Moment,
    Prefix,
    Tolerance,
)
from dpql.lang.parser import parse_requirements, parse_workload
from dpql.plan.resolve import (
    DEFAULT_RANGE_THRESHOLDS,
    MAX_MARGINAL_CELLS,
    resolve_requirements,
    resolve_workload,
)

ORIGIN = SourcePos("release.yaml", 40, 5)
DOMAIN = adult_domain()
N = adult_rows()


def workload(*texts: str, seed: int = 7, sink: DiagnosticSink | None = None):
    origins = [ORIGIN] * len(texts)
    return resolve_workload(parse_workload(texts, origins), DOMAIN, N, seed, origins, sink)


def requirements(*texts: str):
    origins = [ORIGIN] * len(texts)
    return resolve_requirements(parse_requirements(texts, origins), DOMAIN, origins)


def errors_of(resolve, *texts: str):
    with pytest.raises(DiagnosticError) as info:
        resolve(*texts)
    return info.value.diagnostics


# --------------------------------------------------------------------------------------------
# The adult example


def test_adult_workload_expands_as_documented() -> None:
    spec = adult_spec()
    resolved = workload(*spec["workload"])
    kinds = Counter(q.kind for q in resolved.queries)
    assert math.comb(len(DOMAIN), 3) == 455
    assert kinds == {
        "marginal": 455,
        "prefix": DEFAULT_RANGE_THRESHOLDS,
        "halfspace": 500,
        "count": 1,
    }
    assert len(resolved.items) == len(resolved.queries)
    assert Counter(resolved.items) == {0: 455, 1: 64, 2: 500, 3: 1}
    marginals = [q.columns for q in resolved.queries if isinstance(q, Marginal)]
    assert marginals == list(combinations(DOMAIN.names, 3))  # all 3-subsets, schema order
    hs = [q for q in resolved.queries if isinstance(q, Halfspace)]
    assert {(q.columns, q.by) for q in hs} == {
        (("age", "education_num", "capital_gain", "hours_per_week"), "income")
    }
    assert resolved.queries[-1] == Count(resolved.queries[-1].predicate)


def test_adult_requirements() -> None:
    reqs = requirements(*adult_spec()["requirements"])
    logistic, corr, mean = reqs
    assert logistic == ModelRequirement(
        "logistic",
        "income",
        ("age", "education_num", "hours_per_week", "sex", "marital_status"),
        Tolerance(within=0.02),
        "logistic(income ~ age + education_num + hours_per_week + sex + marital_status) "
        "within 0.02",
    )
    assert corr == CorrRequirement(
        "age", "hours_per_week", Tolerance(within=0.05), "corr(age, hours_per_week) within 0.05"
    )
    assert isinstance(mean, MeanRequirement) and mean.column == "hours_per_week"
    assert mean.given == CatIn("sex", frozenset({DOMAIN["sex"].code_of("Female")}))
    bound = requirements("logistic(income ~ age) accuracy >= 0.8")[0].tolerance
    assert bound == Tolerance(metric="accuracy", op=">=", bound=0.8)


# --------------------------------------------------------------------------------------------
# Meaning of the resolved IR


def random_table(rows: int, seed: int) -> tuple[EncodedTable, dict[str, np.ndarray]]:
    """A random table in the adult encoding, and its values in original units / categories."""
    rng = np.random.default_rng(seed)
    raw, codes, scaled = {}, {}, {}
    for c in DOMAIN:
        if isinstance(c, NumericColumn):
            x = rng.integers(c.lo, c.hi + 1, rows).astype(float)
            x[: rows // 10] = c.lo + 23  # many ties at one value so == has work to do
            raw[c.name], codes[c.name] = x, c.bin_of(x)
            scaled[c.name] = (x - c.lo) / c.span
        else:
            codes[c.name] = rng.integers(0, c.card, rows).astype(np.int32)
            raw[c.name] = np.asarray(c.values, dtype=object)[codes[c.name]]
    return EncodedTable(DOMAIN, codes, scaled), raw


PREDICATES = {
    "age > 40": lambda r: r["age"] > 40,
    "age <= 40": lambda r: r["age"] <= 40,
    "age == 40": lambda r: r["age"] == 40,
    "age != 40": lambda r: r["age"] != 40,
    'sex == "Female"': lambda r: r["sex"] == "Female",
    "sex != 'Female'": lambda r: r["sex"] != "Female",
    'race in {"White", "Black"}': lambda r: np.isin(r["race"], ["White", "Black"]),
    'not (age < 30 or hours_per_week >= 50) and income == ">50K"': lambda r: (
        ~((r["age"] < 30) | (r["hours_per_week"] >= 50)) & (r["income"] == ">50K")
    ),
    "capital_gain > 200000": lambda r: r["capital_gain"] > 200000,
}


def test_predicates_mean_what_they_say_in_original_units() -> None:
    table, raw = random_table(4000, seed=3)
    resolved = workload(*(f"count({p})" for p in PREDICATES))
    assert len(resolved.queries) == len(PREDICATES)
    for q, (text, truth) in zip(resolved.queries, PREDICATES.items(), strict=True):
        expected = np.mean(truth(raw))
        assert answer(q, table)[0] == pytest.approx(expected, abs=1e-12), text
    assert 0 < np.mean(raw["age"] == 40) < 1  # the equality case is not vacuous


def test_conditional_mean_is_moment_over_count() -> None:
    table, raw = random_table(3000, seed=4)
    moment, count = workload('mean(hours_per_week | sex == "Female")').queries
    assert isinstance(moment, Moment) and isinstance(count, Count)
    female = raw["sex"] == "Female"
    hours = DOMAIN["hours_per_week"]
    truth = np.mean((raw["hours_per_week"][female] - hours.lo) / hours.span)
    assert answer(moment, table)[0] / answer(count, table)[0] == pytest.approx(truth)
    assert workload("mean(age)").queries == (Moment(("age",)),)


def test_marginal_columns_in_schema_order_and_deduplicated() -> None:
    resolved = workload("marginals(2) over [sex, age]", "marginal(sex, age)", "marginals(1)")
    assert resolved.queries[0] == Marginal(("age", "sex"))
    assert resolved.items == (0,) + (2,) * len(DOMAIN)


def test_random_families_depend_on_public_seed_and_item_only() -> None:
    a = workload("range(age, hours_per_week) thresholds 5", "count(age > 3)", seed=1).queries
    b = workload("count(age > 3)", "range(age, hours_per_week) thresholds 5", seed=1).queries
    c = workload("range(age, hours_per_week) thresholds 5", seed=2).queries
    assert set(a) == set(b) and len(a) == 6
    assert set(a[:5]).isdisjoint(c)
    prefixes = [q for q in a if isinstance(q, Prefix)]
    assert all(0 <= t <= 1 for q in prefixes for t in q.thresholds)


def test_halfspaces_cut_the_unit_cube() -> None:
    hs = workload("halfspaces(400) by income").queries
    r = len(DOMAIN.numeric)
    assert len(hs) == 400 and all(q.columns == tuple(c.name for c in DOMAIN.numeric) for q in hs)
    theta = np.array([q.theta for q in hs])
    tau = np.array([q.tau for q in hs])
    low, high = np.minimum(theta, 0).sum(1), np.maximum(theta, 0).sum(1)  # <theta, u> over cube
    assert np.all((low < tau) & (tau < high))
    assert np.mean(theta**2) == pytest.approx(1 / r, rel=0.15)  # theta ~ N(0, I) / sqrt(r)


# --------------------------------------------------------------------------------------------
# Diagnostics: (workload item, code, column in release.yaml, words in the message or hint)

WORKLOAD_ERRORS = [
    ("marginal(age, agee)", "E301", 19, "did you mean 'age'"),
    ("range(sex, age)", "E302", 11, "categorical"),
    ("range(age) by hours_per_week", "E302", 19, "numeric"),
    ("halfspaces(5) over [age, race] by income", "E302", 30, "race"),
    ("halfspaces(5) by age", "E302", 22, "the label of halfspaces"),
    ("mean(sex)", "E302", 10, "mean"),
    ("count(age in {1, 2})", "E303", 11, "'in'"),
    ('count(age == "old")', "E303", 18, "string"),
    ("count(sex < 1)", "E303", 11, "categorical"),
    ('count(sex == "Femal")', "E304", 18, "did you mean 'Female'"),
    ("count(race in {'White', 'Blak'})", "E304", 29, "Blak"),
    ("count(sex == 1)", "E304", 18, "Female, Male"),
    (
        "marginals(5) over [native_country, education, occupation, fnlwgt, hours_per_week]",
        "E305",
        5,
        "2,257,920",
    ),
    ("marginal(age, sex, age)", "E306", 24, "age"),
    ("marginals(2) over [sex, race, sex]", "E306", 35, "sex"),
    ("range(age) by income thresholds 3", None, 0, ""),
    ("halfspaces(3) over [age] by income", None, 0, ""),
    ("marginals(0)", "E307", 5, "between 1 and 15"),
    ("marginals(3) over [age, sex]", "E307", 5, "between 1 and 2"),
    ("halfspaces(0) by income", "E309", 5, "at least 1"),
    ("range(age) thresholds 0", "E309", 5, "at least 1"),
    ("halfspaces(2000000) by income", "E310", 5, "2,000,000"),
]


@pytest.mark.parametrize(("text", "code", "col", "words"), WORKLOAD_ERRORS)
def test_workload_diagnostics(text: str, code: str | None, col: int, words: str) -> None:
    if code is None:  # a control: valid items next to the broken ones resolve cleanly
        assert workload(text).queries
        return
    [d] = errors_of(workload, text)
    assert (d.code, d.pos.file, d.pos.line, d.pos.col) == (code, "release.yaml", 40, col)
    assert words in f"{d.message} {d.hint}"


REQUIREMENT_ERRORS = [
    ("logistic(race ~ age) within 0.1", "E308", 14, "exactly 2 values"),
    ("logistic(age ~ sex) within 0.1", "E302", 14, "categorical"),
    ("linear(sex ~ age) within 0.1", "E302", 12, "numeric"),
    ("logistic(income ~ age + income) within 0.1", "E306", 29, "income"),
    ("corr(age, sex) within 0.1", "E302", 15, "sex"),
    ("corr(age, age) within 0.1", "E306", 15, "age"),
    ("corr(age, wage) within 0.1", "E301", 15, "did you mean 'age'"),
    ("mean(sex) within 1", "E302", 10, "numeric"),
    ('count(sex == "F") within 0.1', "E304", 18, "Female"),
    ("logistic(income ~ age) accuray >= 0.8", "E311", 28, "did you mean 'accuracy'"),
    ("corr(age, fnlwgt) r2 >= 0.5", "E311", 23, "within"),
    ("corr(age, fnlwgt) within 0", "E312", 23, "positive"),
    ("count(age > 30) within -1", "E312", 21, "positive"),
]


@pytest.mark.parametrize(("text", "code", "col", "words"), REQUIREMENT_ERRORS)
def test_requirement_diagnostics(text: str, code: str, col: int, words: str) -> None:
    [d] = errors_of(requirements, text)
    assert (d.code, d.pos.file, d.pos.line, d.pos.col) == (code, "release.yaml", 40, col)
    assert words in f"{d.message} {d.hint}"


def test_all_errors_of_all_items_are_collected_with_their_own_lines() -> None:
    texts = ["marginal(agee)", "marginals(3)", "count(sex == 'x' or race == 'y')"]
    origins = [SourcePos("release.yaml", line, 5) for line in (30, 31, 32)]
    with pytest.raises(DiagnosticError) as info:
        resolve_workload(parse_workload(texts, origins), DOMAIN, N, 0, origins)
    assert [(d.code, d.pos.line) for d in info.value.diagnostics] == [
        ("E301", 30),
        ("E304", 32),
        ("E304", 32),
    ]


def test_warnings_do_not_stop_resolution_and_land_in_the_sink() -> None:
    sink = DiagnosticSink()
    wide = "marginals(4) over [native_country, education, occupation, fnlwgt, age]"
    resolved = workload("count(capital_gain > 200000)", wide, sink=sink)
    assert len(resolved.queries) == 1 + 5
    assert [(d.code, d.severity) for d in sink.items] == [("W301", "warning"), ("W302", "warning")]
    assert sink.items[0].pos.col == 5 + len("count(capital_gain > ")


def test_cell_limit_is_what_the_message_says() -> None:
    cols = ("native_country", "education", "occupation", "fnlwgt", "hours_per_week")
    assert DOMAIN.cells(cols) > MAX_MARGINAL_CELLS >= DOMAIN.cells(cols[:4])
