"""`dpql verify`: a provenance record checked against itself, its spec's plan and its signature.

:func:`verify_release` runs, in order:

1. reading (``V000``): a bounded, UTF-8, JSON file
   (:func:`dpql.release.provenance.read_record_bytes`);
2. the record on its own (:func:`dpql.release.provenance.verify_record`): every number's range
   (``V004``), the schema, the accounting recomputed from the events, the spec and table hashes;
3. the re-plan (:func:`replan_problems`): planning reads no data and is deterministic, so the
   normalised spec the record embeds is loaded again (:func:`dpql.spec.load.load_normalised_spec`)
   and planned (:func:`dpql.plan.planner.build_plan`). The record's budget must be the plan's
   (``V015``), its ``plan_sha256`` the re-plan's (``V022``,
   :func:`dpql.release.provenance.plan_sha256`), and its events exactly the ones the plan's budget
   table schedules, in order (``V016`` an event that differs or is not in the plan, ``V017`` a
   planned event missing). A record whose events were deleted and whose ``spent`` was recomputed to
   match fails here;
4. the signature (:mod:`dpql.release.signing`): with ``key``, a valid Ed25519 signature by that
   key over the record's content (``V040``-``V043``) and a file byte for byte as dpql wrote it
   (``V044``); without, a note says whether the record is signed.

What the plan fixes, per budget-table line (:class:`dpql.privacy.budget.BudgetLine`), and what an
event must match (relative tolerance :data:`REL_TOL`):

* Gaussian and Gumbel lines: one event per release with the line's mechanism, phase and rho.
  Outside adaptive phases also its noise scale, its L2 sensitivity and its count (the values it
  releases: the cells of the line's queries), exactly. In an adaptive phase (one with a Gumbel
  selection, such as a RAP++ or AIM round) which queries are measured is a DP output: the record
  lists them (:func:`listed_queries`), and the Gaussian's count, L2 sensitivity and noise scale
  must be those of the listed queries, exactly. The Gumbel selects at most the planned number
  of queries, so its scale is at most the plan's.
* DP-SGD lines: the noise multiplier and the number of steps, and where the backend's plan
  lists its events (``plan.synth.config.events()``), the sampling rate and clip norm.
* The external line: the charged (epsilon, delta) of the plan's budget, and the declared
  budget and neighbouring relation of the spec.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpql import __version__
from dpql.diagnostics import DiagnosticError
from dpql.privacy.budget import BudgetLine
from dpql.privacy.ledger import ZCDP_MECHANISMS, PrivacyEvent
from dpql.release.provenance import (
    RecordUnreadable,
    VerifyProblem,
    dependency_versions,
    parse_record,
    plan_sha256,
    read_record_bytes,
    sha256_json,
    verify_record,
)

#: Relative tolerance when an event's numbers are compared with the plan's.
REL_TOL = 1e-9
#: Most problems of one code listed; the rest are counted.
MAX_LISTED = 10
#: Problems after which the record is not re-planned (its structure or numbers are unusable).
_STRUCTURAL = frozenset({"V001", "V002", "V003", "V004"})


@dataclass
class Verification:
    """What ``dpql verify`` found: ``problems`` (the record does not verify unless empty),
    ``notes`` (said, but not failures: an unsigned record without ``--key``), the parsed
    ``record`` (None when unreadable) and the signing key's fingerprint when checked."""

    record: Any = None
    problems: list[VerifyProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    signed_by: str | None = None
    replanned: bool = False


def verify_release(
    record_path: Path, synthetic: Path | None = None, key: Path | None = None
) -> Verification:
    """Every check of the module docstring on the record at ``record_path``; never raises on
    a bad record, table or key (each is a problem)."""
    out = Verification()
    try:
        raw = read_record_bytes(record_path)
        out.record = parse_record(raw, record_path)
    except RecordUnreadable as exc:
        out.problems.append(VerifyProblem("V000", str(exc)))
        return out
    record = out.record
    out.problems += verify_record(record, synthetic)
    if isinstance(record, Mapping) and not any(p.code in _STRUCTURAL for p in out.problems):
        out.problems += replan_problems(record, _spec_name(record_path))
        out.replanned = True
    if key is not None:
        out.problems += _signature_problems(record, raw, key, out)
    elif isinstance(record, Mapping) and not any(p.code in _STRUCTURAL for p in out.problems):
        section = record.get("signature")
        out.notes.append(
            "unsigned record: nothing shows it is the one the curator issued (compile with "
            "--sign-key, verify with --key)"
            if section is None
            else "signed, but the signature was not checked: pass --key with the curator's "
            "public key"
        )
    return out


def _spec_name(record_path: Path) -> Path:
    """What the embedded spec is called in diagnostics (never opened)."""
    return record_path.with_name(record_path.name + "#spec")


# ---------------------------------------------------------------------------------------------
# Re-planning the embedded spec


def replan_problems(record: Mapping[str, Any], name: Path) -> list[VerifyProblem]:
    """``V021``: the embedded spec does not load or plan, or does not load back to itself;
    ``V015``: the record's budget is not the plan's; ``V022``: ``plan_sha256`` is not the
    re-plan's; ``V016`` / ``V017``: the events are not the plan's (module docstring). The
    record must have passed :func:`dpql.release.provenance.verify_record`'s structural checks."""
    from dpql.spec.load import load_normalised_spec, normalised_spec_json

    try:
        spec = load_normalised_spec(record["spec"], name)
    except DiagnosticError as exc:
        return [
            VerifyProblem(
                "V021", f"the embedded spec does not load: {_summary(exc)}{_version_note(record)}"
            )
        ]
    reloaded = json.loads(normalised_spec_json(spec.model))
    if sha256_json(reloaded) != sha256_json(record["spec"]):
        differ = sorted(k for k in record["spec"] if reloaded.get(k) != record["spec"][k])
        return [
            VerifyProblem(
                "V021",
                "the embedded spec is not in the normalised form this dpql writes (loading it "
                f"back changes {', '.join(differ) or 'its keys'}), so it cannot be re-planned"
                + _version_note(record),
            )
        ]
    try:
        plan = _build_plan(spec)
    except DiagnosticError as exc:
        return [VerifyProblem("V021", f"the embedded spec cannot be planned: {_summary(exc)}")]
    except (ValueError, ArithmeticError) as exc:
        return [VerifyProblem("V021", f"the embedded spec cannot be planned: {exc}")]
    problems = _budget_problems(record["privacy"]["budget"], plan.budget)
    digest = plan_sha256(plan.to_json())
    if record.get("plan_sha256") != digest:
        problems.append(
            VerifyProblem(
                "V022",
                f"plan_sha256 is {record.get('plan_sha256')}, but the plan of the embedded spec "
                f"hashes to {digest}{_version_note(record)}",
            )
        )
    events = [PrivacyEvent.from_json(e) for e in record["privacy"]["events"]]
    problems += event_problems(events, plan, record.get("synthesizer"))
    return problems


def _build_plan(spec: Any) -> Any:
    """The plan of ``spec``; a compile estimate over this machine's memory limit (``E160``)
    does not stop verification, which needs no such memory."""
    from dpql.plan.planner import build_plan

    try:
        return build_plan(spec)
    except DiagnosticError as exc:
        if not all(d.code == "E160" for d in exc.diagnostics if d.severity == "error"):
            raise
    with _memory_limit_lifted():
        return build_plan(spec)


@contextmanager
def _memory_limit_lifted() -> Iterator[None]:
    from dpql.plan.resources import MEMORY_LIMIT_ENV

    old = os.environ.get(MEMORY_LIMIT_ENV)
    os.environ[MEMORY_LIMIT_ENV] = str(2**62)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(MEMORY_LIMIT_ENV, None)
        else:
            os.environ[MEMORY_LIMIT_ENV] = old


def _summary(exc: DiagnosticError) -> str:
    errors = [d for d in exc.diagnostics if d.severity == "error"] or list(exc.diagnostics)
    text = "; ".join(f"{d.code} {d.message}" for d in errors[:3])
    return text + (f" (and {len(errors) - 3} more)" if len(errors) > 3 else "")


def _version_note(record: Mapping[str, Any]) -> str:
    if record.get("dpql_version") == __version__ and record.get("dependencies") == (
        dependency_versions()
    ):
        return ""
    return (
        f" (the record was made with dpql {record.get('dpql_version')} and the dependency "
        f"versions it lists; this is dpql {__version__}, and other versions may plan "
        "differently)"
    )


def _budget_problems(budget: Mapping[str, Any], planned: Any) -> list[VerifyProblem]:
    out = []
    for key in ("epsilon", "delta", "rho"):
        want = float(getattr(planned, key))
        got = budget.get(key)
        if not (isinstance(got, int | float) and _close(float(got), want)):
            out.append(
                VerifyProblem(
                    "V015",
                    f"privacy.budget.{key} is {got!r}, but the embedded spec's budget gives "
                    f"{want!r}",
                )
            )
    return out


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)


# ---------------------------------------------------------------------------------------------
# Events against the budget table


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
    from dpql.synth.aim import AimSchedule
    from dpql.synth.rap.schedule import RapSchedule

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


def _listed_event(
    line: BudgetLine, index: int, listed: list[Any] | str, cards: dict[str, int]
) -> PlannedEvent:
    """The adaptive Gaussian of ``line`` that measured the ``listed`` queries (a string: why
    they are not known): its count is their cells, its L2 sensitivity theirs at the public n."""
    from dpql.ir.queries import joint_l2_sensitivity
    from dpql.plan.resolve import query_cells

    phase = event_phase(line)
    if isinstance(listed, str) or line.n is None:
        return PlannedEvent(line, index, phase, True, unlisted=str(listed))
    count = sum(query_cells(q, cards) for q in listed)
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
    cards = {c.name: c.card for c in plan.spec.domain}
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
                    _listed_event(line, i, next(entries, "no selection listed for it"), cards)
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
    return [] if _close(float(got), float(want)) else [f"{name} {got:.10g}, the plan's {want:.10g}"]


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


# ---------------------------------------------------------------------------------------------
# The signature


def record_layout(record: Any) -> bytes:
    """The bytes dpql writes for a record (:func:`dpql.io.write_json`: indented JSON and a
    newline), to which a signed record must be identical."""
    return (json.dumps(record, indent=2) + "\n").encode("utf-8")


def _signature_problems(
    record: Any, raw: bytes, key: Path, out: Verification
) -> list[VerifyProblem]:
    """``V040`` unsigned, ``V041`` the signature does not match the content, ``V042`` signed by
    another key, ``V043`` the public key file is unusable, ``V044`` the file is not byte for
    byte what dpql wrote (whitespace or number formatting changed)."""
    from dpql.release.signing import SigningError, fingerprint, load_public_key, verify_signature

    try:
        public = load_public_key(key)
    except SigningError as exc:
        return [VerifyProblem("V043", str(exc))]
    if not isinstance(record, Mapping) or record.get("signature") is None:
        return [VerifyProblem("V040", "the record is unsigned, and --key asks for a signature")]
    section = record["signature"]
    want = fingerprint(public)
    if isinstance(section, Mapping) and section.get("public_key_sha256") not in (None, want):
        return [VerifyProblem("V042", str(verify_signature(record, key)))]
    why = verify_signature(record, key)
    if why is not None:
        return [VerifyProblem("V041", why)]
    try:
        layout = record_layout(record)
    except (ValueError, RecursionError):
        layout = b""
    if raw != layout:
        return [
            VerifyProblem(
                "V044",
                "the signature matches the content, but the file's bytes are not the ones dpql "
                "wrote (whitespace or number formatting was changed); publish the record as "
                "written",
            )
        ]
    out.signed_by = want
    return []
