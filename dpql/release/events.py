"""A provenance record's privacy events against the plan's budget table (``dpql verify``'s
``V016``/``V017``, :func:`event_problems`).

What the plan fixes, per budget-table line (:class:`dpql.privacy.budget.BudgetLine`), and what an
event must match (relative tolerance :data:`REL_TOL`):

* Gaussian and Gumbel lines: one event per release with the line's mechanism, phase and rho.
  Outside adaptive phases also its noise scale, its L2 sensitivity and its count (the values it
  releases: the cells of the line's queries), exactly. In an adaptive phase (one with a Gumbel
  selection, such as a RAP++ or AIM round) which queries are measured is a DP output: the record
  lists them (:func:`listed_queries`), and the Gaussian's count, L2 sensitivity and noise scale
  must be those of the listed queries, exactly (their count over AIM's merged rare cells where
  the record states them, :func:`measured_cells`). The Gumbel selects at most the planned number
  of queries, so its scale is at most the plan's.
* DP-SGD lines: the noise multiplier and the number of steps, and where the backend's plan
  lists its events (``plan.synth.config.events()``), the sampling rate and clip norm.
* The external line: the charged (epsilon, delta) of the plan's budget, and the declared
  budget and neighbouring relation of the spec.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpql.privacy.budget import BudgetLine
from dpql.privacy.ledger import ZCDP_MECHANISMS, PrivacyEvent
from dpql.release.provenance import VerifyProblem

#: Relative tolerance when an event's numbers are compared with the plan's.
REL_TOL = 1e-9
#: Most problems of one code listed; the rest are counted.
MAX_LISTED = 10


def numbers_agree(a: float, b: float) -> bool:
    """Whether a recorded number is the planned one, within :data:`REL_TOL`."""
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)


@dataclass(frozen=True)
class PlannedEvent:
    """One ledger event the plan schedules: its budget-table ``line`` (number ``index``), the
    phase its event records, whether its phase is adaptive (has a Gumbel selection), and for
    DP-SGD the backend's planned event (sampling rate, clip norm) when it lists one. For a
    Gaussian, ``count`` and ``l2`` are the values it releases and its L2 sensitivity where the
    plan or the record's selections fix them, and ``unlisted`` says why an adaptive one's
    queries are unknown where its backend lists them."""

    line: BudgetLine
    index: int
    phase: str
    adaptive: bool
    planned: PrivacyEvent | None = None
    count: int | None = None
    l2: float | None = None
    unlisted: str | None = None

    def describe(self) -> str:
        rho = (
            f", rho {self.line.rho_per_release:.6g}"
            if self.line.rho_per_release is not None
            else ""
        )
        return f"a {self.line.mechanism} event of phase {self.line.phase}{rho}"


def event_phase(line: BudgetLine) -> str:
    """The ``phase`` the event of a budget-table line records: RAP++ rounds (``rap.KIND[i]``)
    select and measure through the oracle as ``rap.select`` / ``rap.measure``, the acceptance
    tests' release (``accept.test``) is ``accept``, a GAN phase ``gan.P`` is ``P``."""
    phase = line.phase
    if phase.startswith("rap."):
        return "rap.select" if line.mechanism == "gumbel_top_k" else "rap.measure"
    if phase == "accept.test":
        return "accept"
    return phase.removeprefix("gan.")


def backend_config(plan: Any) -> Any:
    """The config of the backend that runs ``plan``: ``method: auto`` delegates to the plan of
    the backend it picks (``config == (name, plan)``)."""
    config = getattr(plan.synth, "config", None)
    while isinstance(config, tuple) and len(config) == 2 and hasattr(config[1], "config"):
        config = config[1].config
    return config


def listed_queries(plan: Any, synthesizer: Any) -> list[list[Any] | str] | None:
    """The queries each adaptive Gaussian release of ``plan`` measured, in ledger order, as the
    record's ``synthesizer`` section lists them: RAP++ ``round_queries`` (per selecting round,
    indices into the plan's candidates of the round's kind), AIM ``selected`` (the picked
    cliques, ``s.picks(i)`` per round). A string in place of a list says why a release's
    queries are not resolved; None: ``plan``'s backend lists no selections. Public: the plan
    and the record."""
    from dpql.ir.queries import Marginal
    from dpql.synth.aim.plan import AimSchedule
    from dpql.synth.rap.plan import RapSchedule

    config = backend_config(plan)
    schedule = config[0] if isinstance(config, tuple) and config else None
    section = synthesizer if isinstance(synthesizer, Mapping) else {}
    if isinstance(schedule, RapSchedule):
        rounds = [r for r in schedule.rounds if r.kind != "init"]
        pools = [
            schedule.marginal_candidates if r.kind == "marginal" else schedule.threshold_candidates
            for r in rounds
        ]
        entries = section.get("round_queries")
        key = "round_queries"
    elif isinstance(schedule, AimSchedule):
        known = set(schedule.candidates) | set(schedule.tree_pairs)
        pools = [tuple(sorted(known))] * len(schedule.rounds)
        picks = [schedule.picks(i) for i in range(len(schedule.rounds))]
        flat = section.get("selected")
        entries = None
        key = "selected"
        if isinstance(flat, list) and len(flat) == sum(picks):
            index = {cl: k for k, cl in enumerate(pools[0] if pools else ())}
            ends = [sum(picks[: i + 1]) for i in range(len(picks))]
            entries = [
                [index.get(tuple(cl), -1) if isinstance(cl, list) else -1 for cl in flat[e - p : e]]
                for e, p in zip(ends, picks, strict=True)
            ]
    else:
        return None
    if not isinstance(entries, list) or len(entries) != len(pools):
        why = f"the record does not list the queries it measured (synthesizer.{key})"
        return [why] * len(pools)
    out: list[list[Any] | str] = []
    for entry, pool in zip(entries, pools, strict=True):
        if not (
            isinstance(entry, list)
            and entry
            and all(type(k) is int and 0 <= k < len(pool) for k in entry)
            and len(set(entry)) == len(entry)
        ):
            out.append(
                f"its listed queries (synthesizer.{key}) are not among the plan's candidates"
            )
            continue
        picked = [pool[k] for k in entry]
        out.append([Marginal(q) if isinstance(q, tuple) else q for q in picked])
    return out


def measured_cells(synthesizer: Any, cards: dict[str, int]) -> Callable[[Any], int]:
    """``cells(q)``: the values a Gaussian release of ``q`` gives. AIM measures a marginal over
    a column with merged rare cells over its fit cells (``dpql.synth.aim.program.FitDomain``):
    the record's ``merged_rare_cells`` (release cells merged into one, per column) and
    ``fitted_without_null_cell`` give them. A section that does not state them as such leaves
    every query its full cells (so a count that does not match them is flagged)."""
    from dpql.ir.queries import Marginal
    from dpql.plan.resolve import query_cells

    section = synthesizer if isinstance(synthesizer, Mapping) else {}
    merged, closed = section.get("merged_rare_cells"), section.get("fitted_without_null_cell")
    closed = set(closed) if isinstance(closed, list) else set()
    if not (
        isinstance(merged, Mapping)
        and all(
            c in cards and type(k) is int and 2 <= k <= cards[c] - (c in closed)
            for c, k in merged.items()
        )
    ):
        merged = {}
    fit = {c: k - (c in closed) - merged[c] + 1 for c, k in cards.items() if c in merged}
    fit |= {c: k - (c in closed) for c, k in cards.items() if c not in merged}

    def cells(q: Any) -> int:
        if isinstance(q, Marginal) and set(q.columns) & set(merged):
            return math.prod(fit[c] for c in q.columns)
        return query_cells(q, cards)

    return cells


def _listed_event(
    line: BudgetLine, index: int, listed: list[Any] | str, cells: Callable[[Any], int]
) -> PlannedEvent:
    """The adaptive Gaussian of ``line`` that measured the ``listed`` queries (a string: why
    they are not known): its count is their ``cells``, its L2 sensitivity theirs at the public
    n."""
    from dpql.ir.queries import joint_l2_sensitivity

    phase = event_phase(line)
    if isinstance(listed, str) or line.n is None:
        return PlannedEvent(line, index, phase, True, unlisted=str(listed))
    count = sum(cells(q) for q in listed)
    l2 = joint_l2_sensitivity(listed, line.n)
    return PlannedEvent(line, index, phase, True, count=count, l2=l2)


def planned_events(plan: Any, synthesizer: Any = None) -> list[PlannedEvent]:
    """The events ``plan`` schedules, in ledger order (one per zCDP release of each line, one
    per DP-SGD phase, one for an external table). A zCDP line of rho 0 or infinite noise
    spends nothing and schedules no event. ``synthesizer``: the record's section of that name,
    whose selections fix the adaptive Gaussian releases (:func:`listed_queries`)."""
    lines: Sequence[BudgetLine] = plan.table.lines
    listed = listed_queries(plan, synthesizer)
    entries = iter(listed or [])
    cells = measured_cells(synthesizer, {c.name: c.card for c in plan.spec.domain})
    selecting = {line.phase for line in lines if line.mechanism == "gumbel_top_k"}
    listed_events = getattr(backend_config(plan), "events", None)
    backend_events = list(listed_events()) if callable(listed_events) else []
    out = []
    for i, line in enumerate(lines):
        adaptive = line.phase in selecting
        if line.mechanism in ZCDP_MECHANISMS:
            rho, scale = line.rho_per_release, line.noise_scale
            if not (rho and rho > 0 and scale is not None and math.isfinite(scale)):
                continue
            if adaptive and listed is not None and line.mechanism == "gaussian":
                out.append(
                    _listed_event(line, i, next(entries, "no selection listed for it"), cells)
                )
                continue
            planned = PlannedEvent(line, i, event_phase(line), adaptive, count=line.count)
            out += [planned] * line.releases
        else:
            phase = event_phase(line)
            match = next((e for e in backend_events if e.phase == phase), None)
            out.append(PlannedEvent(line, i, phase, adaptive, match))
    return out


def released_values_bound(plan: Any) -> int:
    """The most values one Gaussian event of ``plan`` can release: every cell of the planned
    queries and of their sub-marginals (a marginal over columns of cardinalities ``c_i`` has
    sub-marginals of at most ``prod(c_i + 1)`` cells in all), every 1- and 2-way marginal (the
    candidates AIM and the GAN measure), and the post-processing measures and acceptance tests.
    Public: the domain and the plan."""
    from dpql.ir.queries import Marginal
    from dpql.plan.resolve import query_cells

    cards = {c.name: c.card for c in plan.spec.domain}
    total = 0
    for q in plan.queries:
        if isinstance(q, Marginal):
            total += math.prod(cards[c] + 1 for c in q.columns)
        else:
            total += query_cells(q, cards)
    every = sum(card + 1 for card in cards.values())
    measures = len(plan.measures.queries) if plan.measures is not None else 0
    return total + every * every + measures + len(plan.requirements)


def event_differences(
    event: PrivacyEvent, expected: PlannedEvent, plan: Any, bound: int | None = None
) -> list[str]:
    """How ``event`` differs from what the plan schedules (empty: it is the planned one).
    ``bound``: :func:`released_values_bound` of ``plan`` (computed when not given)."""
    line = expected.line
    if event.mechanism != line.mechanism:
        return [f"mechanism {event.mechanism}, the plan's {line.mechanism}"]
    out = []
    if event.phase != expected.phase:
        out.append(f"phase {event.phase!r}, the plan's {expected.phase!r}")
    if event.mechanism == "gaussian":
        out += _count_differences(event, expected, plan, bound)
    if event.mechanism in ZCDP_MECHANISMS:
        out += _zcdp_differences(event, expected)
    elif event.mechanism == "dpsgd":
        out += _dpsgd_differences(event, expected)
    else:
        out += _external_differences(event, plan)
    return out


def _count_differences(
    event: PrivacyEvent, expected: PlannedEvent, plan: Any, bound: int | None
) -> list[str]:
    if expected.unlisted is not None:
        return [expected.unlisted]
    if expected.count is not None:
        if event.count == expected.count:
            return []
        whose = "its listed queries'" if expected.adaptive else "the plan's"
        return [f"count {event.count:,}, {whose} {expected.count:,}"]
    most = released_values_bound(plan) if bound is None else bound
    if event.count > most:
        return [f"count {event.count:,}, more values than the plan can release ({most:,})"]
    return []


def _differs(name: str, got: float | None, want: float | None) -> list[str]:
    if got is None or want is None:
        return [] if got is None and want is None else [f"{name} {got!r}, the plan's {want!r}"]
    if numbers_agree(float(got), float(want)):
        return []
    return [f"{name} {got:.10g}, the plan's {want:.10g}"]


def _zcdp_differences(event: PrivacyEvent, expected: PlannedEvent) -> list[str]:
    line = expected.line
    assert line.rho_per_release is not None and line.noise_scale is not None
    out = _differs("rho", event.rho, line.rho_per_release)
    if event.mechanism == "gumbel_top_k":  # at most the planned k: a scale at most the plan's
        scale = event.noise_scale or 0.0
        if scale > line.noise_scale * (1 + REL_TOL):
            out.append(
                f"noise_scale {scale:.10g} above the plan's {line.noise_scale:.10g} (more "
                "queries selected than planned)"
            )
    elif not expected.adaptive:
        out += _differs("noise_scale", event.noise_scale, line.noise_scale)
        l2 = line.noise_scale * math.sqrt(2 * line.rho_per_release)
        out += _differs("l2_sensitivity", event.l2_sensitivity, l2)
    elif expected.l2 is not None:  # an adaptive release of listed queries
        sigma = expected.l2 / math.sqrt(2 * line.rho_per_release)
        out += _differs("noise_scale", event.noise_scale, sigma)
        out += _differs("l2_sensitivity", event.l2_sensitivity, expected.l2)
    return out


def _dpsgd_differences(event: PrivacyEvent, expected: PlannedEvent) -> list[str]:
    line = expected.line
    out = []
    if event.steps != line.releases:
        out.append(f"steps {event.steps}, the plan's {line.releases}")
    out += _differs("noise_multiplier", event.noise_multiplier, line.noise_scale)
    planned = expected.planned
    if planned is not None:
        out += _differs("sampling_rate", event.sampling_rate, planned.sampling_rate)
        out += _differs("l2_sensitivity (clip norm)", event.l2_sensitivity, planned.l2_sensitivity)
    return out


def _external_differences(event: PrivacyEvent, plan: Any) -> list[str]:
    budget = plan.budget
    out = _differs("epsilon", event.epsilon, budget.external_epsilon)
    out += _differs("delta", event.delta, budget.external_delta)
    declared = getattr(plan.spec.model.synthesizer, "budget", None)
    if declared is not None:
        out += _differs("declared_epsilon", event.declared_epsilon, declared.epsilon)
        out += _differs("declared_delta", event.declared_delta, declared.delta)
        if event.neighbouring != declared.neighbouring:
            out.append(f"neighbouring {event.neighbouring}, the spec's {declared.neighbouring}")
    return out


def event_problems(
    events: Sequence[PrivacyEvent], plan: Any, synthesizer: Any = None
) -> list[VerifyProblem]:
    """``V016`` for each event that differs from the planned one in its place or is not in the
    plan, ``V017`` for each planned event the record lacks. Events are aligned with the plan in
    order; an event that matches a later planned one means the planned ones between are
    missing. ``synthesizer``: the record's section of that name (:func:`planned_events`)."""
    expected = planned_events(plan, synthesizer)
    if len(events) > 2 * len(expected) + MAX_LISTED:  # not worth aligning (and bounded work)
        return [
            VerifyProblem(
                "V016",
                f"the record has {len(events)} events where the plan of the embedded spec "
                f"schedules {len(expected)}",
            )
        ]
    bound = released_values_bound(plan)
    differing: list[str] = []
    missing: list[PlannedEvent] = []
    extra: list[str] = []
    i = j = 0
    while i < len(events) and j < len(expected):
        event = events[i]
        diffs = event_differences(event, expected[j], plan, bound)
        if not diffs:
            i, j = i + 1, j + 1
            continue
        later = next(
            (
                k
                for k in range(j + 1, len(expected))
                if not event_differences(event, expected[k], plan, bound)
            ),
            None,
        )
        if later is not None:
            missing += expected[j:later]
            j = later
            continue
        differing.append(
            f"event {i} ({_name(event)}) is not what the plan schedules there "
            f"({expected[j].describe()}): {', '.join(diffs)}"
        )
        i, j = i + 1, j + 1
    extra += [f"event {k} ({_name(events[k])}) is not in the plan" for k in range(i, len(events))]
    missing += expected[j:]
    out = _listed("V016", differing + extra)
    if missing:
        out.append(
            VerifyProblem(
                "V017",
                f"the record has {len(events)} events where the plan of the embedded spec "
                f"schedules {len(expected)}; missing: "
                + "; ".join(m.describe() for m in missing[:MAX_LISTED])
                + (f" (and {len(missing) - MAX_LISTED} more)" if len(missing) > MAX_LISTED else ""),
            )
        )
    return out


def _name(event: PrivacyEvent) -> str:
    label = event.label if len(event.label) <= 60 else event.label[:57] + "..."
    return f"{event.phase} {event.mechanism} {label!r}"


def _listed(code: str, messages: list[str]) -> list[VerifyProblem]:
    out = [VerifyProblem(code, m) for m in messages[:MAX_LISTED]]
    if len(messages) > MAX_LISTED:
        out.append(VerifyProblem(code, f"... and {len(messages) - MAX_LISTED} more such events"))
    return out
