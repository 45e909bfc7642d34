"""The privacy ledger: one immutable, JSON-serialisable event per mechanism call (DESIGN inv. 3).

Events follow dp_accounting's idea of a DpEvent: they record *what the mechanism did* (noise
scale, sensitivity, sampling rate, steps), not only what it claims, so the accountant
(:mod:`dpql.privacy.accountant`) recomputes the guarantee from the mechanism's parameters and the
provenance record's (epsilon, delta) is never copied from a spec.

Neighbouring relation for every event: replace-one with the public row count n of the spec. All
sensitivities below are under that relation.

Mechanisms and the fields each one uses (all others must be ``None``):

============== ========================================================================
``gaussian``     ``l2_sensitivity`` (of the released vector), ``noise_scale`` = sigma,
                 ``rho`` = l2_sensitivity**2 / (2 sigma**2) (zCDP), ``count`` = numbers released
``gumbel_top_k`` ``score_sensitivity`` (max change of any one candidate's score),
                 ``noise_scale`` = Gumbel beta, ``count`` = k indices released,
                 ``rho`` = k * score_sensitivity**2 / (2 beta**2) (zCDP)
``dpsgd``        ``sampling_rate`` q (Poisson), ``steps``, ``noise_multiplier`` z (noise std /
                 clip norm), ``noise_scale`` = z, optional ``l2_sensitivity`` = clip norm (RDP)
``external``     a table or statistic produced elsewhere on the same private data:
                 ``declared_epsilon``, ``declared_delta`` its declared guarantee under the
                 ``neighbouring`` relation it was stated for (``replace_one`` or
                 ``add_remove``); ``epsilon``, ``delta`` the replace-one guarantee charged
                 (:func:`dpql.privacy.accountant.replace_one_guarantee`: add/remove (e, d)
                 gives (2e, (1 + e^e) d)), checked against the declared one on construction
============== ========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from dpql.privacy.budget import BudgetExceeded

Mechanism = Literal["gaussian", "gumbel_top_k", "dpsgd", "external"]

ZCDP_MECHANISMS: frozenset[str] = frozenset({"gaussian", "gumbel_top_k"})

_FIELDS_OF: dict[str, frozenset[str]] = {
    "gaussian": frozenset({"l2_sensitivity", "noise_scale", "rho"}),
    "gumbel_top_k": frozenset({"score_sensitivity", "noise_scale", "rho"}),
    "dpsgd": frozenset(
        {"sampling_rate", "steps", "noise_multiplier", "noise_scale", "l2_sensitivity"}
    ),
    "external": frozenset({"epsilon", "delta", "declared_epsilon", "declared_delta"}),
}
NEIGHBOURING_RELATIONS: frozenset[str] = frozenset({"replace_one", "add_remove"})
_PARAMETERS: tuple[str, ...] = (
    "l2_sensitivity",
    "score_sensitivity",
    "noise_scale",
    "rho",
    "sampling_rate",
    "steps",
    "noise_multiplier",
    "epsilon",
    "delta",
    "declared_epsilon",
    "declared_delta",
)
# fields a mechanism may leave out: only a dpsgd event's clip norm (a Gaussian event needs its
# sensitivity, else its rho could not be recomputed)
_OPTIONAL: dict[str, frozenset[str]] = {"dpsgd": frozenset({"l2_sensitivity"})}
_RHO_RTOL = 1e-9
EPSILON_RTOL = 1e-9  # the odometer's relative slack on the composed epsilon (float conversion)


@dataclass(frozen=True)
class PrivacyEvent:
    """One expenditure of privacy budget. See the module docstring for the fields per mechanism."""

    phase: str
    mechanism: Mechanism
    label: str
    count: int = 1
    l2_sensitivity: float | None = None
    score_sensitivity: float | None = None
    noise_scale: float | None = None
    rho: float | None = None
    sampling_rate: float | None = None
    steps: int | None = None
    noise_multiplier: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    neighbouring: str | None = None
    declared_epsilon: float | None = None
    declared_delta: float | None = None

    def __post_init__(self) -> None:
        if self.mechanism not in _FIELDS_OF:
            raise ValueError(f"unknown mechanism {self.mechanism!r}")
        if not (isinstance(self.count, int) and self.count >= 1):
            raise ValueError(f"count must be an integer >= 1, got {self.count!r}")
        used = _FIELDS_OF[self.mechanism]
        for name in _PARAMETERS:
            value = getattr(self, name)
            if name not in used and value is not None:
                raise ValueError(f"{self.mechanism} event has no field {name!r}")
            if name in used and value is None and name not in _OPTIONAL.get(self.mechanism, ()):
                raise ValueError(f"{self.mechanism} event needs {name!r}")
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if self.mechanism in ZCDP_MECHANISMS:
            self._check_rho()
        elif self.mechanism == "dpsgd":
            self._check_dpsgd()
        else:
            self._check_external()
        if self.mechanism != "external" and self.neighbouring is not None:
            raise ValueError(f"{self.mechanism} event has no field 'neighbouring'")

    def _check_external(self) -> None:
        if self.neighbouring not in NEIGHBOURING_RELATIONS:
            raise ValueError(
                f"{self.label}: an external event needs neighbouring 'replace_one' or "
                f"'add_remove', got {self.neighbouring!r}"
            )
        if not (self.delta is not None and self.delta < 1):
            raise ValueError(f"external delta must be < 1, got {self.delta}")
        from dpql.privacy.accountant import replace_one_guarantee

        assert self.declared_epsilon is not None and self.declared_delta is not None
        eps, delta = replace_one_guarantee(
            self.declared_epsilon, self.declared_delta, self.neighbouring
        )
        assert self.epsilon is not None
        if not (
            math.isclose(self.epsilon, eps, rel_tol=1e-12)
            and math.isclose(self.delta, delta, rel_tol=1e-12)
        ):
            raise ValueError(
                f"{self.label}: charged (epsilon, delta) = ({self.epsilon!r}, {self.delta!r}) is "
                f"not the replace-one conversion ({eps!r}, {delta!r}) of the declared "
                f"{self.neighbouring} guarantee"
            )

    def _check_rho(self) -> None:
        if not (self.noise_scale and self.rho and self.rho > 0):
            raise ValueError("a zCDP event needs noise_scale > 0 and rho > 0")
        implied = self.implied_rho
        if not math.isclose(self.rho, implied, rel_tol=_RHO_RTOL):
            raise ValueError(
                f"{self.label}: recorded rho={self.rho!r} but the noise parameters give {implied!r}"
            )

    def _check_dpsgd(self) -> None:
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"dpsgd steps must be an integer >= 1, got {self.steps!r}")
        if not (self.sampling_rate and 0 < self.sampling_rate <= 1):
            raise ValueError(f"dpsgd sampling_rate must be in (0, 1], got {self.sampling_rate!r}")
        if not (self.noise_multiplier and self.noise_scale == self.noise_multiplier):
            raise ValueError("dpsgd needs noise_multiplier > 0 and noise_scale == noise_multiplier")

    @property
    def implied_rho(self) -> float:
        """The zCDP rho that the noise parameters give (what the accountant uses)."""
        assert self.noise_scale is not None
        if self.mechanism == "gaussian":
            assert self.l2_sensitivity is not None
            return (self.l2_sensitivity / self.noise_scale) ** 2 / 2
        if self.mechanism == "gumbel_top_k":
            assert self.score_sensitivity is not None
            return self.count * (self.score_sensitivity / self.noise_scale) ** 2 / 2
        raise ValueError(f"a {self.mechanism} event has no zCDP rho")

    @classmethod
    def dpsgd(
        cls,
        phase: str,
        label: str,
        *,
        sampling_rate: float,
        noise_multiplier: float,
        steps: int,
        clip_norm: float | None = None,
    ) -> PrivacyEvent:
        """``steps`` DP-SGD steps with Poisson sampling rate q and noise std z * clip_norm."""
        return cls(
            phase,
            "dpsgd",
            label,
            sampling_rate=sampling_rate,
            noise_multiplier=noise_multiplier,
            noise_scale=noise_multiplier,
            steps=steps,
            l2_sensitivity=clip_norm,
        )

    @classmethod
    def external(
        cls, phase: str, label: str, *, epsilon: float, delta: float, neighbouring: str
    ) -> PrivacyEvent:
        """A release made outside dpql on the same private rows, declared (``epsilon``,
        ``delta``)-DP under ``neighbouring``; the event charges its replace-one conversion."""
        from dpql.privacy.accountant import replace_one_guarantee

        if neighbouring not in NEIGHBOURING_RELATIONS:
            raise ValueError(f"unknown neighbouring relation {neighbouring!r}")
        eps, charged_delta = replace_one_guarantee(epsilon, delta, neighbouring)
        return cls(
            phase,
            "external",
            label,
            epsilon=eps,
            delta=charged_delta,
            neighbouring=neighbouring,
            declared_epsilon=epsilon,
            declared_delta=delta,
        )

    def to_json(self) -> dict[str, Any]:
        """The event's fields, omitting those that are ``None``."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PrivacyEvent:
        return cls(**data)


class Ledger:
    """Append-only record of a release's privacy events, and the release's odometer.

    A ledger created with the release's budget refuses, by raising :class:`BudgetExceeded` in
    :meth:`append` (which every mechanism calls *before* it draws noise), any event that would take
    the composed spend over that budget:

    * ``rho_budget``: the zCDP total of the Gaussian and Gumbel events (``math.fsum`` of their
      rho, the correctly rounded exact sum) may not exceed it, with no tolerance. Allocate with
      :func:`dpql.privacy.budget.split_rho` or :func:`~dpql.privacy.budget.divide_rho` so the
      parts never sum above the total.
    * ``epsilon_budget`` at ``delta``: the (epsilon, delta)-DP of *all* events, DP-SGD (RDP) and
      external (epsilon, delta) ones included, as :mod:`dpql.privacy.accountant` composes them,
      may not exceed it by more than the relative :data:`EPSILON_RTOL` (floating-point slack of
      the conversion). An event whose external delta uses up ``delta`` is refused too.

    ``dpql compile`` creates its ledger with :meth:`for_budget` from the plan's budget. A ledger
    without a budget (``Ledger()``) records only; it is for tests and benchmarks.
    """

    def __init__(
        self,
        events: Iterable[PrivacyEvent] = (),
        *,
        rho_budget: float | None = None,
        epsilon_budget: float | None = None,
        delta: float | None = None,
    ) -> None:
        if epsilon_budget is not None and delta is None:
            raise ValueError("an epsilon budget needs its delta")
        if delta is not None and not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        for name, value in (
            ("rho_budget", rho_budget),
            ("epsilon_budget", epsilon_budget),
        ):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        self._events: list[PrivacyEvent] = []
        self.rho_budget = rho_budget
        self.epsilon_budget = epsilon_budget
        self.delta = delta
        for event in events:
            self.append(event)

    @classmethod
    def for_budget(cls, *, epsilon: float, delta: float, rho: float) -> Ledger:
        """An empty odometer for a release of (``epsilon``, ``delta``)-DP whose own zCDP
        mechanisms may spend ``rho`` (the plan's :class:`~dpql.plan.planner.Budget`)."""
        return cls(rho_budget=rho, epsilon_budget=epsilon, delta=delta)

    def append(self, event: PrivacyEvent) -> None:
        """Record ``event``, or raise :class:`BudgetExceeded` (recording nothing) if it would
        take the spend over the budget."""
        if self.rho_budget is not None and event.rho is not None:
            spent = self.total_rho()
            rhos = [e.rho for e in self._events if e.rho is not None]
            if math.fsum([*rhos, event.rho]) > self.rho_budget:  # one rounding of the exact sum
                remaining = max(0.0, self.rho_budget - spent)
                raise BudgetExceeded(requested=event.rho, remaining=remaining, what=event.label)
        if self.epsilon_budget is not None:
            self._check_epsilon(event)
        self._events.append(event)

    def _check_epsilon(self, event: PrivacyEvent) -> None:
        assert self.epsilon_budget is not None and self.delta is not None
        after = _composed_epsilon([*self._events, event], self.delta)
        if after <= self.epsilon_budget * (1 + EPSILON_RTOL):
            return
        before = _composed_epsilon(self._events, self.delta)
        shown = "inf (delta used up)" if math.isinf(after) else f"{after:.12g}"
        raise BudgetExceeded(
            requested=after - before,
            remaining=max(0.0, self.epsilon_budget - before),
            what=event.label,
            unit="epsilon",
            message=(
                f"privacy budget exceeded by {event.label!r} ({event.phase}, {event.mechanism}): "
                f"it would take the composed spend from epsilon={before:.12g} to "
                f"epsilon={shown} at delta={self.delta:g}, over the budget "
                f"epsilon={self.epsilon_budget:g}"
            ),
        )

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return tuple(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def total_rho(self) -> float:
        """zCDP rho of the Gaussian and Gumbel events (correctly rounded sum)."""
        return math.fsum(e.rho for e in self._events if e.rho is not None)

    def epsilon(self, delta: float) -> float:
        """(epsilon, delta)-DP of everything recorded, recomputed by the accountant."""
        from dpql.privacy.accountant import epsilon_from_events

        return epsilon_from_events(self._events, delta).epsilon

    def to_json(self) -> dict[str, Any]:
        return {
            "rho_budget": self.rho_budget,
            "epsilon_budget": self.epsilon_budget,
            "delta": self.delta,
            "events": [e.to_json() for e in self._events],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ledger:
        events = (PrivacyEvent.from_json(e) for e in data["events"])
        return cls(
            events,
            rho_budget=data.get("rho_budget"),
            epsilon_budget=data.get("epsilon_budget"),
            delta=data.get("delta"),
        )


def _composed_epsilon(events: Sequence[PrivacyEvent], delta: float) -> float:
    """Epsilon at ``delta`` of ``events`` composed; ``inf`` if external deltas use up ``delta``.

    zCDP-only ledgers convert their rho sum directly (what the accountant gives for them, to
    within 1e-9); any DP-SGD or external event sends the whole ledger through the accountant.
    """
    from dpql.privacy.accountant import eps_from_rho, epsilon_from_events

    if not events:
        return 0.0
    if all(e.mechanism in ZCDP_MECHANISMS for e in events):
        return eps_from_rho(math.fsum(e.implied_rho for e in events), delta)
    try:
        return epsilon_from_events(events, delta).epsilon
    except ValueError:  # the external events' delta is >= delta: no epsilon is finite
        return math.inf
