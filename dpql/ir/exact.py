"""Exact, vectorised numpy evaluation of the query IR on an encoded table.

``answer(q, table)`` returns the answer vector of :mod:`dpql.ir.queries` (length ``q.cells``):
the *average* over rows. The measurement layer uses these on private data; tests and the
synthesizers' reports use them on synthetic data. Families of the same class are evaluated
together (one bincount per marginal, one matrix product per block of halfspaces) and rows are
processed in chunks so memory stays bounded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpql.domain import EncodedTable
from dpql.ir.queries import (
    And,
    CatIn,
    CentredProduct,
    Count,
    Factor,
    Halfspace,
    Marginal,
    ModelAccuracy,
    Moment,
    Not,
    NumCmp,
    Or,
    Pred,
    Prefix,
    Query,
    TruePred,
    dispatch,
    query_grid,
)

ROW_CHUNK = 1 << 16


def _true_mask(p: TruePred, t: EncodedTable) -> np.ndarray:
    return np.ones(t.n, dtype=bool)


def _num_cmp_mask(p: NumCmp, t: EncodedTable) -> np.ndarray:
    u = t.scaled[p.column]
    if p.op == "<":
        return u < p.threshold
    if p.op == "<=":
        return u <= p.threshold
    if p.op == ">":
        return u > p.threshold
    return u >= p.threshold


def _cat_in_mask(p: CatIn, t: EncodedTable) -> np.ndarray:
    return np.isin(t.codes[p.column], np.fromiter(p.codes, dtype=np.int32))


def _and_mask(p: And, t: EncodedTable) -> np.ndarray:
    out = np.ones(t.n, dtype=bool)
    for i in p.items:
        out &= eval_pred(i, t)
    return out


def _or_mask(p: Or, t: EncodedTable) -> np.ndarray:
    out = np.zeros(t.n, dtype=bool)
    for i in p.items:
        out |= eval_pred(i, t)
    return out


def _not_mask(p: Not, t: EncodedTable) -> np.ndarray:
    return ~eval_pred(p.item, t)


PRED_MASKS: dict[type, Callable[[Any, EncodedTable], np.ndarray]] = {
    TruePred: _true_mask,
    NumCmp: _num_cmp_mask,
    CatIn: _cat_in_mask,
    And: _and_mask,
    Or: _or_mask,
    Not: _not_mask,
}
"""The numpy evaluator's predicate table: node class -> boolean row mask."""


def eval_pred(p: Pred, t: EncodedTable) -> np.ndarray:
    """Boolean mask of the rows satisfying ``p``."""
    return dispatch(PRED_MASKS, p)(p, t)


def _cell_index(columns: Sequence[str], t: EncodedTable) -> tuple[np.ndarray, int]:
    """Each row's cell of the marginal over ``columns`` (row-major) and the number of cells."""
    cards = [t.domain.card(c) for c in columns]
    idx = np.zeros(t.n, dtype=np.int64)
    for c, k in zip(columns, cards, strict=True):
        idx = idx * k + t.codes[c]
    return idx, int(np.prod(cards))


def marginal_counts(columns: Sequence[str], t: EncodedTable) -> np.ndarray:
    """Cell counts (not averages) of the marginal over ``columns``, row-major cell order."""
    idx, cells = _cell_index(columns, t)
    return np.bincount(idx, minlength=cells).astype(np.float64)


def factor_values(f: Factor, t: EncodedTable) -> np.ndarray:
    """Per-row value of a factor: the scaled column, or the indicator of its code."""
    column, code = f
    return t.scaled[column] if code is None else (t.codes[column] == code).astype(np.float64)


def centred_values(q: CentredProduct, t: EncodedTable) -> np.ndarray:
    """Per-row ``(f - c) * (g - d)`` of a :class:`~dpql.ir.queries.CentredProduct` (centres
    ``(c, d)``, 1/2 unless re-centred)."""
    c, d = q.centres
    out = (factor_values(q.left, t) - c) * (factor_values(q.right, t) - d)
    return out if isinstance(q.given, TruePred) else out * eval_pred(q.given, t)


def moment_values(q: Moment, t: EncodedTable) -> np.ndarray:
    """Per-row ``prod_j u_j * 1{given}`` of a :class:`~dpql.ir.queries.Moment`, or ``(u - c) *
    1{given}`` with a centre ``c``."""
    w = eval_pred(q.given, t).astype(np.float64)
    for col in q.columns:
        u = t.scaled[col] if q.centre is None else t.scaled[col] - q.centre
        w = w * u
    return w


def design_matrix(features: Sequence[str], t: EncodedTable) -> np.ndarray:
    """Design rows ``z(x)`` of :class:`~dpql.ir.queries.ModelAccuracy`: per feature in order, the
    scaled value of a numeric column or one-hot indicators of *every* value of a categorical one.
    """
    blocks = []
    for f in features:
        if f in t.scaled:
            blocks.append(t.scaled[f][:, None])
        else:
            blocks.append(np.eye(t.domain.card(f))[t.codes[f]])
    return np.hstack(blocks) if blocks else np.zeros((t.n, 0))


def model_scores(q: ModelAccuracy, t: EncodedTable) -> np.ndarray:
    """Per-row score in [0, 1] of a fixed linear model (accuracy or clipped squared error)."""
    if not q.fitted:
        raise ValueError("a pilot's model is fitted at compile time (dpql.postprocess.run)")
    z = design_matrix(q.features, t) @ np.asarray(q.coef, dtype=np.float64).T + np.asarray(
        q.intercept
    )
    if q.model == "logistic":
        out = (np.argmax(z, axis=1) == t.codes[q.label]).astype(np.float64)
    else:
        out = (t.scaled[q.label] - np.clip(z[:, 0], 0.0, 1.0)) ** 2
    return out if isinstance(q.given, TruePred) else out * eval_pred(q.given, t)


def _marginal_sums(q: Marginal, t: EncodedTable) -> np.ndarray:
    return marginal_counts(q.columns, t)


def _marginal_sparse(q: Marginal, t: EncodedTable) -> tuple[np.ndarray, np.ndarray]:
    return _cell_index(q.columns, t)[0], np.ones(t.n)


def _prefix_hits(q: Prefix, t: EncodedTable) -> np.ndarray:
    hit = np.ones(t.n, dtype=bool)
    for c, thr in zip(q.columns, q.thresholds, strict=True):
        hit &= t.scaled[c] <= thr
    return hit.astype(np.float64)


def _halfspace_hits(q: Halfspace, t: EncodedTable) -> np.ndarray:
    z = np.column_stack([t.scaled[c] for c in q.columns]) @ np.asarray(q.theta)
    return (z > q.tau).astype(np.float64)


@dataclass(frozen=True)
class QueryRule:
    """How the numpy evaluator answers one query class: ``sums(q, t)`` the per-cell sums over the
    rows (length ``q.cells``); ``sparse(q, t)`` the per-row values in sparse form, ``(cell,
    value)`` arrays with one entry per row: every query's per-record vector has at most one
    non-zero cell (:mod:`dpql.ir.queries`)."""

    sums: Callable[[Any, EncodedTable], np.ndarray]
    sparse: Callable[[Any, EncodedTable], tuple[np.ndarray, np.ndarray]]


def _by_label(hits: Callable[[Any, EncodedTable], np.ndarray]) -> QueryRule:
    """The rule of a query whose per-row value is a 0/1 ``hits(q, t)``, split by the codes of its
    ``by`` column (one cell when it has none)."""

    def sums(q: Prefix | Halfspace, t: EncodedTable) -> np.ndarray:
        w = hits(q, t)
        if q.by is None:
            return np.array([float(np.sum(w))])
        return np.bincount(t.codes[q.by], weights=w, minlength=t.domain.card(q.by))

    def sparse(q: Prefix | Halfspace, t: EncodedTable) -> tuple[np.ndarray, np.ndarray]:
        cell = np.zeros(t.n, dtype=np.int64) if q.by is None else t.codes[q.by].astype(np.int64)
        return cell, hits(q, t)

    return QueryRule(sums, sparse)


def _count_values(q: Count, t: EncodedTable) -> np.ndarray:
    return eval_pred(q.predicate, t).astype(np.float64)


def _scalar(values: Callable[[Any, EncodedTable], np.ndarray]) -> QueryRule:
    """The rule of a one-cell query from its per-row ``values(q, t)``."""
    return QueryRule(
        lambda q, t: np.array([float(np.sum(values(q, t)))]),
        lambda q, t: (np.zeros(t.n, dtype=np.int64), values(q, t)),
    )


def _model_sums(q: ModelAccuracy, t: EncodedTable) -> np.ndarray:
    parts = (model_scores(q, t.slice(s, s + ROW_CHUNK)).sum() for s in range(0, t.n, ROW_CHUNK))
    return np.array([math.fsum(parts)])


QUERY_RULES: dict[type, QueryRule] = {
    Marginal: QueryRule(_marginal_sums, _marginal_sparse),
    Prefix: _by_label(_prefix_hits),
    Halfspace: _by_label(_halfspace_hits),
    Count: _scalar(_count_values),
    Moment: _scalar(moment_values),
    CentredProduct: _scalar(centred_values),
    ModelAccuracy: QueryRule(_model_sums, _scalar(model_scores).sparse),
}
"""The numpy evaluator's query table: node class -> its :class:`QueryRule`."""


def per_row(q: Query, t: EncodedTable) -> np.ndarray:
    """Per-record values ``v(x)`` of one query, shape ``(rows, cells)``; ``answer`` is their mean.

    Used by post-processing (I-projection reweights rows by these) and by tests. Memory is
    ``rows * cells`` floats: meant for scalar and small vector queries.
    """
    cell, value = per_row_sparse(q, t)
    out = np.zeros((t.n, q.cells(t.domain)))
    out[np.arange(t.n), cell] = value
    return out


def per_row_sparse(q: Query, t: EncodedTable) -> tuple[np.ndarray, np.ndarray]:
    """:func:`per_row` in sparse form: per row its one cell that may be non-zero and the value
    there (``v(x)`` is ``value`` at ``cell`` and 0 elsewhere), two arrays of ``rows`` entries."""
    return dispatch(QUERY_RULES, q).sparse(q, t)


def answer(q: Query, t: EncodedTable) -> np.ndarray:
    """Exact answer vector of one query (averages over rows)."""
    return answer_all([q], t)[0]


def _halfspace_block_sums(qs: Sequence[Halfspace], t: EncodedTable) -> list[np.ndarray]:
    """All halfspaces sharing (columns, by) in one matrix product per row chunk."""
    theta = np.asarray([q.theta for q in qs], dtype=np.float64)  # (m, r)
    tau = np.asarray([q.tau for q in qs], dtype=np.float64)
    by = qs[0].by
    k = t.domain.card(by)
    out = np.zeros((len(qs), k))
    for s in range(0, t.n, ROW_CHUNK):
        part = t.slice(s, s + ROW_CHUNK)
        x = np.column_stack([part.scaled[c] for c in qs[0].columns])
        hit = (x @ theta.T > tau).astype(np.float64)  # (rows, m)
        onehot = np.eye(k)[part.codes[by]]  # (rows, k)
        out += hit.T @ onehot
    return list(out)


def answer_all(queries: Sequence[Query], t: EncodedTable) -> list[np.ndarray]:
    """Exact answers of many queries; halfspaces with the same columns and label are batched."""
    if t.n == 0:
        raise ValueError("cannot answer queries on an empty table")
    return [s / t.n for s in sums_all(queries, t)]


def sums_all(queries: Sequence[Query], t: EncodedTable) -> list[np.ndarray]:
    """Exact per-record *sums* (answers times the row count) of many queries; halfspaces with
    the same columns and label are batched. Engines add these over row chunks."""
    out: list[np.ndarray | None] = [None] * len(queries)
    groups: dict[tuple[tuple[str, ...], str], list[int]] = {}
    for i, q in enumerate(queries):
        if isinstance(q, Halfspace):
            groups.setdefault((q.columns, q.by), []).append(i)
        else:
            out[i] = dispatch(QUERY_RULES, q).sums(q, t)
    for idxs in groups.values():
        sums = _halfspace_block_sums([queries[i] for i in idxs], t)  # type: ignore[misc]
        for i, s in zip(idxs, sums, strict=True):
            out[i] = s
    return [o for o in out if o is not None]


def to_grid(values: np.ndarray, grid: float) -> np.ndarray:
    """Per-record values as whole grid steps: ``floor(v / grid + 1/2)`` (round half up, the same
    rule as the SQL engines' ``FLOOR(v * 2^k + 0.5)``; ``grid`` is a power of two, so ``v / grid``
    is exact)."""
    return np.floor(values / grid + 0.5)


def grid_sums_all(queries: Sequence[Query], t: EncodedTable) -> list[np.ndarray]:
    """What the measurement engines answer: per query, the sum over records of
    ``round(v(x) / grid)`` with :func:`dpql.ir.queries.query_grid` (whole numbers, float64). For
    integer-valued queries this is :func:`sums_all`; real-valued ones are rounded per record
    before summing, so a record moves a sum by at most its sensitivity in grid steps."""
    out = sums_all([q for q in queries if query_grid(q) == 1.0], t)
    integer = iter(out)
    result = []
    for q in queries:
        grid = query_grid(q)
        if grid == 1.0:
            result.append(next(integer))
            continue
        total = 0.0
        for s in range(0, t.n, ROW_CHUNK):
            total += float(to_grid(per_row(q, t.slice(s, s + ROW_CHUNK))[:, 0], grid).sum())
        result.append(np.array([total]))
    return result
