"""``dpql evaluate``: the utility report of a synthetic table (curator-side, NOT private).

The report reads the real data. It is for the data custodian and is never part of a release;
the HTML page and the JSON summary say so.

Entry points: :func:`build_report` and :func:`write_report`. The pure functions below are the
ones benchmarks should reuse rather than copy (the DP-auto-GAN metrics live in
:mod:`dpql.evaluate.gan_metrics`). scikit-learn and matplotlib (default dependencies) are
imported lazily; without them a :class:`MissingExtraError` gives the install hint.
"""

from dpql.evaluate.deps import INSTALL_HINT, MissingExtraError
from dpql.evaluate.encode import encode_table
from dpql.evaluate.metrics import (
    correlation_l1,
    correlation_matrix,
    dimension_wise_probability,
    diversity,
    histograms,
)
from dpql.evaluate.models import (
    MODELS,
    RequirementCheck,
    Scores,
    check_requirement,
    classification_scores,
    tstr_scores,
)
from dpql.evaluate.render import write_report
from dpql.evaluate.report import PRIVATE_WARNING, EvaluationReport, build_report, default_label
from dpql.evaluate.workload import (
    ClassStats,
    QueryError,
    class_stats,
    describe_query,
    marginal_tvd,
    query_errors,
)

__all__ = [
    "INSTALL_HINT",
    "MODELS",
    "PRIVATE_WARNING",
    "ClassStats",
    "EvaluationReport",
    "MissingExtraError",
    "QueryError",
    "RequirementCheck",
    "Scores",
    "build_report",
    "check_requirement",
    "class_stats",
    "classification_scores",
    "correlation_l1",
    "correlation_matrix",
    "default_label",
    "describe_query",
    "dimension_wise_probability",
    "diversity",
    "encode_table",
    "histograms",
    "marginal_tvd",
    "query_errors",
    "tstr_scores",
    "write_report",
]
