"""Write ``benchmarks/RESULTS.md`` from each question's current results file.

One section per question (:data:`QUESTIONS`): the question, the command that answers it, the
machine it ran on and the table of its figures. A question whose results file does not exist
yet gets a section that says so and gives the command. Nothing here runs a benchmark.

    python benchmarks/report.py            # writes benchmarks/RESULTS.md
    python benchmarks/report.py --stdout   # prints it instead
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "RESULTS.md"
ARCHIVE_TAG = "benchmarks-archive-2026-11"


@dataclass(frozen=True)
class Question:
    """One benchmark question: its harness, its current results file, and its table."""

    title: str
    question: str
    harness: str  # relative to benchmarks/
    results: str  # relative to benchmarks/
    command: str
    render: Callable[[dict[str, Any]], list[str]]


# ------------------------------------------------------------------------------------------
# formatting


def _f(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pm(xs: list[float], digits: int = 4) -> str:
    """Mean, with ± the sd over runs when there are several."""
    if not xs:
        return ""
    mean = statistics.fmean(xs)
    return f"{mean:.{digits}f}" + (f" ± {statistics.stdev(xs):.{digits}f}" if len(xs) > 1 else "")


def _wall(s: dict[str, Any] | None) -> str:
    """Mean wall seconds of a cell's runs, with the mean XLA compile seconds in brackets."""
    if not s or not s["time"]:
        return ""
    xla = f" ({sum(s['xla']) / len(s['xla']):.1f})" if s.get("xla") else ""
    return f"{sum(s['time']) / len(s['time']):.1f}{xla}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _machine(m: dict[str, Any] | None) -> str:
    if not m:
        return "not recorded"
    parts = [m.get("date", "?")[:16].replace("T", " "), f"commit {m.get('commit') or '?'}"]
    if m.get("cpus"):
        parts.append(f"{m['cpus']} CPUs, {m.get('memory_gb', '?')} GB")
    if m.get("load_avg"):
        parts.append("load average " + "/".join(f"{x:.1f}" for x in m["load_avg"]))
    if m.get("note"):
        parts.append(m["note"])
    return ", ".join(parts)


# ------------------------------------------------------------------------------------------
# one renderer per question


def render_suite(results: dict[str, Any]) -> list[str]:
    """Mean 3-way TVD per table, epsilon and method, then each method's CPU time."""
    sys.path.insert(0, str(HERE / "suite"))
    try:
        import run as suite  # the harness's own grouping of records
    finally:
        sys.path.remove(str(HERE / "suite"))
    summ = suite.summarise(results["records"])
    known = list(suite.suite_tables.TABLES)
    tables = sorted({k[0] for k in summ}, key=lambda t: known.index(t) if t in known else 99)
    epsilons = sorted({k[1] for k in summ}, key=float)
    methods = [m for m in suite.DISPLAY_ORDER if any(k[2] == m for k in summ)]
    methods += sorted({k[2] for k in summ} - set(methods))
    tvd_rows, cpu_rows, wall_rows = [], [], []
    for t in tables:
        for e in epsilons:
            cells = [summ.get((t, e, m)) for m in methods]
            if not any(cells):
                continue
            tvd_rows.append([t, e] + [_pm(s["tvd"]) + f" ({s['runs']})" if s and s["runs"]
                                      else ("error" if s else "") for s in cells])  # fmt: skip
            cpu_rows.append([t, e] + [_pm(s["cpu"], 1) if s and s["cpu"] else "" for s in cells])
            wall_rows.append([t, e] + [_wall(s) for s in cells])
    dates = sorted({d for s in summ.values() for d in s["finished"]})
    invocations = results.get("invocations", [])
    lines = [
        "Mean total variation distance over every 3-way marginal of the spec's discretisation, "
        "synthetic vs real (lower is better); ± the sd over runs, (n) the number of runs, each "
        "with fresh DP noise; delta = 1/n^2. `independent` is no privacy: each column drawn "
        "from its real values.",
        "",
        *_table(["table", "epsilon", *methods], tvd_rows),
        "",
        "Process CPU seconds per synthesis (imports and JIT included; steadier than wall time "
        "on a shared machine):",
        "",
        *_table(["table", "epsilon", *methods], cpu_rows),
        "",
        "Wall seconds per synthesis (the whole `dpql compile` for dpql's methods), and in "
        "brackets the part spent compiling XLA programs (JAX's own compile-time monitoring; "
        "0 when every program came from the persistent compilation cache); the rest is "
        "imports, tracing and running. Each run is a fresh process under the load its record "
        "gives:",
        "",
        *_table(["table", "epsilon", *methods], wall_rows),
        "",
        f"Runs finished on {', '.join(dates)}; every record carries its date and load.",
    ]
    if invocations:
        m = invocations[-1].get("machine", {})
        lines.append(
            f"Machine: {m.get('cpus')} CPUs, {m.get('memory_gb')} GB ({m.get('platform')}); "
            "commands: " + "; ".join(f"`{i['command']}`" for i in invocations) + "."
        )
    return lines


def render_coverage(results: dict[str, Any]) -> list[str]:
    """Pass rate, how often a pass held on the real table, and the 3-way TVD cost."""
    rows = []
    for table, s in results.items():
        rows.append([
            table, f"{s['compiles']} ({s['baseline_compiles']})",
            f"{s['passed']}/{s['requirements']}", _f(s.get("coverage"), 3),
            f"{s['all_pass_compiles']}/{s['compiles']}", _f(s.get("tvd3_ratio"), 3),
            _f(s.get("postprocess_tvd3_factor"), 3), _f(s.get("min_ess_fraction"), 3),
        ])  # fmt: skip
    return [
        "Each compile of a spec with requirements and `postprocess: iproj` at epsilon 1: how "
        "many requirements passed, the share of passes that held on the real table (the "
        "requirement's value within its tolerance), and the mean 3-way TVD against the same "
        "spec without requirements (baseline compiles in brackets); post-processing's own "
        "factor is the TVD after it over the TVD before it in the same compile.",
        "",
        *_table(
            ["table", "compiles (baseline)", "passed", "passes that held", "all pass",
             "3-way TVD ratio", "post-processing factor", "smallest ESS / n"],
            rows,
        ),
        "",
        "Per-compile rows (seed, commit, seconds, each requirement's verdict and error) are in "
        "`iproj/coverage.jsonl`.",
    ]


def render_speed(results: dict[str, Any]) -> list[str]:
    rows = [
        [f"{r['rows']:,}", str(r["measures"]), r["run"], _f(r["seconds"], 2), r["method"],
         str(r["iterations"]), f"{r['kkt']:.1e}", f"{r['ess']:.0f}"]
        for r in results["rows"]
    ]  # fmt: skip
    return [
        f"Machine: {_machine(results.get('machine'))}.",
        "",
        *_table(["rows", "measures", "run", "seconds", "solver", "iterations", "KKT", "ESS"],
                rows),
    ]


def render_missing(results: dict[str, Any]) -> list[str]:
    rows = []
    for r in results["rows"]:
        verdicts = ", ".join(q["verdict"] for q in r["requirements"]) or "-"
        means = "; ".join(
            f"real {q['real_clipped']:.2f}, released {q['synthetic']:.2f}"
            for q in r["requirements"] if "real" in q
        ) or "-"  # fmt: skip
        shares = ", ".join(
            f"{c} {a:.4f} -> {b:.4f}" for c, (a, b) in r["empty_share"].items() if a or b
        ) or "-"  # fmt: skip
        gaps = r.get("category_gap_vs_kept") or {}
        rows.append([
            r["config"], str(r["seed"]), _f(r["tvd3_mean"]), verdicts, means, shares,
            _f(max(gaps.values())) if gaps else "-", f"{r['cpu_s']}",
        ])  # fmt: skip
    machines = {_machine(r.get("machine")) for r in results["rows"]}
    return [
        "Epsilon 1, the specs as shipped (`flights-drop`: `missing: drop` on `arr_delay`). The "
        "real mean is over present values, clipped to the public bounds as the release is; "
        "empty shares are real -> synthetic (under drop, real among the kept rows).",
        "",
        *_table(
            ["config", "seed", "mean 3-way TVD", "verdicts", "mean requirement",
             "empty share real -> synthetic", "max category gap", "CPU s"],
            rows,
        ),
        "",
        "Machine: " + "; ".join(sorted(machines)) + ".",
    ]


def render_gan(results: dict[str, Any]) -> list[str]:
    rows = []
    for r in results["rows"]:
        worst = max(r["tvd1"], key=r["tvd1"].get)
        rows.append([
            r["variant"], f"{r['epsilon']:g}", f"{r['delta']:.3g}", _f(r["tvd3_mean"], 3),
            _f(r["tvd3_max"], 3), f"{r['tvd1_max']:.3f} ({worst})", _f(r["lr_accuracy"], 3),
            f"{r['compile_wall_s']:.0f}", _machine(r.get("machine")),
        ])  # fmt: skip
    lines = _table(
        ["variant", "epsilon", "delta", "3-way TVD mean", "max", "worst 1-way TVD",
         "LR accuracy (test split)", "compile wall s", "machine"],
        rows,
    )  # fmt: skip
    missing = sorted({"default", "paper"} - {r["variant"] for r in results["rows"]})
    if missing:
        lines += ["", f"*Not in the current results:* the {', '.join(missing)} variant."]
    return lines


def render_privacy(results: dict[str, Any]) -> list[str]:
    rows = []
    for engine, r in results["engines"].items():
        b = r["best"]
        rows.append([engine, f"{r['cells']:,}", *(_f(b[k], 3) for k in
                     ("load_s", "sums_s", "noise_s", "measure_s", "total_s"))])  # fmt: skip
    first = next(iter(results["engines"].values()), {})
    return [
        f"{first.get('queries', '?')} 3-way marginals at rho {first.get('rho', '?')}, best of "
        f"{len(first.get('runs', []))} runs, seconds. `noise` is the exact discrete Gaussian "
        "sampler; `measure` = sums + noise.",
        "",
        *_table(["engine", "cells", "load", "sums", "noise", "measure", "total"], rows),
        "",
        f"Machine: {_machine(results.get('machine'))}.",
    ]


def _per_10m(r: dict[str, Any], seconds: float) -> str:
    """``seconds`` scaled to 10M rows (the measurement grows linearly with the rows)."""
    return f"{seconds * 10_000_000 / r['rows']:.1f}"


def render_scale(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if results.get("measure"):
        lines += [*_table(
            ["rows", "engine", "open s", "455 marginals s", "total s", "peak RSS MiB", "load",
             "sha256 of the sums"],
            [[f"{r['rows']:,}", r["engine"], str(r["open_s"]), str(r["marginals_s"]),
              str(r["total_s"]), str(r["peak_rss_mb"]),
              "/".join(f"{x:.1f}" for x in r["machine"]["load_avg"]), f"`{r['sha256']}`"]
             for r in results["measure"]],
        ), ""]  # fmt: skip
    compiles = results.get("compile", [])
    if compiles:
        lines += [
            "Whole `dpql compile` (`synthesizer.method: auto`, `engine: auto`: DuckDB from 2M "
            "rows; 32,561 synthetic rows), seconds per phase. *measure*: the exact answers "
            "computed in the engine, wherever asked for; *synthesis* and *post-process*: those "
            "phases without the measurement inside them. *Measurement per 10M rows*: open + "
            "measure, scaled to 10M rows (it grows linearly with them); synthesis is not scaled "
            "(it depends on the rows only through what the smaller noise lets the selection "
            "pick). Peak RSS of the process tree (DuckDB runs in process). *XLA cache*: cold, "
            "JAX's persistent compilation cache empty at the start (a user's first compile); "
            "the user's, whatever an earlier run left there.",
            "",
            *_table(
                ["rows", "spec", "method", "total s", "open + encode s", "measure s",
                 "synthesis s", "post-process s", "write s", "measurement per 10M rows s",
                 "peak RSS MiB", "XLA cache", "load at start / end"],
                [[f"{r['rows']:,}", r.get("variant", "example"), str(r.get("method", "?")),
                  str(r["total_s"]), str(r.get("open_encode_s", "-")), str(r.get("measure_s", "-")),
                  str(r.get("synthesis_s", "-")), str(r.get("postprocess_s", "-")),
                  str(r.get("write_s", "-")),
                  _per_10m(r, r.get("open_encode_s", 0) + r.get("measure_s", 0)),
                  str(r["peak_rss_mb"]), r.get("jax_cache", "the user's"),
                  " / ".join("/".join(f"{x:.1f}" for x in r[k])
                             for k in ("load_avg_start", "load_avg_end") if k in r)]
                 for r in compiles],
            ),
            "",
        ]  # fmt: skip
    for r in results.get("dpsgd", []):
        shown = {k: v for k, v in r.items() if k not in ("machine", "settings")}
        lines.append(f"* dpsgd: `{json.dumps(shown)}`")
    entries = [r for p in ("measure", "compile", "dpsgd") for r in results.get(p, [])]
    missing = [p for p in ("compile", "dpsgd") if not results.get(p)]
    missing += [f"compile of the {v} spec" for v in ("example", "marginals")
                if compiles and not any(r.get("variant") == v for r in compiles)]  # fmt: skip
    if not any(r["rows"] >= 10_000_000 for r in entries):
        missing.insert(0, "10M rows")
    if missing:
        lines.append(f"*Not in the current results:* {', '.join(missing)} (run the command above).")
    if entries:
        lines.append(f"Machine: {_machine(entries[-1]['machine'])}.")
    return lines


QUESTIONS: tuple[Question, ...] = (
    Question(
        "Fidelity against MST and AIM",
        "How close are dpql's releases to the real table, against MST, AIM and independent "
        "columns, across tables and epsilons?",
        "suite/run.py", "suite/results.json",
        "python benchmarks/suite/run.py --tables adult adult2k compas fair randhie anes96 "
        "anes96c doctor flights bn1k bn30k --epsilons 0.3 1 3 --methods dpql-auto mst aim "
        "--runs 1 --missing drop; then the same with --runs 4 (stored as runs 1-4), auto and "
        "the peers that beat it, on the settings where auto was not the best in run 0",
        render_suite,
    ),
    Question(
        "Post-processing: does `pass` mean the requirement holds?",
        "When a release says `pass`, does the requirement hold on the real table, and what does "
        "post-processing cost the workload?",
        "iproj/coverage.py", "iproj/coverage.json",
        "python benchmarks/iproj/coverage.py run --table adult randhie bn30k --seeds 0 1 2; "
        "the same with --baseline; then python benchmarks/iproj/coverage.py summary",
        render_coverage,
    ),
    Question(
        "Post-processing speed",
        "How long does the I-projection take on an Adult-sized table?",
        "iproj/speed.py", "iproj/speed.json", "python benchmarks/iproj/speed.py", render_speed,
    ),
    Question(
        "Empty cells",
        "How do releases of a table with real empty cells (keep, drop) compare with Adult?",
        "missing/run.py", "missing/results.json", "python benchmarks/missing/run.py --runs 2",
        render_missing,
    ),
    Question(
        "The GAN backend",
        "How good is `method: gan` on Adult with its defaults (and the paper's setting)?",
        "gan/run.py", "gan/results.json",
        "python benchmarks/gan/run.py --epsilon 1 --variants default paper", render_gan,
    ),
    Question(
        "The cost of exact noise",
        "What does measuring with the exact discrete Gaussian sampler cost, per engine?",
        "privacy/run.py", "privacy/results.json", "python3 benchmarks/privacy/run.py",
        render_privacy,
    ),
    Question(
        "Scale",
        "How do the measurement engines, a whole compile and DP-SGD scale to 10M rows?",
        "scale/run.py", "scale/results.json",
        "python benchmarks/scale/run.py --rows 1000000 10000000 --engines memory duckdb spark; "
        "python benchmarks/scale/run.py --rows 10000000 --engines --compile example marginals "
        "--dpsgd 500",
        render_scale,
    ),
)


def section(q: Question, root: Path = HERE) -> list[str]:
    """One question's section: the question, its command, and its table (or that there is no
    current results file yet)."""
    lines = [f"## {q.title}", "", f"**Question.** {q.question}", "",
             f"**Harness.** `benchmarks/{q.harness}`, writing `benchmarks/{q.results}`.", "",
             f"**Command.** `{q.command}`", ""]  # fmt: skip
    path = root / q.results
    if not path.exists():
        return [
            *lines,
            f"*No current results: `benchmarks/{q.results}` does not exist yet.* Run the "
            f"command above, then `python benchmarks/report.py`. Earlier figures are in the "
            f"archive tag (`git show {ARCHIVE_TAG}:benchmarks/`).",
            "",
        ]
    results = json.loads(path.read_text())
    if isinstance(results, dict) and results.get("command", q.command) != q.command:
        lines += [f"**Last run.** `{results['command']}`", ""]
    return lines + q.render(results) + [""]


def render(root: Path = HERE) -> str:
    lines = [
        "# Benchmarks: current results",
        "",
        "*Generated by `python benchmarks/report.py` from each question's results file; do not "
        "edit by hand.* `benchmarks/README.md` lists the questions and how to run them; the "
        "constants these figures justify are in `benchmarks/DECISIONS.md`. Figures come from "
        "the project's shared 2-core CPU machine unless a section says otherwise: wall times "
        "move with its load, so each section gives the load it ran under.",
        "",
    ]
    for q in QUESTIONS:
        lines += section(q, root)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stdout", action="store_true", help="print instead of writing RESULTS.md")
    a = ap.parse_args(argv)
    text = render()
    if a.stdout:
        print(text, end="")
    else:
        OUT.write_text(text)
        print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
