"""``build_report``: the curator-side utility report of a synthetic table.

NOT PRIVATE. Every number here is computed on the real (private) table and the optional real
holdout; the report is for the data custodian and is never part of a release.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpql.data.codec import MissingPolicy
from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos, did_you_mean
from dpql.domain import CategoricalColumn, Domain, EncodedTable
from dpql.evaluate.deps import gan_metrics, require
from dpql.evaluate.encode import encode_table
from dpql.evaluate.metrics import (
    DimensionWiseProbability,
    Diversity,
    Histogram,
    correlation_columns,
    correlation_matrix,
    dimension_wise_probability,
    diversity,
    histograms,
)
from dpql.evaluate.models import MODELS, RequirementCheck, Scores, check_requirement, tstr_encoded
from dpql.evaluate.workload import (
    ClassStats,
    Progress,
    QueryError,
    class_stats,
    query_errors,
    worst,
)
from dpql.ir.queries import ModelRequirement, Query, Requirement
from dpql.quality import QualityHeadline, report_headline

# Each dimension-wise prediction model (2 per column) is fit on at most this many rows of its
# table, a uniform sample (seeded): it bounds the report's time on large tables, for 30 models
# on Adult a few seconds. The paper fits on every row; the TSTR models always do.
DIMENSION_WISE_ROWS = 20_000

PRIVATE_WARNING = (
    "CONFIDENTIAL: this report is computed on the PRIVATE data (curator-side, not differentially "
    "private). It reveals facts about real individuals and must not be published or shared "
    "outside the data custodian."
)


@dataclass(frozen=True)
class TstrResult:
    """One model class trained on real and on synthetic data, scored on the same real test set."""

    model: str
    train_on_real: Scores
    train_on_synthetic: Scores


@dataclass(frozen=True, eq=False)
class EvaluationReport:
    """Everything ``dpql evaluate`` reports; :func:`dpql.evaluate.write_report` renders it."""

    rows: dict[str, int]
    label: str | None
    test_set: str
    workload: tuple[ClassStats, ...]
    queries: tuple[QueryError, ...]
    worst_queries: tuple[QueryError, ...]
    requirements: tuple[RequirementCheck, ...]
    tstr: tuple[TstrResult, ...]
    correlation_columns: tuple[str, ...]
    correlation_real: np.ndarray
    correlation_synthetic: np.ndarray
    dimension_wise_probability: DimensionWiseProbability
    dimension_wise_prediction: tuple[Any, ...]  # dpql.evaluate.gan_metrics.PredictionScore
    diversity: tuple[Diversity, ...]
    histograms: tuple[Histogram, ...]
    notes: tuple[str, ...] = ()
    #: the 1-way shifts from the real table against the split-half scale (dpql.quality)
    headline: QualityHeadline | None = None
    #: the synthesizer of the release (the spec's plan); DP-auto-GAN's own metrics are shown
    #: for ``gan`` (and when unknown)
    method: str | None = None
    #: the report's ``index.html`` once written (``dpql.evaluate_report``)
    path: Path | None = None

    @property
    def collapsed_columns(self) -> frozenset[str]:
        """Categorical columns the synthetic table reduced to one category (brown points)."""
        return frozenset(d.column for d in self.diversity if d.synthetic_categories == 1)

    @property
    def correlation_l1(self) -> float:
        """The post-processing paper's ``||corr(real) - corr(synthetic)||_1`` (full matrix)."""
        return float(np.abs(self.correlation_real - self.correlation_synthetic).sum())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (NaN becomes null); flags itself as private."""
        return _jsonable(
            {
                "private": True,
                "warning": PRIVATE_WARNING,
                "rows": self.rows,
                "headline": None if self.headline is None else self.headline.to_json(),
                "method": self.method,
                "label": self.label,
                "test_set": self.test_set,
                "workload": {
                    "classes": self.workload,
                    "worst": self.worst_queries,
                    "queries": self.queries,
                },
                "requirements": self.requirements,
                "tstr": self.tstr,
                "correlation": {
                    "l1": self.correlation_l1,
                    "columns": self.correlation_columns,
                    "real": self.correlation_real,
                    "synthetic": self.correlation_synthetic,
                },
                "dimension_wise_probability": {
                    "sse": self.dimension_wise_probability.sse,
                    **_jsonable(self.dimension_wise_probability),
                },
                "dimension_wise_prediction": self.dimension_wise_prediction,
                "diversity": {
                    "jsd_total": float(sum(d.jsd for d in self.diversity)),
                    "kl_mu_total": float(sum(d.kl_mu for d in self.diversity)),
                    "columns": self.diversity,
                },
                "histograms": self.histograms,
                "notes": self.notes,
            }
        )


def _jsonable(x: Any) -> Any:
    if is_dataclass(x) and not isinstance(x, type):
        return {f.name: _jsonable(getattr(x, f.name)) for f in fields(x)}
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple | np.ndarray):
        return [_jsonable(v) for v in (x.tolist() if isinstance(x, np.ndarray) else x)]
    if isinstance(x, float | np.floating):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.integer | np.bool_):
        return x.item()
    return x


def default_label(domain: Domain, requirements: Sequence[Requirement]) -> str | None:
    """The first logistic requirement's label, else the last two-valued categorical column
    (its null code under ``missing: keep`` not counted)."""
    for r in requirements:
        if isinstance(r, ModelRequirement) and r.model == "logistic":
            return r.label
    # two values, plus a null code when missingness is kept (missing: keep)
    binary = [c.name for c in domain.categorical if c.card - c.nullable == 2]
    return binary[-1] if binary else None


def check_label(domain: Domain, label: str) -> None:
    """E601 unless ``label`` names a categorical column."""
    if label not in domain:
        msg, hint = f"label '{label}' is not a column", did_you_mean(label, domain.names)
    elif not isinstance(domain[label], CategoricalColumn):
        msg, hint = f"label '{label}' is numeric", None
    else:
        return
    cats = ", ".join(c.name for c in domain.categorical)
    hint = hint or f"the label must be a categorical column: {cats}"
    raise DiagnosticError([Diagnostic("E601", msg, SourcePos("--label"), hint)])


def build_report(
    domain: Domain,
    real_df: pd.DataFrame,
    synthetic_df: pd.DataFrame,
    queries: Sequence[Query],
    requirements: Sequence[Requirement],
    holdout_df: pd.DataFrame | None = None,
    label: str | None = None,
    output_dir: str | Path | None = None,
    progress: Progress | None = None,
    *,
    seed: int = 0,
    worst_k: int = 10,
    test_fraction: float = 0.2,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
    dimension_wise_rows: int | None = DIMENSION_WISE_ROWS,
    workers: int | None = None,
    method: str | None = None,
) -> EvaluationReport:
    """Evaluate ``synthetic_df`` against ``real_df`` (both in original units of ``domain``).

    * workload error of ``queries`` per class, and the ``worst_k`` worst queries of each class;
    * each requirement on both tables (:func:`dpql.evaluate.models.check_requirement`);
    * train on synthetic / test on real for logistic regression and gradient boosting next to
      train on real, predicting ``label`` (default :func:`default_label`). The real test set is
      ``holdout_df`` if given; otherwise a random ``test_fraction`` of the real table (``seed``),
      the train-on-real models then fitting the rest, so that no score is in-sample;
    * correlation-matrix difference, DP-auto-GAN's dimension-wise probability, prediction
      (each model fit on at most ``dimension_wise_rows`` rows, :data:`DIMENSION_WISE_ROWS` by
      default; None fits on all, as in the paper) and diversity, and the 1-way histograms.

    Models are fit with BLAS and OpenMP limited to one thread each (idle threads spinning on a
    shared machine made the report several times slower), the independent models on
    ``workers`` threads (default: the CPU count, at most 4); the scores do not depend on it.

    Tables are encoded by the release codec (:func:`dpql.data.codec.encode_frame`) with the spec's
    ``missing`` and ``other`` rules (an unreadable or undeclared cell follows them; the
    codec raises only for the schema and the rules).
    With ``output_dir`` the report is also written there (:func:`write_report`). ``progress``
    is called as ``progress(step, done, total)`` during the long steps. Raises
    :class:`~dpql.evaluate.MissingExtraError` up front if scikit-learn or matplotlib is missing.
    """
    require("sklearn")
    if output_dir is not None:
        require("matplotlib")
    label = label or default_label(domain, requirements)
    if label is not None:
        check_label(domain, label)

    def encode(df: pd.DataFrame, source: str) -> EncodedTable:
        return encode_table(df, domain, missing, other, source)

    real, synthetic = encode(real_df, "<real table>"), encode(synthetic_df, "<synthetic table>")
    notes = [f"Train-on-synthetic scores predict {label!r}." if label else
             "Train on synthetic, test on real: skipped (no label given and no two-valued "
             "categorical column); dpql evaluate --label COLUMN names a categorical column "
             "to predict."]  # fmt: skip
    if holdout_df is not None:
        train, test = real, encode(holdout_df, "<holdout table>")
        test_set = f"holdout table ({test.n} rows)"
    else:
        perm = np.random.default_rng(seed).permutation(real.n)
        cut = max(1, round(real.n * test_fraction))
        train, test = real.take(perm[cut:]), real.take(perm[:cut])
        test_set = (
            f"random {test_fraction:.0%} of the real table ({test.n} rows, seed {seed}); "
            f"train-on-real models fit on the other {train.n} rows"
        )

    tick = progress or (lambda step, done, total: None)
    errors = query_errors(queries, real, synthetic, progress)
    workers = workers or min(4, os.cpu_count() or 1)
    metrics = gan_metrics()  # imports sklearn.ensemble: its OpenMP runtime is then limited too
    require("sklearn.linear_model")
    with require("threadpoolctl").threadpool_limits(1):
        checks = []
        for i, r in enumerate(requirements):
            checks.append(check_requirement(r, real, synthetic))
            tick("requirements", i + 1, len(requirements))
        tstr = []
        if label is not None:
            step = "train on synthetic, test on real"
            tick(step, 0, 2 * len(MODELS))
            for i, m in enumerate(MODELS):
                on_real = tstr_encoded(train, test, label, m, seed)
                tick(step, 2 * i + 1, 2 * len(MODELS))
                on_synthetic = tstr_encoded(synthetic, test, label, m, seed)
                tstr.append(TstrResult(m, on_real, on_synthetic))
                tick(step, 2 * i + 2, 2 * len(MODELS))
        with warnings.catch_warnings():
            # the paper's Lasso(alpha=1) on raw units (e.g. fnlwgt) stops before converging;
            # that is the protocol being reproduced, not news for the curator
            warnings.simplefilter("ignore", require("sklearn.exceptions").ConvergenceWarning)
            dimension_wise = metrics.dimension_wise_prediction(
                train, test, synthetic, seed, max_train_rows=dimension_wise_rows,
                workers=workers, progress=lambda done, total: tick(
                    "dimension-wise prediction", done, total),
            )  # fmt: skip
    if dimension_wise_rows is not None and max(train.n, synthetic.n) > dimension_wise_rows:
        notes.append(
            f"Dimension-wise prediction: each model is fit on a random {dimension_wise_rows:,} "
            f"rows of its table (seed {seed}), scored on the whole test set."
        )
    report = EvaluationReport(
        rows={"real": real.n, "synthetic": synthetic.n, "test": test.n},
        label=label,
        test_set=test_set,
        workload=class_stats(errors),
        queries=errors,
        worst_queries=worst(errors, worst_k),
        requirements=tuple(checks),
        tstr=tuple(tstr),
        correlation_columns=correlation_columns(domain),
        correlation_real=correlation_matrix(real, correlation_columns(domain)),
        correlation_synthetic=correlation_matrix(synthetic, correlation_columns(domain)),
        dimension_wise_probability=dimension_wise_probability(real, synthetic),
        dimension_wise_prediction=dimension_wise,
        diversity=diversity(real, synthetic),
        histograms=histograms(real, synthetic),
        notes=tuple(notes),
        headline=report_headline(real, synthetic, domain.names, seed),
        method=method,
    )
    if output_dir is not None:
        from dpql.evaluate.render import write_report

        write_report(report, output_dir, progress)
    return report
