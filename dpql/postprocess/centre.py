"""Compile-time centres of the corr / mean measures: post-processing of the synthetic table.

The plan measures a correlation's second moments centred at the midpoint of the public range,
``E(a - 1/2)(b - 1/2)`` (``dpql.plan.requirements``). The correlation's covariance is then
``E(a - 1/2)(b - 1/2) - (E a - 1/2)(E b - 1/2)``: where a column's mean lies far from its
midpoint, the noise of the *other* column's first moment enters the correlation with weight
``|E a - 1/2| / (sd_a sd_b)``. On the Adult example (``E u(age) = 0.30``) that term and its twin
were a third of the correlation's ``sum_k |d corr / d m_k| Delta_k`` (the quantity the
within-release allocation minimises), and the noisy first moments pulled the projection off
the value the test compares with. Centred at the column means ``(c, d)`` instead, the first
moments drop out to first order (their derivatives are ``E a - c`` and ``E b - d``), at the
price of a wider product range (``Delta`` 0.70 / n instead of 0.5 / n at those means): on the
example the correlation's delta-method sd falls by about 8% at the same rho. A mean's numerator
``E[u 1{P}]`` is likewise measured as ``E[(u - c) 1{P}]`` around the conditional mean ``c``: the
count ``E 1{P}`` then drops out to first order, with the same sensitivity (width 1).

The centres are the synthetic table's means (a DP output or the declared external table, so
public), rounded to ``ir.CENTRE_GRID``. Each release keeps the plan's rho and L2 sensitivity
(:func:`keep_planned_l2` rescales the public spread), which ``dpql verify`` checks event by
event; only *which* linear functionals the release answers changes.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dpql.domain import EncodedTable, NumericColumn
from dpql.ir.exact import eval_pred
from dpql.ir.queries import (
    CorrRequirement,
    MeanRequirement,
    Query,
    Requirement,
    joint_l2_sensitivity,
    on_centre_grid,
)
from dpql.plan.requirements import (
    Release,
    RequirementMeasures,
    present_of,
    requirement_queries,
)


def _mean(x: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no finite value: NaN, handled below
        return float(np.nanmean(x)) if x.size else math.nan


def centred_requirement(req: Requirement, table: EncodedTable) -> Requirement:
    """``req`` with its compile-time centres from ``table`` (public): a corr's numeric columns at
    their means, a mean's numeric column at its conditional mean. Unchanged where a column is
    categorical or the table gives no finite value."""
    d = table.domain
    # the means over the rows the statistic is defined on (its columns present)
    rows = eval_pred(present_of(req, d), table)
    if isinstance(req, CorrRequirement):
        centres = []
        for c in (req.a, req.b):
            x = np.asarray(table.scaled[c])[rows] if isinstance(d[c], NumericColumn) else None
            m = _mean(x) if x is not None else math.nan
            centres.append(on_centre_grid(m) if math.isfinite(m) else 0.5)
        return replace(req, centres=(centres[0], centres[1]))
    if isinstance(req, MeanRequirement) and isinstance(d[req.column], NumericColumn):
        rows = rows & eval_pred(req.given, table)
        m = _mean(np.asarray(table.scaled[req.column])[rows])
        return replace(req, centre=on_centre_grid(m)) if math.isfinite(m) else req
    return req


def _owners(releases: Sequence[Release], index: Sequence[tuple[int, ...]]) -> list[list[int]]:
    """Per release, the requirements it was made for: a requirement belongs to the releases whose
    cells are exactly its own (one release per requirement, or per weighted requirement), and
    when there is none, to every release holding all its cells (one joint release)."""
    out: list[list[int]] = [[] for _ in releases]
    for r, c in enumerate(index):
        if not c:
            continue
        exact = [g for g, rel in enumerate(releases) if set(rel.cells) == set(c)]
        for g in exact or [g for g, rel in enumerate(releases) if set(c) <= set(rel.cells)]:
            out[g].append(r)
    return out


def recentre(
    requirements: Sequence[Requirement], measures: RequirementMeasures, table: EncodedTable
) -> tuple[tuple[Requirement, ...], RequirementMeasures]:
    """The requirements with their compile-time centres (:func:`centred_requirement`) and their
    measures: queries deduplicated as in ``expand_requirements``, each release of ``measures``
    (same order and shares) now holding its owners' centred queries."""
    reqs = tuple(centred_requirement(r, table) for r in requirements)
    pos: dict[Query, int] = {}
    index = tuple(
        tuple(pos.setdefault(q, len(pos)) for q in requirement_queries(r, table.domain))
        for r in reqs
    )
    releases = []
    for rel, owners in zip(measures.releases, _owners(measures.releases, measures.index),
                           strict=True):  # fmt: skip
        cells: dict[int, None] = {}
        for r in owners:
            for k in index[r]:
                cells[k] = None
        releases.append(Release(tuple(cells), rel.share))
    return reqs, RequirementMeasures(tuple(pos), index, tuple(releases))


def keep_planned_l2(
    planned: RequirementMeasures,
    measures: RequirementMeasures,
    scales: Sequence[np.ndarray],
    n: int,
) -> tuple[np.ndarray, ...]:
    """``scales`` (one array per release of ``measures``) multiplied, release by release, so
    that each release's L2 sensitivity is the plan's (its planned queries at scale 1): what the
    ledger event must show. Public: it depends on the plan, the centres and the spread only."""
    out = []
    for old, new, c in zip(planned.releases, measures.releases, scales, strict=True):
        want = joint_l2_sensitivity([planned.queries[k] for k in old.cells], n)
        c = np.asarray(c, dtype=np.float64)
        have = joint_l2_sensitivity([measures.queries[k] for k in new.cells], n, c.tolist())
        out.append(c * (want / have))
    return tuple(out)
