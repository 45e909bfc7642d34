"""Privacy accounting: zCDP <-> (epsilon, delta), DP-SGD in RDP, and the epsilon of a ledger.

Neighbouring relation: replace-one with the public row count n (see :mod:`dpql.ir.queries`).

* zCDP (Bun & Steinke 2016, Def. 1.1) is RDP with the linear curve ``D_alpha <= rho * alpha``; the
  Gaussian and Gumbel top-K events of the ledger are zCDP and compose by adding rho.
* RDP -> (epsilon, delta) uses the tight conversion of Canonne, Kamath & Steinke 2020, Prop. 12
  (also Asoodeh et al. 2020, eq. 20), the one dp_accounting's ``compute_epsilon`` applies:

      eps(alpha) = rdp(alpha) + log((alpha - 1) / alpha) - (log(delta) + log(alpha)) / (alpha - 1)

  For rdp(alpha) = rho * alpha the minimiser solves eps'(alpha) = rho + log(delta alpha)/(alpha-1)^2
  = 0, a monotone equation we solve to machine precision (:func:`eps_and_order_from_rho`).
* DP-SGD (Abadi et al. 2016) is a Poisson-subsampled Gaussian, whose RDP dp_accounting computes
  (Mironov, Talwar & Zhang 2019) for the *add/remove-one* relation only. Under replace-one we bound
  it with the weak triangle inequality of Rényi divergence (Mironov 2017, Prop. 11, p = q = 2)
  through the dataset without the replaced record:

      D_alpha(M(D) || M(D')) <= (alpha - 1/2)/(alpha - 1) * R(2 alpha) + R(2 alpha - 1)

  where R is the add/remove curve (it bounds both directions, MTZ 2019 §3.3). This is sound but
  costs roughly 2x in epsilon (e.g. ADULT DP-auto-GAN at psi = 2.5/7.5: 0.39 -> 0.84). The
  add/remove numbers are available (``neighbouring="add_remove"``) to reproduce papers.
* An external (epsilon, delta)-DP guarantee declared under add/remove-one becomes
  (2 epsilon, (1 + e^epsilon) delta) under replace-one by group privacy: a replacement is a removal
  then an addition (group privacy, Dwork & Roth 2014 §2.3, for a group of two, with the delta
  term kept exact: P[M(D) in S] <= e^eps (e^eps P[M(D') in S] + delta) + delta). See
  :func:`replace_one_guarantee`.
* A release's spend for lifetime composition is its RDP curve (:attr:`AccountingResult.curve`)
  plus the external (epsilon, delta) it composed by basic composition; releases compose by summing
  curves order by order (:func:`compose_rdp_curves`) and converting once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import dp_accounting
import numpy as np
from dp_accounting import rdp as dp_rdp
from scipy.optimize import brentq

if TYPE_CHECKING:
    from dpql.privacy.ledger import PrivacyEvent

Neighbouring = Literal["replace_one", "add_remove"]
Conversion = Literal["tight", "classic"]

_RTOL = 4 * float(np.finfo(np.float64).eps)  # the smallest relative tolerance brentq accepts

DEFAULT_ORDERS: tuple[float, ...] = tuple(
    float(a) for a in dp_rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS
)


# --------------------------------------------------------------------------------------------
# zCDP <-> (epsilon, delta)


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def _tight_eps(rho: float, delta: float, alpha: float) -> float:
    # Same expression (and floating-point evaluation) as dp_accounting.rdp.compute_epsilon.
    return rho * alpha + math.log1p(-1 / alpha) - math.log(delta * alpha) / (alpha - 1)


def eps_and_order_from_rho(rho: float, delta: float) -> tuple[float, float]:
    """(epsilon, optimal alpha) such that rho-zCDP implies (epsilon, delta)-DP, tightly (CKS20).

    The optimal alpha is the root of rho (alpha - 1)^2 + log(delta alpha) = 0 (increasing in
    alpha, negative at 1, positive at 2 + sqrt(log(1/delta)/rho)). If rho is so small that the KL
    bound delta >= sqrt(1 - exp(-rho)) already holds, epsilon is 0 (alpha is then ``inf``).
    """
    _check_delta(delta)
    if not (math.isfinite(rho) and rho >= 0):
        raise ValueError(f"rho must be finite and >= 0, got {rho!r}")
    if rho == 0 or delta**2 + math.expm1(-rho) > 0:
        return 0.0, math.inf
    hi = 2 + math.sqrt(math.log(1 / delta) / rho)

    def slope_sign(alpha: float) -> float:  # (alpha - 1)^2 * d eps / d alpha
        return rho * (alpha - 1) ** 2 + math.log(delta * alpha)

    alpha = float(brentq(slope_sign, 1.0, hi, xtol=1e-15, rtol=_RTOL))
    return max(0.0, _tight_eps(rho, delta, alpha)), alpha


def eps_from_rho(rho: float, delta: float) -> float:
    """Smallest epsilon such that rho-zCDP implies (epsilon, delta)-DP (CKS20 Prop. 12)."""
    return eps_and_order_from_rho(rho, delta)[0]


def rho_from_eps_delta_simple(epsilon: float, delta: float) -> float:
    """The rho of Bun & Steinke 2016 Prop. 1.3, solving eps = rho + 2 sqrt(rho log(1/delta)).

    This is what RAP++ uses (Vietri et al. 2022, App. C); :func:`rho_from_eps_delta` gives a larger
    rho for the
    same guarantee (about 10-25% more at the epsilons of interest).
    """
    _check_delta(delta)
    log_inv = math.log(1 / delta)
    return (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2


def rho_from_eps_delta(epsilon: float, delta: float) -> float:
    """The largest rho with ``eps_from_rho(rho, delta) <= epsilon``, by bisection to the last bit.

    Uses the tight conversion, so the result is >= :func:`rho_from_eps_delta_simple`.
    """
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    lo = rho_from_eps_delta_simple(epsilon, delta)  # tight <= simple conversion, so eps(lo) <= eps
    if eps_from_rho(lo, delta) > epsilon:
        lo = 0.0
    hi = max(2 * lo, 1e-300)
    while eps_from_rho(hi, delta) <= epsilon:
        lo, hi = hi, 2 * hi
    while True:  # invariant: eps(lo) <= epsilon < eps(hi)
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            return lo
        if eps_from_rho(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid


def replace_one_guarantee(epsilon: float, delta: float, neighbouring: str) -> tuple[float, float]:
    """The replace-one (epsilon, delta) implied by a guarantee declared under ``neighbouring``.

    ``replace_one``: unchanged. ``add_remove``: (2 epsilon, (1 + e^epsilon) delta) by group
    privacy over the removal and the addition that make up a replacement (module docstring).
    The delta is rounded up by a few ulps so floating point never understates it.
    """
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if neighbouring == "replace_one":
        return epsilon, delta
    if neighbouring != "add_remove":
        raise ValueError(f"unknown neighbouring relation {neighbouring!r}")
    converted = (1.0 + math.exp(epsilon)) * delta
    for _ in range(4):  # exp and two roundings: at most ~2.5 ulps below the exact value
        converted = math.nextafter(converted, math.inf) if converted else converted
    return 2.0 * epsilon, converted


# --------------------------------------------------------------------------------------------
# RDP curves and conversion


def compose_rdp_curves(
    curves: Iterable[tuple[Sequence[float], Sequence[float]]],
) -> tuple[tuple[float, ...], np.ndarray]:
    """RDP composition (Mironov 2017, Prop. 1) of ``(orders, rdp)`` curves: their sum at every
    order that all of them share. Raises ValueError when there is no curve or no common order."""
    points = [dict(zip(map(float, o), map(float, r), strict=True)) for o, r in curves]
    if not points:
        raise ValueError("no RDP curve to compose")
    common = sorted(set.intersection(*(set(p) for p in points)))
    if not common:
        raise ValueError("the RDP curves share no order")
    total = np.zeros(len(common))
    for p in points:
        total = total + np.array([p[a] for a in common])
    return tuple(common), total


def epsilon_from_rdp(
    orders: Sequence[float], rdp: Sequence[float], delta: float, *, conversion: Conversion = "tight"
) -> tuple[float, float]:
    """(epsilon, optimal order) from an RDP curve.

    ``tight``: CKS20 Prop. 12 via dp_accounting. ``classic``: Mironov 2017 Prop. 3,
    eps = min rdp(alpha) + log(1/delta)/(alpha - 1), kept to reproduce older papers (DP-auto-GAN).
    """
    _check_delta(delta)
    if conversion == "tight":
        eps, order = dp_rdp.compute_epsilon(orders, rdp, delta)
        return float(eps), float(order)
    orders_arr = np.asarray(orders, dtype=np.float64)
    eps_arr = np.asarray(rdp, dtype=np.float64) + math.log(1 / delta) / (orders_arr - 1)
    best = int(np.argmin(eps_arr))
    return float(eps_arr[best]), float(orders_arr[best])


def _add_remove_rdp(
    q: float, noise_multiplier: float, steps: int, orders: np.ndarray
) -> np.ndarray:
    accountant = dp_rdp.RdpAccountant(list(orders))
    step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise_multiplier))
    accountant.compose(dp_accounting.SelfComposedDpEvent(step, steps))
    return accountant.rdp


def dpsgd_rdp(
    q: float,
    noise_multiplier: float,
    steps: int,
    orders: Sequence[float],
    *,
    neighbouring: Neighbouring = "replace_one",
) -> np.ndarray:
    """RDP curve of ``steps`` DP-SGD steps (Poisson rate q, noise std = z * clip norm).

    ``add_remove``: dp_accounting's subsampled-Gaussian RDP (MTZ 2019). ``replace_one`` (dpql's
    relation): the weak-triangle bound of the module docstring.
    """
    alphas = np.asarray(orders, dtype=np.float64)
    if neighbouring == "add_remove":
        return _add_remove_rdp(q, noise_multiplier, steps, alphas)
    via_removal = _add_remove_rdp(q, noise_multiplier, steps, 2 * alphas)
    via_addition = _add_remove_rdp(q, noise_multiplier, steps, 2 * alphas - 1)
    return (alphas - 0.5) / (alphas - 1) * via_removal + via_addition


def dpsgd_epsilon(
    q: float,
    noise_multiplier: float,
    steps: int,
    delta: float,
    *,
    neighbouring: Neighbouring = "replace_one",
    conversion: Conversion = "tight",
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> float:
    """Epsilon of ``steps`` DP-SGD steps at ``delta``."""
    curve = dpsgd_rdp(q, noise_multiplier, steps, orders, neighbouring=neighbouring)
    return epsilon_from_rdp(orders, curve, delta, conversion=conversion)[0]


# --------------------------------------------------------------------------------------------
# Ledgers


@dataclass(frozen=True)
class AccountingResult:
    """(epsilon, delta)-DP of a set of events; ``optimal_order`` is the RDP order that achieved it.

    ``zcdp_rho`` is the zCDP part recomputed from noise parameters (Gaussian and Gumbel events
    only); ``rho`` is the release's rho only when *every* event is zCDP, else None (DP-SGD and
    external events have no rho). ``rdp`` is the RDP curve of all non-external events on
    ``orders``; ``external_epsilon`` and ``external_delta`` are the external guarantees (already
    converted to replace-one) added by basic composition.
    """

    epsilon: float
    delta: float
    optimal_order: float
    orders: tuple[float, ...]
    zcdp_rho: float
    external_epsilon: float = 0.0
    external_delta: float = 0.0
    rdp: tuple[float, ...] = ()
    zcdp_only: bool = False

    @property
    def rho(self) -> float | None:
        """zCDP rho of the release, or None when some event is not zCDP (DP-SGD, external)."""
        return self.zcdp_rho if self.zcdp_only else None

    @property
    def curve(self) -> dict[str, Any]:
        """The release's spend for lifetime composition: its RDP curve at the orders where it is
        finite (an infinite order can never be the optimum) and its external (epsilon, delta)."""
        finite = [(a, r) for a, r in zip(self.orders, self.rdp, strict=True) if math.isfinite(r)]
        return {
            "orders": [a for a, _ in finite],
            "epsilons": [r for _, r in finite],
            "external_epsilon": self.external_epsilon,
            "external_delta": self.external_delta,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "optimal_order": self.optimal_order,
            "zcdp_rho": self.zcdp_rho,
            "rho": self.rho,
            "external_epsilon": self.external_epsilon,
            "external_delta": self.external_delta,
            "orders": list(self.orders),
            "rdp": list(self.rdp),
        }


@dataclass(frozen=True)
class _RdpBudget:
    """The RDP part of a ledger on an orders grid, plus the externally declared (eps, delta)."""

    orders: tuple[float, ...]
    rdp: np.ndarray
    zcdp_rho: float
    external_epsilon: float
    external_delta: float


def _rdp_budget(
    events: Sequence[PrivacyEvent], delta: float, orders: Sequence[float] = DEFAULT_ORDERS
) -> _RdpBudget:
    zcdp = [e for e in events if e.mechanism in ("gaussian", "gumbel_top_k")]
    external = [e for e in events if e.mechanism == "external"]
    external_delta = math.fsum(e.delta or 0.0 for e in external)
    if not external_delta < delta:
        raise ValueError(f"delta={delta} is used up by the external tables ({external_delta})")
    zcdp_rho = math.fsum(e.implied_rho for e in zcdp)
    # Put the pure-zCDP optimum on the grid so zCDP-only ledgers convert as tightly as
    # eps_from_rho (the acceptance criterion is agreement to 1e-9).
    alpha_star = eps_and_order_from_rho(zcdp_rho, delta - external_delta)[1]
    extra = {alpha_star} if math.isfinite(alpha_star) else set()
    grid = tuple(sorted(set(orders) | extra))
    # GaussianDpEvent/ZCDpEvent curves do not depend on the relation once the sensitivity is the
    # replace-one one; REPLACE_ONE makes dp_accounting refuse add/remove-only events outright.
    accountant = dp_rdp.RdpAccountant(list(grid), dp_accounting.NeighboringRelation.REPLACE_ONE)
    for e in zcdp:
        if e.mechanism == "gaussian":
            assert e.noise_scale is not None and e.l2_sensitivity is not None
            accountant.compose(dp_accounting.GaussianDpEvent(e.noise_scale / e.l2_sensitivity))
        else:
            # Gumbel top-K is K adaptive exponential mechanisms, each (2 du/beta)-bounded-range,
            # hence du^2/(2 beta^2)-zCDP (Cesar & Rogers 2021): a zCDP *upper bound*, not the
            # mechanism's exact RDP curve.
            accountant.compose(dp_accounting.ZCDpEvent(e.implied_rho))
    rdp = accountant.rdp
    for e in events:
        if e.mechanism == "dpsgd":
            assert e.sampling_rate is not None and e.noise_multiplier is not None and e.steps
            rdp = rdp + dpsgd_rdp(e.sampling_rate, e.noise_multiplier, e.steps, grid)
    external_epsilon = math.fsum(e.epsilon or 0.0 for e in external)
    return _RdpBudget(grid, rdp, zcdp_rho, external_epsilon, external_delta)


def epsilon_from_events(events: Iterable[PrivacyEvent], delta: float) -> AccountingResult:
    """(epsilon, delta)-DP of the composition of ``events`` under replace-one, recomputed.

    The RDP curves of all Gaussian, Gumbel top-K and DP-SGD events are summed (RDP composition,
    Mironov 2017 Prop. 1) on a grid of orders that contains dp_accounting's default orders and the
    optimal order of the zCDP part, and converted with the tight conversion at
    ``delta - sum(external deltas)``. External tables' (epsilon, delta) are then added by basic
    composition (Dwork & Roth 2014, Thm. 3.16): sound for any mechanism, but not tight.
    """
    _check_delta(delta)
    events = tuple(events)
    budget = _rdp_budget(events, delta)
    eps, order = epsilon_from_rdp(budget.orders, budget.rdp, delta - budget.external_delta)
    return AccountingResult(
        epsilon=eps + budget.external_epsilon,
        delta=delta,
        optimal_order=order,
        orders=budget.orders,
        zcdp_rho=budget.zcdp_rho,
        external_epsilon=budget.external_epsilon,
        external_delta=budget.external_delta,
        rdp=tuple(float(r) for r in budget.rdp),
        zcdp_only=all(e.mechanism in ("gaussian", "gumbel_top_k") for e in events),
    )


def calibrate_dpsgd_noise(
    q: float,
    steps: int,
    epsilon: float,
    delta: float,
    *,
    other_events: Iterable[PrivacyEvent] = (),
    neighbouring: Neighbouring = "replace_one",
    conversion: Conversion = "tight",
    rtol: float = 1e-4,
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> float:
    """Smallest noise multiplier z (to relative ``rtol``, rounded up) such that ``steps`` DP-SGD
    steps, composed with the data-independent ``other_events`` planned for the same release
    (e.g. the I-projection stage's zCDP measurements), satisfy (epsilon, delta)-DP.

    Bisection on log z over dp_accounting RDP curves; epsilon is decreasing in z.
    ``neighbouring`` and ``conversion`` apply to the calibrated phase (``add_remove``/``classic``
    only to reproduce papers); ``other_events`` are always accounted as the ledger accounts them.
    """
    _check_delta(delta)
    budget = _rdp_budget(tuple(other_events), delta, orders)
    rdp_delta = delta - budget.external_delta

    def spent(z: float) -> float:
        curve = budget.rdp + dpsgd_rdp(q, z, steps, budget.orders, neighbouring=neighbouring)
        eps = epsilon_from_rdp(budget.orders, curve, rdp_delta, conversion=conversion)[0]
        return eps + budget.external_epsilon

    floor = epsilon_from_rdp(budget.orders, budget.rdp, rdp_delta, conversion=conversion)[0]
    if floor + budget.external_epsilon >= epsilon:
        raise ValueError(f"the other events already spend epsilon >= {epsilon}")
    lo, hi = 0.5, 1.0  # invariant once set up: spent(lo) > epsilon >= spent(hi)
    while spent(hi) > epsilon:
        lo, hi = hi, 2 * hi
        if hi > 1e6:
            raise ValueError(f"no noise multiplier <= 1e6 reaches epsilon={epsilon}")
    while spent(lo) <= epsilon:
        lo, hi = lo / 2, lo
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        if spent(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi
