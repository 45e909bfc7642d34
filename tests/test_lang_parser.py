"""DSL parser: round trip (examples and a generated corpus), positions, syntax diagnostics."""

from __future__ import annotations

import dataclasses

import pytest
from adult_domain import adult_spec
from hypothesis import given, settings
from hypothesis import strategies as st

from dpql.diagnostics import DiagnosticError, SourcePos
from dpql.lang import ast as A
from dpql.lang.parser import (
    parse_requirement,
    parse_requirements,
    parse_workload,
    parse_workload_item,
)

ORIGIN = SourcePos("release.yaml", 40, 5)

WORKLOAD_EXAMPLES = [
    "marginals(3)",
    "marginals(2) over [age, `odd name`, `count`]",
    "marginal(sex, race)",
    "range(age, hours_per_week) by income thresholds 10",
    "range(age)",
    "halfspaces(500) over [age, education_num] by income",
    "halfspaces(20) by sex",
    'count(age >= 65 and not hours_per_week > 40 or sex in {"Male", 1})',
    "count((a < 1 and b < 2) and c < 3)",
    "count(not (a < 1 or b > -2.5e-3))",
    'count(a == \'it\\\'s\' or b != "say \\"hi\\"")',
    "mean(x)",
    'mean(x | sex == "Female")',
]
REQUIREMENT_EXAMPLES = [
    "logistic(income ~ age + sex) within 0.02",
    "linear(hours ~ age) r2 >= 0.1",
    "corr(a, b) within 0.05",
    'mean(hours | sex == "Female") within 1.0',
    "count(age > 40) within 1e-2",
    "logistic(y ~ x) accuracy > 0.8",
]


def walk(node: object):
    """Every AST node below ``node`` (inclusive)."""
    yield node
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, A._Node):
                    yield from walk(v)


def assert_spans_match(tree: object, text: str) -> None:
    """Each column's and literal's span slices its own spelling out of ``text``."""
    for node in walk(tree):
        piece = text[node.pos.start : node.pos.end]
        if isinstance(node, A.Column):
            assert piece.strip("`") == node.name
            assert node.pos.col == node.pos.start + 1 and node.pos.line == 1
        elif isinstance(node, A.NumberLit):
            assert float(piece) == node.value


@pytest.mark.parametrize("text", WORKLOAD_EXAMPLES)
def test_workload_examples_round_trip(text: str) -> None:
    tree = parse_workload_item(text)
    assert parse_workload_item(A.to_dsl(tree)) == tree
    assert_spans_match(tree, text)


@pytest.mark.parametrize("text", REQUIREMENT_EXAMPLES)
def test_requirement_examples_round_trip(text: str) -> None:
    tree = parse_requirement(text)
    assert parse_requirement(A.to_dsl(tree)) == tree
    assert_spans_match(tree, text)


def test_adult_example_round_trips() -> None:
    spec = adult_spec()
    for tree in parse_workload(spec["workload"]):
        assert parse_workload_item(A.to_dsl(tree)) == tree
    for tree in parse_requirements(spec["requirements"]):
        assert parse_requirement(A.to_dsl(tree)) == tree


def test_precedence_and_structure() -> None:
    tree = parse_workload_item("count(not a < 1 and b < 2 or c < 3)")
    assert isinstance(tree, A.CountOf)
    top = tree.predicate
    assert isinstance(top, A.Disjunction) and len(top.items) == 2
    conj = top.items[0]
    assert isinstance(conj, A.Conjunction) and isinstance(conj.items[0], A.Negation)
    flat = parse_workload_item("count(a < 1 and b < 2 and c < 3)")
    assert isinstance(flat.predicate, A.Conjunction) and len(flat.predicate.items) == 3
    nested = parse_workload_item("count((a < 1 and b < 2) and c < 3)")
    assert nested != flat  # the printer keeps the parentheses that make the difference
    assert parse_workload_item("marginals(3) over all") == parse_workload_item("marginals(3)")


def test_positions_excluded_from_equality_and_relative_to_string() -> None:
    a = parse_workload_item("marginal(age,sex)")
    b = parse_workload_item("marginal( age , sex )")
    assert a == b and hash(a) == hash(b)
    assert b.columns[1].pos == A.Span(1, 17, 16, 19)
    assert b.columns[1].pos.in_file(ORIGIN) == SourcePos("release.yaml", 40, 21, 24)


# --------------------------------------------------------------------------------------------
# A generated corpus: random tree -> print -> parse -> the same tree

IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
ODD = st.text(st.characters(exclude_characters="`\n", exclude_categories=("Cs",)), min_size=1)
COLUMNS = st.builds(A.Column, st.one_of(IDENT, st.sampled_from(sorted(A.KEYWORDS)), ODD))
COLUMN_LISTS = st.lists(COLUMNS, min_size=1, max_size=4).map(tuple)
NUMBERS = st.floats(allow_nan=False, allow_infinity=False)
STRINGS = st.text(st.characters(exclude_characters="\n", exclude_categories=("Cs",)))
VALUES = st.one_of(st.builds(A.NumberLit, NUMBERS), st.builds(A.StringLit, STRINGS))
CMP_OPS = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])
LEAVES = st.one_of(
    st.builds(A.Comparison, COLUMNS, CMP_OPS, VALUES),
    st.builds(A.Membership, COLUMNS, st.lists(VALUES, min_size=1, max_size=3).map(tuple)),
)
PREDICATES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.builds(A.Conjunction, st.lists(inner, min_size=2, max_size=3).map(tuple)),
        st.builds(A.Disjunction, st.lists(inner, min_size=2, max_size=3).map(tuple)),
        st.builds(A.Negation, inner),
    ),
    max_leaves=8,
)
COUNTS = st.integers(-3, 10**9)
COUNT_OF = st.builds(A.CountOf, PREDICATES)
MEAN_OF = st.builds(A.MeanOf, COLUMNS, st.none() | PREDICATES)
WORKLOAD_TREES = st.one_of(
    st.builds(A.AllMarginals, COUNTS, st.none() | COLUMN_LISTS),
    st.builds(A.Marginal, COLUMN_LISTS),
    st.builds(A.Range, COLUMN_LISTS, st.none() | COLUMNS, st.none() | COUNTS),
    st.builds(A.Halfspaces, COUNTS, COLUMNS, st.none() | COLUMN_LISTS),
    COUNT_OF,
    MEAN_OF,
)
METRICS = IDENT.filter(lambda m: m not in A.KEYWORDS)
REQUIREMENT_TREES = st.builds(
    A.Requirement,
    st.one_of(
        st.builds(A.Model, st.sampled_from(["logistic", "linear"]), COLUMNS, COLUMN_LISTS),
        st.builds(A.Corr, COLUMNS, COLUMNS),
        COUNT_OF,
        MEAN_OF,
    ),
    st.one_of(
        st.builds(A.Within, NUMBERS),
        st.builds(A.MetricBound, METRICS, st.sampled_from(["<", "<=", ">", ">="]), NUMBERS),
    ),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, derandomize=True)
@given(WORKLOAD_TREES)
def test_generated_workload_trees_round_trip(tree: A.WorkloadNode) -> None:
    text = A.to_dsl(tree)
    parsed = parse_workload_item(text)
    assert parsed == tree
    assert A.to_dsl(parsed) == text
    assert_spans_match(parsed, text)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, derandomize=True)
@given(REQUIREMENT_TREES)
def test_generated_requirement_trees_round_trip(tree: A.Requirement) -> None:
    text = A.to_dsl(tree)
    parsed = parse_requirement(text)
    assert parsed == tree
    assert_spans_match(parsed, text)


# --------------------------------------------------------------------------------------------
# Syntax errors: (text, expected code, expected column in release.yaml, text in the message)

WORKLOAD_ERRORS = [
    ("margnals(3)", "E203", 5, "margnals"),
    ("corr(a, b)", "E203", 5, "requirement"),
    ("marginals(2.5)", "E207", 15, "2.5"),
    ("marginals(3) ovr [a]", "E201", 18, "'over'"),
    ("marginals(3) over [a b]", "E201", 26, "','"),
    ("marginals(3) over [a,", "E202", 26, "column name"),
    ("marginal()", "E201", 14, "column name"),
    ("marginal(a, b", "E202", 18, "')'"),
    ("range(a) by", "E202", 16, "column name"),
    ("range(a) thresholds x", "E201", 25, "whole number"),
    ("range(a) thresholds 1.5", "E207", 25, "1.5"),
    ("halfspaces(10) over [a]", "E202", 28, "'by'"),
    ("halfspaces(x) by y", "E201", 16, "whole number"),
    ("count()", "E201", 11, "column name"),
    ("count(a >)", "E201", 14, "number"),
    ("count(a > 1 adn b < 2)", "E201", 17, "'and'"),
    ('count(sex == "Fem)', "E205", 18, "string"),
    ("count(a in {})", "E201", 17, "string"),
    ("count(a @ 3)", "E204", 13, "'@'"),
    ("count((a > 1)", "E202", 18, "')'"),
    ("count(a > 1e999)", "E208", 15, "1e999"),
    ("count(`a)", "E205", 11, "quoted name"),
    ("mean(x | )", "E201", 14, "column name"),
    ("mean(x y)", "E201", 12, "')'"),
    ("   ", "E206", 5, "empty"),
]
REQUIREMENT_ERRORS = [
    ("logistic(y ~ x)", "E202", 20, "within"),
    ("logistic(y x) within 1", "E201", 16, "'~'"),
    ("logistic(y ~ x +) within 1", "E201", 21, "column name"),
    ("linear(y ~ ) within 1", "E201", 16, "column name"),
    ("corr(a) within 1", "E201", 11, "','"),
    ("corr(a, b) within", "E202", 22, "number"),
    ("corr(a, b) accuracy == 1", "E201", 25, "'>='"),
    ("corr(a, b) withn 0.1", "E201", 22, "'<='"),
    ("mean(x) within 1 extra", "E201", 22, "the end"),
    ("count(a > 1)", "E202", 17, "within"),
    ("logisitc(y ~ x) within 1", "E203", 5, "logisitc"),
    ("marginals(3) within 1", "E203", 5, "workload item"),
    ("", "E206", 5, "empty"),
]


def _only_error(parse, text: str):
    with pytest.raises(DiagnosticError) as info:
        parse(text, ORIGIN)
    [d] = info.value.diagnostics
    return d


@pytest.mark.parametrize(("text", "code", "col", "words"), WORKLOAD_ERRORS)
def test_workload_syntax_errors(text: str, code: str, col: int, words: str) -> None:
    d = _only_error(parse_workload_item, text)
    assert (d.code, d.pos.file, d.pos.line, d.pos.col) == (code, "release.yaml", 40, col)
    assert words in d.message


@pytest.mark.parametrize(("text", "code", "col", "words"), REQUIREMENT_ERRORS)
def test_requirement_syntax_errors(text: str, code: str, col: int, words: str) -> None:
    d = _only_error(parse_requirement, text)
    assert (d.code, d.pos.file, d.pos.line, d.pos.col) == (code, "release.yaml", 40, col)
    assert words in d.message


def test_did_you_mean_hints() -> None:
    assert "'marginals'" in _only_error(parse_workload_item, "margnals(3)").hint
    assert "'over'" in _only_error(parse_workload_item, "marginals(3) ovr [a]").hint
    assert "'within'" in _only_error(parse_requirement, "corr(a, b) withn 0.1").hint
    assert "'logistic'" in _only_error(parse_requirement, "logisitc(y ~ x) within 1").hint


def test_a_name_that_needs_backquotes_is_shown_quoted() -> None:
    """R's and SAS's column names (`flc.grp`, `sample.yr`) are not identifiers: the hint
    writes the name in backquotes; a character on its own gets no such hint."""
    d = _only_error(parse_requirement, 'mean(futime | flc.grp == "10") within 300')
    assert (d.code, d.pos.col) == ("E204", 22)
    assert "`flc.grp`" in d.hint
    assert "`sample.yr`" in _only_error(parse_workload_item, "range(sample.yr) by death").hint
    assert _only_error(parse_workload_item, "count(a @ 3)").hint is None


def test_all_items_reported_at_once() -> None:
    origins = [SourcePos("r.yaml", 10, 5), SourcePos("r.yaml", 11, 5), SourcePos("r.yaml", 12, 5)]
    with pytest.raises(DiagnosticError) as info:
        parse_workload(["marginals(", "marginal(a)", "count(a >)"], origins)
    assert [(d.code, d.pos.line) for d in info.value.diagnostics] == [("E202", 10), ("E201", 12)]
