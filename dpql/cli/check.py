"""``dpql check`` (a spec and its policy, for CI) and ``dpql ledger`` (lifetime spend); neither
reads data."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpql.cli.output import (
    EXIT_INPUT,
    EXIT_OK,
    emit_json,
    out,
    report_diagnostics,
)
from dpql.diagnostics import Diagnostic, DiagnosticError


def cmd_check(args: argparse.Namespace) -> int:
    from dpql.pipeline import output_problems
    from dpql.plan.planner import build_plan
    from dpql.release.policy import (
        check_policy,
        lifetime_report,
        planned_spend,
        violation_pos,
    )
    from dpql.release.project import choose_ledger
    from dpql.spec.load import load_spec

    spec = load_spec(args.spec)
    plan = build_plan(spec)
    as_json = args.format == "json"
    policy_path = Path(args.policy) if args.policy else None
    choice = choose_ledger(spec, policy=policy_path, for_write=False)
    problems = output_problems(spec, choice.ledger, policy_path)
    if problems:  # compile would refuse them before reading any data
        raise DiagnosticError(problems)
    policy = choice.policy
    shown = args.policy or (str(policy.path) if policy is not None else None)
    doc: dict[str, Any] = {"spec": str(args.spec), "policy": shown, "violations": []}
    if policy is None:
        note = (
            "spec and plan valid; no policy given or found; releases are recorded in "
            f"{choice.ledger}"
        )
        if as_json:
            return emit_json({**doc, "ok": True, "notes": [note]})
        out.print(f"{args.spec}: ok ({note})", markup=False, highlight=False, soft_wrap=True)
        return EXIT_OK
    seconds = plan.resources.seconds if plan.resources is not None else None
    result = check_policy(
        spec, policy, choice.ledger, plan.budget.epsilon, data=choice.data,
        estimated_seconds=seconds,
    )  # fmt: skip
    violations = getattr(result, "violations", result)
    summary = getattr(result, "summary", None)
    found = [
        Diagnostic(v.code, v.message, violation_pos(v, spec, policy), v.hint) for v in violations
    ]
    if as_json and violations:  # each with its file, line and column, for CI annotations
        return emit_json(
            {**doc, "ok": False, "violations": [d.to_json() for d in found], "summary": summary},
            EXIT_INPUT,
        )
    report_diagnostics(found, "text")
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
        return emit_json({**doc, "ok": True, "summary": summary, "notes": notes})
    print(f"{args.spec}: ok (policy {shown})" + (f"; {notes[0]}" if notes[:1] else ""))
    for note in notes[1:]:
        print(f"{args.spec}: note: {note}")
    return EXIT_OK


def cmd_ledger(args: argparse.Namespace) -> int:
    from dpql.release.ledger_report import ledger_report, render_report

    report = ledger_report(args.target, Path(args.policy) if args.policy else None)
    if args.format == "json":
        return emit_json(report)
    print(render_report(report))
    return EXIT_OK
