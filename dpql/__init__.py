"""dpql: a compiler for differentially private synthetic-data releases.

The public Python API (the command line is a thin layer over it)::

    import dpql

    spec = dpql.load_spec("examples/adult/adult.release.yaml")   # checks, no data read
    plan = dpql.build_plan(spec)                                  # budget, queries; no data read
    release = dpql.compile("examples/adult/adult.release.yaml", seed=0)
    table = release.table()                                       # the synthetic pandas.DataFrame
    print(release.summary())                                      # paths, spend, verdicts
    dpql.verify(release.record_path, synthetic=release.table_path)  # [] when the record checks

    # the private table as a DataFrame, the budget overridden, progress bars on stderr:
    release = dpql.compile(spec, data=df, overrides={"privacy.epsilon": 2.0}, progress=True)
    report = dpql.evaluate_report(spec, release.table_path)       # curator-only; never publish
    print(report.headline.text())

(The names avoid the subpackages ``dpql.plan`` and ``dpql.evaluate``: importing one binds
its name on the package, over a function of that name.) Errors in specs, policies or data raise
:class:`DiagnosticError` (its ``diagnostics`` carry codes, positions and hints); see
``docs/diagnostics.md``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import pandas as pd

    from dpql.evaluate.report import EvaluationReport
    from dpql.pipeline import CompileResult
    from dpql.plan.planner import ReleasePlan
    from dpql.quality import QualityHeadline
    from dpql.spec.load import LoadedSpec

__version__ = "0.1.0"

__all__ = [
    "Diagnostic",
    "DiagnosticError",
    "Release",
    "SourcePos",
    "__version__",
    "build_plan",
    "compile",
    "evaluate_report",
    "load_spec",
    "verify",
]


def load_spec(path: str | os.PathLike[str]) -> LoadedSpec:
    """Load and check a release spec (YAML); raises :class:`DiagnosticError`. No data read."""
    from dpql.spec.load import load_spec as _load

    return _load(path)


def build_plan(spec: LoadedSpec | str | os.PathLike[str]) -> ReleasePlan:
    """The release plan (queries, budget table, requirement predictions), without data."""
    from dpql.plan.planner import build_plan as _build

    return _build(spec if not isinstance(spec, str | os.PathLike) else load_spec(spec))


@dataclass(frozen=True)
class Release:
    """A compiled release: where its outputs are, and its provenance record."""

    result: CompileResult

    @property
    def table_path(self) -> Path:
        return self.result.table_path

    @property
    def record_path(self) -> Path:
        return self.result.record_path

    @property
    def record(self) -> dict[str, Any]:
        return self.result.record

    @property
    def timings(self) -> dict[str, float]:
        """Seconds per stage (curator-only: they depend on the true row count)."""
        return self.result.timings

    @property
    def quality(self) -> QualityHeadline | None:
        """The released table's 1-way shifts from the synthesizer's noisy 1-way answers
        (post-processing of DP outputs), None when it measured none."""
        return self.result.quality

    def table(self) -> pd.DataFrame:
        """The synthetic table as a pandas DataFrame."""
        import pandas as pd

        path = self.table_path
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)

    def summary(self) -> str:
        """What ``dpql compile`` prints, as text: where the outputs are, the privacy spent, each
        requirement's verdict and the quality headline (public values of the record and the
        table, plus the curator-only file's path)."""
        rec = self.record
        spent, budget = rec["privacy"]["spent"], rec["privacy"]["budget"]
        lines = [
            f"released {self.table_path} ({rec['output']['rows']:,} rows, method "
            f"{rec['synthesizer'].get('method')})",
            f"provenance {self.record_path}",
        ]
        if self.result.curator_path is not None:
            lines.append(f"curator-only (never publish) {self.result.curator_path}")
        lines.append(
            f"privacy spent: epsilon {spent['epsilon']:.6g} of {budget['epsilon']:.6g}, "
            f"delta {spent['delta']:.3g}, over {len(rec['privacy']['events'])} mechanism events"
        )
        for r in rec.get("requirements", []):
            lines.append(f"requirement {r.get('requirement')}: {r.get('verdict')}")
        if self.quality is not None:
            lines.append(self.quality.text())
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:  # notebooks show the summary
        return "```\n" + self.summary() + "\n```"


def compile(
    spec: LoadedSpec | str | os.PathLike[str],
    *,
    data: pd.DataFrame | str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    progress: bool | Callable[[str, int, int], None] = False,
    seed: int | None = None,
    ledger_path: str | os.PathLike[str] | None = None,
    signing_key: str | os.PathLike[str] | None = None,
    force: bool = False,
    policy: str | os.PathLike[str] | None = None,
) -> Release:
    """Run a release end to end (``dpql compile``): reads the private data, spends the budget,
    writes the table, the provenance record and the curator file, and records the release in
    the lifetime ledger. ``seed`` fixes optimisation and row sampling only, never DP noise.
    ``force`` replaces an earlier release at the same outputs (else E614); ``policy`` enforces
    a privacy policy, lifetime caps included, before any data is read.

    ``spec`` is a spec file (or a spec from :func:`load_spec`). ``data`` replaces the spec's
    ``data.path``: another file, or a pandas DataFrame that *is* the private table (measured
    through the same oracle and ledger, held in memory, never written; the curator file
    fingerprints its content). ``overrides`` replaces values of the spec by dotted key
    (``{"privacy.epsilon": 2.0, "synthesizer.rows": 1000}``) before it is checked.
    ``progress``: True for progress on stderr (bars on a terminal or in a notebook, plain lines
    otherwise), or a callable ``progress(phase, step, total)``."""
    from dpql.pipeline import compile_release

    if overrides:
        if not isinstance(spec, str | os.PathLike):
            raise TypeError("overrides need the spec's file: pass its path")
        from dpql.spec.load import load_spec_with_overrides

        spec = load_spec_with_overrides(spec, overrides)
    update, stop = _progress(progress)
    try:
        result = compile_release(
            spec,
            data=data,
            seed=seed,
            progress=update,
            ledger_path=Path(ledger_path) if ledger_path is not None else None,
            signing_key=Path(signing_key) if signing_key is not None else None,
            force=force,
            policy_path=Path(policy) if policy is not None else None,
        )
    finally:
        stop()
    return Release(result)


def _progress(
    progress: bool | Callable[[str, int, int], None],
) -> tuple[Callable[[str, int, int], None] | None, Callable[[], None]]:
    if callable(progress):
        return progress, lambda: None
    if not progress:
        return None, lambda: None
    import sys

    from dpql.progress import plain_progress, progress_bars
    from dpql.terminal import SafeConsole

    console = SafeConsole(stderr=True)
    if sys.stderr.isatty() or console.is_jupyter:
        return progress_bars(console)
    return plain_progress("compile")


def verify(
    record_path: str | os.PathLike[str],
    *,
    synthetic: str | os.PathLike[str] | None = None,
    key: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Re-check a provenance record (``dpql verify``): the accounting recomputed from its
    events, its schema and hashes, its events and budget against the plan of its embedded spec,
    and with ``key`` (the curator's public key) its signature. Returns the problems found
    (empty: it verifies); a bad file is a problem, never an exception."""
    from dpql.release.verify import verify_release

    result = verify_release(
        Path(record_path),
        Path(synthetic) if synthetic else None,
        Path(key) if key is not None else None,
    )
    return [str(p) for p in result.problems]


def evaluate_report(
    spec_path: str | os.PathLike[str],
    synthetic: str | os.PathLike[str],
    *,
    holdout: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    label: str | None = None,
    progress: bool | Callable[[str, int, int], None] = False,
) -> EvaluationReport:
    """The curator-only utility report (``dpql evaluate``), written to ``output`` (default:
    beside the release's curator-only file) and returned: ``report.headline`` (the largest
    1-way shift from the real table, with its sampling scale), ``workload``,
    ``requirements``, ``tstr``, ``correlation_l1``, ``path`` (its ``index.html``) and
    ``to_json()``. It is computed on private data: never publish it."""
    from dataclasses import replace

    from dpql.evaluate.cli import make_report

    report, page = make_report(
        spec_path, synthetic, holdout=holdout, output=output, label=label, progress=progress
    )
    return replace(report, path=page)
