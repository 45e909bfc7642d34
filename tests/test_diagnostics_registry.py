"""The diagnostics registry (dpql/diagnostics_registry/) against the source and the docs.

Every code literal in ``dpql/`` is registered, with the modules that use it; every registered
code is used somewhere (or marked reserved); ``docs/diagnostics.md`` holds the tables the registry
renders; ``spec/language.md`` §7 lists the DSL codes as registered; a code's severity is the one
its prefix says wherever the source states one.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from dpql.data import codec
from dpql.diagnostics_registry import (
    CODE_PATTERN,
    DOC,
    REGISTRY,
    SECTIONS,
    DiagnosticCode,
    doc_sections,
    lookup,
    render_doc,
    section_of,
    section_table,
)
from dpql.spec import codes as spec_codes

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dpql"
REGISTRY_DIR = PKG / "diagnostics_registry"  # the registry itself is not a use of its codes
SOURCES = sorted(p for p in PKG.rglob("*.py") if REGISTRY_DIR not in p.parents)
# a code anywhere in a source text: a literal, a message, a docstring or a comment
MENTION = re.compile(r"(?<![A-Za-z0-9_])[EWPV]\d{3}(?![0-9])")


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def code_literals(raised_only: bool = False) -> dict[str, set[str]]:
    """``{code: modules}`` of every string constant that is a whole code (``"E401"``); with
    ``raised_only``, only those that report the code: a call's first argument or its ``code=``
    (``Diagnostic("E401", ...)``, ``sink.error("E301", ...)``, ``VerifyProblem("V010", ...)``),
    not a comparison or a set of codes."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        reporting = {
            id(arg)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            for arg in [*node.args[:1], *(k.value for k in node.keywords if k.arg == "code")]
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if CODE_PATTERN.fullmatch(node.value) and (
                    not raised_only or id(node) in reporting
                ):
                    found[node.value].add(module_name(path))
    return found


@pytest.mark.slow
def test_the_scan_sees_the_codes() -> None:
    """Guards the scan itself: it finds codes of every kind in the modules they are in."""
    found = code_literals()
    assert len(found) >= 90
    assert {c[0] for c in found} == {"E", "W", "P", "V"}
    assert "dpql.spec.load" in found["E010"] and "dpql.release.provenance" in found["V030"]
    assert "dpql.data.engines.duckdb" in found["E409"]
    raised = code_literals(raised_only=True)
    assert set(raised) <= set(found) and len(raised) >= 90


def test_every_code_used_in_the_source_is_registered() -> None:
    unregistered = sorted(set(code_literals()) - set(REGISTRY))
    assert not unregistered, f"register these codes in dpql/diagnostics_registry/: {unregistered}"


def test_every_code_mentioned_in_the_source_is_registered() -> None:
    """Codes written any other way (in a message, a hint, a docstring, a comment, an f-string)
    name registered codes too, so no text points to a code that does not exist."""
    stray = {
        f"{path.relative_to(ROOT)}: {code}"
        for path in SOURCES
        for code in MENTION.findall(path.read_text(encoding="utf-8"))
        if code not in REGISTRY
    }
    assert not stray, sorted(stray)


def test_registered_modules_are_the_ones_that_use_each_code() -> None:
    """Every registered code is reported (or reserved), by exactly the modules the registry
    names."""
    used = code_literals(raised_only=True)
    wrong = {
        c.code: {"registry": sorted(c.modules), "source": sorted(used.get(c.code, ()))}
        for c in REGISTRY.values()
        if set(c.modules) != used.get(c.code, set())
    }
    assert not wrong, f"update the modules in dpql/diagnostics_registry/: {wrong}"
    for c in REGISTRY.values():
        assert c.reserved == (c.code not in used), c.code


def test_severity_matches_the_prefix_wherever_the_source_states_it() -> None:
    """``W`` codes are warnings and the others errors: checked on ``Diagnostic(code, ...,
    severity)`` and ``sink.warning(code, ...)`` / ``sink.error(code, ...)`` calls."""
    checked, wrong = 0, []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            if not CODE_PATTERN.fullmatch(first.value):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            severity: object = None
            if name == "Diagnostic":
                given = [k.value for k in node.keywords if k.arg == "severity"]
                given += node.args[4:5]
                severity = (
                    given[0].value
                    if given and isinstance(given[0], ast.Constant)
                    else ("error" if not given else None)
                )
            elif name in ("warning", "error") and isinstance(func, ast.Attribute):
                severity = name
            if severity is None:
                continue
            checked += 1
            if severity != lookup(first.value).severity:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {first.value} {severity}")
    assert checked >= 60
    assert not wrong, wrong


def test_entries_are_consistent() -> None:
    cli = (PKG / "cli" / "parser.py").read_text(encoding="utf-8")
    commands = set(re.findall(r'add_parser\(\s*"(\w+)"', cli))
    assert commands >= {"plan", "check", "compile", "verify", "evaluate"}
    sections = {s.key for s in SECTIONS}
    for code, c in REGISTRY.items():
        assert code == c.code and c.section in sections
        assert c.commands and set(c.commands) <= commands, code
        assert c.title and "\n" not in c.title and "|" not in c.meaning, code
        assert all(m.startswith("dpql.") for m in c.modules), code
    assert list(REGISTRY) == sorted(REGISTRY)
    assert {c.section for c in REGISTRY.values()} == sections


def test_a_bad_entry_is_refused() -> None:
    with pytest.raises(ValueError, match="W codes are warnings"):
        DiagnosticCode("W999", "error", "x", ("plan",), ("dpql.x",))
    with pytest.raises(ValueError, match="malformed"):
        DiagnosticCode("E12", "error", "x", ("plan",), ("dpql.x",))
    with pytest.raises(ValueError, match="reserved"):
        DiagnosticCode("E999", "error", "x", ("plan",), ())
    assert DiagnosticCode("E999", "error", "x", ("plan",), (), reserved=True).reserved


@pytest.mark.parametrize(
    ("code", "section"),
    [("E001", "spec"), ("E111", "spec"), ("W101", "spec"), ("E150", "planning"),
     ("W160", "planning"), ("E209", "dsl"), ("W302", "dsl"), ("E410", "data"),
     ("W507", "postprocess"), ("E612", "release"), ("P008", "policy"), ("V000", "verify")],
)  # fmt: skip
def test_section_follows_the_range(code: str, section: str) -> None:
    assert section_of(code) == section


def test_the_docs_tables_are_generated_from_the_registry() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert render_doc(doc) == doc, (
        "docs/diagnostics.md is stale: run python -m dpql.diagnostics_registry"
    )
    keys = doc_sections(doc)
    assert sorted(keys) == sorted(["ranges", *(s.key for s in SECTIONS)])  # each table once
    missing = [code for code in REGISTRY if f"| `{code}` |" not in doc]
    assert not missing, f"codes without a row in docs/diagnostics.md: {missing}"


def test_render_doc_replaces_a_stale_table_and_keeps_the_prose() -> None:
    begin = "<!-- diagnostics-table: policy (generated by python -m dpql.diagnostics_registry) -->"
    stale = (
        f"# Title\n\nprose\n\n{begin}\n| old | table |\n<!-- end diagnostics-table -->\n\nmore\n"
    )
    new = render_doc(stale)
    assert new.startswith("# Title\n\nprose\n\n") and new.endswith("\n\nmore\n")
    assert "| old | table |" not in new and section_table("policy") in new
    assert render_doc(new) == new


def test_the_language_reference_lists_the_dsl_codes_as_registered() -> None:
    """spec/language.md §7 has its own table of the DSL codes (same codes, severities, text);
    every other code row there (the planner's, §5) is registered with its severity."""
    text = (ROOT / "spec" / "language.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([EWPV]\d{3}) \| (\w+) \| (.*) \|$", text, re.MULTILINE)
    documented = {code: (severity, meaning) for code, severity, meaning in rows}
    registered = {c.code: (c.severity, c.meaning) for c in REGISTRY.values() if c.section == "dsl"}
    assert {c: v for c, v in documented.items() if section_of(c) == "dsl"} == registered
    for code, (severity, _) in documented.items():
        assert code in REGISTRY and REGISTRY[code].severity == severity, code


def test_the_legacy_code_tables_are_views_of_the_registry() -> None:
    assert spec_codes.CODES == {
        c.code: c.title for c in REGISTRY.values() if c.section in ("spec", "policy")
    }
    assert codec.CODES == {c.code: c.title for c in REGISTRY.values() if c.section == "data"}
    assert set(codec.CODES) == {f"E{n}" for n in range(401, 413)}


def test_the_registry_imports_nothing_else_of_dpql() -> None:
    """Every layer may import the registry (the loader and the codec do), so it imports no other
    dpql module: it cannot add an edge to the layer contract (tests/test_layers.py)."""
    for path in REGISTRY_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith("dpql") or name.startswith(
                    "dpql.diagnostics_registry"
                ), f"{path.name} imports {name}"
