"""benchmarks/report.py: RESULTS.md is generated from each question's results file, and a
question without one says so and gives its command."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("bench_report", BENCH / "report.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_report"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("bench_report", None)


def test_every_question_names_a_harness_that_exists(report):
    for q in report.QUESTIONS:
        assert (BENCH / q.harness).is_file(), q.harness
        assert q.results.endswith(".json"), q.results


def test_the_committed_results_md_is_what_the_script_writes(report):
    assert (BENCH / "RESULTS.md").read_text() == report.render(), (
        "benchmarks/RESULTS.md is stale: run python benchmarks/report.py"
    )


def test_a_question_without_results_says_so_and_gives_its_command(report, tmp_path):
    text = report.render(tmp_path)  # no results file at all
    for q in report.QUESTIONS:
        assert f"`benchmarks/{q.results}` does not exist yet" in text
        assert q.command in text


def test_a_results_file_fills_its_section(report, tmp_path):
    q = next(q for q in report.QUESTIONS if q.harness == "privacy/run.py")
    (tmp_path / q.results).parent.mkdir(parents=True)
    shutil.copy(BENCH / q.results, tmp_path / q.results)
    text = "\n".join(report.section(q, tmp_path))
    best = json.loads((BENCH / q.results).read_text())["engines"]["memory"]["best"]
    assert "| memory | " in text and f"{best['noise_s']:.3f}" in text
    assert "does not exist yet" not in text


def _module_constants() -> set[str]:
    """Every UPPER_CASE name assigned at module level anywhere in dpql/."""
    names: set[str] = set()
    for path in (BENCH.parent / "dpql").rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) else []
            )
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id.isupper():
                        names.add(n.id)
    return names


def test_every_constant_decisions_md_names_is_in_dpql():
    named = set(re.findall(r"`([A-Z][A-Z0-9_]{2,})[`/]", (BENCH / "DECISIONS.md").read_text()))
    assert len(named) > 30  # the pattern still finds the table's names
    missing = sorted(named - _module_constants())
    assert not missing, f"DECISIONS.md names constants dpql/ no longer has: {missing}"


def _benchmark_paths() -> list[tuple[str, str]]:
    """(path, 'file:line') for each ``benchmarks/...`` path the docs and the code name, except
    on lines that point into the archive tag."""
    root = BENCH.parent
    files = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "spec").glob("*.md"),
             *(root / "examples").rglob("README.md"), *(root / "dpql").rglob("*.py")]  # fmt: skip
    out = []
    for f in files:
        for number, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if "benchmarks-archive-" in line:
                continue
            for path in re.findall(r"\bbenchmarks/[\w./-]*", line):
                out.append((path.rstrip("./"), f"{f.relative_to(root)}:{number}"))
    return out


def test_every_benchmark_path_the_docs_and_code_name_exists():
    named = _benchmark_paths()
    assert named  # the pattern still finds the references
    missing = [f"{where}: {path}" for path, where in named if not (BENCH.parent / path).exists()]
    assert not missing, "point these at benchmarks/RESULTS.md or the archive tag:\n" + "\n".join(
        missing
    )
