"""spec/language.md: every ```dpql example parses, round-trips, resolves; codes documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from adult_domain import adult_domain, adult_rows

from dpql.diagnostics import DiagnosticError
from dpql.lang.ast import to_dsl
from dpql.lang.parser import parse_requirement, parse_workload_item
from dpql.plan.resolve import resolve_requirements, resolve_workload

ROOT = Path(__file__).resolve().parents[1]
LANGUAGE_MD = (ROOT / "spec" / "language.md").read_text(encoding="utf-8")
EXAMPLES = [
    line.strip()
    for block in re.findall(r"```dpql\n(.*?)```", LANGUAGE_MD, re.DOTALL)
    for line in block.splitlines()
    if line.strip()
]


def test_the_reference_has_examples_of_every_construct() -> None:
    heads = {re.match(r"\w+", e).group(0) for e in EXAMPLES}
    assert heads >= {"marginals", "marginal", "range", "halfspaces", "count", "mean"}
    assert heads >= {"logistic", "linear", "corr"}


@pytest.mark.parametrize("text", EXAMPLES)
def test_example_parses_round_trips_and_resolves(text: str) -> None:
    try:
        node = parse_requirement(text)
    except DiagnosticError:
        node = None
    if node is None:
        item = parse_workload_item(text)
        assert parse_workload_item(to_dsl(item)) == item
        assert resolve_workload([item], adult_domain(), adult_rows(), seed=0).queries
    else:
        assert parse_requirement(to_dsl(node)) == node
        assert len(resolve_requirements([node], adult_domain())) == 1


def test_every_emitted_code_is_documented() -> None:
    plan = ROOT / "dpql" / "plan"
    sources = [ROOT / "dpql" / "lang" / "parser.py", plan / "resolve.py", plan / "resolve_predicates.py"]
    emitted = {c for p in sources for c in re.findall(r'"([EW][23]\d\d)"', p.read_text())}
    documented = set(re.findall(r"^\| ([EW][23]\d\d) \|", LANGUAGE_MD, re.MULTILINE))
    assert len(emitted) >= 20
    assert emitted == documented
