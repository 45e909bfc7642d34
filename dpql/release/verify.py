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

What each event must match: :mod:`dpql.release.events`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpql import __version__
from dpql.diagnostics import DiagnosticError
from dpql.privacy.ledger import PrivacyEvent
from dpql.release.events import event_problems, numbers_agree
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
        if not (isinstance(got, int | float) and numbers_agree(float(got), want)):
            out.append(
                VerifyProblem(
                    "V015",
                    f"privacy.budget.{key} is {got!r}, but the embedded spec's budget gives "
                    f"{want!r}",
                )
            )
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
