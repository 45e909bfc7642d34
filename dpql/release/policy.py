"""Policy check of a release spec (``dpql check release.yaml --policy policy.yaml``).

Reads the spec, the policy and the policy's release ledger; never the data (DESIGN invariant 1).
Each rule that fails gives one :class:`Violation` (codes ``P0xx`` in :mod:`dpql.spec.codes`).

The release's (epsilon, delta) is the spec's ``privacy`` block, or for a rho-only spec the
epsilon the privacy layer converts rho to, passed in as ``requested_epsilon``. For
``synthesizer: external`` the privacy block is the release total, the external table's budget
included (the planner spends only the remainder on post-processing).

Lifetime budget. The ledger (JSONL, one :class:`ReleaseRecord` per line) lists earlier releases
of the same data source. Two sound statements of their spend with this release added:

* basic composition (Dwork & Roth 2014, Thm. 3.16): epsilons add and deltas add. It holds
  whatever each release's accounting was, so it applies to every release;
* RDP composition (Mironov 2017, Prop. 1) of the releases that carry their RDP curve (``rdp``,
  copied from the provenance record by ``dpql compile``; for this release, the planned curve):
  the curves are summed at every order they share and converted once with dp-accounting's tight
  conversion (CKS 2020) at the largest delta any of them was converted at, so with equal deltas
  the result is at least every release's own epsilon. RDP composition does not add deltas. The
  external tables' (epsilon, delta) and the releases without a curve (hand-written lines, GAN
  releases before compile) are added on top by basic composition.

:class:`LifetimeBudget` reports and enforces the statement with the smaller epsilon among those
within both caps: ``lifetime.epsilon`` (P007) and, when set, ``lifetime.delta`` (P008). A
record's ``rho`` is informational and null unless the release was pure zCDP; it is never used to
compose (a record from an older dpql may hold only the zCDP part of a release there, so
composing it could undercount).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dpql.diagnostics import DiagnosticError, InternalError, SourcePos
from dpql.domain import NumericColumn
from dpql.privacy.accountant import (
    DEFAULT_ORDERS,
    compose_rdp_curves,
    eps_and_order_from_rho,
    epsilon_from_rdp,
    rho_from_eps_delta,
)
from dpql.release.lifetime import (
    RdpCurve,
    ReleaseRecord,
    ledger_location_error,
    of_source,
    read_ledger,
    real_path,
)
from dpql.spec.load import LoadedPolicy, LoadedSpec
from dpql.synth.base import backend

_SLACK = 1e-12  # float round-off in sums of epsilons must not fail a release at the limit


@dataclass(frozen=True)
class Violation:
    """One failed policy rule: a stable code, a one-line message and how to fix it.

    ``spec_key`` or ``policy_key`` is the key path where the fix goes (``("privacy",
    "epsilon")`` in the spec, ``("lifetime", "epsilon")`` in the policy): the diagnostic's
    position (:func:`violation_pos`)."""

    code: str
    message: str
    hint: str | None = None
    spec_key: tuple[str, ...] = ()
    policy_key: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_json(self) -> dict[str, str | None]:
        return {"code": self.code, "message": self.message, "hint": self.hint}




@dataclass(frozen=True)
class ReleaseBudget:
    """What one release spends in total (for ``external``, the external table's budget
    included, as ``privacy`` states it; see :func:`planned_spend`). ``rdp`` is the planned
    curve of the release (None: it composes by basic composition only)."""

    epsilon: float
    delta: float
    rho: float | None
    rdp: RdpCurve | None = None


def planned_curve(
    rho: float, delta: float, external_epsilon: float = 0.0, external_delta: float = 0.0
) -> RdpCurve:
    """The RDP curve ``rho * alpha`` of a release whose own mechanisms spend at most ``rho``
    (zCDP), on dp-accounting's orders plus the optimal order at ``delta - external_delta``, with
    the external (epsilon, delta) it adds by basic composition."""
    alpha = eps_and_order_from_rho(rho, delta - external_delta)[1]
    orders = sorted(set(DEFAULT_ORDERS) | ({alpha} if math.isfinite(alpha) else set()))
    return RdpCurve(
        orders=orders,
        epsilons=[rho * a for a in orders],
        external_epsilon=external_epsilon,
        external_delta=external_delta,
    )


def planned_spend(
    spec: LoadedSpec,
    requested_epsilon: float | None = None,
    requested_delta: float | None = None,
    requested_rho: float | None = None,
) -> ReleaseBudget:
    """The release's total budget.

    ``requested_epsilon`` defaults to the spec's ``privacy.epsilon``; a rho-only spec must pass
    the epsilon the privacy layer computed at ``requested_delta`` (default:
    ``spec.target_delta``). For ``synthesizer: external`` the privacy block is the release's
    total, the external table's budget (converted to replace-one) included (the planner spends
    only the rest), so nothing is added here.

    ``rho`` is set only for a release that is all zCDP (``rap``): an external table or DP-SGD
    (``gan``) is not zCDP, so theirs is None. ``rdp`` is the planned curve: dpql's own zCDP part
    (``requested_rho``, ``privacy.rho`` or the rho the planner derives from (epsilon, delta)) plus
    the external table's converted (epsilon, delta); None for ``gan``, whose DP-SGD curve is
    known after calibration only (it then composes by basic composition).
    """
    privacy = spec.model.privacy
    epsilon = requested_epsilon if requested_epsilon is not None else privacy.epsilon
    if epsilon is None:
        raise InternalError("a rho-only spec needs requested_epsilon from dpql.privacy")
    delta = requested_delta if requested_delta is not None else spec.target_delta
    rho = requested_rho if requested_rho is not None else privacy.rho
    synth = backend(spec.model.synthesizer.method)
    ext_eps, ext_delta = synth.declared_budget(spec)
    curve = None
    if synth.traits.planned_curve:
        own = rho
        if own is None and epsilon > ext_eps and delta > ext_delta:
            own = rho_from_eps_delta(epsilon - ext_eps, delta - ext_delta)
        if own is not None and delta > ext_delta:
            curve = planned_curve(own, delta, ext_eps, ext_delta)
    if not synth.traits.zcdp_only:
        rho = None
    return ReleaseBudget(epsilon, delta, rho, curve)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """(epsilon, delta)-DP of rho-zCDP: rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016,
    Prop. 1.3; as in Vietri et al. 2022, App. C). Looser than the tight conversion; not used
    for the lifetime."""
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def compose_releases(
    releases: Sequence[tuple[float, float, RdpCurve | None]],
) -> tuple[float, float, int] | None:
    """RDP composition of ``(epsilon, delta, curve)`` releases.

    The curves are summed at every order they share (RDP composition, Mironov 2017, Prop. 1)
    and converted once (dp-accounting's tight conversion) at the largest delta any of those
    releases converted its own curve at (``delta - external_delta``): with equal deltas the
    composed epsilon is then at least every release's own. RDP composition does not add deltas;
    the external tables' (epsilon, delta) and the releases without a curve are added on top by
    basic composition. Returns (epsilon, delta, number of releases composed by curve), or None
    when no release has a curve (or the curves share no order).
    """
    with_curve = [(d, c) for _, d, c in releases if c is not None]
    if not with_curve:
        return None
    try:
        orders, total = compose_rdp_curves((c.orders, c.epsilons) for _, c in with_curve)
    except ValueError:
        return None
    rdp_delta = max(d - c.external_delta for d, c in with_curve)
    if not rdp_delta > 0:
        return None
    basic_eps = math.fsum(
        [c.external_epsilon for _, c in with_curve] + [e for e, _, c in releases if c is None]
    )
    basic_delta = math.fsum(
        [c.external_delta for _, c in with_curve] + [d for _, d, c in releases if c is None]
    )
    epsilon = epsilon_from_rdp(orders, total, rdp_delta)[0] + basic_eps
    return epsilon, rdp_delta + basic_delta, len(with_curve)


@dataclass(frozen=True)
class LifetimeBudget:
    """Earlier releases in the ledger plus this one, against ``lifetime.epsilon`` (and
    ``lifetime.delta`` when the policy sets it). See the module docstring.

    Two sound statements of the lifetime spend: basic composition (epsilons add, deltas add)
    and RDP composition (:func:`compose_releases`). The one reported and enforced
    (:attr:`total_epsilon`, :attr:`total_delta`) is the one with the smaller epsilon among those
    within both caps (or, when neither is, the one with the smaller epsilon). The RDP epsilon is
    never reported below the largest single release's epsilon (at a larger delta the conversion
    could dip below it, which is sound but reads as an error; more is always sound).
    """

    limit: float
    releases: int
    recorded_epsilon: float
    this: ReleaseBudget
    recorded_delta: float
    composed_epsilon: float | None = None  # RDP composition (None: no release has a curve)
    composed_delta: float | None = None
    composed_releases: int = 0  # how many releases (this one included) composed by curve
    delta_limit: float | None = None
    largest_epsilon: float = 0.0  # the largest single release's epsilon (this one included)
    allow_rdp: bool = False  # the policy's `lifetime.composition: rdp`

    @property
    def basic_epsilon(self) -> float:
        """Basic composition: epsilons add (sound for every release)."""
        return self.recorded_epsilon + self.this.epsilon

    @property
    def basic_delta(self) -> float:
        return self.recorded_delta + self.this.delta

    def _fits(self, epsilon: float, delta: float) -> bool:
        return epsilon <= self.limit + _SLACK and (
            self.delta_limit is None or delta <= self.delta_limit
        )

    @property
    def uses_rdp(self) -> bool:
        """Whether the reported statement is the RDP composition (else basic composition)."""
        if not self.allow_rdp or self.composed_epsilon is None or self.composed_delta is None:
            return False
        rdp = (max(self.composed_epsilon, self.largest_epsilon), self.composed_delta)
        basic = (self.basic_epsilon, self.basic_delta)
        fitting = [s for s in (rdp, basic) if self._fits(*s)] or [rdp, basic]
        return min(fitting, key=lambda s: s[0]) is rdp

    @property
    def total_epsilon(self) -> float:
        """The lifetime epsilon the policy enforces (at :attr:`total_delta`)."""
        if self.uses_rdp:
            assert self.composed_epsilon is not None
            return max(self.composed_epsilon, self.largest_epsilon)
        return self.basic_epsilon

    @property
    def total_delta(self) -> float:
        """The lifetime delta of the reported statement (capped by ``lifetime.delta``)."""
        if self.uses_rdp:
            assert self.composed_delta is not None
            return self.composed_delta
        return self.basic_delta

    @property
    def exceeded(self) -> bool:
        return self.total_epsilon > self.limit + _SLACK

    @property
    def delta_exceeded(self) -> bool:
        return self.delta_limit is not None and self.total_delta > self.delta_limit

    def describe(self) -> str:
        """One line: requested vs recorded vs limit, and the composition used."""
        cap = f" of {self.delta_limit:g}" if self.delta_limit is not None else " (not capped)"
        head = (
            f"lifetime epsilon {self.total_epsilon:.4g} of {self.limit:g} at delta "
            f"{self.total_delta:.3g}{cap} (recorded: {self.releases} release(s), epsilon "
            f"{self.recorded_epsilon:.4g}, delta {self.recorded_delta:.3g}; this release: "
            f"{self.this.epsilon:.4g}, {self.this.delta:.3g}; "
        )
        if self.uses_rdp:
            rest = self.releases + 1 - self.composed_releases
            others = f" for {rest} release(s) without one and" if rest else ""
            return head + (
                f"RDP composition of {self.composed_releases} release curve(s), basic "
                f"composition{others} for external tables; basic composition alone gives "
                f"{self.basic_epsilon:.4g} at delta {self.basic_delta:.3g})"
            )
        composed = self.composed_epsilon
        alt = (
            f"; RDP composition gives {max(composed, self.largest_epsilon):.4g} at delta "
            f"{self.composed_delta:.3g}"
            if composed is not None
            else ""
        )
        return head + f"basic composition, epsilons and deltas add{alt})"


def lifetime_budget(
    limit: float,
    records: list[ReleaseRecord],
    this: ReleaseBudget,
    delta_limit: float | None = None,
    composition: str = "basic",
) -> LifetimeBudget:
    """The lifetime spend of ``records`` plus ``this`` against ``limit``: basic composition, or
    with ``composition="rdp"`` the smaller of basic and RDP composition (both sound)."""
    composed = compose_releases(
        [(r.epsilon, r.delta, r.rdp) for r in records] + [(this.epsilon, this.delta, this.rdp)]
    )
    return LifetimeBudget(
        limit=limit,
        releases=len(records),
        recorded_epsilon=math.fsum(r.epsilon for r in records),
        this=this,
        recorded_delta=math.fsum(r.delta for r in records),
        composed_epsilon=composed[0] if composed else None,
        composed_delta=composed[1] if composed else None,
        composed_releases=composed[2] if composed else 0,
        delta_limit=delta_limit,
        largest_epsilon=max([r.epsilon for r in records] + [this.epsilon]),
        allow_rdp=composition == "rdp",
    )


def lifetime_report(
    policy: LoadedPolicy,
    spend: ReleaseBudget,
    ledger_path: str | os.PathLike[str] | None = None,
    data: Path | None = None,
) -> LifetimeBudget | None:
    """The lifetime budget with this release added (None when the policy sets no lifetime),
    over the ledger's lines that count against the data file ``data`` (all lines when None;
    :func:`dpql.release.lifetime.of_source`). ``ledger_path`` defaults to the policy's
    ``lifetime.ledger``; a missing ledger holds no release (``dpql compile`` creates it; a typo
    that hides the real ledger is caught by :func:`dpql.release.project.choose_ledger`, E616);
    E020 if it is malformed, E615 if it is not a usable file."""
    lifetime = policy.model.lifetime
    path = ledger_path if ledger_path is not None else policy.ledger_path
    if lifetime is None or path is None:
        return None
    problem = ledger_location_error(
        path, must_exist=False, named_by=f"lifetime.ledger of {policy.path}"
    )
    if problem is not None:
        raise DiagnosticError([problem])
    records = read_ledger(path)
    if data is not None:
        records = [r for r in records if of_source(r, Path(path), data)]
    return lifetime_budget(
        lifetime.epsilon, records, spend, lifetime.delta, lifetime.composition
    )


def check_policy(
    spec: LoadedSpec,
    policy: LoadedPolicy,
    ledger_path: str | os.PathLike[str] | None = None,
    requested_epsilon: float | None = None,
    *,
    requested_delta: float | None = None,
    requested_rho: float | None = None,
    data: Path | None = None,
    estimated_seconds: float | None = None,
) -> list[Violation]:
    """Every rule of ``policy`` that ``spec`` breaks (empty list: the spec passes).

    ``ledger_path`` defaults to the policy's ``lifetime.ledger`` (relative to the policy file);
    its lines of the data source ``data`` (default: the spec's data file) count. See
    :func:`planned_spend` for ``requested_*``. ``estimated_seconds`` is the plan's
    compile-time estimate (``plan.resources.seconds``), checked against ``max_minutes``.
    Raises DiagnosticError (E020) when the ledger is malformed: a budget we cannot read is not
    a budget we can check.
    """
    rules = policy.model
    spend = planned_spend(spec, requested_epsilon, requested_delta, requested_rho)
    out: list[Violation] = []
    if spend.epsilon > rules.max_epsilon + _SLACK:
        out.append(
            Violation(
                "P001",
                f"epsilon {spend.epsilon:g} exceeds max_epsilon {rules.max_epsilon:g}",
                f"lower privacy.epsilon to at most {rules.max_epsilon:g} (dpql plan shows what "
                "each requirement needs), or ask the policy's owner for a higher cap",
                spec_key=("privacy", "epsilon"),
            )
        )
    if spend.delta > rules.max_delta:
        out.append(
            Violation(
                "P002",
                f"delta {spend.delta:g} exceeds max_delta {rules.max_delta:g}",
                f"lower privacy.delta to at most {rules.max_delta:g}",
                spec_key=("privacy", "delta"),
            )
        )
    forbidden = {c.casefold() for c in rules.forbidden_columns}
    for name in spec.domain.names:
        if name.casefold() in forbidden:
            out.append(
                Violation(
                    "P003",
                    f"column '{name}' is forbidden by the policy",
                    f"remove '{name}' from the schema (its values are then never read)",
                    spec_key=("schema", name),
                )
            )
    methods = [("synthesizer", spec.model.synthesizer.method)]
    if spec.model.postprocess is not None:
        methods.append(("postprocess", spec.model.postprocess.method))
    for role, method in methods:
        if method not in rules.allowed_methods:
            allowed = ", ".join(rules.allowed_methods) or "none"
            out.append(
                Violation(
                    "P004",
                    f"{role} method '{method}' is not allowed by the policy",
                    f"use one of the policy's allowed_methods ({allowed}) as {role}.method"
                    + (" (no method: means auto)" if method == "auto" else ""),
                    spec_key=(role, "method"),
                )
            )
    if rules.require.public_bounds:
        out += _public_bounds(spec)
    if rules.require.delta_below_inverse_rows and spend.delta >= 1.0 / spec.rows:
        out.append(
            Violation(
                "P006",
                f"delta {spend.delta:g} is not below 1/rows = {1.0 / spec.rows:.3g}",
                f"lower privacy.delta below {1.0 / spec.rows:.3g}, e.g. "
                f"{_smaller_delta(spec.rows):g}",
                spec_key=("privacy", "delta"),
            )
        )
    if rules.max_minutes is not None and estimated_seconds is not None:
        if estimated_seconds > rules.max_minutes * 60:
            out.append(
                Violation(
                    "P009",
                    f"dpql compile is estimated to take about {estimated_seconds / 60:,.0f} "
                    f"minutes, over max_minutes {rules.max_minutes:g}",
                    policy_key=("max_minutes",),
                )
            )
    source = real_path(data if data is not None else spec.data_path)
    budget = lifetime_report(policy, spend, ledger_path, source)
    if budget is not None:
        out += lifetime_violations(budget)
    return out


def violation_pos(v: Violation, spec: LoadedSpec, policy: LoadedPolicy) -> SourcePos:
    """Where ``v`` is fixed: its key (or the nearest key above it that is written) in the spec
    or the policy, else the policy file."""
    for doc, key in ((spec.doc, v.spec_key), (policy.doc, v.policy_key)):
        for n in range(len(key), 0, -1):
            if doc.has(key[:n]):
                return doc.key_pos(key[:n])
    return SourcePos(str(policy.path))


def lifetime_violations(budget: LifetimeBudget) -> list[Violation]:
    """P007/P008 for a lifetime budget over its caps (empty list: within them)."""
    out = []
    if budget.exceeded:
        out.append(
            Violation(
                "P007",
                f"exceeded: {budget.describe()}",
                "lower privacy.epsilon, or release this data source no more: the lifetime cap "
                "counts every earlier release in the ledger",
                policy_key=("lifetime", "epsilon"),
            )
        )
    if budget.delta_exceeded:
        out.append(
            Violation(
                "P008",
                f"delta exceeded: {budget.describe()}",
                "lower privacy.delta: the lifetime cap adds the deltas of every release",
                policy_key=("lifetime", "delta"),
            )
        )
    return out


def _public_bounds(spec: LoadedSpec) -> list[Violation]:
    """Defence in depth: the spec model already requires these, so a spec built some other
    way (e.g. in Python) is caught here too."""
    out = []
    for col in spec.domain:
        if isinstance(col, NumericColumn):
            ok = math.isfinite(col.lo) and math.isfinite(col.hi) and col.lo < col.hi
            what = "finite public min < max"
        else:
            ok = col.card > 0
            what = "a public list of values"
        if not ok:
            out.append(
                Violation(
                    "P005",
                    f"column '{col.name}' lacks {what}",
                    "take the bounds or values from public documentation, never from the data",
                    spec_key=("schema", col.name),
                )
            )
    return out


def _smaller_delta(rows: int) -> float:
    """A power of ten well below ``1 / rows`` (a hint's example value)."""
    return 10.0 ** math.floor(math.log10(1.0 / rows) - 1)
