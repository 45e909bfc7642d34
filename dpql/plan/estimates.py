"""A requirement's value estimated from (noisy) answers of its measures, the delta-method
standard deviation of that estimate, and the planner's prediction of it from public facts alone.

The measures and the function that turns their answers into a value are
:func:`dpql.plan.requirements.parts_and_fn`. Under Gaussian noise on the answers the value's sd
is, to first order, ``||sigma * grad value||_2`` (the delta method; :func:`value_sd` at the
noisy answers for the record, :func:`predicted_error` at public *planning* moments for the
planner). Pure planning and post-processing code: it reads answers and the public domain, never
data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.domain import Domain, EncodedTable, NumericColumn
from dpql.ir.queries import (
    CentredProduct,
    CorrRequirement,
    Count,
    CountRequirement,
    MeanRequirement,
    ModelRequirement,
    Pred,
    Query,
    Requirement,
    pred_columns,
)
from dpql.plan.requirements import lookup_part, parts_and_fn, product_query


def requirement_value(req: Requirement, answers: Mapping[Query, float], domain: Domain) -> float:
    """Value of a corr / mean / count requirement from (noisy or exact) answers of its queries.

    ``corr``: Pearson correlation from first and second moments (scale-free). ``mean(a | P)``:
    ``E[u_a 1{P}] / E[1{P}]`` mapped back to original units (``lo + span * ratio``). ``count``: a
    fraction of rows. Raises ``E502`` when the value is undefined (zero or negative variance, an
    empty condition) -- with noisy answers this means the noise swamped the statistic.
    """
    parts, fn, _ = parts_and_fn(req, domain)
    v = fn([lookup_part(answers, p) for p in parts])
    if math.isnan(v):
        what = "a column has zero variance" if isinstance(req, CorrRequirement) else "no row"
        where = f"requirement '{req.text}': " if req.text else ""
        hint = (
            "check the column is not constant / the condition selects rows; "
            "with noisy answers, spend more budget on the requirement"
        )
        raise DiagnosticError(
            [Diagnostic("E502", f"{where}the value is undefined ({what})", hint=hint)]
        )
    if isinstance(req, MeanRequirement) and isinstance(domain[req.column], NumericColumn):
        return float(domain[req.column].unscale(v))
    return float(v)


def numeric_gradient(fn: Callable[[Sequence[float]], float], m: Sequence[float]) -> np.ndarray:
    """Central differences: the value functions are smooth where defined and cheap."""
    m = np.asarray(m, dtype=np.float64)
    h = 1e-6
    out = np.zeros_like(m)
    for i in range(m.size):
        e = np.zeros_like(m)
        e[i] = h
        out[i] = (fn(m + e) - fn(m - e)) / (2 * h)
    return out


def delta_method_sd(
    fn: Callable[[Sequence[float]], float], m: Sequence[float], sigmas: Sequence[float]
) -> float:
    """sd of ``fn(m + noise)`` to first order, the noise independent N(0, sigmas[i]^2) per part:
    ``sqrt(sum_i (d fn / d m_i)^2 sigmas[i]^2)`` (NaN where ``fn`` is undefined near ``m``)."""
    g = numeric_gradient(fn, m)
    return float(np.sqrt(np.sum((g * np.asarray(sigmas, dtype=np.float64)) ** 2)))


def value_sd(
    req: Requirement,
    answers: Mapping[Query, float],
    sigma: float | Mapping[Query, float],
    domain: Domain,
) -> float:
    """Delta-method standard deviation of :func:`requirement_value` at the given answers.

    Each measured part carries independent N(0, sigma^2) noise, ``sigma`` one number (one joint
    Gaussian release) or one per query (weighted releases); constant parts carry none.
    ``sd = ||sigma * grad_measured value||_2`` in original units.
    """
    parts, fn, span = parts_and_fn(req, domain)

    def sd(p: Query) -> float:
        return float(sigma[p]) if isinstance(sigma, Mapping) else float(sigma)

    sigmas = [0.0 if isinstance(p, float) else sd(p) for p in parts]
    return span * delta_method_sd(fn, [lookup_part(answers, p) for p in parts], sigmas)


def uniform_prior_probability(pred: Pred, domain: Domain, rows: int = 1 << 15) -> float:
    """P(pred) when every column is independently uniform on its public domain.

    Data-independent (a fixed-seed Monte Carlo over the domain, not over data).
    """
    from dpql.ir.exact import eval_pred

    cols = pred_columns(pred)
    if not cols:
        return 1.0
    rng = np.random.default_rng(0)
    sub = Domain(tuple(domain[c] for c in cols))
    codes, scaled = {}, {}
    for c in sub:
        if isinstance(c, NumericColumn):
            u = rng.uniform(0.0, 1.0, rows)
            scaled[c.name] = u
            codes[c.name] = c.bin_of(c.lo + u * c.span)
        else:
            codes[c.name] = rng.integers(0, c.card, rows).astype(np.int32)
    return float(eval_pred(pred, EncodedTable(sub, codes, scaled)).mean())


# The planning reference spread of a numeric column (scaled to [0, 1]): the sd of the symmetric
# triangular distribution on its public bounds, 1 / sqrt(24) = 0.204 of the range (half the
# uniform's variance; see predicted_error).
PLANNING_SD = 1 / math.sqrt(24)


def _plausible(part: Query | float, domain: Domain) -> float:
    """Planning moment of one part (:func:`predicted_error`): columns independent, every numeric
    one centred in its bounds with sd :data:`PLANNING_SD`, categorical values and predicates
    under the uniform prior."""
    if isinstance(part, float):
        return part
    if isinstance(part, Count):
        return uniform_prior_probability(part.predicate, domain)
    if isinstance(part, CentredProduct):
        p = uniform_prior_probability(part.given, domain)
        if part.square:  # E(u - 1/2)^2 = Var u at the planning spread
            return p * PLANNING_SD**2
        # independent factors: E(f - 1/2) E(g - 1/2); 0 for a numeric one
        left, right = (_plausible(product_query([f]), domain) for f in (part.left, part.right))
        return p * (left - 0.5) * (right - 0.5)
    mean_u = {1: 1 / 2, 2: 1 / 4 + PLANNING_SD**2}  # E u, E u^2 at the planning spread
    cols = part.columns
    num = 1.0
    for c in set(cols):
        num *= mean_u[cols.count(c)]
    return num * uniform_prior_probability(part.given, domain)


def predicted_error(req: Requirement, sigma: float, domain: Domain) -> float:
    """Predicted standard deviation of a corr / mean / count requirement's released value, with
    per-measure noise ``sigma``.

    A planning number: data-independent, so the delta method is evaluated at *public planning*
    moments (:func:`_plausible`): columns independent (corr = 0), each numeric column centred in
    its public bounds with the spread of the **symmetric triangular distribution** on them
    (:data:`PLANNING_SD`: sd = range / sqrt(24), E u = 1/2, E(u - 1/2)^2 = 1/24), categorical
    values and predicates under the uniform prior. The delta method's derivative of a
    correlation is ``1 / (sd_a sd_b)``, so the spread sets the need: the uniform spread
    (range / sqrt(12)) is the *widest* a bounded column can plausibly have, and real columns
    are more concentrated, so it under-predicts the sd. The triangular is the usual reference
    for a quantity known only by its range and most likely in its middle (half the uniform's
    variance); compile's within-release allocation (``dpql.postprocess.allocation``) recovers
    the rest of a column's concentration. It is a reference, not a bound: a column more
    concentrated than it (or a correlation between columns with off-centre means) has a larger
    sd, which the record reports (``requirements[].sigma``, the delta method at the noisy
    values). For ``mean(a | P)`` the conditional mean is taken at the worst case (ratio 1),
    giving ``span * sigma * sqrt(2) / P(P)``, whatever the spread.

    Model requirements are decided by their own DP test: see
    :func:`dpql.plan.acceptance.predicted_sd`.
    """
    if isinstance(req, ModelRequirement):
        raise TypeError("a model requirement's error is its test's: acceptance.predicted_sd")
    if isinstance(req, CountRequirement):
        return sigma
    parts, fn, span = parts_and_fn(req, domain)
    m = [_plausible(p, domain) for p in parts]
    if isinstance(req, MeanRequirement) and isinstance(domain[req.column], NumericColumn):
        # compile centres the numerator at the synthetic conditional mean
        # (dpql.postprocess.centre): E[(u - c) 1{P}] ~ 0, the count's derivative ~ 0
        m[0] = 0.0
    elif isinstance(req, MeanRequirement):
        m[0] = m[1]  # a binary column's share, not centred: worst case (ratio 1)
    if isinstance(req, MeanRequirement) and m[1] <= 0:
        return math.inf
    sigmas = [0.0 if isinstance(p, float) else sigma for p in parts]
    return span * delta_method_sd(fn, m, sigmas)


def smallest_epsilon_for(
    sd_of_eps: Callable[[float], float],
    tolerance: float,
    *,
    z: float = 2.0,
    lo: float = 1e-4,
    hi: float = 1e3,
) -> float:
    """Smallest epsilon with ``z * sd_of_eps(eps) <= tolerance``.

    ``sd_of_eps`` is the planner's predicted sd of a requirement's DP measurement at a release
    budget of epsilon (its accounting, decreasing in eps; not reimplemented here). Bisection on
    log(eps). ``z = 2`` matches the acceptance tests' ~2 sigma inconclusive band. Returns
    ``math.inf`` when even ``hi`` is not enough.
    """

    def ok(eps: float) -> bool:
        return z * sd_of_eps(eps) <= tolerance

    if not ok(hi):
        return math.inf
    if ok(lo):
        return lo
    a, b = math.log(lo), math.log(hi)
    for _ in range(60):
        mid = (a + b) / 2
        a, b = (a, mid) if ok(math.exp(mid)) else (mid, b)
    return math.exp(b)
