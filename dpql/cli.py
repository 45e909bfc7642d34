"""Command line: ``dpql plan | check | compile | verify | keygen | evaluate``.

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

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpql import __version__
from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos, render_all, to_json

EXIT_OK, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2

out = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True, soft_wrap=True)  # log lines are never wrapped mid-sentence


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    return f"{x:.{digits}g}"


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
    from dpql.check import check_policy, lifetime_report, planned_spend
    from dpql.plan.planner import build_plan
    from dpql.spec.load import load_policy, load_spec

    spec = load_spec(args.spec)
    plan = build_plan(spec)
    if not args.policy:
        out.print(f"{args.spec}: ok (spec and plan valid; no policy given)", markup=False)
        return EXIT_OK
    policy = load_policy(args.policy)
    result = check_policy(spec, policy, policy.ledger_path, plan.budget.epsilon)
    violations = getattr(result, "violations", result)
    for v in violations:
        print(f"{args.spec}: {v.code}: {v.message}")
    summary = getattr(result, "summary", None)
    if summary:
        print(summary)
    if violations:
        return EXIT_INPUT
    lifetime = lifetime_report(policy, planned_spend(spec, plan.budget.epsilon))
    note = f"; {lifetime.describe()}" if lifetime is not None else ""
    print(f"{args.spec}: ok (policy {args.policy}){note}")
    if lifetime is not None and policy.ledger_path is not None:
        from dpql.lifetime import read_ledger

        open_lines = [r for r in read_ledger(policy.ledger_path) if r.status != "committed"]
        if open_lines:
            print(
                f"{args.spec}: note: {len(open_lines)} line(s) of {policy.ledger_path} are "
                "pending or abandoned (interrupted compiles; the next dpql compile on this "
                "ledger completes pending ones); they count as spent"
            )
    return EXIT_OK


# ------------------------------------------------------------------------------------------
# compile


def _progress() -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """Bars on a terminal; plain lines (phase, step/total, elapsed, ETA) otherwise."""
    from dpql.progress import plain_progress, progress_bars

    return progress_bars(err) if sys.stderr.isatty() else plain_progress("compile")


def cmd_compile(args: argparse.Namespace) -> int:
    from dpql.pipeline import Interrupted, compile_release

    update, stop = _progress() if not args.quiet else (None, lambda: None)
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
        return _print_compiled(result)
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted; the release was written and recorded: {result.table_path}, "
            f"{result.record_path}"
        ) from None


def _print_compiled(result: Any) -> int:
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
            f"requirement {r.get('requirement')}: {r.get('verdict')} (real{what} "
            f"{_fmt(r.get('real_noisy'))} +- {_fmt(r.get('sigma'), 2)}; synthetic "
            f"{_fmt(r.get('synthetic_before'))} -> {_fmt(r.get('synthetic_after'))})"
            + (f" [{r['note']}]" if r.get("note") else ""),
            markup=False,
        )
    out.print("time: " + ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items()))
    return EXIT_OK


# ------------------------------------------------------------------------------------------
# verify


def cmd_verify(args: argparse.Namespace) -> int:
    from dpql.audit import verify_release

    path = Path(args.record)
    synthetic = Path(args.synthetic) if args.synthetic else None
    result = verify_release(path, synthetic, Path(args.key) if args.key else None)
    for p in result.problems:
        print(f"{path}: {p.code}: {p.message}")
    if result.problems:
        return EXIT_INPUT
    for note in result.notes:
        print(f"{path}: note: {note}")
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
    print(f"{path}: ok ({'; '.join(checks)})")
    return EXIT_OK


# ------------------------------------------------------------------------------------------
# keygen


def cmd_keygen(args: argparse.Namespace) -> int:
    from dpql.signing import SigningError, generate_keypair

    out_path = Path(args.out)
    try:
        private, public, fingerprint = generate_keypair(out_path)
    except (SigningError, OSError) as exc:
        message = str(exc) if isinstance(exc, SigningError) else f"cannot write the key: {exc}"
        raise DiagnosticError([Diagnostic("V045", message, SourcePos(str(out_path)))]) from None
    print(f"private key {private} (mode 0600; keep it secret, never publish it)")
    print(f"public key  {public} (publish it: dpql verify RECORD --key {public})")
    print(f"key sha256  {fingerprint}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------
# evaluate


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

    s = sub.add_parser("plan", help="show the plan and predicted error; never reads data")
    s.add_argument("spec")
    s.add_argument("--output", help="write the plan as versioned JSON")
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("check", help="validate a spec (and a policy) without data; for CI")
    s.add_argument("spec")
    s.add_argument("--policy")
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("compile", help="run the release: synthetic table + provenance record")
    s.add_argument("spec")
    s.add_argument("--seed", type=int, help="fixes optimisation and row sampling (never DP noise)")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.add_argument(
        "--ledger",
        help="lifetime release ledger (JSONL) to record this release in (default: "
        "output.ledger, the policy's lifetime.ledger, else <spec stem>.ledger.jsonl beside the "
        "spec)",
    )
    s.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier release at the same outputs (spends the budget again; both "
        "releases stay in the ledger)",
    )
    s.add_argument(
        "--policy",
        help="enforce this privacy policy, lifetime caps included, before any data is read",
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
    s.set_defaults(func=cmd_keygen)

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
