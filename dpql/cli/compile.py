"""``dpql compile``: the release, its progress and its summary (text or JSON)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape

from dpql.cli.output import (
    EXIT_OK,
    emit_json,
    err,
    fmt_number,
    out,
)


def _progress(verbose: bool) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """Bars on a terminal; plain lines (phase, step/total) otherwise; elapsed and remaining
    times only when ``verbose`` (they scale with the real row count: curator-only)."""
    from dpql.progress import plain_progress, progress_bars

    if sys.stderr.isatty():
        return progress_bars(err, timings=verbose)
    return plain_progress("compile", timings=verbose)


def cmd_compile(args: argparse.Namespace) -> int:
    from dpql.pipeline import Interrupted, compile_release

    if args.no_compile_cache:  # read by dpql.synth.jax_cache when a synthesizer starts
        os.environ["DPQL_NO_JAX_CACHE"] = "1"
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
            return emit_json(compiled_json(result))
        return print_compiled(result, args.verbose)
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


def print_compiled(result: Any, verbose: bool = False) -> int:
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
        f"privacy spent: epsilon={fmt_number(spent['epsilon'], 6)} "
        f"(budget {fmt_number(budget['epsilon'])}), "
        f"delta={fmt_number(spent['delta'])}, rho={fmt_number(spent['rho'], 6)} "
        f"over {len(rec['privacy']['events'])} mechanism events"
    )
    synth = rec["synthesizer"]
    if "mean_abs_error_vs_noisy" in synth:
        out.print(
            "fit vs noisy measurements: "
            f"mean |err| {fmt_number(synth['mean_abs_error_vs_noisy'])}, "
            f"max {fmt_number(synth['max_abs_error_vs_noisy'])}"
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
                f"; workload mean |err| vs noisy {fmt_number(wl['mean_abs_error_before'])} -> "
                f"{fmt_number(wl['mean_abs_error_after'])}"
                if wl
                else ""
            ),
            markup=False,
        )
    for r in rec.get("requirements", []):
        what = f" {r['metric']}" if "metric" in r else ""
        out.print(
            f"requirement {r.get('requirement')}: {r.get('verdict')} (noisy{what} "
            f"{fmt_number(r.get('real_noisy'))} +- {fmt_number(r.get('sigma'), 2)}; synthetic "
            f"{fmt_number(r.get('synthetic_before'))} -> {fmt_number(r.get('synthetic_after'))})"
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
