"""Hostile specs: `dpql plan` answers every one with exit 1 and a located diagnostic
(or exit 0), never a traceback (exit 2), and without large allocations or work that grows faster
than the spec.

Each case is a small edit of examples/adult/adult.release.yaml written to tmp_path; the data
file is never opened by `plan`.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import re
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from guards import run_or_fail

from dpql.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adult" / "adult.release.yaml"
BASE = EXAMPLE.read_text(encoding="utf-8")
AGE = "age:            {type: numeric, min: 17, max: 90, integer: true, bins: 15}"
COUNT = "count(age >= 65 and hours_per_week > 40)"
IPROJ = "  method: iproj          # I-projection resampling toward the requirement measurements"


def sub(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


def _alias_bomb(levels: int = 9, fanout: int = 10) -> str:
    lines = ["description: &a0 [lol]"]
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * fanout)
        lines.append(f"x{i}: &a{i} [{refs}]")
    return "\n".join(lines)


def _weighted_requirements(k: int) -> str:
    reqs = "".join(
        f"  - mean(hours_per_week | age > {17 + (i % 70)}.{i // 70}) within 1.0 weight 1\n"
        for i in range(k)
    )
    start, end = BASE.index("requirements:\n"), BASE.index("\nsynthesizer:")
    return BASE[:start] + "requirements:\n" + reqs + BASE[end:]


def _external(epsilon: str, neighbouring: str = "add_remove") -> str:
    start, end = BASE.index("synthesizer:\n"), BASE.index("\npostprocess:")
    synth = (
        "synthesizer:\n  method: external\n  path: elsewhere.csv\n"
        f"  budget: {{epsilon: {epsilon}, delta: 1e-12, neighbouring: {neighbouring}}}\n"
    )
    return sub("epsilon: 1.0", "epsilon: 2.0", BASE[:start] + synth + BASE[end:])


def _wide_schema(columns: int, bins: int, workload: str) -> str:
    cols = "".join(
        f"  c{i}: {{type: numeric, min: 0, max: 1, bins: {bins}}}\n" for i in range(columns)
    )
    text = re.sub(r"schema:\n.*?\n\n", "schema:\n" + cols + "\n", BASE, count=1, flags=re.S)
    text = re.sub(r"workload:\n.*?\n\n", f"workload:\n  - {workload}\n\n", text, flags=re.S)
    text = re.sub(r"requirements:\n.*?\n\n", "requirements:\n\n", text, flags=re.S)
    return text


def _gan(options: str) -> str:
    start, end = BASE.index("synthesizer:\n"), BASE.index("\npostprocess:")
    synth = f"synthesizer:\n  method: gan\n  rows: 32561\n  options: {options}\n"
    return BASE[:start] + synth + BASE[end:]


# (id, spec text, expected code); all exit 1 with the code at a file:line:col position.
# fmt: off
CASES: list[tuple[str, Callable[[], str], str]] = [
    # integers Python cannot convert (4,300-digit limit), in YAML and in the DSL
    ("yaml-int-4301-digits", lambda: sub("rows: 32561 ", "rows: " + "9" * 4301 + " "), "E101"),
    ("yaml-int-120-digits", lambda: sub("rows: 32561 ", "rows: " + "9" * 120 + " "), "E101"),
    ("rows-huge", lambda: sub("rows: 32561 ", "rows: " + "9" * 40 + " "), "E101"),
    ("dsl-int-5000-digits", lambda: sub("marginals(3)", "marginals(" + "9" * 5000 + ")"), "E208"),
    ("dsl-number-5000-digits", lambda: sub("within 1.0", "within " + "9" * 5000), "E208"),
    # recursion
    ("yaml-deeply-nested", lambda: sub("dpql: 1\n", "dpql: 1\ndeep: " + _nest(5000) + "\n"), "E006"),
    ("yaml-recursive-alias", lambda: sub("description: Public", "description: &r [*r]\nx: Public"), "E006"),
    ("yaml-alias-bomb", lambda: sub("description: Public-use synthetic version of the UCI Adult census extract.", _alias_bomb()), "E006"),
    ("dsl-deep-not", lambda: sub(COUNT, "count(" + "not " * 1000 + "age >= 65)"), "E209"),
    ("dsl-deep-parens-not", lambda: sub(COUNT, "count(" + "(not " * 600 + "age >= 65" + ")" * 600 + ")"), "E209"),
    # sizes and ranges that overflowed or allocated gigabytes
    ("bins-2**64", lambda: sub("bins: 15", f"bins: {2**64}"), "E101"),
    ("bins-2**63", lambda: sub("bins: 15", f"bins: {2**63}"), "E101"),
    ("bins-1e9-int", lambda: sub("bins: 15", "bins: 1000000000"), "E101"),
    ("bins-1e9-float", lambda: sub("bins: 15", "bins: 1e9"), "E012"),
    ("epsilon-1e308", lambda: sub("epsilon: 1.0", "epsilon: 1e308"), "E101"),
    ("delta-near-1", lambda: sub("delta: 1e-9", "delta: 0.9999999999999999"), "E101"),
    ("delta-subnormal", lambda: sub("delta: 1e-9", "delta: 5e-324"), "E101"),
    ("share-rounds-to-1", lambda: sub(IPROJ, IPROJ + "\n  share: 0.9999999999"), "E101"),
    ("share-rounds-to-0", lambda: sub(IPROJ, IPROJ + "\n  share: 1e-12"), "E101"),
    ("external-add-remove-overflow", lambda: _external("1000"), "E151"),
    # work bounded up front
    ("name-100k", lambda: sub("name: adult-public", "name: " + "a" * 100_000), "E111"),
    ("file-5M-characters", lambda: sub("description: Public", "description: " + "x" * 5_000_000 + " Public"), "E006"),
    ("range-10k-items", lambda: sub(f"  - {COUNT}\n", "  - range(age, hours_per_week) by income\n" * 10_000), "E111"),
    ("requirements-201", lambda: _weighted_requirements(201), "E111"),
    ("dsl-item-too-long", lambda: sub(COUNT, "count(" + " or ".join(["age > 20"] * 2000) + ")"), "E111"),
    # bounds whose arithmetic breaks (silently wrong output before)
    ("bounds-overflow", lambda: sub(AGE, "age: {type: numeric, min: -1e308, max: 1e308, bins: 15}"), "E104"),
    ("bounds-subnormal", lambda: sub(AGE, "age: {type: numeric, min: 0, max: 5e-324, bins: 15}"), "E104"),
    ("bounds-below-resolution", lambda: sub(AGE, "age: {type: numeric, min: 1e15, max: 1.0000000000000002e15, bins: 15}"), "E104"),
    ("edges-overflow", lambda: sub(AGE, "age: {type: numeric, min: 0, max: 1, edges: [-1e308, 0.5, 1e308]}"), "E105"),
    # plans that passed and then exhausted memory in compile
    ("halfspaces-1e6", lambda: sub("halfspaces(500)", "halfspaces(1000000)"), "E315"),
    ("halfspaces-2e5", lambda: sub("halfspaces(500)", "halfspaces(200000)"), "E160"),
    ("range-1e6-thresholds", lambda: sub("hours_per_week) by income", "hours_per_week) by income thresholds 1000000"), "E315"),
    ("range-3e5-thresholds", lambda: sub("hours_per_week) by income", "hours_per_week) by income thresholds 300000"), "E160"),
    ("synthetic-rows-1e9", lambda: sub("  rows: 32561\n", "  rows: 1000000000\n"), "E160"),
    ("relaxed-rows-1e8", lambda: sub("  rows: 32561\n", "  rows: 32561\n  options: {relaxed_rows: 100000000}\n"), "E160"),
    ("gan-noise-1e-300", lambda: _gan("{noise_multipliers: [1e-300, 1e300]}"), "E101"),
    ("gan-noise-planning", lambda: _gan("{noise_multipliers: [1e-300, 1e9]}"), "E152"),
    ("gan-batch-1e8", lambda: _gan("{ae_batch_size: 100000000}"), "E160"),
    ("gan-hidden-1e9", lambda: _gan("{ae_hidden: 1000000000}"), "E160"),
    ("marginals2-45x1000", lambda: _wide_schema(45, 999, "marginals(2)"), "E315"),
    ("marginals2-45x300", lambda: _wide_schema(45, 300, "marginals(2)"), "E160"),
]
# fmt: on


def _plan(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    rc = main(["plan", str(path), *extra])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.parametrize(("make", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_spec_is_a_located_error(
    make: Callable[[], str], code: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "hostile.release.yaml"
    spec.write_text(make(), encoding="utf-8")
    rc, _, err = _plan(spec, capsys)
    assert rc == 1, err[-2000:]
    assert re.search(rf"hostile\.release\.yaml:\d+:\d+: error\[{code}\]: ", err), err[-2000:]
    assert "Traceback" not in err and "internal error" not in err
    assert len(err) < 4000  # echoed text is clipped: one screen, not the 5,000-digit number


def test_alias_bomb_is_refused_without_expanding_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bomb.release.yaml"
    spec.write_text(sub("description: Public-use", _alias_bomb(12) + "\nd: Public-use"))
    tracemalloc.start()
    try:
        rc, _, err = _plan(spec, capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 1 and "error[E006]" in err and "alias" in err
    assert peak < 64 << 20, peak  # 10^12 values if expanded


@pytest.mark.slow
def test_plan_is_bounded_in_memory_in_a_limited_process(tmp_path: Path) -> None:
    """The cases that allocated gigabytes before (7.45 GiB for the bins, 10^9 values for the
    alias bomb) run in a child limited to 3 GiB of address space: each is refused, none is
    killed or raises MemoryError."""
    cases = {
        "bins": sub("bins: 15", "bins: 1000000000"),
        "bomb": sub("description: Public-use", _alias_bomb(9) + "\nd: Public-use"),
        "halfspaces": sub("halfspaces(500)", "halfspaces(1000000)"),
        "ranges": sub(f"  - {COUNT}\n", "  - range(age, hours_per_week) by income\n" * 10_000),
    }
    paths = []
    for name, text in cases.items():
        path = tmp_path / f"{name}.release.yaml"
        path.write_text(text)
        paths.append(str(path))
    script = textwrap.dedent(
        """
        import contextlib, io, resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        from dpql.cli import main
        for path in sys.argv[1:]:
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = main(["plan", path])
            print(rc, "error[E" in err.getvalue())
        """
    )
    threads = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    done = run_or_fail(
        [sys.executable, "-c", script, *paths],
        "dpql plan in a memory-limited child",
        capture_output=True,
        text=True,
        env={**os.environ, **threads},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "True"] * len(cases), done.stdout + done.stderr[-2000:]


def test_markup_in_user_text_is_printed_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = sub("name: adult-public", 'name: "[/] adult [bold]x[/bold] [link=y]"')
    text = sub('values: ["?", Federal-gov', 'values: ["[/]", "?", Federal-gov', text)
    text = sub(
        "corr(age, hours_per_week) within 0.05",
        'count(workclass == "[/]" or workclass == "?") within 0.05',
        text,
    )
    spec = tmp_path / "markup.release.yaml"
    spec.write_text(text)
    rc, out, err = _plan(spec, capsys)
    assert rc == 0, err
    assert "[/] adult [bold]x[/bold] [link=y]: 32561 public rows" in out
    assert 'workclass == "[/]"' in out


@pytest.mark.slow
def test_planning_work_is_linear_in_the_weighted_requirements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Planning does work linear in the requirements: twice the requirements, at most about
    twice the Python calls (a quadratic step would make it four times). Calls, not seconds:
    the count does not depend on the machine's load."""

    def calls(k: int) -> int:
        spec = tmp_path / f"many{k}.release.yaml"
        spec.write_text(_weighted_requirements(k))
        profile = cProfile.Profile()
        profile.enable()
        try:
            rc, out, err = _plan(spec, capsys, "--format", "json")
        finally:
            profile.disable()
        assert rc == 0, err[-2000:]
        assert len(json.loads(out)["requirements"]) == k
        return pstats.Stats(profile).total_calls  # type: ignore[attr-defined]

    calls(20)  # imports and one-off set-up out of the count
    assert calls(200) < 2.5 * calls(100)


def test_a_tiny_tolerance_is_unreachable_not_an_overflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """(Z sd / t)^2 overflows for t = 1e-300: the smallest epsilon is inf (found by the fuzz)."""
    spec = tmp_path / "tiny.release.yaml"
    spec.write_text(
        sub("corr(age, hours_per_week) within 0.05", "corr(age, hours_per_week) within 1e-300")
    )
    rc, out, err = _plan(spec, capsys, "--format", "json")
    assert rc == 0, err[-2000:]
    corr = json.loads(out)["requirements"][1]
    assert corr["reachable"] is False and corr["smallest_epsilon"] is None


@pytest.mark.parametrize("weights", [("1e-300", "1e300", "1"), ("1e308", "1e308", "1e308")])
def test_extreme_requirement_weights_plan(
    weights: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A release with almost no budget needs a huge rho: unreachable (inf), not a math domain
    error (found by the fuzz)."""
    text = BASE
    for tol, w in zip(("within 0.02\n", "within 0.05\n", "within 1.0\n"), weights, strict=True):
        text = sub(tol, tol.replace("\n", f" weight {w}\n"), text)
    spec = tmp_path / "weights.release.yaml"
    spec.write_text(text)
    rc, out, err = _plan(spec, capsys, "--format", "json")
    assert rc == 0, err[-2000:]
    assert len(json.loads(out)["requirements"]) == 3


def test_extreme_budgets_within_the_ranges_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The documented ranges' ends plan to a finite allocation (no nan, no math error)."""
    for epsilon, delta in [("1e-6", "1e-100"), ("1e6", "0.5"), ("1e6", "1e-100"), ("1e-6", "0.5")]:
        text = sub("epsilon: 1.0", f"epsilon: {epsilon}")
        spec = tmp_path / "budget.release.yaml"
        spec.write_text(sub("delta: 1e-9", f"delta: {delta}", text))
        rc, out, err = _plan(spec, capsys, "--format", "json")
        assert rc == 0, (epsilon, delta, err[-2000:])
        plan = json.loads(out)
        assert 0 < plan["budget"]["rho"] < float("inf")
        assert plan["allocation"]["total_rho"] <= plan["budget"]["rho"]


def test_plan_reports_the_compile_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "adult.release.yaml"
    spec.write_text(BASE)
    rc, out, _ = _plan(spec, capsys)
    assert rc == 0 and "compile estimate: peak memory about" in out
    rc, out, _ = _plan(spec, capsys, "--format", "json")
    resources = json.loads(out)["resources"]
    peak = resources["peak_memory_bytes"]
    assert 2**28 < peak < 4 * 2**30 and resources["seconds"] > 0
    # Below the limit but above half of it: a warning with the figure; above it: refused.
    monkeypatch.setenv("DPQL_MEMORY_LIMIT", str(int(peak * 1.5)))
    rc, _, err = _plan(spec, capsys)
    assert rc == 0 and "warning[W160]" in err
    monkeypatch.setenv("DPQL_MEMORY_LIMIT", str(peak // 2))
    rc, _, err = _plan(spec, capsys)
    assert rc == 1 and "error[E160]" in err and "DPQL_MEMORY_LIMIT" in err
