"""dpql: a compiler for differentially private synthetic-data releases.

The public Python API (the command line is a thin layer over it)::

    import dpql

    spec = dpql.load_spec("examples/adult/adult.release.yaml")   # checks, no data read
    plan = dpql.build_plan(spec)                                  # budget, queries; no data read
    release = dpql.compile("examples/adult/adult.release.yaml", seed=0)
    table = release.table()                                       # the synthetic pandas.DataFrame
    dpql.verify(release.record_path, synthetic=release.table_path)  # [] when the record checks

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
    import pandas as pd

    from dpql.pipeline import CompileResult
    from dpql.plan.planner import ReleasePlan
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

    def table(self) -> pd.DataFrame:
        """The synthetic table as a pandas DataFrame."""
        import pandas as pd

        path = self.table_path
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def compile(
    spec_path: str | os.PathLike[str],
    *,
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
    a privacy policy, lifetime caps included, before any data is read."""
    from dpql.pipeline import compile_release

    return Release(
        compile_release(
            spec_path,
            seed=seed,
            ledger_path=Path(ledger_path) if ledger_path is not None else None,
            signing_key=Path(signing_key) if signing_key is not None else None,
            force=force,
            policy_path=Path(policy) if policy is not None else None,
        )
    )


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
    from dpql.audit import verify_release

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
) -> int:
    """The curator-only utility report (``dpql evaluate``); returns the command's exit code.
    It is computed on private data: never publish it."""
    import argparse

    from dpql.evaluate.cli import run_evaluate

    args = argparse.Namespace(
        spec=str(spec_path),
        synthetic=str(synthetic),
        holdout=str(holdout) if holdout else None,
        output=str(output) if output else None,
        label=label,
        format="text",
    )
    return run_evaluate(args)
