"""How one Gaussian release's noise is spread over its measures (chosen on the *public*
synthetic table being post-processed, so the choice is DP-neutral): the scales that minimise
``sum_r sd_r / t_r`` over the corr / mean / count requirements, each requirement's delta-method
sd relative to its tolerance. See :func:`allocation_scales`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from dpql.domain import Domain
from dpql.ir.queries import ModelRequirement, Query, Requirement
from dpql.plan.estimates import numeric_gradient
from dpql.plan.requirements import RequirementMeasures, lookup_part, parts_and_fn

ALLOCATION_SWEEPS = 200  # fixed-point iterations of allocation_scales (a few dozen suffice)
# Smallest precision c_k^2 of a cell (the mean is 1): noise at most 1/sqrt(0.05) = 4.5x the
# equal-noise sd. The gradients are taken at the synthetic table's moments, not the real ones,
# so a poor table must not starve a measure; on Adult the optimum never went below 0.097.
ALLOCATION_FLOOR = 0.05


def value_gradient(
    req: Requirement, answers: Mapping[Query, float], domain: Domain
) -> dict[Query, float]:
    """d value / d measure of a moment requirement at ``answers`` (original units; a query that
    is several parts, e.g. ``E x^2 = E x`` of a binary column, sums its parts' derivatives)."""
    parts, fn, span = parts_and_fn(req, domain)
    grad = numeric_gradient(fn, [lookup_part(answers, p) for p in parts])
    out: dict[Query, float] = {}
    for p, g in zip(parts, grad, strict=True):
        if not isinstance(p, float) and math.isfinite(g):
            out[p] = out.get(p, 0.0) + span * float(g)
    return out


def allocation_scales(
    measures: RequirementMeasures,
    requirements: Sequence[Requirement],
    answers: Mapping[Query, float],
    domain: Domain,
) -> tuple[np.ndarray, ...]:
    """Scales that spread each release's noise over its measures, one array per release
    (aligned with ``release.cells``), for ``dpql.postprocess.iproj.measure``: measure k of release g
    gets sd ``sigma_g / c_k`` there (spec/language.md 5.3).

    In each release, cells that a model requirement of the release uses, or that no moment
    requirement uses, keep ``c = 1``: a model has no delta-method objective. The other cells
    ("free") share the rest with ``sum Delta_k^2 c_k^2 = sum Delta_k^2`` (``Delta_k`` the
    measure's sensitivity), which keeps the release's L2 sensitivity, hence ``sigma_g`` and its
    rho, unchanged. They minimise ``sum_r sd_r / t_r`` over the corr / mean / count
    requirements ``r`` whose cells the release holds, where ``sd_r^2 = sum_k g_rk^2 sigma_g^2 /
    c_k^2`` is the delta-method variance of the requirement's value (``g_rk`` its derivative in
    measure k at ``answers``) and ``t_r`` its tolerance. Stationarity gives
    ``c_k^2 ∝ sqrt(sum_r g_rk^2 / (sd_r t_r)) / Delta_k``, iterated to a fixed point; a cell's
    ``c_k^2`` is floored at ``ALLOCATION_FLOOR`` of the (``Delta^2``-weighted) mean, 1.

    ``answers`` must be public: the moments of the synthetic table being post-processed.
    Why: at the same rho, equal noise gives every free cell the same sd whether or not a
    requirement's value depends on it; this allocation moves the noise to the cells the
    requirements' values are least sensitive to.
    """
    pairs = list(zip(requirements, measures.index, strict=True))
    return tuple(
        _release_scales(
            rel.cells,
            [(r, c) for r, c in pairs if c and set(c) <= set(rel.cells)],
            measures.queries,
            answers,
            domain,
        )
        for rel in measures.releases
    )


def _release_scales(
    cells: tuple[int, ...],
    inside: list[tuple[Requirement, tuple[int, ...]]],
    queries: tuple[Query, ...],
    answers: Mapping[Query, float],
    domain: Domain,
) -> np.ndarray:
    """:func:`allocation_scales` of one release holding ``cells`` and the requirements
    ``inside`` it: the fixed point of ``c_k^2 ∝ sqrt(sum_r g_rk^2 / (sd_r t_r)) / Delta_k``."""
    scales = np.ones(len(cells))
    reqs = [r for r, _ in inside if not isinstance(r, ModelRequirement)]
    model = {k for r, c in inside if isinstance(r, ModelRequirement) for k in c}
    free = sorted({k for r, c in inside if not isinstance(r, ModelRequirement) for k in c} - model)
    if len(free) < 2:
        return scales
    col = {queries[k]: i for i, k in enumerate(free)}
    # rows: requirements; columns: free cells. The fixed cells' share of each variance apart.
    G2 = np.zeros((len(reqs), len(free)))
    fixed = np.zeros(len(reqs))
    for i, r in enumerate(reqs):
        for q, g in value_gradient(r, answers, domain).items():
            if q in col:
                G2[i, col[q]] += g * g
            else:
                fixed[i] += g * g
    if not G2.any():
        return scales
    tol = np.array([r.tolerance.within or 1.0 for r in reqs])
    # weights of the constraint sum_k w_k c_k^2 = 1: each cell's share of the squared sensitivity
    delta = np.array([queries[k].sensitivity(1).l2 for k in free])
    w = delta**2 / np.sum(delta**2)
    p = np.ones(len(free))  # c_k^2
    for _ in range(ALLOCATION_SWEEPS):
        sd = np.sqrt(fixed + G2 @ (1 / p))
        live = sd > 0
        new = np.sqrt(G2[live].T @ (1 / (sd[live] * tol[live]))) / delta
        new = np.maximum(new / (w @ new), ALLOCATION_FLOOR)
        new /= w @ new
        done = np.max(np.abs(new - p)) <= 1e-12 * np.max(p)
        p = new
        if done:
            break
    where = {k: i for i, k in enumerate(cells)}
    scales[[where[k] for k in free]] = np.sqrt(p)
    return scales
