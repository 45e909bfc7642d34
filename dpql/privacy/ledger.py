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
``external``     ``epsilon``, ``delta``: a table or statistic produced elsewhere on the same
                 private data, with its declared (epsilon, delta)-DP guarantee
============== ========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
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
    "external": frozenset({"epsilon", "delta"}),
}
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
)
_OPTIONAL: frozenset[str] = frozenset({"l2_sensitivity"})  # the clip norm of a dpsgd event
_RHO_RTOL = 1e-9


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
            if name in used and value is None and name not in _OPTIONAL:
                raise ValueError(f"{self.mechanism} event needs {name!r}")
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if self.mechanism in ZCDP_MECHANISMS:
            self._check_rho()
        elif self.mechanism == "dpsgd":
            self._check_dpsgd()
        elif not (self.delta is not None and self.delta < 1):
            raise ValueError(f"external delta must be < 1, got {self.delta}")

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
    def external(cls, phase: str, label: str, *, epsilon: float, delta: float) -> PrivacyEvent:
        """A declared (epsilon, delta)-DP release made outside dpql on the same private rows."""
        return cls(phase, "external", label, epsilon=epsilon, delta=delta)

    def to_json(self) -> dict[str, Any]:
        """The event's fields, omitting those that are ``None``."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PrivacyEvent:
        return cls(**data)


class Ledger:
    """Append-only record of a release's privacy events.

    With ``rho_budget`` set, an append that would take the zCDP total (``math.fsum`` of the events'
    rho, i.e. the correctly rounded exact sum) above the budget raises :class:`BudgetExceeded`
    *before* the mechanism releases anything. Allocate with :func:`dpql.privacy.budget.split_rho`
    or :func:`~dpql.privacy.budget.divide_rho` so the parts never sum above the total. DP-SGD and
    external events are not covered by the rho cap: check ``epsilon(delta)`` against the target.
    """

    def __init__(
        self, events: Iterable[PrivacyEvent] = (), *, rho_budget: float | None = None
    ) -> None:
        self._events: list[PrivacyEvent] = []
        self.rho_budget = rho_budget
        for event in events:
            self.append(event)

    def append(self, event: PrivacyEvent) -> None:
        if self.rho_budget is not None and event.rho is not None:
            spent = self.total_rho()
            rhos = [e.rho for e in self._events if e.rho is not None]
            if math.fsum([*rhos, event.rho]) > self.rho_budget:  # one rounding of the exact sum
                remaining = max(0.0, self.rho_budget - spent)
                raise BudgetExceeded(requested=event.rho, remaining=remaining, what=event.label)
        self._events.append(event)

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
        return {"rho_budget": self.rho_budget, "events": [e.to_json() for e in self._events]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ledger:
        events = (PrivacyEvent.from_json(e) for e in data["events"])
        return cls(events, rho_budget=data.get("rho_budget"))
