"""Readable one-line descriptions of queries and predicates (``u(x)`` is ``x`` on its public
[0, 1] scale): what ``dpql plan``, the provenance record and the curator's report print."""

from __future__ import annotations

from dpql.domain import CategoricalColumn, Domain, NumericColumn
from dpql.ir.queries import (
    And,
    CatIn,
    CentredProduct,
    Count,
    Factor,
    Halfspace,
    Marginal,
    Moment,
    Not,
    NumCmp,
    Or,
    Pred,
    Prefix,
    Query,
    TruePred,
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


def describe_pred(p: Pred, domain: Domain) -> str:
    """DSL-like text of a resolved predicate, thresholds back in original units."""
    if isinstance(p, TruePred):
        return "true"
    if isinstance(p, NumCmp):
        return f"{p.column} {p.op} {_unscaled(domain, p.column, p.threshold)}"
    if isinstance(p, Not) and isinstance(p.item, CatIn) and _is_null(p.item, domain):
        return f"{p.item.column} is present"
    if isinstance(p, CatIn) and _is_null(p, domain):
        return f"{p.column} is missing"
    if isinstance(p, CatIn):
        cat = domain[p.column]
        assert isinstance(cat, CategoricalColumn)
        # the null category of a nullable (missing: keep) column has no value to quote
        names = [
            f'"{cat.values[c]}"' if c < len(cat.values) else "<missing>" for c in sorted(p.codes)
        ]
        if len(names) == 1:
            return f"{p.column} == {names[0]}"
        return f"{p.column} in {{{', '.join(names)}}}"
    if isinstance(p, Not):
        return f"not ({describe_pred(p.item, domain)})"
    joiner = " and " if isinstance(p, And) else " or "
    assert isinstance(p, And | Or)
    return joiner.join(
        f"({describe_pred(i, domain)})" if isinstance(i, And | Or) else describe_pred(i, domain)
        for i in p.items
    )


def _describe_factor(f: Factor, domain: Domain) -> str:
    column, code = f
    if code is None:
        return f"u({column})"
    return f"1{{{describe_pred(CatIn(column, frozenset({code})), domain)}}}"


def describe_query(q: Query, domain: Domain) -> str:
    """A readable one-line description of a query (``u(x)`` is ``x`` on its [0, 1] scale)."""
    by = f" by {q.by}" if isinstance(q, Prefix | Halfspace) and q.by else ""
    if isinstance(q, Marginal):
        return f"marginal({', '.join(q.columns)})"
    if isinstance(q, Prefix):
        pairs = zip(q.columns, q.thresholds, strict=True)
        parts = [f"{c} <= {_unscaled(domain, c, t)}" for c, t in pairs]
        return f"range({', '.join(parts)}){by}"
    if isinstance(q, Halfspace):
        terms = " + ".join(f"{w:.3g}*u({c})" for w, c in zip(q.theta, q.columns, strict=True))
        return f"halfspace({terms} > {q.tau:.3g}){by}"
    if isinstance(q, Count):
        return f"count({describe_pred(q.predicate, domain)})"
    if isinstance(q, CentredProduct):
        left, right = (_describe_factor(f, domain) for f in (q.left, q.right))
        c, d = ("1/2" if x == 0.5 else f"{x:.6g}" for x in q.centres)
        given = "" if isinstance(q.given, TruePred) else f" | {describe_pred(q.given, domain)}"
        return f"mean(({left} - {c})*({right} - {d}){given})"
    if not isinstance(q, Moment):  # a query class added after this function was written
        return f"{q.kind}({', '.join(query_columns(q))})"
    given = "" if isinstance(q.given, TruePred) else f" | {describe_pred(q.given, domain)}"
    prod = "*".join(f"u({c})" for c in q.columns) or "1"
    if q.centre is not None:
        prod = f"({prod} - {q.centre:.6g})"
    return f"mean({prod}{given})"
