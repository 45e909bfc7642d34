"""The query IR as SQL over the SQL engines' relations (:mod:`dpql.data.sql`): ``cube`` (the
distinct kept code tuples and their counts ``w``) for marginals, ``enc`` (the kept rows' codes
``c{i}`` and scaled values ``u{i}``) for every other query.

Pure string building, shared by DuckDB and Spark. Every statement returns exact sums on the
query's public grid (:func:`dpql.ir.queries.query_grid`): counts for integer-valued queries,
``SUM(FLOOR(v * 2^k + 1/2))`` for real-valued ones, the per-record rounding of
:func:`dpql.ir.exact.to_grid`, so every engine gives the numpy evaluator's sums.

Several aggregates batched into one statement read ``enc`` through its distinct tuples of the
columns they use, with their multiplicities ``w`` (:func:`query_sql`): each aggregate is then
evaluated once per distinct tuple instead of once per row (a halfspace reads four numeric
columns and a label, which take far fewer distinct values than there are rows), and a record's
contribution times ``w`` is the same whole number of grid steps summed ``w`` times.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dpql.data.sql import double
from dpql.domain import Domain, NumericColumn
from dpql.ir.queries import (
    REAL_GRID,
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
)

AGGREGATES_PER_SELECT = 200  # keeps statements short; one scan of ``enc`` each
# the per-record weight of a batched aggregate: 1 over ``enc``, ``w`` over its distinct tuples
WEIGHT = "{weight}"


def _true_sql(p: TruePred, domain: Domain) -> str:
    return "TRUE"


def _num_cmp_sql(p: NumCmp, domain: Domain) -> str:
    return f"u{domain.names.index(p.column)} {p.op} {double(p.threshold)}"


def _cat_in_sql(p: CatIn, domain: Domain) -> str:
    if not p.codes:
        return "FALSE"
    codes = ", ".join(str(c) for c in sorted(p.codes))
    return f"c{domain.names.index(p.column)} IN ({codes})"


def _joined_sql(op: str, empty: str) -> Callable[[And | Or, Domain], str]:
    """A conjunction's or disjunction's condition: its items joined by ``op`` (``empty`` when it
    has none, the identity of ``op``)."""

    def condition(p: And | Or, domain: Domain) -> str:
        if not p.items:
            return empty
        return "(" + f" {op} ".join(pred_sql(i, domain) for i in p.items) + ")"

    return condition


def _not_sql(p: Not, domain: Domain) -> str:
    return f"(NOT {pred_sql(p.item, domain)})"


PRED_SQL: dict[type, Callable[[Any, Domain], str]] = {
    TruePred: _true_sql,
    NumCmp: _num_cmp_sql,
    CatIn: _cat_in_sql,
    And: _joined_sql("AND", "TRUE"),
    Or: _joined_sql("OR", "FALSE"),
    Not: _not_sql,
}
"""The SQL evaluator's predicate table: node class -> condition over ``enc``'s columns."""


def pred_sql(p: Pred, domain: Domain) -> str:
    """An SQL condition over ``enc`` (``c{i}`` codes, ``u{i}`` scaled values) that holds on
    exactly the rows satisfying ``p``."""
    return dispatch(PRED_SQL, p)(p, domain)


@dataclass(frozen=True)
class MarginalSQL:
    """``SELECT cell, count``: cells in row-major order of the columns' codes."""

    index: int
    cells: int
    sql: str


@dataclass(frozen=True)
class AggregateSQL:
    """One scan for several scalar sums, split by the codes of ``by`` when it is set: rows
    ``(by code, sum_1, ..., sum_m)`` or one row ``(sum_1, ..., sum_m)``."""

    indices: tuple[int, ...]
    by_card: int | None
    sql: str


def marginal_sql(index: int, q: Marginal, domain: Domain) -> MarginalSQL:
    """One GROUP BY on the row-major cell index over the kept tuples of ``cube``."""
    if not q.columns:
        return MarginalSQL(index, 1, "SELECT 0, SUM(w) FROM cube WHERE keep")
    key, stride = [], 1
    for name in reversed(q.columns):
        key.append(f"CAST(c{domain.names.index(name)} AS BIGINT) * {stride}")
        stride *= domain.card(name)
    return MarginalSQL(
        index, stride, f"SELECT {' + '.join(key)}, SUM(w) FROM cube WHERE keep GROUP BY 1"
    )


def _factor_sql(f: Factor, domain: Domain) -> str:
    """A factor's per-record value: the scaled column, or the indicator of its code."""
    column, code = f
    i = domain.names.index(column)
    if code is None:
        return f"u{i}"
    return f"CASE WHEN c{i} = {code} THEN {double(1.0)} ELSE {double(0.0)} END"


@dataclass(frozen=True)
class BatchedSum:
    """One aggregate over ``enc`` (``SUM(...)``), batched with the others split by the codes of
    the same ``by`` column (None: not split) into one scan."""

    expr: str
    by: str | None


def _count_sum(cond: str) -> str:
    return f"SUM(CASE WHEN {cond} THEN {WEIGHT} ELSE 0 END)"


def _prefix_sql(index: int, q: Prefix, domain: Domain) -> BatchedSum:
    pairs = zip(q.columns, q.thresholds, strict=True)
    cond = " AND ".join(f"u{domain.names.index(c)} <= {double(t)}" for c, t in pairs)
    return BatchedSum(_count_sum(cond or "TRUE"), q.by)


def _halfspace_sql(index: int, q: Halfspace, domain: Domain) -> BatchedSum:
    dot = " + ".join(
        f"{double(w)} * u{domain.names.index(c)}" for c, w in zip(q.columns, q.theta, strict=True)
    )
    return BatchedSum(_count_sum(f"{dot} > {double(q.tau)}"), q.by)


def _count_sql(index: int, q: Count, domain: Domain) -> BatchedSum:
    return BatchedSum(_count_sum(pred_sql(q.predicate, domain)), None)


def _moment_sql(index: int, q: Moment, domain: Domain) -> BatchedSum:
    if not q.columns:
        return BatchedSum(_count_sum(pred_sql(q.given, domain)), None)
    prod = " * ".join(f"u{domain.names.index(c)}" for c in q.columns)
    if q.centre is not None:
        prod = f"({prod} - {double(q.centre)})"
    value = f"CASE WHEN {pred_sql(q.given, domain)} THEN {prod} ELSE 0.0 END"
    return BatchedSum(_grid_sum(value), None)


def _centred_sql(index: int, q: CentredProduct, domain: Domain) -> BatchedSum:
    left, right = (_factor_sql(f, domain) for f in (q.left, q.right))
    c, d = (double(x) for x in q.centres)
    value = f"({left} - {c}) * ({right} - {d})"
    if not isinstance(q.given, TruePred):
        value = f"CASE WHEN {pred_sql(q.given, domain)} THEN {value} ELSE 0.0 END"
    return BatchedSum(_grid_sum(value), None)


def _model_sql(index: int, q: ModelAccuracy, domain: Domain) -> AggregateSQL:
    return AggregateSQL((index,), None, model_accuracy_sql(q, domain))


def _grid_sum(value: str, weight: str = WEIGHT) -> str:
    """``SUM(round(v / 2^-k) * weight)`` of a real per-record value on the public grid of
    :data:`dpql.ir.queries.REAL_GRID`, rounded half up per record like
    :func:`dpql.ir.exact.to_grid` (the scaling by a power of two is exact; so are the products
    by a whole-number weight and their sums, whole numbers far below 2^53)."""
    return f"SUM(FLOOR(({value}) * {double(1.0 / REAL_GRID)} + {double(0.5)}) * {weight})"


def _linear_score(
    coef: Sequence[float], intercept: float, features: Sequence[str], d: Domain
) -> str:
    """``coef . z(x) + intercept`` for the design row ``z`` of :func:`dpql.ir.exact.design_matrix`
    (per feature the scaled value, or one-hot indicators of every value of a categorical one),
    summed left to right as the matrix product does; a one-hot block contributes the weight of
    the row's value (the others multiply 0)."""
    terms, j = [], 0
    for f in features:
        col = d[f]
        i = d.names.index(f)
        if isinstance(col, NumericColumn):
            terms.append(f"{double(coef[j])} * u{i}")
            j += 1
        else:
            arms = " ".join(f"WHEN {v} THEN {double(coef[j + v])}" for v in range(col.card))
            terms.append(f"(CASE c{i} {arms} END)")
            j += col.card
    if j != len(coef):
        raise ValueError(f"model has {len(coef)} coefficients, its design row {j}")
    return f"({' + '.join(terms or [double(0.0)])}) + {double(intercept)}"


def model_accuracy_sql(q: ModelAccuracy, domain: Domain) -> str:
    """``SELECT SUM(score) FROM enc``: the per-record score of
    :func:`dpql.ir.exact.model_scores` in SQL. Logistic: 1 when the first class of largest
    ``coef[c] . z + intercept[c]`` (``np.argmax`` order) is the label's code; linear:
    ``(u(label) - clip(coef[0] . z + intercept[0], 0, 1))**2``."""
    scores = [
        _linear_score(w, b, q.features, domain) for w, b in zip(q.coef, q.intercept, strict=True)
    ]
    y = domain.names.index(q.label)
    # the rows outside ``given`` score 0: they are left out of the sum
    enc = "enc" if isinstance(q.given, TruePred) else f"enc WHERE {pred_sql(q.given, domain)}"
    if q.model == "linear":
        clip = f"LEAST(GREATEST({scores[0]}, {double(0.0)}), {double(1.0)})"
        errors = f"(SELECT u{y} - {clip} AS e FROM {enc}) AS err"
        return f"SELECT COALESCE({_grid_sum('e * e', '1')}, 0) FROM {errors}"
    items = ", ".join(f"{s} AS s{c}" for c, s in enumerate(scores))
    if len(scores) == 1:
        best = "0"
    else:
        arms = " ".join(f"WHEN s{c} = m THEN {c}" for c in range(len(scores)))
        best = f"CASE {arms} END"
    top = "GREATEST(" + ", ".join(f"s{c}" for c in range(len(scores))) + ")"
    return (
        f"SELECT COALESCE(SUM(CASE WHEN y = {best} THEN 1 ELSE 0 END), 0) FROM (SELECT y, "
        f"{', '.join(f's{c}' for c in range(len(scores)))}, {top} AS m FROM "
        f"(SELECT c{y} AS y, {items} FROM {enc}) AS scored) AS ranked"
    )


QUERY_SQL: dict[type, Callable[[int, Any, Domain], MarginalSQL | AggregateSQL | BatchedSum]] = {
    Marginal: marginal_sql,
    Prefix: _prefix_sql,
    Halfspace: _halfspace_sql,
    Count: _count_sql,
    Moment: _moment_sql,
    CentredProduct: _centred_sql,
    ModelAccuracy: _model_sql,
}
"""The SQL evaluator's query table: node class -> ``handler(index, query, domain)``, a statement
of its own or a :class:`BatchedSum` that :func:`query_sql` batches with others."""


_ENC_COLUMN = re.compile(r"\b[cu][0-9]+\b")


def _batched(sums: Sequence[str], by: str | None) -> str:
    """One SELECT of the aggregates ``sums`` (split by the ``enc`` column ``by`` when set).
    A single aggregate scans ``enc``; several scan its distinct tuples of the columns they
    read (``c{i}``/``u{i}``, the only identifiers this module writes besides SQL keywords and
    quoted literals), each aggregate weighted by the tuple's multiplicity ``w``."""
    key = [by] if by else []
    if len(sums) == 1:
        source, weight = "enc", "1"
    else:
        used = sorted(set(_ENC_COLUMN.findall(" ".join(sums))) | set(key))
        group = ", ".join(used)
        source = (
            f"(SELECT {group}, COUNT(*) AS w FROM enc GROUP BY {group}) AS weighted"
            if used
            else "(SELECT COUNT(*) AS w FROM enc) AS weighted"
        )
        weight = "w"
    select = ", ".join([*key, *(e.replace(WEIGHT, weight) for e in sums)])
    return f"SELECT {select} FROM {source}" + (f" GROUP BY {by}" if by else "")


def query_sql(queries: Sequence[Query], domain: Domain) -> list[MarginalSQL | AggregateSQL]:
    """Statements answering ``queries`` (exact sums): one GROUP BY per marginal and one statement
    per model score, the others batched per ``by`` column, at most
    :data:`AGGREGATES_PER_SELECT` sums per statement (over ``enc``'s distinct tuples of the
    columns they read when there are several: :func:`_batched`)."""
    out: list[MarginalSQL | AggregateSQL] = []
    groups: dict[str | None, list[tuple[int, str]]] = {}
    for i, q in enumerate(queries):
        stmt = dispatch(QUERY_SQL, q)(i, q, domain)
        if isinstance(stmt, BatchedSum):
            groups.setdefault(stmt.by, []).append((i, stmt.expr))
        else:
            out.append(stmt)
    for by, items in groups.items():
        c = None if by is None else f"c{domain.names.index(by)}"
        for s in range(0, len(items), AGGREGATES_PER_SELECT):
            part = items[s : s + AGGREGATES_PER_SELECT]
            indices = tuple(i for i, _ in part)
            sql = _batched([e for _, e in part], c)
            out.append(AggregateSQL(indices, None if by is None else domain.card(by), sql))
    return out
