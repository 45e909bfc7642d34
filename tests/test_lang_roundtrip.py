"""``parse(to_dsl(tree)) == tree`` (the canonical printer of ``dpql/lang/ast.py``), for every
workload item and requirement of the shipped examples and for generated predicates."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from dpql.lang import parse_requirement, parse_workload_item, to_dsl

ROOT = Path(__file__).resolve().parents[1]


def _example_texts() -> tuple[list[str], list[str]]:
    workload, requirements = [], []
    for spec in sorted((ROOT / "examples").rglob("*.release.yaml")):
        doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
        workload += list(doc.get("workload") or [])
        requirements += list(doc.get("requirements") or [])
    return workload, requirements


def test_example_items_print_and_parse_back_unchanged() -> None:
    workload, requirements = _example_texts()
    assert workload and requirements
    for text in workload:
        tree = parse_workload_item(text)
        assert parse_workload_item(to_dsl(tree)) == tree, text
        assert to_dsl(parse_workload_item(to_dsl(tree))) == to_dsl(tree)
    for text in requirements:
        tree = parse_requirement(text)
        assert parse_requirement(to_dsl(tree)) == tree, text


COLUMNS = st.sampled_from(["age", "sex", "hours_per_week", "native_country", "income"])
NUMBERS = st.integers(-1000, 1000).map(str) | st.floats(0, 1e6, allow_nan=False).map(
    lambda x: f"{x:.6g}"
)


def _atoms() -> st.SearchStrategy[str]:
    compare = st.tuples(COLUMNS, st.sampled_from(["<", "<=", ">", ">="]), NUMBERS).map(" ".join)
    equal = st.tuples(COLUMNS, st.sampled_from(["==", "!="]), st.text("abcXYZ-_ ", min_size=1)).map(
        lambda t: f'{t[0]} {t[1]} "{t[2]}"'
    )
    member = st.tuples(COLUMNS, st.lists(st.text("abc", min_size=1), min_size=1, max_size=3)).map(
        lambda t: f"{t[0]} in {{{', '.join(repr_(v) for v in t[1])}}}"
    )
    return compare | equal | member


def repr_(v: str) -> str:
    return f'"{v}"'


PREDICATES = st.recursive(
    _atoms(),
    lambda inner: st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(
        lambda t: f"({t[0]}) {t[1]} ({t[2]})"
    )
    | inner.map(lambda p: f"not ({p})"),
    max_leaves=6,
)


@given(PREDICATES)
def test_generated_counts_print_and_parse_back_unchanged(pred: str) -> None:
    tree = parse_workload_item(f"count({pred})")
    assert parse_workload_item(to_dsl(tree)) == tree
