"""Workload error: exact answers of the planned queries on the real and the synthetic table.

Per query (answers from :func:`dpql.ir.exact.answer_all`, averages over rows):

* a marginal's error is its total variation distance ``TVD = 1/2 * ||a_real - a_syn||_1``;
* every other class (range/prefix, halfspace, count, moment) reports the largest absolute error
  over its cells, ``||a_real - a_syn||_inf``: each cell is one statistical query (a label split
  of a prefix or halfspace is one cell per label value, RAP++ Definition 4), so this is the
  statistical-query error RAP++ reports (Vietri et al. 2022, §2.1, Definition 5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpql.domain import EncodedTable
from dpql.ir.exact import answer_all
from dpql.ir.queries import (
    QUERY_KINDS,
    Marginal,
    Query,
)
from dpql.plan.describe import describe_query
from dpql.progress import Progress

# queries answered per answer_all call: bounds the latency between progress reports
_BATCH = 64


@dataclass(frozen=True)
class QueryError:
    """One query's error; ``real``/``synthetic`` hold the answers of non-marginal queries."""

    kind: str
    description: str
    error: float
    real: tuple[float, ...] = ()
    synthetic: tuple[float, ...] = ()


@dataclass(frozen=True)
class ClassStats:
    """Mean and max error over the queries of one class (``metric``: ``tvd`` or ``max_abs``)."""

    kind: str
    metric: str
    count: int
    mean: float
    max: float



def error_of(q: Query, real: np.ndarray, synthetic: np.ndarray) -> float:
    """TVD for a marginal, largest absolute cell error otherwise (module docstring)."""
    d = np.abs(np.asarray(real) - np.asarray(synthetic))
    return float(0.5 * d.sum()) if isinstance(q, Marginal) else float(d.max())


def query_errors(
    queries: Sequence[Query],
    real: EncodedTable,
    synthetic: EncodedTable,
    progress: Progress | None = None,
) -> tuple[QueryError, ...]:
    """Errors of ``queries`` between two encoded tables of the same domain, in query order."""
    out: list[QueryError] = []
    total = len(queries)
    for s in range(0, total, _BATCH):
        batch = queries[s : s + _BATCH]
        answers = zip(batch, answer_all(batch, real), answer_all(batch, synthetic), strict=True)
        for q, a, b in answers:
            keep = not isinstance(q, Marginal)  # marginal answers are long; TVD says enough
            out.append(
                QueryError(
                    q.kind,
                    describe_query(q, real.domain),
                    error_of(q, a, b),
                    tuple(float(x) for x in a) if keep else (),
                    tuple(float(x) for x in b) if keep else (),
                )
            )
        if progress:
            progress("workload", len(out), total)
    return tuple(out)


def _kinds(errors: Sequence[QueryError]) -> list[str]:
    """Classes present, in :data:`QUERY_KINDS` order, then any other class by first appearance."""
    seen = dict.fromkeys(x.kind for x in errors)
    return [k for k in QUERY_KINDS if k in seen] + [k for k in seen if k not in QUERY_KINDS]


def class_stats(errors: Sequence[QueryError]) -> tuple[ClassStats, ...]:
    """Per-class mean and max error, in :func:`_kinds` order (absent classes omitted)."""
    out = []
    for kind in _kinds(errors):
        e = np.array([x.error for x in errors if x.kind == kind])
        metric = "tvd" if kind == "marginal" else "max_abs"
        out.append(ClassStats(kind, metric, int(e.size), float(e.mean()), float(e.max())))
    return tuple(out)


def worst(errors: Sequence[QueryError], k: int) -> tuple[QueryError, ...]:
    """The ``k`` largest errors of each class, largest first within a class."""
    out: list[QueryError] = []
    for kind in _kinds(errors):
        mine = sorted((x for x in errors if x.kind == kind), key=lambda x: -x.error)
        out.extend(mine[:k])
    return tuple(out)


def marginal_tvd(
    real: EncodedTable, synthetic: EncodedTable, queries: Sequence[Query]
) -> ClassStats:
    """Mean and max TVD over the marginals among ``queries`` (other classes are ignored)."""
    ms = [q for q in queries if isinstance(q, Marginal)]
    if not ms:
        return ClassStats("marginal", "tvd", 0, float("nan"), float("nan"))
    return class_stats(query_errors(ms, real, synthetic))[0]
