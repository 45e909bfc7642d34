"""Semantic resolution: DSL trees + the public :class:`Domain` -> typed query IR and requirements.

This pass reads the spec only, never data (DESIGN invariant 1). It checks every column, type
and value against the schema and reports *all* problems of a spec at once, with positions in the
spec file (codes E3xx/W3xx, table in spec/language.md):

* E301 unknown column (with "did you mean")   * E307 ``k`` out of range for ``marginals(k)``
* E302 column of the wrong type               * E308 logistic label without exactly 2 values
* E303 comparison invalid for the column type * E309 a count (``n``, ``thresholds``) below 1
* E304 value not in the column's domain       * E310 an item expands to too many queries
* E305 marginal with too many cells           * E311 metric unknown for the requirement
* E306 column repeated in one construct       * E312 tolerance not positive
* E313 requirement weight not positive        * E314 weights on some requirements only
* E315 the whole workload expands to too many queries or cells (limits below)
* W301 (warning) threshold outside the column's ``[min, max]``: values are clipped to the
  bounds, so the comparison is constant on the declared domain
* W302 (warning) marginal with more cells than the table has rows (noise-dominated cells)

Columns and predicates (E301-E304, E306, W301) are resolved by :mod:`dpql.plan.resolve_predicates`,
shared by workload items and requirements.

Random query families (``range``, ``halfspaces``) are drawn with a numpy Generator seeded from
the *public* plan seed and the item's canonical text. That randomness is not DP noise: it is
public and the plan records the resulting queries. Hashing the item text keeps an item's queries
the same when other items are added or reordered.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

from dpql.diagnostics import DiagnosticSink, SourcePos, did_you_mean
from dpql.domain import CategoricalColumn, Domain, NumericColumn
from dpql.ir.queries import (
    CorrRequirement,
    Count,
    CountRequirement,
    Halfspace,
    Marginal,
    MeanRequirement,
    ModelRequirement,
    Moment,
    Prefix,
    Query,
    Requirement,
    Tolerance,
    TruePred,
)
from dpql.lang import ast as A
from dpql.plan.resolve_predicates import (
    Scope,
    column_names,
    lookup_column,
    resolve_given,
    resolve_predicate,
    schema_order,
)

#: Largest number of cells of one marginal (a dense float64 answer of 8 MB).
MAX_MARGINAL_CELLS = 1_000_000
#: Largest number of queries one workload item may expand to.
MAX_QUERIES_PER_ITEM = 1_000_000
#: Largest number of queries (after deduplication: counted before it, an upper bound) and of
#: answer cells of the whole workload; checked item by item before an item is expanded, so
#: planning never holds much more than the limit (spec/language.md §9).
MAX_TOTAL_QUERIES = 1_000_000
MAX_TOTAL_CELLS = 100_000_000
#: Number of random prefix points of ``range(...)`` without ``thresholds``.
DEFAULT_RANGE_THRESHOLDS = 64
#: Metrics a bound such as ``accuracy >= 0.8`` may name, per model requirement.
MODEL_METRICS: dict[str, tuple[str, ...]] = {
    "logistic": ("accuracy", "f1", "auc"),
    "linear": ("r2", "rmse"),
}

@dataclass(frozen=True)
class ResolvedWorkload:
    """The workload's distinct queries in first-appearance order; ``items[i]`` is the index of
    the workload item that first produced ``queries[i]``."""

    queries: tuple[Query, ...]
    items: tuple[int, ...]


# --------------------------------------------------------------------------------------------
# Workload items


def _item_rng(seed: int, node: A.WorkloadNode) -> np.random.Generator:
    """Public generator of one item's random queries: seeded by the plan seed and the item."""
    digest = hashlib.sha256(A.to_dsl(node).encode("utf-8")).digest()
    return np.random.default_rng([seed, *np.frombuffer(digest[:16], dtype=np.uint32).tolist()])


def _count_ok(s: Scope, node: A.WorkloadNode, count: int, what: str) -> bool:
    if count < 1:
        s.error("E309", f"{what} must be at least 1, not {count}", node)
        return False
    if count > MAX_QUERIES_PER_ITEM:
        s.error(
            "E310",
            f"{A.to_dsl(node)} expands to {count:,} queries (limit {MAX_QUERIES_PER_ITEM:,})",
            node,
            "ask for fewer queries or fewer columns",
        )
        return False
    return True


#: A categorical column with more values than this gets a hint to group them (E305, W302).
LARGE_CATEGORICAL = 1_000


def _marginal_hint(s: Scope, m: Marginal) -> str:
    """How to shrink marginal ``m``: coarser bins only when it has numeric columns."""
    nums = [c for c in m.columns if isinstance(s.domain[c], NumericColumn)]
    if nums:
        listed = ", ".join(f"'{c}'" for c in nums)
        return f"declare coarser `bins:`/`edges:` for {listed}, or use fewer columns"
    widest = max(m.columns, key=lambda c: s.domain[c].card)
    return (
        f"use fewer columns, or group the values of '{widest}' "
        f"({s.domain[widest].card:,} categories) with a public `group: {{file: ...}}`"
    )


def _sized(s: Scope, node: A.WorkloadNode, marginals: list[Marginal], n: int) -> list[Query]:
    """``marginals`` unless one has more than MAX_MARGINAL_CELLS cells (E305)."""
    cells = [m.cells(s.domain) for m in marginals]
    too_big = [c for c in cells if c > MAX_MARGINAL_CELLS]
    hint = (
        _marginal_hint(s, marginals[max(range(len(cells)), key=cells.__getitem__)])
        if marginals
        else "use fewer columns"
    )
    large = sorted(
        {
            c
            for m in marginals
            for c in m.columns
            if isinstance(col := s.domain[c], CategoricalColumn) and col.card > LARGE_CATEGORICAL
        },
        key=lambda c: -s.domain[c].card,
    )
    if large:  # a large categorical column: the fix is a public grouping of its values
        hint = (
            f"group the values of '{large[0]}' ({s.domain[large[0]].card:,} categories) with a "
            "public `group: {file: ...}` so marginals use the groups (spec/language.md §10), "
            "or use fewer columns"
        )
    if too_big:
        big = max(range(len(cells)), key=cells.__getitem__)
        largest = A.to_dsl(A.Marginal(tuple(A.Column(c) for c in marginals[big].columns)))
        s.error(
            "E305",
            f"{len(too_big)} of the {len(cells)} marginals of {A.to_dsl(node)} have more than "
            f"{MAX_MARGINAL_CELLS:,} cells; the largest, {largest}, has {cells[big]:,}",
            node,
            hint,
        )
        return []
    sparse = sum(c > n for c in cells)
    if sparse:
        s.warning(
            "W302",
            f"{sparse} of the {len(cells)} marginals of {A.to_dsl(node)} have more cells than "
            f"the table has rows ({n:,}): most cells will be noise",
            node,
            hint,
        )
    return list(marginals)


def _all_marginals(s: Scope, node: A.AllMarginals, n: int) -> list[Query]:
    names = s.domain.names if node.over is None else column_names(s, node.over, "marginals")
    if names is None:
        return []
    names = schema_order(s.domain, names)
    if not 1 <= node.k <= len(names):
        s.error(
            "E307",
            f"marginals({node.k}) over {len(names)} columns: k must be between 1 and {len(names)}",
            node,
        )
        return []
    if not _count_ok(s, node, math.comb(len(names), node.k), "the number of marginals"):
        return []
    return _sized(s, node, [Marginal(c) for c in combinations(names, node.k)], n)


def _marginal(s: Scope, node: A.Marginal, n: int) -> list[Query]:
    names = column_names(s, node.columns, "marginal")
    return [] if names is None else _sized(s, node, [Marginal(schema_order(s.domain, names))], n)


def _label(s: Scope, by: A.Column, construct: str) -> str | None:
    """The categorical ``by`` column of a construct (its other columns are numeric)."""
    col = lookup_column(s, by, f"the label of {construct}", "categorical")
    return None if col is None else col.name


def _range(s: Scope, node: A.Range, seed: int) -> list[Query]:
    """``m`` prefix queries; each threshold vector is uniform on [0, 1]^k (public randomness)."""
    cols = column_names(s, node.columns, "range", "numeric")
    by = _label(s, node.by, "range") if node.by is not None else None
    m = DEFAULT_RANGE_THRESHOLDS if node.thresholds is None else node.thresholds
    if not _count_ok(s, node, m, "thresholds") or cols is None or (node.by and by is None):
        return []
    points = _item_rng(seed, node).random((m, len(cols)))
    return [Prefix(cols, tuple(p), by) for p in points.tolist()]  # tolist: Python floats


def _halfspaces(s: Scope, node: A.Halfspaces, seed: int) -> list[Query]:
    """``m`` random class-conditional halfspaces (Vietri et al. 2022, §5.1, Definition 4).

    ``theta ~ N(0, I_r) / sqrt(r)`` as in the paper and its code. The paper's ``tau ~ N(0, 1)``
    assumes standardised features; on [0, 1]-scaled data many such halfspaces miss the unit
    cube and are constant. We draw ``tau = <theta, p>`` for ``p`` uniform on
    [0, 1]^r instead, so every hyperplane passes through the cube and splits the data domain.
    """
    if node.over is None:
        cols = tuple(c.name for c in s.domain.numeric)
        if not cols:
            s.error("E302", "halfspaces needs numeric columns; the schema has none", node)
    else:
        cols = column_names(s, node.over, "halfspaces", "numeric")
    by = _label(s, node.by, "halfspaces")
    if not _count_ok(s, node, node.n, "the number of halfspaces") or not cols or by is None:
        return []
    rng = _item_rng(seed, node)
    r = len(cols)
    theta = rng.standard_normal((node.n, r)) / math.sqrt(r)
    tau = np.einsum("ij,ij->i", theta, rng.random((node.n, r)))
    return [
        Halfspace(cols, tuple(th), t, by)  # tolist: Python floats, the same values
        for th, t in zip(theta.tolist(), tau.tolist(), strict=True)
    ]


def _count(s: Scope, node: A.CountOf) -> list[Query]:
    p = resolve_predicate(s, node.predicate)
    return [] if p is None else [Count(p)]


def _mean(s: Scope, node: A.MeanOf) -> list[Query]:
    """``Moment((col,), given)``, plus ``Count(given)`` when conditional, so that the
    conditional mean (their ratio) is determined by the measured answers."""
    col = lookup_column(s, node.column, "mean", "numeric")
    given = resolve_given(s, node.given)
    if col is None or given is None:
        return []
    moment = Moment((col.name,), given)
    return [moment] if isinstance(given, TruePred) else [moment, Count(given)]


def _expand(s: Scope, node: A.WorkloadNode, n: int, seed: int) -> list[Query]:
    if isinstance(node, A.AllMarginals):
        return _all_marginals(s, node, n)
    if isinstance(node, A.Marginal):
        return _marginal(s, node, n)
    if isinstance(node, A.Range):
        return _range(s, node, seed)
    if isinstance(node, A.Halfspaces):
        return _halfspaces(s, node, seed)
    if isinstance(node, A.CountOf):
        return _count(s, node)
    return _mean(s, node)


def _origin(origins: Sequence[SourcePos | None] | None, i: int) -> SourcePos | None:
    return origins[i] if origins is not None else None


def resolve_workload(
    nodes: Sequence[A.WorkloadNode],
    domain: Domain,
    n: int,
    seed: int,
    origins: Sequence[SourcePos | None] | None = None,
    sink: DiagnosticSink | None = None,
) -> ResolvedWorkload:
    """Expand workload items into distinct IR queries (first appearance wins).

    ``n`` is the public row count (for W302), ``seed`` the public, non-negative plan seed of the
    random families, ``origins[i]`` the spec-file position of item i's first character. Raises
    DiagnosticError with every diagnostic if any is an error; warnings are left in ``sink``
    when one is passed (pass the planner's sink to surface them).
    """
    sink = DiagnosticSink() if sink is None else sink
    first_item: dict[Query, int] = {}
    queries = cells = 0
    cards = {c.name: c.card for c in domain}
    for i, node in enumerate(nodes):
        scope = Scope(domain, _origin(origins, i), sink)
        planned = _planned_queries(node, domain)
        if planned <= MAX_QUERIES_PER_ITEM and queries + planned > MAX_TOTAL_QUERIES:
            _too_much(scope, node, f"{queries + planned:,} queries", f"{MAX_TOTAL_QUERIES:,}")
            break
        expanded = _expand(scope, node, n, seed)
        queries += len(expanded)
        cells += sum(query_cells(q, cards) for q in expanded)
        if cells > MAX_TOTAL_CELLS:
            _too_much(scope, node, f"{cells:,} answer cells", f"{MAX_TOTAL_CELLS:,}")
            break
        for q in expanded:
            first_item.setdefault(q, i)
    sink.raise_if_errors()
    return ResolvedWorkload(tuple(first_item), tuple(first_item.values()))


def query_cells(q: Query, cards: dict[str, int]) -> int:
    """``q.cells(domain)`` from a name -> card map (a domain lookup is linear in the columns)."""
    if isinstance(q, Marginal):
        return math.prod(cards[c] for c in q.columns)
    by = getattr(q, "by", None)
    return cards[by] if by else 1


def _planned_queries(node: A.WorkloadNode, domain: Domain) -> int:
    """How many queries ``node`` expands to (before deduplication), without expanding it."""
    if isinstance(node, A.AllMarginals):
        m = len(domain.names) if node.over is None else len(node.over)
        return math.comb(m, node.k) if 0 <= node.k <= m else 0
    if isinstance(node, A.Range):
        return DEFAULT_RANGE_THRESHOLDS if node.thresholds is None else max(node.thresholds, 0)
    if isinstance(node, A.Halfspaces):
        return max(node.n, 0)
    return 2 if isinstance(node, A.MeanOf) else 1


def _too_much(s: Scope, node: A.WorkloadNode, what: str, limit: str) -> None:
    s.error(
        "E315",
        f"the workload up to this item expands to {what} (limit {limit} for the whole workload)",
        node,
        "ask for fewer queries (marginals over fewer columns, fewer range thresholds or "
        "halfspaces), or split the release",
    )


# --------------------------------------------------------------------------------------------
# Requirements


def _tolerance(s: Scope, t: A.Within | A.MetricBound, kind: str) -> Tolerance | None:
    if isinstance(t, A.Within):
        if t.value <= 0:
            s.error("E312", f"tolerance must be positive, not {A.number_text(t.value)}", t)
            return None
        return Tolerance(within=t.value)
    metrics = MODEL_METRICS.get(kind, ())
    if t.metric in metrics:
        return Tolerance(metric=t.metric, op=t.op, bound=t.value)
    if metrics:
        hint = did_you_mean(t.metric, metrics) or f"{kind} metrics are: {', '.join(metrics)}"
        s.error("E311", f"unknown metric '{t.metric}' for a {kind} requirement", t, hint)
    else:
        hint = f"state a {kind} requirement as `within t`"
        s.error("E311", f"a {kind} requirement takes no metric bound", t, hint)
    return None


def _two_valued_hint(s: Scope) -> str:
    """The schema's two-valued categorical columns, which logistic can predict."""
    names = [c.name for c in s.domain.categorical if len(c.values) == 2]
    if not names:
        return "no categorical column of the schema has 2 values"
    return "two-valued columns: " + ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")


def _model(s: Scope, m: A.Model, tol: Tolerance | None, text: str) -> Requirement | None:
    if m.kind == "logistic":
        label = lookup_column(s, m.label, "the label of logistic", "categorical")
        # the values, not the null state of a missing: keep label (a model is fitted and
        # tested on the rows where its columns are present)
        if isinstance(label, CategoricalColumn) and len(label.values) != 2:
            s.error(
                "E308",
                f"the label of logistic must have exactly 2 values; '{label.name}' has "
                f"{len(label.values)}",
                m.label,
                _two_valued_hint(s),
            )
            label = None
    else:
        label = lookup_column(s, m.label, "the label of linear", "numeric")
    features = column_names(s, (m.label, *m.features), f"{m.kind}(...)")
    if label is None or features is None or tol is None:
        return None
    return ModelRequirement(m.kind, label.name, features[1:], tol, text)


def _kind(target: A.Model | A.Corr | A.MeanOf | A.CountOf) -> str:
    if isinstance(target, A.Model):
        return target.kind
    return {A.Corr: "corr", A.MeanOf: "mean", A.CountOf: "count"}[type(target)]


def _requirement(s: Scope, node: A.Requirement) -> Requirement | None:
    req = _requirement_target(s, node)
    if req is None or node.weight is None:
        return req
    w = node.weight.value
    if not (w > 0 and math.isfinite(w)):
        s.error("E313", f"weight must be positive, not {A.number_text(w)}", node.weight)
        return None
    return replace(req, weight=w)


def _requirement_target(s: Scope, node: A.Requirement) -> Requirement | None:
    target, text = node.target, A.to_dsl(A.Requirement(node.target, node.tolerance))
    tol = _tolerance(s, node.tolerance, _kind(target))
    if isinstance(target, A.Model):
        return _model(s, target, tol, text)
    if isinstance(target, A.Corr):
        pair = column_names(s, (target.a, target.b), "corr", "numeric")
        return None if pair is None or tol is None else CorrRequirement(*pair, tol, text)
    if isinstance(target, A.MeanOf):
        col = lookup_column(s, target.column, "mean", "numeric")
        given = resolve_given(s, target.given)
        if col is None or given is None or tol is None:
            return None
        return MeanRequirement(col.name, given, tol, text)
    p = resolve_predicate(s, target.predicate)
    return None if p is None or tol is None else CountRequirement(p, tol, text)


def resolve_requirements(
    nodes: Sequence[A.RequirementNode],
    domain: Domain,
    origins: Sequence[SourcePos | None] | None = None,
    sink: DiagnosticSink | None = None,
) -> tuple[Requirement, ...]:
    """IR requirements of ``nodes`` (``text`` is each one's canonical DSL). Tolerances stay in
    the user's units (see spec/language.md). Raises DiagnosticError if any error was found."""
    sink = DiagnosticSink() if sink is None else sink
    out = [
        _requirement(Scope(domain, _origin(origins, i), sink), node)
        for i, node in enumerate(nodes)
    ]
    weighted = [node.weight is not None for node in nodes]
    if any(weighted) and not all(weighted):
        # Weights divide one budget between requirements: a missing one has no meaning.
        i = weighted.index(False)
        Scope(domain, _origin(origins, i), sink).error(
            "E314",
            "some requirements have a weight and this one has none",
            nodes[i],
            "give every requirement a `weight w` or none (none: the planner splits the "
            "budget, one release per requirement)",
        )
    sink.raise_if_errors()
    return tuple(r for r in out if r is not None)
