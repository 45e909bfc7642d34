"""Command line: ``dpql init | plan | check | ledger | compile | verify | keygen | evaluate``.

Exit codes: 0 success; 1 a problem in the user's input (spec, policy, data) or a failed check,
reported as ``file:line:col: error[CODE]: message`` with a hint, never a traceback; 2 an internal
error in dpql itself (a bug: please report it), or bad command-line usage (argparse).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from dpql import __version__
from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos, render_all, to_json
from dpql.terminal import SafeConsole, safe_streams

EXIT_OK, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2

# every byte printed goes through dpql.terminal: control characters of user text are escaped
out = SafeConsole(width=None if sys.stdout.isatty() else 120)
err = SafeConsole(stderr=True, soft_wrap=True)  # log lines are never wrapped mid-sentence


def _fmt(x: float | None, digits: int = 4) -> str:
    """``digits`` significant digits, and a number that would need an exponent in full with
    thousands separators (15,980, not 1.598e+04)."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    text = f"{x:.{digits}g}"
    return f"{x:,.0f}" if "e+" in text else text


def _report(diagnostics: Sequence[Diagnostic], fmt: str, show_values: bool = False) -> None:
    """Print diagnostics; private data values only with ``show_values`` (``--show-values``)."""
    if fmt == "json":
        print(to_json(diagnostics, show_values))
    else:
        print(render_all(diagnostics, show_values), file=sys.stderr)


# ------------------------------------------------------------------------------------------
# plan


def cmd_plan(args: argparse.Namespace) -> int:
    from dpql.plan.planner import build_plan
    from dpql.spec.load import load_spec

    t = time.perf_counter()
    spec = load_spec(args.spec)
    plan = build_plan(spec)
    data = plan.to_json()
    if plan.resources is not None:  # the compile estimate is shown, not hashed into records
        data["resources"] = plan.resources.to_json()
    if "reason" in plan.synth.options:  # method: auto's choice (shown, not hashed)
        data["auto"] = {k: plan.synth.options[k] for k in ("chosen", "reason")}
    if args.output:
        from dpql.io import write_json

        write_json(data, Path(args.output))
    if args.format == "json":
        print(json.dumps(data, indent=2))
        return EXIT_OK
    if plan.warnings:
        _report(plan.warnings, "text")
    b = plan.budget
    out.print(  # user text is escaped wherever rich renders markup
        f"[bold]{escape(spec.model.name)}[/]: {spec.rows} public rows, method "
        f"[bold]{plan.method}[/]",
        highlight=False,
    )
    if "reason" in plan.synth.options:  # method: auto says what it chose and why
        out.print(
            f"auto: chose [bold]{plan.synth.options['chosen']}[/]: "
            f"{escape(str(plan.synth.options['reason']))}",
            highlight=False,
        )
    out.print(
        f"budget: epsilon={_fmt(b.epsilon)} delta={_fmt(b.delta)} -> rho={_fmt(b.rho, 6)} zCDP "
        "(tight conversion, Canonne-Kamath-Steinke 2020)"
    )
    q = Table(title="Workload queries")
    q.add_column("class")
    q.add_column("queries", justify="right")
    q.add_column("cells", justify="right")
    counts: dict[str, list[int]] = {}
    for query in plan.queries:
        c = counts.setdefault(query.kind, [0, 0])
        c[0] += 1
        c[1] += query.cells(spec.domain)
    for kind, (k, cells) in counts.items():
        q.add_row(kind, str(k), str(cells))
    out.print(q)
    n = spec.rows
    bt = Table(title="Budget allocation")
    accounting, total = _plan_accounting(spec, plan)
    for col in (
        "phase",
        "mechanism",
        "releases",
        "accounting",
        "noise (fraction of n)",
        "noise (rows)",
        "E|err| per cell",
    ):
        bt.add_column(col, justify="right" if col != "phase" else "left")
    for line, cell in zip(plan.table.lines, accounting, strict=True):
        bt.add_row(
            line.phase,
            line.mechanism,
            str(line.releases),
            cell,
            _fmt(line.noise_scale),
            _fmt(
                line.noise_scale * n if line.noise_scale and line.mechanism == "gaussian" else None
            ),
            _fmt(line.expected_abs_error),
        )
    out.print(bt)
    out.print(total, markup=False, highlight=False, soft_wrap=True)
    if plan.split is not None:
        out.print(_split_text(plan), markup=False, highlight=False, soft_wrap=True)
    if plan.resources is not None:
        from dpql.plan.resources import format_bytes, memory_limit

        out.print(
            f"compile estimate: {plan.resources.summary()}; memory limit "
            f"{format_bytes(memory_limit())} (spec/language.md §9)",
            markup=False,
            highlight=False,
        )
    if plan.requirement_plans:
        from dpql.plan.acceptance import tolerance_text

        rt = Table(title="Requirements (predicted error of the DP measurement they are tested on)")
        for col in (
            "requirement",
            "tested on",
            "predicted sd",
            "tolerance",
            "reachable",
            "smallest epsilon",
            "check",
        ):
            rt.add_column(col)
        for r in plan.requirement_plans:
            reach = "-" if r.reachable is None else ("yes" if r.reachable else "no")
            weight = r.requirement.weight
            rt.add_row(
                escape(r.requirement.text + (f" weight {weight:g}" if weight is not None else "")),
                r.metric,
                _fmt(r.predicted_sd),
                escape(tolerance_text(r.requirement.tolerance)),
                reach,
                _fmt(r.smallest_epsilon),
                ", ".join(d.code for d in r.diagnostics) or "ok",
            )
        out.print(rt)
        out.print(
            "[dim]reachable: 2 sd <= tolerance, so the DP test can decide it; whether the "
            "synthetic table meets it is known after compile. The sd of corr and mean assumes "
            "each numeric column has the spread of the symmetric triangular distribution on "
            "its public bounds and equal noise on every measure (no data is read); more "
            "concentrated columns give larger sds, and compile spreads the noise at the "
            "synthetic table's moments (spec/language.md 5.3).[/]"
        )
    out.print(f"[dim]planned in {time.perf_counter() - t:.2f} s; no data was read[/]")
    return EXIT_OK


def _split_text(plan: Any) -> str:
    """The post-processing budget's split (dpql.plan.split) in words, for `dpql plan`."""
    from dpql.plan.acceptance import Z
    from dpql.plan.split import PASS_ROOM, ROOM_SHARE_CAP, pilot_sd, synthesizer_sd_growth

    split = plan.split
    rho = plan.budget.rho
    how = (
        "chosen by the planner: the least that lets every DP test decide its tolerance, "
        f"at most {float(split.cap):g}, plus room for a pass (2 sd <= {1 - PASS_ROOM:g} t) "
        f"while the share stays at most {float(ROOM_SHARE_CAP):g} (the first room that "
        "does not fit whole gets what is left)"
        if split.chosen
        else "fixed by postprocess.share"
    )
    if split.weighted:
        how += "; split across requirements by their weights"

    def pilot(req: Any) -> str:
        sd = pilot_sd(req)
        # the release measures the real-table accuracy of the model compile fits on the
        # synthetic table, nothing else (dpql.plan.requirements.piloted)
        return "" if sd is None else f": its pilot accuracy alone, at sd {sd:.2g}"

    def room(req: Any, sd: float) -> str:
        t = req.tolerance.within
        if t is None or sd != sd:
            return ""
        return f"; test sd {sd:.3g}, room for the table t - {Z:g} sd = {t - Z * sd:.3g}"

    sds = split.planned_sd or (float("nan"),) * len(split.given)
    parts = [
        f"{r.requirement.text}: rho {_fmt(g)} (needs {_fmt(need)}{pilot(r.requirement)}"
        f"{room(r.requirement, sd)})"
        for r, g, need, sd in zip(
            plan.requirement_plans, split.given, split.needs, sds, strict=True
        )
        if g == g  # NaN: no release of its own
    ]
    if split.test_share > 0:
        parts.append(f"acceptance tests: rho {_fmt(float(split.test_share) * rho)}")
    cost = ""
    if plan.phase_rho.get("synthesizer", 0.0) > 0:
        share = float(split.share)
        cost = (f"; the synthesizer keeps {100 * (1 - share):.3g}%: its noise sd grows "
                f"{synthesizer_sd_growth(share):.3f}x")  # fmt: skip
    return (
        f"post-processing: {100 * float(split.share):.3g}% of the budget ({how}){cost}; "
        + "; ".join(parts)
    )


def _plan_accounting(spec: Any, plan: Any) -> tuple[list[str], str]:
    """Each budget line in its own accounting (zCDP rho; a DP-SGD phase as its epsilon at the
    plan's delta by RDP; an external table as its declared (epsilon, delta)) and the planned
    total: zCDP alone as rho, else the epsilon of all phases composed (RDP, the external table
    added by basic composition) at the plan's delta."""
    from dpql.privacy.accountant import epsilon_from_events
    from dpql.privacy.ledger import PrivacyEvent
    from dpql.synth.base import backend

    delta = plan.budget.delta
    events = getattr(plan.synth.config, "events", None)
    dpsgd = {f"gan.{e.phase}": e for e in events()} if callable(events) else {}
    ext_eps, ext_delta = backend(plan.method).declared_budget(spec)
    cells = []
    for line in plan.table.lines:
        if line.rho_per_release is not None:
            cells.append(f"rho {_fmt(line.rho, 4)}")
        elif line.phase in dpsgd:
            eps = epsilon_from_events([dpsgd[line.phase]], delta).epsilon
            cells.append(f"eps {_fmt(eps)} (RDP)")
        elif line.mechanism == "external":
            cells.append(f"eps {_fmt(ext_eps)}, delta {ext_delta:.3g}")
        else:
            cells.append("-")
    rho = plan.table.total_rho
    if not dpsgd and not any(line.mechanism == "external" for line in plan.table.lines):
        return cells, f"allocated rho {_fmt(rho, 6)} of {_fmt(plan.budget.rho, 6)} (zCDP)"
    composed = list(dpsgd.values())
    if rho > 0:
        sigma = 1.0 / math.sqrt(2 * rho)
        composed.append(
            PrivacyEvent("zcdp", "gaussian", "planned zCDP phases", l2_sensitivity=1.0,
                         noise_scale=sigma, rho=rho)
        )  # fmt: skip
    eps = epsilon_from_events(composed, delta - ext_delta).epsilon if composed else 0.0
    parts = [f"zCDP phases rho {_fmt(rho, 6)}"] if rho > 0 else []
    if dpsgd:
        parts.append("DP-SGD phases by RDP")
    if ext_eps or ext_delta:
        parts.append(f"external table eps {_fmt(ext_eps)}, delta {ext_delta:.3g} added")
    return cells, (
        f"planned spend: epsilon {_fmt(eps + ext_eps)} at delta {delta:g} of the budget "
        f"epsilon {_fmt(plan.budget.epsilon)} ({'; '.join(parts)})"
    )


# ------------------------------------------------------------------------------------------
# check


def cmd_check(args: argparse.Namespace) -> int:
    from dpql.plan.planner import build_plan
    from dpql.release.policy import check_policy, lifetime_report, planned_spend
    from dpql.release.project import choose_ledger
    from dpql.spec.load import load_spec

    spec = load_spec(args.spec)
    plan = build_plan(spec)
    as_json = args.format == "json"
    policy_path = Path(args.policy) if args.policy else None
    choice = choose_ledger(spec, policy=policy_path, for_write=False)
    policy = choice.policy
    shown = args.policy or (str(policy.path) if policy is not None else None)
    doc: dict[str, Any] = {"spec": str(args.spec), "policy": shown, "violations": []}
    if policy is None:
        note = (
            "spec and plan valid; no policy given or found; releases are recorded in "
            f"{choice.ledger}"
        )
        if as_json:
            return _emit({**doc, "ok": True, "notes": [note]})
        out.print(f"{args.spec}: ok ({note})", markup=False, highlight=False, soft_wrap=True)
        return EXIT_OK
    seconds = plan.resources.seconds if plan.resources is not None else None
    result = check_policy(
        spec, policy, choice.ledger, plan.budget.epsilon, data=choice.data,
        estimated_seconds=seconds,
    )  # fmt: skip
    violations = getattr(result, "violations", result)
    summary = getattr(result, "summary", None)
    if as_json and violations:
        return _emit(
            {**doc, "ok": False, "violations": [_violation_json(v) for v in violations],
             "summary": summary},
            EXIT_INPUT,
        )  # fmt: skip
    for v in violations:
        hint = getattr(v, "hint", None)
        print(f"{args.spec}: {v.code}: {v.message}" + (f" (hint: {hint})" if hint else ""))
    if summary:
        print(summary)
    if violations:
        return EXIT_INPUT
    spend = planned_spend(spec, plan.budget.epsilon)
    lifetime = lifetime_report(policy, spend, choice.ledger, choice.data)
    notes = [lifetime.describe()] if lifetime is not None else []
    open_lines = [r for r in choice.records if r.status != "committed"]
    if lifetime is not None and open_lines:
        notes.append(
            f"{len(open_lines)} line(s) of {choice.ledger} are pending or abandoned "
            "(interrupted compiles; the next dpql compile on this ledger completes pending "
            "ones); they count as spent"
        )
    if as_json:
        return _emit({**doc, "ok": True, "summary": summary, "notes": notes})
    print(f"{args.spec}: ok (policy {shown})" + (f"; {notes[0]}" if notes[:1] else ""))
    for note in notes[1:]:
        print(f"{args.spec}: note: {note}")
    return EXIT_OK


def _violation_json(v: Any) -> dict[str, Any]:
    return {"code": v.code, "message": v.message, "hint": getattr(v, "hint", None)}


def _emit(doc: dict[str, Any], code: int = EXIT_OK) -> int:
    """Print ``doc`` as the command's one JSON document on stdout; return ``code``."""
    print(json.dumps(doc, indent=2, allow_nan=False, default=str))
    return code


# ------------------------------------------------------------------------------------------
# ledger


def cmd_ledger(args: argparse.Namespace) -> int:
    from dpql.release.ledger_report import ledger_report, render_report

    report = ledger_report(args.target, Path(args.policy) if args.policy else None)
    if args.format == "json":
        return _emit(report)
    print(render_report(report))
    return EXIT_OK


# ------------------------------------------------------------------------------------------
# compile


def _progress(verbose: bool) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """Bars on a terminal; plain lines (phase, step/total) otherwise; elapsed and remaining
    times only when ``verbose`` (they scale with the real row count: curator-only)."""
    from dpql.progress import plain_progress, progress_bars

    if sys.stderr.isatty():
        return progress_bars(err, timings=verbose)
    return plain_progress("compile", timings=verbose)


def cmd_compile(args: argparse.Namespace) -> int:
    from dpql.pipeline import Interrupted, compile_release

    update, stop = _progress(args.verbose) if not args.quiet else (None, lambda: None)
    try:
        result = compile_release(
            args.spec,
            seed=args.seed,
            progress=update,
            ledger_path=Path(args.ledger) if args.ledger else None,
            signing_key=Path(args.sign_key) if args.sign_key else None,
            force=args.force,
            policy_path=Path(args.policy) if args.policy else None,
            notify=lambda note: print(f"note: {note}", file=sys.stderr, flush=True),
        )
    finally:
        stop()
    try:
        if args.format == "json":
            return _emit(compiled_json(result))
        return _print_compiled(result, args.verbose)
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted; the release was written and recorded: {result.table_path}, "
            f"{result.record_path}"
        ) from None


_REQUIREMENT_KEYS = (
    "requirement", "verdict", "metric", "real_noisy", "sigma", "synthetic_before",
    "synthetic_after", "note",
)  # fmt: skip


def compiled_json(result: Any) -> dict[str, Any]:
    """``dpql compile --format json``: the release's paths, spend, requirement verdicts,
    post-processing warnings and quality headline (public values of the record and the
    table; the stage timings are curator-only and stay out)."""
    rec = result.record
    post = rec.get("postprocess") or {}
    quality = getattr(result, "quality", None)
    return {
        "ok": True,
        "table": str(result.table_path),
        "provenance": str(result.record_path),
        "curator_only": None if result.curator_path is None else str(result.curator_path),
        "rows": rec["output"]["rows"],
        "method": rec["synthesizer"].get("method"),
        "privacy": {
            "spent": rec["privacy"]["spent"],
            "budget": rec["privacy"]["budget"],
            "events": len(rec["privacy"]["events"]),
        },
        "requirements": [
            {k: r[k] for k in _REQUIREMENT_KEYS if k in r} for r in rec.get("requirements", [])
        ],
        "warnings": [d.to_json() for d in getattr(result.plan, "warnings", ())]
        + list(post.get("diagnostics", [])),
        "quality": None if quality is None else quality.to_json(),
        "ledger": None if result.ledger_path is None else str(result.ledger_path),
        "policy": None if result.policy_path is None else str(result.policy_path),
    }


def _print_compiled(result: Any, verbose: bool = False) -> int:
    rec = result.record
    spent = rec["privacy"]["spent"]
    budget = rec["privacy"]["budget"]
    out.print(
        f"[bold green]released[/] {escape(str(result.table_path))} ({rec['output']['rows']} rows)"
    )
    out.print(f"provenance {result.record_path}", markup=False)
    if result.curator_path is not None:
        out.print(f"curator-only (never publish) {result.curator_path}", markup=False)
    out.print(
        f"privacy spent: epsilon={_fmt(spent['epsilon'], 6)} (budget {_fmt(budget['epsilon'])}), "
        f"delta={_fmt(spent['delta'])}, rho={_fmt(spent['rho'], 6)} "
        f"over {len(rec['privacy']['events'])} mechanism events"
    )
    synth = rec["synthesizer"]
    if "mean_abs_error_vs_noisy" in synth:
        out.print(
            f"fit vs noisy measurements: mean |err| {_fmt(synth['mean_abs_error_vs_noisy'])}, "
            f"max {_fmt(synth['max_abs_error_vs_noisy'])}"
        )
    post = rec.get("postprocess") or {}
    for d in post.get("diagnostics", []):
        err.print(f"post-processing {d['severity']}[{d['code']}]: {d['message']}", markup=False)
    if "effective_sample_size" in post:
        wl = post.get("workload") or {}
        out.print(
            f"post-processing: effective sample size {post['effective_sample_size']:.0f} rows"
            + (f" (floor {post['ess_floor']:.0f})" if post.get("ess_floor") else "")
            + (
                f"; workload mean |err| vs noisy {_fmt(wl['mean_abs_error_before'])} -> "
                f"{_fmt(wl['mean_abs_error_after'])}"
                if wl
                else ""
            ),
            markup=False,
        )
    for r in rec.get("requirements", []):
        what = f" {r['metric']}" if "metric" in r else ""
        out.print(
            f"requirement {r.get('requirement')}: {r.get('verdict')} (noisy{what} "
            f"{_fmt(r.get('real_noisy'))} +- {_fmt(r.get('sigma'), 2)}; synthetic "
            f"{_fmt(r.get('synthetic_before'))} -> {_fmt(r.get('synthetic_after'))})"
            + (f" [{r['note']}]" if r.get("note") else ""),
            markup=False,
        )
    if result.ledger_path is not None:
        cap = (
            f"policy {result.policy_path}"
            if result.policy_path is not None
            else "no policy found: no lifetime cap"
        )
        out.print(
            f"ledger: recorded in {result.ledger_path} ({cap})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if verbose:  # stage times scale with the real row count: the curator's terminal only
        out.print("time: " + ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items()))
    quality = getattr(result, "quality", None)
    if quality is not None:
        out.print(quality.text(), markup=False, highlight=False, soft_wrap=True)
        out.print(
            "[dim]TVD: half the L1 distance of two distributions (0 identical, 1 disjoint). "
            "dpql evaluate compares the table with the real data (curator-only report).[/]",
            soft_wrap=True,
        )
    else:
        out.print(
            "[dim]quality: the synthesizer measured no 1-way marginal to compare with; "
            "dpql evaluate compares the table with the real data (curator-only report).[/]",
            soft_wrap=True,
        )
    return EXIT_OK


# ------------------------------------------------------------------------------------------
# verify


def cmd_verify(args: argparse.Namespace) -> int:
    from dpql.release.verify import verify_release

    path = Path(args.record)
    synthetic = Path(args.synthetic) if args.synthetic else None
    result = verify_release(path, synthetic, Path(args.key) if args.key else None)
    doc: dict[str, Any] = {
        "record": str(path),
        "ok": not result.problems,
        "problems": [{"code": p.code, "message": p.message} for p in result.problems],
        "notes": list(result.notes),
    }
    if result.problems:
        if args.format == "json":
            return _emit(doc, EXIT_INPUT)
        for p in result.problems:
            print(f"{path}: {p.code}: {p.message}")
        return EXIT_INPUT
    record = result.record
    spent = record["privacy"]["spent"]
    checks = [
        f"epsilon {spent['epsilon']:.6g}, delta {spent['delta']:.3g} recomputed from "
        f"{len(record['privacy']['events'])} events",
        "budget, events and plan hash match the plan of the embedded spec",
    ]
    if synthetic:
        checks.append("output hash matches")
    if result.signed_by:
        checks.append(f"signature valid (key sha256 {result.signed_by[:16]}...)")
    if args.format == "json":
        return _emit(
            doc
            | {
                "spent": spent,
                "events": len(record["privacy"]["events"]),
                "checks": checks,
                "signed_by": result.signed_by,
            }
        )
    for note in result.notes:
        print(f"{path}: note: {note}")
    print(f"{path}: ok ({'; '.join(checks)})")
    return EXIT_OK


# ------------------------------------------------------------------------------------------
# init


def cmd_init(args: argparse.Namespace) -> int:
    from dpql.init import init_spec, todo_summary

    path, draft = init_spec(args.data, args.output, args.codebook)
    if args.format == "json":
        return _emit(
            {"ok": True, "spec": str(path), "format": draft.fmt, "columns": list(draft.columns),
             "todos": draft.todos}
        )  # fmt: skip
    what = "Parquet schema" if draft.fmt == "parquet" else "CSV header (names only)"
    print(f"wrote {path}: {todo_summary(draft.columns, draft.todos)}, from the {what}; "
          "no cell of the data was read")  # fmt: skip
    if draft.todos:
        print(f"next: replace every TODO in {path} from public documentation (dpql plan "
              f"{path} points at each one), then dpql plan / check / compile")  # fmt: skip
    else:
        print(f"next: dpql plan {path}, then dpql check and dpql compile")
    return EXIT_OK


# ------------------------------------------------------------------------------------------
# keygen


def cmd_keygen(args: argparse.Namespace) -> int:
    from dpql.release.signing import SigningError, generate_keypair

    out_path = Path(args.out)
    try:
        private, public, fingerprint = generate_keypair(out_path)
    except (SigningError, OSError) as exc:
        message = str(exc) if isinstance(exc, SigningError) else f"cannot write the key: {exc}"
        raise DiagnosticError([Diagnostic("V045", message, SourcePos(str(out_path)))]) from None
    if args.format == "json":
        return _emit({"ok": True, "private_key": str(private), "public_key": str(public),
                      "key_sha256": fingerprint})  # fmt: skip
    print(f"private key {private} (mode 0600; keep it secret, never publish it)")
    print(f"public key  {public} (publish it: dpql verify RECORD --key {public})")
    print(f"key sha256  {fingerprint}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------
# evaluate


def cmd_validate(args: argparse.Namespace) -> int:
    """The curator's strict look at the data (exit 1 when anything needed a rule)."""
    from dpql.data.validate import render, validate
    from dpql.spec.load import load_spec

    spec = load_spec(args.spec)
    found = validate(spec)
    if args.format == "json":
        print(json.dumps(found.to_json(args.show_values), indent=2))
    else:
        print(render(found, spec.domain, args.show_values))
    return EXIT_OK if found.clean else EXIT_INPUT


def cmd_evaluate(args: argparse.Namespace) -> int:
    from dpql.evaluate.cli import run_evaluate

    return run_evaluate(args)


# ------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dpql", description="Compile differentially private synthetic-data releases."
    )
    p.add_argument("--version", action="version", version=f"dpql {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser(
        "init", help="draft a release spec from a data file's header; reads no cell value"
    )
    s.add_argument("data", help="the data file (CSV, gzip CSV or Parquet)")
    s.add_argument("--output", help="the draft's path (default: <data stem>.release.yaml beside "
                   "the data); an existing file is never overwritten")  # fmt: skip
    s.add_argument("--codebook", help="a public codebook (YAML or CSV, docs/init.md) that fills "
                   "types, bounds and categories")  # fmt: skip
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_init)

    s = sub.add_parser("plan", help="show the plan and predicted error; never reads data")
    s.add_argument("spec")
    s.add_argument("--output", help="write the plan as versioned JSON")
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("check", help="validate a spec (and a policy) without data; for CI")
    s.add_argument("spec")
    s.add_argument(
        "--policy",
        help="the privacy policy (default: the dpql.yaml or policy file found from the spec's "
        "folder upward)",
    )
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser(
        "ledger",
        help="lifetime spend per data source and per release, against the policy's cap",
    )
    s.add_argument(
        "target",
        nargs="?",
        help="a release spec (its ledger and policy, as compile finds them) or a ledger "
        "(.jsonl); default: the project's ledger found from the current folder upward",
    )
    s.add_argument("--policy", help="the privacy policy whose lifetime cap to report against")
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_ledger)

    s = sub.add_parser("compile", help="run the release: synthetic table + provenance record")
    s.add_argument("spec")
    s.add_argument("--seed", type=int, help="fixes optimisation and row sampling (never DP noise)")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.add_argument(
        "--verbose",
        action="store_true",
        help="print elapsed times and stage timings (they scale with the real row count: "
        "curator-only)",
    )
    s.add_argument(
        "--ledger",
        help="lifetime release ledger (JSONL) to record this release in (default: "
        "output.ledger, the policy's lifetime.ledger, the project file's ledger, else "
        "<data file>.ledger.jsonl beside the spec; docs/privacy.md)",
    )
    s.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier release at the same outputs (spends the budget again; both "
        "releases stay in the ledger)",
    )
    s.add_argument(
        "--policy",
        help="enforce this privacy policy, lifetime caps included, before any data is read "
        "(default: the dpql.yaml or policy file found from the spec's folder upward)",
    )
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.add_argument(
        "--show-values",
        action="store_true",
        help="show the offending private data values in data errors (the curator's own "
        "terminal only: never in shared logs or CI); by default errors name the file, row and "
        "column only",
    )
    s.add_argument(
        "--sign-key",
        metavar="KEYFILE",
        help="sign the provenance record with this Ed25519 private key (from dpql keygen)",
    )
    s.set_defaults(func=cmd_compile)

    s = sub.add_parser(
        "verify",
        help="recompute a provenance record's accounting and hashes, re-plan its spec, check "
        "its signature",
    )
    s.add_argument("record")
    s.add_argument("--synthetic", help="the released table, to check its hash")
    s.add_argument(
        "--key",
        metavar="PUBKEY",
        help="the curator's public key (KEYFILE.pub from dpql keygen): the record must carry "
        "its valid signature",
    )
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("keygen", help="make an Ed25519 key pair for signing provenance records")
    s.add_argument(
        "--out",
        required=True,
        metavar="KEYFILE",
        help="the private key's path (written with mode 0600); the public key goes to KEYFILE.pub",
    )
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_keygen)

    s = sub.add_parser(
        "validate",
        help="curator-only strict look at the data: empty, undeclared and unreadable cells, "
        "malformed rows, with row numbers (outside the DP guarantee; never publish)",
    )
    s.add_argument("spec")
    s.add_argument("--show-values", action="store_true", help="also list the offending values")
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser(
        "evaluate", help="curator-only utility report (uses private data; never publish)"
    )
    s.add_argument("spec")
    s.add_argument("--synthetic", required=True, help="the synthetic table to evaluate")
    s.add_argument(
        "--holdout",
        help="a real test table (e.g. examples/adult/adult_test.csv.gz); default: a random 20%% "
        "of the real table, the train-on-real models fitting the rest",
    )
    s.add_argument("--label", help="categorical column the TSTR models predict")
    s.add_argument(
        "--output",
        help="report folder (PRIVATE; files mode 0600). Default: <table stem>.CURATOR-ONLY-report "
        "beside the release's curator-only file (curator/ next to the spec unless "
        "output.curator says otherwise), never the published output folder",
    )
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_evaluate)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    with safe_streams():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except DiagnosticError as exc:
        _report(
            exc.diagnostics,
            getattr(args, "format", "text"),
            show_values=getattr(args, "show_values", False),
        )
        return EXIT_INPUT
    except KeyboardInterrupt as exc:
        message = getattr(exc, "message", None) or "interrupted"
        print(message, file=sys.stderr, flush=True)
        return 130
    except Exception as exc:
        err.print(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in dpql, not in your spec. Please report it with the command you ran.",
            markup=False,
        )
        if os.environ.get("DPQL_DEBUG"):
            raise
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
