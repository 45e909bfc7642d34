"""``dpql plan``: the plan, its budget table, split and predicted error; reads no data."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from dpql.cli.output import (
    EXIT_OK,
    fmt_number,
    out,
    report_diagnostics,
)
from dpql.diagnostics import DiagnosticError


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
        from dpql.release.commit import overwrites_release_file

        problems = overwrites_release_file(spec, Path(args.output), "the plan file")
        if problems:
            raise DiagnosticError(problems)
        write_json(data, Path(args.output))
    if args.format == "json":
        print(json.dumps(data, indent=2))
        return EXIT_OK
    if plan.warnings:
        report_diagnostics(plan.warnings, "text")
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
        f"budget: epsilon={fmt_number(b.epsilon)} delta={fmt_number(b.delta)} "
        f"-> rho={fmt_number(b.rho, 6)} zCDP "
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
            fmt_number(line.noise_scale),
            fmt_number(
                line.noise_scale * n if line.noise_scale and line.mechanism == "gaussian" else None
            ),
            fmt_number(line.expected_abs_error),
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
                fmt_number(r.predicted_sd),
                escape(tolerance_text(r.requirement.tolerance)),
                reach,
                fmt_number(r.smallest_epsilon),
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
    from dpql.plan.split import (
        PASS_ROOM,
        ROOM_SD_GROWTH,
        ROOM_SHARE_CAP,
        pilot_sd,
        synthesizer_sd_growth,
    )

    split = plan.split
    rho = plan.budget.rho
    how = (
        "chosen by the planner: the least that lets every DP test decide its tolerance, "
        f"at most {float(split.cap):g}, plus room for a pass (2 sd <= {1 - PASS_ROOM:g} t) "
        f"while the synthesizer's noise sd grows at most {float(ROOM_SD_GROWTH):g}x (share "
        f"{float(ROOM_SHARE_CAP):.3g}; the first room that "
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
        left = t - Z * sd  # round-off of a room bought to the tolerance's edge is no room
        shown = f"{left:.3g}" if left > 1e-6 * t else f"none ({Z:g} sd >= t)"
        return f"; test sd {sd:.3g}, room for the table t - {Z:g} sd = {shown}"

    sds = split.planned_sd or (float("nan"),) * len(split.given)
    parts = [
        f"{r.requirement.text}: rho {fmt_number(g)} (needs {fmt_number(need)}{pilot(r.requirement)}"
        f"{room(r.requirement, sd)})"
        for r, g, need, sd in zip(
            plan.requirement_plans, split.given, split.needs, sds, strict=True
        )
        if g == g  # NaN: no release of its own
    ]
    if split.test_share > 0:
        parts.append(f"acceptance tests: rho {fmt_number(float(split.test_share) * rho)}")
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
            cells.append(f"rho {fmt_number(line.rho, 4)}")
        elif line.phase in dpsgd:
            eps = epsilon_from_events([dpsgd[line.phase]], delta).epsilon
            cells.append(f"eps {fmt_number(eps)} (RDP)")
        elif line.mechanism == "external":
            cells.append(f"eps {fmt_number(ext_eps)}, delta {ext_delta:.3g}")
        else:
            cells.append("-")
    rho = plan.table.total_rho
    if not dpsgd and not any(line.mechanism == "external" for line in plan.table.lines):
        total = fmt_number(plan.budget.rho, 6)
        return cells, f"allocated rho {fmt_number(rho, 6)} of {total} (zCDP)"
    composed = list(dpsgd.values())
    if rho > 0:
        sigma = 1.0 / math.sqrt(2 * rho)
        composed.append(
            PrivacyEvent("zcdp", "gaussian", "planned zCDP phases", l2_sensitivity=1.0,
                         noise_scale=sigma, rho=rho)
        )  # fmt: skip
    eps = epsilon_from_events(composed, delta - ext_delta).epsilon if composed else 0.0
    parts = [f"zCDP phases rho {fmt_number(rho, 6)}"] if rho > 0 else []
    if dpsgd:
        parts.append("DP-SGD phases by RDP")
    if ext_eps or ext_delta:
        parts.append(f"external table eps {fmt_number(ext_eps)}, delta {ext_delta:.3g} added")
    return cells, (
        f"planned spend: epsilon {fmt_number(eps + ext_eps)} at delta {delta:g} of the budget "
        f"epsilon {fmt_number(plan.budget.epsilon)} ({'; '.join(parts)})"
    )
