"""The excess-risk *bound* reported with a model requirement: a bound on the excess empirical
loss of an exact ERM fitted to moments within ``rho`` of the real ones; usually vacuous at
realistic n, and reported as such (``vacuous``), never as the model's accuracy.

It follows Zhou et al. 2024, sec. 3.1 (Theorems 3.1-3.2, proofs in App. A.1-A.2): approximate the
loss by a polynomial in the margin, so that the empirical loss is a linear function of the data's
moments and moments within ``rho`` bound the loss difference. Here the polynomial has degree two,
and the logistic loss is split exactly as ``-y s / 2 + h(s)`` with ``h(s) = log(2 cosh(s / 2))``
even, so only ``h`` is approximated (minimax, as in sec. 3.1, "Polynomial Approximation
Error"). ``rho`` is certified without spending privacy: the triangle inequality splits the
distance between real and synthetic moments into the public gap between the noisy and the
synthetic moments and the noise, bounded by a Gaussian tail.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpql.domain import Domain, NumericColumn
from dpql.ir.queries import (
    CentredProduct,
    ModelAccuracy,
    ModelRequirement,
    Query,
    TruePred,
)
from dpql.plan.requirements import (
    present_of,
    product_query,
    requirement_queries,
)

if TYPE_CHECKING:  # jax stays out of plan-time imports
    from dpql.postprocess.iproj import IProjResult

@dataclass(frozen=True)
class RiskBound:
    """A certified upper bound on excess empirical loss (NOT accuracy), after Zhou et al. 2024,
    sec. 3.1, Theorems 3.1-3.2; ``vacuous`` when it is no better than the trivial bound."""

    value: float
    a: float
    rho: float
    vacuous: bool
    assumptions: str
    source: str = "after Zhou et al. 2024, sec. 3.1, Theorems 3.1-3.2"

    def to_json(self) -> dict[str, Any]:
        return {"kind": "upper bound", **asdict(self)}


def _margin(q: ModelAccuracy, domain: Domain, cls: int) -> tuple[np.ndarray, float, float]:
    """Coefficients in moment coordinates (reference levels folded into the intercept,
    requirements.py) and ``a = max |theta.z + b|`` over the whole domain."""
    coef = np.asarray(q.coef[cls]) - (np.asarray(q.coef[0]) if q.model == "logistic" else 0.0)
    b = q.intercept[cls] - (q.intercept[0] if q.model == "logistic" else 0.0)
    theta, hi, lo, pos = [], b, b, 0
    for f in q.features:
        col = domain[f]
        k = 1 if isinstance(col, NumericColumn) else col.card
        c = coef[pos : pos + k]
        pos += k
        if k == 1:
            theta.append(c[0])
            hi, lo = hi + max(c[0], 0.0), lo + min(c[0], 0.0)
        else:
            b += c[0]
            theta.extend(c[1:] - c[0])
            hi, lo = hi + c.max(), lo + c.min()
    return np.asarray(theta), b, max(abs(hi), abs(lo))


def _even_quadratic(a: float) -> tuple[float, float]:
    """Minimax ``q0 + q2 z^2`` for h(z) = log(2 cosh(z/2)) on [-a, a]: (q2, sup error).

    In t = z^2, g(t) = h(sqrt t) is concave, so the best line has the chord's slope and half the
    chord gap at the tangent point (Chebyshev equioscillation)."""
    if a <= 0:
        return 0.125, 0.0

    def g(t: float) -> float:  # log(2 cosh(x)) = x + log1p(exp(-2x)), x >= 0: no overflow
        x = math.sqrt(t) / 2
        return x + math.log1p(math.exp(-2 * x))

    q2 = (g(a * a) - g(0.0)) / (a * a)
    lo, hi = 0.0, a * a  # g'(t) = tanh(sqrt t / 2) / (4 sqrt t), decreasing
    for _ in range(100):
        mid = (lo + hi) / 2
        slope = math.tanh(math.sqrt(mid) / 2) / (4 * math.sqrt(mid)) if mid > 0 else 0.125
        lo, hi = (mid, hi) if slope > q2 else (lo, mid)
    return q2, (g(lo) - g(0.0) - q2 * lo) / 2


def excess_risk_bound(
    req: ModelRequirement, q: ModelAccuracy, evidence: IProjResult, beta: float = 0.05
) -> RiskBound | None:
    """Certified bound from the requirement's measured moments (module docstring).

    rho = max over the requirement's raw moments ``E f``, ``E fg`` of the deviation
    |noisy - synthetic| + sigma sqrt(2 ln(2K/beta)) (a public fit gap plus a Gaussian tail
    bound, union over the K released measures). The second moments are measured centred
    (``dpql.plan.requirements``); since ``E fg = E f'g' + (E f + E g)/2 - 1/4``, the raw
    deviation is at most the centred one plus half the two first moments'. With
    ``A = ||(theta, b)||_1`` in moment coordinates and ``a`` the largest |margin| on the domain:

    * linear (squared loss, quadratic in the moments, exact): ``2 rho (1 + A)^2``;
    * binary logistic: ``-y s / 2 + h(s)`` with h even; h ~ q0 + q2 s^2 on [-a, a] within eps_h:
      ``3 rho A + 4 eps_h + 2 q2 rho A^2`` (y = 2 1{y = 2nd value} - 1 makes |dE[y z]| <= 3 rho).

    Holds w.p. 1 - beta for exact ERM over models with these A and a; reported as a bound only.
    None for multi-class labels or when a moment of the requirement was not measured.
    """
    domain = evidence.table.domain
    if req.model == "logistic" and domain.card(req.label) != 2:
        return None
    if not isinstance(present_of(req, domain), TruePred):
        return None  # the bound is for moments over all n rows, not over the present ones
    pos = {qq: i for i, qq in enumerate(evidence.queries)}
    idx = [pos.get(qq) for qq in requirement_queries(req, domain)]
    if any(i is None or evidence.noisy.shape[0] != len(evidence.queries) for i in idx):
        return None
    k = len(evidence.queries)
    tail = evidence.sigma * math.sqrt(2 * math.log(2 * k / beta))  # per measure
    dev = np.abs(evidence.noisy - evidence.after) + tail

    def raw_deviation(qq: Query) -> float:
        if not isinstance(qq, CentredProduct):
            return float(dev[pos[qq]])
        firsts = (pos[product_query([f])] for f in (qq.left, qq.right))
        return float(dev[pos[qq]] + 0.5 * sum(dev[i] for i in firsts))

    rho = max(raw_deviation(qq) for qq in requirement_queries(req, domain))
    theta, b, a = _margin(q, domain, 1 if req.model == "logistic" else 0)
    big_a = float(np.abs(theta).sum() + abs(b))
    if req.model == "linear":
        value, trivial = 2 * rho * (1 + big_a) ** 2, (1 + big_a) ** 2
    else:
        q2, eps_h = _even_quadratic(a)
        value, trivial = 3 * rho * big_a + 4 * eps_h + 2 * q2 * rho * big_a**2, a
    return RiskBound(
        value=value,
        a=a,
        rho=rho,
        vacuous=bool(value >= trivial),
        assumptions=(
            f"upper bound on the excess empirical "
            f"{'logistic' if req.model == 'logistic' else 'squared'} loss on the real table of "
            f"an exact ERM over models with ||(theta,b)||_1 <= {big_a:.3g} (margin <= {a:.3g}); "
            f"probability {1 - beta:g}; not the accuracy of the sklearn fit"
        ),
    )
