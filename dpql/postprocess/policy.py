"""The post-processing policy and the one place that decides each requirement's role.

A ``within t`` requirement passes when ``|v - v_noisy| + z sd <= t`` (``dpql.postprocess.accept``):
``v`` its value on the released table, ``v_noisy`` the DP measurement's value, ``sd`` the
measurement's delta-method sd. Post-processing puts ``v`` inside the *band* ``v_noisy +- h``
with ``h = band * (t - z sd)``, moving the table as little as the MAP I-projection allows
(``docs/postprocess.md``). Each requirement has exactly one role (:func:`decide_roles`):

* ``inside``: the table's value already lies in its band; its box is kept (so other moves
  cannot push it out) but it moves nothing;
* ``constrained``: outside its band; its box pulls the value to the band's edge;
* ``no_room``: ``t <= z sd``: no table can pass, so nothing is constrained (``W511``);
* ``unbanded``: no value post-processing can place (a bound, a linear model, an undefined
  value on the noisy answers).

Public: functions of DP outputs, the plan and the synthetic table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from dpql.diagnostics import DiagnosticError
from dpql.domain import Domain
from dpql.ir.queries import ModelRequirement, Query, Requirement
from dpql.plan.acceptance import Z
from dpql.plan.estimates import requirement_value, value_sd
from dpql.plan.requirements import piloted

RoleName = Literal["inside", "constrained", "no_room", "unbanded"]


@dataclass(frozen=True)
class PostprocessPolicy:
    """Every choice post-processing makes, passed explicitly and written into the record
    (``postprocess.policy``). Each field's principle is in ``docs/postprocess.md``."""

    # the synthesizer's table is a prior worth this fraction of its rows; None: worth what the
    # noise leaves undecided (:meth:`prior_strength`)
    prior_rows: float | None = None
    ess_floor: float = 0.5  # never release weights worth fewer than this fraction of the rows
    z: float = Z  # the verdicts' z: a pass needs |v - v_noisy| + z sd <= t
    band: float = 0.5  # h = band * (t - z sd): the rest of the room is the verdict's margin

    def __post_init__(self) -> None:
        if self.prior_rows is not None and not self.prior_rows > 0:
            raise ValueError("prior_rows must be positive (or None: from the noise)")
        if not (0 <= self.ess_floor < 1 and self.z > 0):
            raise ValueError("0 <= ess_floor < 1 and z > 0 are required")
        if not 0 < self.band <= 1:
            raise ValueError("band must lie in (0, 1]")

    def to_json(self) -> dict[str, float | None]:
        return asdict(self)

    def prior_strength(self, rows: int, sds: Sequence[float]) -> float:
        """The MAP prior's strength in rows: ``prior_rows * rows`` when set; else ``z / s``,
        ``s`` the median noise sd per cell of the synthesizer's measured answers (``sds``, a
        fraction of n), at most ``rows``. Why ``z / s``: moving a cell of share ``p`` by
        ``d`` costs the prior ``m d^2 / (2 p)`` and its measurement ``d^2 / (2 s^2)``, equal at
        ``p = m s^2``; with ``m = z / s`` the prior decides the cells the noise cannot resolve
        (share below ``z s``) and the measurements decide the rest. The synthetic table is a
        function of those same measurements, so a stronger prior counts their evidence twice
        and outweighs it. Without measured answers the table is worth its rows."""
        if self.prior_rows is not None:
            return self.prior_rows * rows
        finite = [s for s in sds if math.isfinite(s) and s > 0]
        if not finite:
            return float(rows)
        return min(float(rows), self.z / float(np.median(finite)))


DEFAULT_POLICY = PostprocessPolicy()


@dataclass(frozen=True, eq=False)
class Role:
    """One requirement's role and the figures that decided it: its value on the table before
    post-processing and on the noisy answers, the value's sd, its band's half-width, and
    ``gradient`` (K,), d value / d measure at the table's moments (None when ``unbanded``)."""

    index: int
    role: RoleName
    before: float = math.nan
    noisy: float = math.nan
    sd: float = math.nan
    half_width: float = math.nan
    gradient: np.ndarray | None = None

    @property
    def banded(self) -> bool:
        """Whether the requirement gets a box in the projection."""
        return self.role in ("inside", "constrained")

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "requirement": self.index,
            "role": self.role,
            "before": num(self.before),
            "noisy": num(self.noisy),
            "sd": num(self.sd),
            "half_width": num(self.half_width),
        }


def _value_and_gradient(
    req: Requirement, answers: Mapping[Query, float], queries: Sequence[Query], domain: Domain
) -> tuple[float, np.ndarray]:
    """The requirement's value at ``answers`` and its gradient over the measures."""
    from dpql.postprocess.allocation import value_gradient

    v = requirement_value(req, answers, domain)
    g = np.zeros(len(queries))
    where = {q: k for k, q in enumerate(queries)}
    for q, d in value_gradient(req, answers, domain).items():
        g[where[q]] += d
    return v, g


def decide_roles(
    requirements: Sequence[Requirement],
    index: Sequence[Sequence[int]],
    queries: Sequence[Query],
    noisy: np.ndarray,
    sigma: np.ndarray,
    before: np.ndarray,
    domain: Domain,
    policy: PostprocessPolicy,
) -> tuple[Role, ...]:
    """Each requirement's role (module docstring). ``index[i]`` are requirement i's measure
    cells; ``noisy`` / ``sigma`` the measurement (DP outputs), ``before`` the measures on the
    synthetic table. A piloted logistic's value is its pilot accuracy (one cell); a corr / mean /
    count's is :func:`~dpql.plan.estimates.requirement_value`, its sd the delta method at the
    table's moments."""
    at_noisy = dict(zip(queries, np.asarray(noisy, dtype=float).tolist(), strict=True))
    at_before = dict(zip(queries, np.asarray(before, dtype=float).tolist(), strict=True))
    sigmas = dict(zip(queries, np.asarray(sigma, dtype=float).tolist(), strict=True))
    out = []
    for i, (req, cells) in enumerate(zip(requirements, index, strict=True)):
        t = req.tolerance.within
        if t is None or not cells:
            out.append(Role(i, "unbanded"))
            continue
        if isinstance(req, ModelRequirement):
            if not (piloted(req) and len(cells) == 1):
                out.append(Role(i, "unbanded"))
                continue
            k = cells[0]
            g = np.zeros(len(queries))
            g[k] = 1.0
            v0, v, sd = float(before[k]), float(noisy[k]), float(sigma[k])
        else:
            try:
                v = requirement_value(req, at_noisy, domain)
                try:
                    v0, g = _value_and_gradient(req, at_before, queries, domain)
                    sd = value_sd(req, at_before, sigmas, domain)
                except DiagnosticError:  # undefined on the table: linearise at the noisy one
                    _, g = _value_and_gradient(req, at_noisy, queries, domain)
                    v0, sd = math.nan, value_sd(req, at_noisy, sigmas, domain)
            except DiagnosticError:  # undefined on the noisy answers: nothing to aim at
                out.append(Role(i, "unbanded"))
                continue
        if not (math.isfinite(sd) and np.all(np.isfinite(g)) and np.any(g)):
            out.append(Role(i, "unbanded", v0, v, sd))
            continue
        room = t - policy.z * sd
        if room <= 0:
            out.append(Role(i, "no_room", v0, v, sd, 0.0))
            continue
        h = policy.band * room
        role: RoleName = "inside" if abs(v0 - v) <= h else "constrained"
        out.append(Role(i, role, v0, v, sd, h, g))
    return tuple(out)


def value_at(
    role: Role, req: Requirement, queries: Sequence[Query], at: np.ndarray, domain: Domain
) -> float:
    """The requirement's value at the measures ``at`` (NaN where undefined): a pilot's accuracy
    cell, or :func:`~dpql.plan.estimates.requirement_value`."""
    if isinstance(req, ModelRequirement):
        assert role.gradient is not None
        return float(role.gradient @ at)
    try:
        return requirement_value(req, dict(zip(queries, np.asarray(at).tolist(), strict=True)),
                                 domain)  # fmt: skip
    except DiagnosticError:
        return math.nan


def reachable(role: Role, value: float, req: Requirement, policy: PostprocessPolicy) -> bool:
    """Whether ``value`` passes the verdict's condition ``|v - v_noisy| + z sd <= t``."""
    t = req.tolerance.within
    return t is not None and abs(value - role.noisy) + policy.z * role.sd <= t


def linearise_at(
    roles: Sequence[Role],
    requirements: Sequence[Requirement],
    queries: Sequence[Query],
    at: np.ndarray,
    domain: Domain,
) -> tuple[Role, ...]:
    """The banded roles with their value and gradient taken at the measures ``at`` instead of
    the table's (the role itself, sd and band unchanged): a Gauss-Newton step for a value the
    first linearisation missed. A value undefined at ``at`` keeps its linearisation."""
    out = []
    answers = dict(zip(queries, np.asarray(at, dtype=float).tolist(), strict=True))
    for r in roles:
        req = requirements[r.index]
        if not r.banded or isinstance(req, ModelRequirement):
            out.append(replace(r, before=value_at(r, req, queries, at, domain)) if r.banded
                       else r)  # fmt: skip
            continue
        try:
            v, g = _value_and_gradient(req, answers, queries, domain)
        except DiagnosticError:
            out.append(r)
            continue
        out.append(replace(r, before=v, gradient=g) if np.all(np.isfinite(g)) else r)
    return tuple(out)
