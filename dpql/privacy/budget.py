"""Exact budget arithmetic and the budget table the planner prints.

Splitting a zCDP budget in floating point can make the parts sum to *more* than the total (e.g.
``3 * (0.3 / 3) > 0.3`` for some totals). Here every part is the largest float not above its exact
rational share (``fractions.Fraction``), so the parts' exact sum never exceeds the total; the
ledger sums with ``math.fsum`` (the correctly rounded exact sum) and therefore never reports an
overspend that the allocation did not make.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any


class BudgetExceeded(Exception):
    """A mechanism asked for more budget than is left (Tumult style: requested vs remaining).

    ``unit`` is what ``requested`` and ``remaining`` measure: ``"rho"`` (zCDP) or ``"epsilon"``
    (the composed (epsilon, delta) spend, where ``requested`` is the increase the event causes);
    ``message`` replaces the default text.
    """

    def __init__(
        self,
        requested: float,
        remaining: float,
        what: str = "",
        *,
        unit: str = "rho",
        message: str | None = None,
    ) -> None:
        self.requested = requested
        self.remaining = remaining
        self.what = what
        self.unit = unit
        where = f" by {what!r}" if what else ""
        super().__init__(
            message
            or f"privacy budget exceeded{where}: requested {unit}={requested!r}, "
            f"remaining {unit}={remaining!r}"
        )


def floor_float(x: Fraction) -> float:
    """The largest float that is <= x."""
    f = float(x)  # correctly rounded, so at most one step above x
    return math.nextafter(f, -math.inf) if Fraction(f) > x else f


def split_rho(total_rho: float, shares: Mapping[str, Fraction]) -> dict[str, float]:
    """Split ``total_rho`` into named parts ``total_rho * share`` (shares are exact, sum <= 1).

    Guarantee: the exact sum of the returned floats is <= ``total_rho`` (so is ``math.fsum`` of
    them), and so is their plain left-to-right ``sum`` in the mapping's order. Each part is within
    a few ulps below its exact share. A share sum below 1 leaves the rest unallocated.
    """
    if not (math.isfinite(total_rho) and total_rho >= 0):
        raise ValueError(f"total rho must be finite and >= 0, got {total_rho!r}")
    for name, share in shares.items():
        if not isinstance(share, Fraction | int) or share < 0:
            raise ValueError(f"share {name!r} must be a non-negative Fraction, got {share!r}")
    if sum(shares.values(), Fraction(0)) > 1:
        raise ValueError("budget shares sum to more than 1")
    total = Fraction(total_rho)
    parts = {name: floor_float(total * share) for name, share in shares.items()}
    # The exact sum is already <= total; rounding in a naive float sum may still land above it.
    while parts and sum(parts.values()) > total_rho:
        largest = max(parts, key=parts.__getitem__)
        parts[largest] = math.nextafter(parts[largest], -math.inf)
    return parts


def divide_rho(total_rho: float, parts: int) -> float:
    """Rho of each of ``parts`` equal releases: the largest r with parts * r <= total, exactly."""
    if parts < 1:
        raise ValueError(f"cannot divide a budget into {parts} parts")
    return floor_float(Fraction(total_rho) / parts)


@dataclass(frozen=True)
class BudgetLine:
    """One planned phase of a release, as ``dpql plan`` prints it.

    ``noise_scale`` is sigma (Gaussian; on the [0, 1] average scale of :mod:`dpql.ir.queries`), beta
    (Gumbel) or the noise multiplier (DP-SGD). ``n`` is the public row count.
    ``rho_per_release`` is ``None`` for phases not accounted in zCDP (DP-SGD, external).
    """

    phase: str
    mechanism: str
    releases: int
    rho_per_release: float | None
    noise_scale: float | None = None
    n: int | None = None
    #: values one Gaussian release of the line publishes, where the plan fixes them (``None`` in
    #: an adaptive phase, whose queries a selection picks); not part of the printed plan
    count: int | None = field(default=None, compare=False)

    @property
    def exact_rho(self) -> Fraction:
        """zCDP spent by the line, exactly (0 for phases accounted otherwise)."""
        if self.rho_per_release is None:
            return Fraction(0)
        return Fraction(self.rho_per_release) * self.releases

    @property
    def rho(self) -> float:
        return float(self.exact_rho)

    @property
    def noise_count(self) -> float | None:
        """Gaussian sigma expressed as a count of rows (sigma * n)."""
        if self.mechanism != "gaussian" or self.noise_scale is None or self.n is None:
            return None
        return self.noise_scale * self.n

    @property
    def expected_abs_error(self) -> float | None:
        """E|N(0, sigma^2)| = sigma * sqrt(2 / pi): expected absolute error of one noisy cell."""
        if self.mechanism != "gaussian" or self.noise_scale is None:
            return None
        return self.noise_scale * math.sqrt(2 / math.pi)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["count"]
        out.update(
            rho=self.rho, noise_count=self.noise_count, expected_abs_error=self.expected_abs_error
        )
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BudgetLine:
        derived = {"rho", "noise_count", "expected_abs_error"}
        return cls(**{k: v for k, v in data.items() if k not in derived})


@dataclass(frozen=True)
class BudgetTable:
    """The planned allocation: ordered lines and the zCDP total they spend.

    Raises :class:`BudgetExceeded` if the lines' exact zCDP total is above ``rho_budget``.
    """

    lines: tuple[BudgetLine, ...]
    rho_budget: float

    def __post_init__(self) -> None:
        total = sum((line.exact_rho for line in self.lines), Fraction(0))
        if total > Fraction(self.rho_budget):
            raise BudgetExceeded(requested=float(total), remaining=self.rho_budget, what="plan")

    @property
    def total_rho(self) -> float:
        return float(sum((line.exact_rho for line in self.lines), Fraction(0)))

    def to_json(self) -> dict[str, Any]:
        return {
            "rho_budget": self.rho_budget,
            "total_rho": self.total_rho,
            "lines": [line.to_json() for line in self.lines],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BudgetTable:
        return cls(tuple(BudgetLine.from_json(d) for d in data["lines"]), data["rho_budget"])
