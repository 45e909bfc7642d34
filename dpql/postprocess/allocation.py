"""How one Gaussian release's noise is spread over its measures (chosen on the *public*
synthetic table being post-processed and the releases' public noise sds, so the choice is
DP-neutral): the scales that minimise ``sum_r sd_r / t_r`` over the corr / mean / count
requirements, each requirement's delta-method sd relative to its tolerance, while every
denominator of a requirement's value keeps a small relative noise, so that the delta-method
sd the record reports stays the sd of the noisy value. See :func:`allocation_scales`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from dpql.domain import Domain
from dpql.ir.queries import ModelRequirement, Query, Requirement
from dpql.plan.estimates import numeric_gradient
from dpql.plan.requirements import (
    RequirementMeasures,
    denominators,
    lookup_part,
    parts_and_fn,
)

ALLOCATION_SWEEPS = 200  # fixed-point iterations of allocation_scales (a few dozen suffice)
# Smallest precision c_k^2 of a cell (the mean is 1): noise at most 1/sqrt(0.05) = 4.5x the
# equal-noise sd. The gradients are taken at the synthetic table's moments, not the real ones,
# so a poor table must not starve a measure; on Adult the optimum never went below 0.097.
ALLOCATION_FLOOR = 0.05
# Largest noise sd that each measure of a denominator (``requirements.denominators``: a corr's
# variance, the count of a ratio) may give it, relative to its value at the synthetic table's
# moments. Beyond its first-order (delta-method) terms, a ratio's error N/D - n/d is led by
# -e_N e_D / d^2, uncorrelated with them and of sd at most r times the numerator's term for a
# relative sd r of the denominator: at r = 0.1 the reported sd is the error's within a factor
# sqrt(1 + r^2) to second order, and the denominator is 10 sds from zero, where the value is
# undefined. The first-order objective cannot see this: a denominator's gradient vanishes with
# the numerator (a correlation near 0, a mean at its centre), which would leave it at the floor.
DENOMINATOR_RSD = 0.1


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
    release_sigmas: Sequence[float],
) -> tuple[np.ndarray, ...]:
    """Scales that spread each release's noise over its measures, one array per release
    (aligned with ``release.cells``), for ``dpql.postprocess.iproj.measure``: measure k of release g
    gets sd ``sigma_g / c_k`` there (spec/language.md 5.3), ``sigma_g = release_sigmas[g]``
    the release's noise sd at equal noise (``RequirementMeasures.release_sigmas``).

    In each release, cells that a model requirement of the release uses, or that no moment
    requirement uses, keep ``c = 1``: a model has no delta-method objective. The other cells
    ("free") share the rest with ``sum Delta_k^2 c_k^2 = sum Delta_k^2`` (``Delta_k`` the
    measure's sensitivity), which keeps the release's L2 sensitivity, hence ``sigma_g`` and its
    rho, unchanged. They minimise ``sum_r sd_r / t_r`` over the corr / mean / count
    requirements ``r`` whose cells the release holds, where ``sd_r^2 = sum_k g_rk^2 sigma_g^2 /
    c_k^2`` is the delta-method variance of the requirement's value (``g_rk`` its derivative in
    measure k at ``answers``) and ``t_r`` its tolerance. Stationarity gives
    ``c_k^2 ∝ sqrt(sum_r g_rk^2 / (sd_r t_r)) / Delta_k``, iterated to a fixed point, subject
    to a floor per cell (the constraint is met exactly, the floors held): ``ALLOCATION_FLOOR``
    of the (``Delta^2``-weighted) mean, 1, and for a measure that a denominator ``D`` of a
    requirement's value depends on (``requirements.denominators``), the precision that keeps
    that measure's share of D's noise within ``DENOMINATOR_RSD`` of D,
    ``|dD/dm_k| sigma_g / c_k <= DENOMINATOR_RSD |D|`` at ``answers``, capped at 1 (where
    even equal noise breaks the bound, the measure gets equal noise). The delta-method sd
    that ``dpql.postprocess.accept`` reports, and the pass rule reads (docs/postprocess.md,
    "What the sd promises"), is the sd of the noisy value only while the value is close to
    linear over the noise; the floor keeps every denominator so, which the objective
    alone does not (a denominator's gradient vanishes with the numerator).

    ``answers`` and ``release_sigmas`` must be public: the moments of the synthetic table
    being post-processed, and each release's sd from its rho, the public n and the measures'
    sensitivities (under ``missing: drop`` times the population's ``sd_scale``, from a DP
    output). Why: at the same rho, equal noise gives every free cell the same sd whether
    or not a requirement's value depends on it; this allocation moves the noise to the cells
    the requirements' values are least sensitive to.
    """
    pairs = list(zip(requirements, measures.index, strict=True))
    return tuple(
        _release_scales(
            rel.cells,
            [(r, c) for r, c in pairs if c and set(c) <= set(rel.cells)],
            measures.queries,
            answers,
            domain,
            sigma,
        )
        for rel, sigma in zip(measures.releases, release_sigmas, strict=True)
    )


def denominator_floors(
    reqs: Sequence[Requirement],
    answers: Mapping[Query, float],
    domain: Domain,
    sigma: float,
) -> dict[Query, float]:
    """The least precision ``c_k^2`` (at most 1) of each measure that a denominator ``D`` of
    one of ``reqs`` depends on: ``|dD/dm_k| sigma / c_k <= DENOMINATOR_RSD |D|`` at
    ``answers``; 1 (equal noise) where ``D`` is not positive there or has no derivative."""
    out: dict[Query, float] = {}
    for r in reqs:
        parts, _, _ = parts_and_fn(r, domain)
        at = [lookup_part(answers, p) for p in parts]
        for fn in denominators(r, domain):
            d = fn(at)
            grad = numeric_gradient(fn, at)
            for p, g in zip(parts, grad, strict=True):
                if isinstance(p, float) or g == 0:
                    continue
                ok = d > 0 and math.isfinite(g)
                need = (sigma * abs(g) / (DENOMINATOR_RSD * d)) ** 2 if ok else 1.0
                out[p] = max(out.get(p, 0.0), min(1.0, need))
    return out


def _spread(a: np.ndarray, w: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """``p = max(lam a, floor)`` with ``w @ p = 1`` (``a >= 0``; ``w @ floor <= 1``, each floor
    at most the mean 1): the floored cells are found one pass at a time, each pass raising the
    ones whose share fell below their floor."""
    held = np.zeros(a.size, dtype=bool)
    while True:
        rest = w[~held] @ a[~held]
        if rest <= 0:
            return floor / (w @ floor)
        lam = (1 - w[held] @ floor[held]) / rest
        below = ~held & (lam * a < floor)
        if not below.any():
            return np.where(held, floor, lam * a)
        held |= below


def _release_scales(
    cells: tuple[int, ...],
    inside: list[tuple[Requirement, tuple[int, ...]]],
    queries: tuple[Query, ...],
    answers: Mapping[Query, float],
    domain: Domain,
    sigma: float,
) -> np.ndarray:
    """:func:`allocation_scales` of one release holding ``cells`` and the requirements
    ``inside`` it, of equal-noise sd ``sigma``: the fixed point of ``c_k^2 ∝ sqrt(sum_r
    g_rk^2 / (sd_r t_r)) / Delta_k`` above each cell's floor."""
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
    least = denominator_floors(reqs, answers, domain, sigma) if math.isfinite(sigma) else {}
    floor = np.array([max(ALLOCATION_FLOOR, least.get(queries[k], 0.0)) for k in free])
    p = np.ones(len(free))  # c_k^2
    for _ in range(ALLOCATION_SWEEPS):
        sd = np.sqrt(fixed + G2 @ (1 / p))
        live = sd > 0
        new = _spread(np.sqrt(G2[live].T @ (1 / (sd[live] * tol[live]))) / delta, w, floor)
        done = np.max(np.abs(new - p)) <= 1e-12 * np.max(p)
        p = new
        if done:
            break
    where = {k: i for i, k in enumerate(cells)}
    scales[[where[k] for k in free]] = np.sqrt(p)
    return scales
