"""``dpql evaluate SPEC --synthetic TABLE [--holdout TABLE] [--label COL] [--output DIR]``.

Curator-side and NOT private: reads the real table named by the spec (through the data layer's
reader, with the spec's missing-value and ``other`` rules) and writes a report that must never
be published. The workload and the requirements are the spec's, as planned by ``dpql plan``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.evaluate._deps import MissingExtraError
from dpql.evaluate.report import PRIVATE_WARNING, build_report


def _read(path: Path) -> pd.DataFrame:
    """A table written by ``dpql compile`` or a real holdout, cells as text (like the data)."""
    from dpql.data.load import data_format, read_frame

    return read_frame(path, data_format(path))


def run_evaluate(args: argparse.Namespace) -> int:
    """Build and write the report; print where it is and its headline numbers. Exit 0.

    Requirement failures are reported, not turned into an exit status: the report informs the
    curator; acceptance checks belong to ``dpql compile``. Raises :class:`DiagnosticError`
    (exit 1) for bad input, including a missing ``evaluate`` extra (E602).
    """
    from dpql.cli import _progress
    from dpql.data.load import read_frame, rules_from_spec
    from dpql.plan.planner import build_plan
    from dpql.spec.load import load_spec

    spec = load_spec(args.spec)
    plan = build_plan(spec)
    missing, other = rules_from_spec(spec.model)
    real = read_frame(spec.data_path, spec.data_format)
    synthetic = _read(Path(args.synthetic))
    holdout = _read(Path(args.holdout)) if args.holdout else None
    print(PRIVATE_WARNING, file=sys.stderr)
    update, stop = _progress()
    try:
        report = build_report(
            spec.domain, real, synthetic, plan.queries, plan.requirements,
            holdout_df=holdout, label=args.label, output_dir=args.output, progress=update,
            seed=plan.seed, missing=missing, other=other,
        )  # fmt: skip
    except MissingExtraError as e:
        raise DiagnosticError(
            [Diagnostic("E602", str(e), SourcePos("dpql evaluate"), "pip install 'dpql[evaluate]'")]
        ) from None
    finally:
        stop()
    page = Path(args.output) / "index.html"
    if args.format == "json":
        s = report.to_json()
        keep = ("private", "warning", "rows", "label", "test_set", "requirements", "tstr")
        summary = {k: s[k] for k in keep} | {
            "report": str(page),
            "workload": s["workload"]["classes"],
            "correlation_l1": s["correlation"]["l1"],
        }
        print(json.dumps(summary, indent=2))
        return 0
    print(f"report: {page} (PRIVATE: do not publish)")
    for c in report.workload:
        print(f"  {c.kind:<10} {c.count:>6} queries  {c.metric} mean {c.mean:.4g}  max {c.max:.4g}")
    verdict = {True: "pass", False: "FAIL", None: "-"}
    for r in report.requirements:
        print(
            f"  {verdict[r.passed]:<4} {r.requirement}: real {r.real:.4g}, "
            f"synthetic {r.synthetic:.4g} ({r.tolerance or 'no tolerance'})"
        )
    for t in report.tstr:
        print(
            f"  {t.model:<8} accuracy real {t.train_on_real.accuracy:.3f} / synthetic "
            f"{t.train_on_synthetic.accuracy:.3f}, AUC {t.train_on_real.auc:.3f} / "
            f"{t.train_on_synthetic.auc:.3f}"
        )
    print(f"  correlation L1 difference {report.correlation_l1:.4g}")
    return 0
