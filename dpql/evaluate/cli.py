"""``dpql evaluate SPEC --synthetic TABLE [--holdout TABLE] [--label COL] [--output DIR]``.

Curator-side and NOT private: reads the real table named by the spec (through the data layer's
reader, with the spec's missing-value and ``other`` rules) and writes a report that must never
be published. The workload and the requirements are the spec's, as planned by ``dpql plan``.
Without ``--output`` the report goes to :func:`default_report_dir`, beside the release's
curator-only file and never into the published output folder; its files are mode 0600.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import pandas as pd

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.evaluate.deps import INSTALL_HINT, MissingExtraError
from dpql.evaluate.metrics import readable
from dpql.evaluate.report import PRIVATE_WARNING, EvaluationReport, build_report, check_label

if TYPE_CHECKING:
    from dpql.spec.load import LoadedSpec

REPORT_SUFFIX = ".CURATOR-ONLY-report"


def default_report_dir(spec: LoadedSpec, synthetic: Path) -> Path:
    """``<table stem>.CURATOR-ONLY-report`` in the folder of the release's curator-only file.

    That folder is ``curator/`` next to the spec by default (``output.curator`` moves it): beside
    the release's outputs but outside the published folder, created with mode 0700, and named
    so that nobody publishes the report by mistake. The stem is the evaluated table's
    (``adult_synthetic.csv`` -> ``adult_synthetic.CURATOR-ONLY-report``).
    """
    from dpql.release.curator import curator_path

    stem = synthetic.name.split(".")[0] or "synthetic"
    return curator_path(spec).parent / f"{stem}{REPORT_SUFFIX}"


def _check_report_dir(
    spec: LoadedSpec, output: Path, synthetic: str | Path, holdout: str | Path | None
) -> None:
    """E618 before any data is read when the report folder is an input or holds one (the
    report's files would replace it): the spec, the data, the public files, the tables; E619
    when it is in the release's published folder (the report is never published)."""
    from dpql.release.commit import published_folder_of, release_inputs
    from dpql.spec.files import same_file

    published = published_folder_of(spec, output.absolute())
    if published is not None:
        raise DiagnosticError(
            [
                Diagnostic(
                    "E619",
                    f"the report folder {output} is inside the published folder {published}",
                    SourcePos(str(output)),
                    "the report is computed on the private data and never published: give "
                    "--output a folder outside it, or none (the default is beside the curator "
                    "file, curator/ next to the spec)",
                )
            ]
        )

    inputs = release_inputs(spec) | {"synthetic table": Path(synthetic).absolute()}
    if holdout:
        inputs["holdout table"] = Path(holdout).absolute()
    folder = output.absolute()
    for what, path in inputs.items():
        if same_file(folder, path) or same_file(folder, path.parent):
            raise DiagnosticError(
                [
                    Diagnostic(
                        "E618",
                        f"the report folder {output} is or holds the {what}: the report's files "
                        "would replace an input",
                        SourcePos(str(output)),
                        "give --output a folder of its own",
                    )
                ]
            )


def plain_progress(
    stream: TextIO | None = None, every: float = 5.0
) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """:func:`dpql.progress.plain_progress` with the ``evaluate:`` prefix, e.g.
    ``evaluate: dimension-wise prediction 12/30, 2.1 s, about 3.2 s left``."""
    from dpql.progress import plain_progress as lines

    return lines("evaluate", stream, every)


def _read(path: Path) -> pd.DataFrame:
    """A table written by ``dpql compile`` or a real holdout, cells as text (like the data)."""
    from dpql.data.load import data_format, read_frame

    return read_frame(path, data_format(path))


def make_report(
    spec_path: str | os.PathLike[str],
    synthetic: str | os.PathLike[str],
    *,
    holdout: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    label: str | None = None,
    progress: bool | Callable[[str, int, int], None] = True,
) -> tuple[EvaluationReport, Path]:
    """Build and write the report (``dpql evaluate``); returns it and its ``index.html``.
    ``progress``: True for bars on a terminal (plain lines otherwise) on stderr, a callable
    ``progress(step, done, total)``, or False. Raises :class:`DiagnosticError` for bad input,
    including a missing scikit-learn or matplotlib (E602)."""
    from dpql.data.load import (
        read_frame,
        require_given_file,
        require_spec_data_file,
        rules_from_spec,
    )
    from dpql.plan.planner import build_plan
    from dpql.progress import progress_bars
    from dpql.spec.load import load_spec

    spec = load_spec(spec_path)
    plan = build_plan(spec)
    if label is not None:  # before the private data is read
        check_label(spec.domain, label)
    out = Path(output) if output else default_report_dir(spec, Path(synthetic))
    _check_report_dir(spec, out, synthetic, holdout)
    require_spec_data_file(spec)
    require_given_file(Path(synthetic), "--synthetic")
    if holdout:
        require_given_file(Path(holdout), "--holdout")
    missing, other = rules_from_spec(spec.model)
    real = read_frame(spec.data_path, spec.data_format)
    synthetic_df = _read(Path(synthetic))
    holdout_df = _read(Path(holdout)) if holdout else None
    print(PRIVATE_WARNING, file=sys.stderr)
    if callable(progress):
        update, stop = progress, lambda: None
    elif progress:
        from dpql.terminal import SafeConsole

        bars = sys.stderr.isatty()
        update, stop = progress_bars(SafeConsole(stderr=True)) if bars else plain_progress()
    else:
        update, stop = None, lambda: None
    try:
        report = build_report(
            spec.domain, real, synthetic_df, plan.queries, plan.requirements,
            holdout_df=holdout_df, label=label, output_dir=out, progress=update,
            seed=plan.seed, missing=missing, other=other, method=plan.method,
        )  # fmt: skip
    except MissingExtraError as e:
        raise DiagnosticError(
            [Diagnostic("E602", str(e), SourcePos("dpql evaluate"), INSTALL_HINT)]
        ) from None
    finally:
        stop()
    return report, out / "index.html"


def run_evaluate(args: argparse.Namespace) -> int:
    """Build and write the report; print where it is and its headline numbers. Exit 0.

    Requirement failures are reported, not turned into an exit status: the report informs the
    curator; acceptance checks belong to ``dpql compile``. Raises :class:`DiagnosticError`
    (exit 1) for bad input, including a missing scikit-learn or matplotlib (E602).
    """
    report, page = make_report(
        args.spec, args.synthetic, holdout=args.holdout, output=args.output, label=args.label
    )
    if args.format == "json":
        s = report.to_json()
        keep = ("private", "warning", "rows", "label", "test_set", "requirements", "tstr",
                "headline", "notes")  # fmt: skip
        summary = {k: s[k] for k in keep} | {
            "report": str(page),
            "workload": s["workload"]["classes"],
            "correlation_l1": s["correlation"]["l1"],
        }
        print(json.dumps(summary, indent=2))
        return 0
    print(f"report: {page} (PRIVATE: do not publish)")
    if report.headline is not None:
        print(f"  {report.headline.text()}")
    for c in report.workload:
        top = next((q.description for q in report.worst_queries if q.kind == c.kind), None)
        print(f"  {c.kind:<10} {c.count:>6} queries  {c.metric} mean {readable(c.mean)}  "
              f"max {readable(c.max)}" + (f" ({top})" if top else ""))  # fmt: skip
    verdict = {True: "pass", False: "FAIL", None: "-"}
    for r in report.requirements:
        # a model requirement is compile's test: one model fitted on the synthetic table,
        # its metric on the real table vs on the synthetic table
        model = " (model fitted on synthetic)" if r.train_on_real is not None else ""
        print(
            f"  {verdict[r.passed]:<4} {r.requirement}{model}: real {readable(r.real)}, "
            f"synthetic {readable(r.synthetic)} ({r.tolerance or 'no tolerance'})"
        )
    if report.tstr:
        print(f"  predicting '{report.label}', trained on real / on synthetic, tested on real:")
    for t in report.tstr:
        print(
            f"  {t.model:<8} accuracy real {t.train_on_real.accuracy:.3f} / synthetic "
            f"{t.train_on_synthetic.accuracy:.3f}, AUC {t.train_on_real.auc:.3f} / "
            f"{t.train_on_synthetic.auc:.3f}"
        )
    if not report.tstr:
        print(f"  {report.notes[0]}")
    print(f"  correlation L1 difference {report.correlation_l1:.4g}")
    return 0
