"""Readable one-line descriptions of queries and predicates (``u(x)`` is ``x`` on its public
[0, 1] scale): what ``dpql plan``, the provenance record and the curator's report print."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpql.domain import CategoricalColumn, Domain, NumericColumn
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
    query_columns,
)


def _unscaled(domain: Domain, column: str, u: float) -> str:
    """A [0, 1]-scale threshold of a numeric column, back in original units."""
    col = domain[column]
    assert isinstance(col, NumericColumn)  # the resolver only thresholds numeric columns
    return f"{col.unscale(u):.6g}"


def _is_null(p: CatIn, domain: Domain) -> bool:
    """Whether ``p`` is ``column is missing`` (the null code of a ``missing: keep`` column)."""
    col = domain[p.column]
    return col.nullable and p.codes == frozenset({col.null_code})


def _describe_true(p: TruePred, domain: Domain) -> str:
    return "true"


def _describe_num_cmp(p: NumCmp, domain: Domain) -> str:
    return f"{p.column} {p.op} {_unscaled(domain, p.column, p.threshold)}"


def _describe_cat_in(p: CatIn, domain: Domain) -> str:
    if _is_null(p, domain):
        return f"{p.column} is missing"
    cat = domain[p.column]
    assert isinstance(cat, CategoricalColumn)
    # the null category of a nullable (missing: keep) column has no value to quote
    names = [f'"{cat.values[c]}"' if c < len(cat.values) else "<missing>" for c in sorted(p.codes)]
    if len(names) == 1:
        return f"{p.column} == {names[0]}"
    return f"{p.column} in {{{', '.join(names)}}}"


def _describe_not(p: Not, domain: Domain) -> str:
    if isinstance(p.item, CatIn) and _is_null(p.item, domain):
        return f"{p.item.column} is present"
    return f"not ({describe_pred(p.item, domain)})"


def _joined(joiner: str) -> Callable[[And | Or, Domain], str]:
    """A conjunction's or disjunction's text: its items joined, nested ones parenthesised."""

    def describe(p: And | Or, domain: Domain) -> str:
        return joiner.join(
            f"({describe_pred(i, domain)})" if isinstance(i, And | Or) else describe_pred(i, domain)
            for i in p.items
        )

    return describe


PRED_TEXT: dict[type, Callable[[Any, Domain], str]] = {
    TruePred: _describe_true,
    NumCmp: _describe_num_cmp,
    CatIn: _describe_cat_in,
    Not: _describe_not,
    And: _joined(" and "),
    Or: _joined(" or "),
}
"""The describer's predicate table: node class -> DSL-like text."""


def describe_pred(p: Pred, domain: Domain) -> str:
    """DSL-like text of a resolved predicate, thresholds back in original units."""
    return dispatch(PRED_TEXT, p)(p, domain)


def _describe_factor(f: Factor, domain: Domain) -> str:
    column, code = f
    if code is None:
        return f"u({column})"
    return f"1{{{describe_pred(CatIn(column, frozenset({code})), domain)}}}"


def _given(p: Pred, domain: Domain) -> str:
    """`` | condition`` of a conditional mean, empty when it always holds."""
    return "" if isinstance(p, TruePred) else f" | {describe_pred(p, domain)}"


def _by(q: Prefix | Halfspace) -> str:
    return f" by {q.by}" if q.by else ""


def _describe_marginal(q: Marginal, domain: Domain) -> str:
    return f"marginal({', '.join(q.columns)})"


def _describe_prefix(q: Prefix, domain: Domain) -> str:
    pairs = zip(q.columns, q.thresholds, strict=True)
    parts = [f"{c} <= {_unscaled(domain, c, t)}" for c, t in pairs]
    return f"range({', '.join(parts)}){_by(q)}"


def _describe_halfspace(q: Halfspace, domain: Domain) -> str:
    terms = " + ".join(f"{w:.3g}*u({c})" for w, c in zip(q.theta, q.columns, strict=True))
    return f"halfspace({terms} > {q.tau:.3g}){_by(q)}"


def _describe_count(q: Count, domain: Domain) -> str:
    return f"count({describe_pred(q.predicate, domain)})"


def _describe_moment(q: Moment, domain: Domain) -> str:
    prod = "*".join(f"u({c})" for c in q.columns) or "1"
    if q.centre is not None:
        prod = f"({prod} - {q.centre:.6g})"
    return f"mean({prod}{_given(q.given, domain)})"


def _describe_centred(q: CentredProduct, domain: Domain) -> str:
    left, right = (_describe_factor(f, domain) for f in (q.left, q.right))
    c, d = ("1/2" if x == 0.5 else f"{x:.6g}" for x in q.centres)
    return f"mean(({left} - {c})*({right} - {d}){_given(q.given, domain)})"


def _describe_model(q: ModelAccuracy, domain: Domain) -> str:
    return f"{q.kind}({', '.join(query_columns(q))})"


QUERY_TEXT: dict[type, Callable[[Any, Domain], str]] = {
    Marginal: _describe_marginal,
    Prefix: _describe_prefix,
    Halfspace: _describe_halfspace,
    Count: _describe_count,
    Moment: _describe_moment,
    CentredProduct: _describe_centred,
    ModelAccuracy: _describe_model,
}
"""The describer's query table: node class -> one-line text."""


def describe_query(q: Query, domain: Domain) -> str:
    """A readable one-line description of a query (``u(x)`` is ``x`` on its [0, 1] scale)."""
    return dispatch(QUERY_TEXT, q)(q, domain)
