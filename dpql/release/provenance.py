"""Provenance records: what was released, under which spec, at what privacy cost.

A record (JSON, schema ``spec/provenance.schema.json`` generated from :func:`record_schema`,
version :data:`RECORD_VERSION`) holds the dpql and dependency versions, the normalised spec and
its sha256, the plan's sha256, every privacy-ledger event, the total (epsilon, delta)
*recomputed from the events* by the accountant (dp-accounting), the synthesizer's settings and
fit metrics (computed against noisy measurements only), the I-projection summary
(``postprocess``: solver, iterations, KKT violation, projection distance, the measures with
their noisy answers, denoised targets and synthetic values before / after; Wang et al. 2023),
the requirement reports (``requirements``: per requirement the noisy real value, its sd, the
tolerance, the synthetic value before / after post-processing and the verdict; for model tests
also the metric, the test's rho and the excess-risk *bound* of Zhou et al. 2024 where one
applies; see :mod:`dpql.postprocess.accept`), and the output's sha256 and row count.

Nothing in a record is derived from private data except DP outputs (ledger events carry only
public calibration values). In particular it holds no timings: how long loading and measuring
took scales with the data file's real size, not the public ``rows``. The curator-only facts (true
row count, clip counts, a keyed HMAC of the data file, the stage timings) go to a separate
curator file (:mod:`dpql.release.curator`) that must not be published. The schema forbids
unknown keys, so a field added without a schema change fails ``dpql verify``.

``verify_record`` checks every number's range, validates the record against the schema,
recomputes the accounting and the hashes; any mismatch is reported. ``dpql verify`` also
re-plans the embedded spec and checks the record's signature (:mod:`dpql.release.verify`); the
optional ``signature`` section (:mod:`dpql.release.signing`) is the curator's Ed25519 signature
over the rest.
Version history: 1 (no ``postprocess`` section, model tests reported as ``real`` /
``synthetic``), 2 and 3 (with ``timings_s``), 4 (no timings: they moved to the curator file;
``spent.rho`` is null unless every event is zCDP; ``privacy.rdp`` holds the release's RDP curve
for lifetime composition; external events state their neighbouring relation and declared
budget; later, an optional ``signature``).

Accounting in the record. ``privacy.spent`` is the (epsilon, delta) recomputed from the events
(:func:`dpql.privacy.accountant.epsilon_from_events`). ``spent.rho`` is the zCDP rho of the
release only when every event is zCDP (Gaussian, Gumbel top-k); with a DP-SGD or external event
it is null, since no rho describes the release. ``privacy.rdp`` is the RDP curve of the
non-external events (``orders``, ``epsilons``: RDP epsilon at each order, finite orders only) and
the external (epsilon, delta) composed on top by basic composition (``external_epsilon``,
``external_delta``, already converted to replace-one); converting the curve at ``spent.delta -
external_delta`` and adding ``external_epsilon`` gives ``spent.epsilon``. ``dpql check`` composes
releases from these curves (:mod:`dpql.release.policy`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from dpql import __version__
from dpql.io import UnreadableFile, read_capped
from dpql.privacy.accountant import AccountingResult, epsilon_from_events, epsilon_from_rdp
from dpql.privacy.ledger import Ledger, PrivacyEvent
from dpql.release.provenance_schema import RECORD_VERSION, record_schema

DEPENDENCIES = ("jax", "jaxlib", "optax", "dp-accounting", "numpy", "pandas", "lark", "pydantic")
EPS_TOLERANCE = 1e-9


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_json(obj: Any) -> str:
    """Hash of a JSON value in canonical form (sorted keys, no whitespace). A plan (a mapping
    with ``dpql_plan``) is hashed as :func:`plan_sha256` does."""
    if isinstance(obj, Mapping) and "dpql_plan" in obj:
        obj = _positionless(obj)
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


_POSITION_KEYS = frozenset({"file", "line", "col", "end_col"})


def plan_sha256(plan_json: Mapping[str, Any]) -> str:
    """The record's ``plan_sha256``: the plan's JSON (``ReleasePlan.to_json``) hashed without
    the source positions of its diagnostics. Where a requirement's warning points in the spec
    file depends on the file's layout (comments, indentation), which the record's normalised
    spec does not keep; without them ``dpql verify`` re-plans the embedded spec to the same
    hash."""
    return sha256_json(plan_json)


def _positionless(value: Any) -> Any:
    """``value`` with the position keys dropped from every diagnostic (a mapping with ``code``
    and ``severity``) inside it."""
    if isinstance(value, Mapping):
        diagnostic = "code" in value and "severity" in value
        return {
            k: _positionless(v)
            for k, v in value.items()
            if not (diagnostic and k in _POSITION_KEYS)
        }
    if isinstance(value, list | tuple):
        return [_positionless(v) for v in value]
    return value


def dependency_versions() -> dict[str, str]:
    out = {}
    for name in DEPENDENCIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def build_record(
    *,
    spec_json: Mapping[str, Any],
    spec_sha256: str,
    plan_sha256: str,
    budget: Mapping[str, float],
    ledger: Ledger,
    synthesizer: Mapping[str, Any],
    requirements: list[Mapping[str, Any]],
    output_path: Path,
    output_rows: int,
    created: str,
    postprocess: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble a record; (epsilon, delta) spent is recomputed from the ledger here.

    ``requirements`` are :mod:`dpql.postprocess.accept`'s reports, ``postprocess`` the
    I-projection summary
    (``PostprocessOutcome.summary_json``; None without post-processing). Both hold DP outputs
    and public values only.
    """
    delta = float(budget["delta"])
    accounted = epsilon_from_events(ledger.events, delta)
    # rho only when every event is zCDP: DP-SGD and external events have none
    spent = {"epsilon": accounted.epsilon, "delta": delta, "rho": accounted.rho}
    return {
        "dpql_provenance": RECORD_VERSION,
        "dpql_version": __version__,
        "dependencies": dependency_versions(),
        "created": created,
        "spec": dict(spec_json),
        "spec_sha256": spec_sha256,
        "plan_sha256": plan_sha256,
        "privacy": {
            "budget": dict(budget),
            "spent": spent,
            "rdp": accounted.curve,
            "accountant": "dp-accounting RDP (zCDP events as Gaussian RDP curves)",
            "neighbouring": "replace-one, public row count",
            "events": [e.to_json() for e in ledger.events],
        },
        "synthesizer": dict(synthesizer),
        "postprocess": dict(postprocess) if postprocess is not None else None,
        "requirements": [dict(r) for r in requirements],
        "output": {
            "file": output_path.name,
            "sha256": sha256_file(output_path),
            "rows": output_rows,
        },
    }


@dataclass(frozen=True)
class VerifyProblem:
    code: str
    message: str


def schema_problems(record: Any, limit: int = 10) -> list[VerifyProblem]:
    """``V003`` per place where ``record`` does not validate against :func:`record_schema`
    (JSON Schema draft 2020-12), at most ``limit`` of them, deepest path first."""
    from jsonschema import Draft202012Validator

    errors = sorted(
        Draft202012Validator(record_schema()).iter_errors(record),
        key=lambda e: (-len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    out = []
    for e in errors[:limit]:
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        out.append(VerifyProblem("V003", f"{where}: {e.message}"))
    return out


#: The largest record ``dpql verify`` reads (a record is a few hundred kB at most).
MAX_RECORD_BYTES = 64 * 2**20
#: Deepest nesting of lists and objects in a record (a record needs 6 levels).
MAX_RECORD_DEPTH = 64
#: Most digits of an integer in a record, and its largest magnitude (counts, steps, rows).
MAX_INT_DIGITS = 30
MAX_INT = 2**63
#: The range of a record's delta (``spec/language.md`` §9: a spec's delta is in [1e-100, 0.5]).
DELTA_RANGE = (1e-100, 0.5)


class RecordUnreadable(ValueError):
    """The record file cannot be read as JSON (missing, too large, not UTF-8, not JSON, nested
    too deep); the message says which."""


class _OversizedInt(float):
    """An integer literal of too many digits, kept (as infinity) so that the problem can be
    reported where it is."""

    digits: int

    def __new__(cls, digits: int) -> _OversizedInt:
        obj = super().__new__(cls, math.inf)
        obj.digits = digits
        return obj


def _parse_int(text: str) -> int | float:
    digits = len(text.lstrip("-"))
    # Python refuses more than 4,300 digits, and converting many is quadratic
    return int(text) if digits <= MAX_INT_DIGITS else _OversizedInt(digits)


def read_record_bytes(path: Path) -> bytes:
    """The bytes of a record file, at most :data:`MAX_RECORD_BYTES`; a missing file, a
    directory or a FIFO (never opened: it could block) raises :class:`RecordUnreadable`."""
    try:
        return read_capped(path, MAX_RECORD_BYTES)
    except UnreadableFile as exc:
        if str(exc).startswith("larger than"):
            raise RecordUnreadable(f"{path} is {exc}") from None
        raise RecordUnreadable(f"cannot read {path}: {exc}") from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key if len(key) <= 60 else key[:57] + "..."


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; :class:`_DuplicateKey` if a key repeats (Python's
    parser keeps the last value, others the first: a record must not mean two things)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def parse_record(raw: bytes, name: Path | str) -> Any:
    """The JSON value of a record's bytes: UTF-8, nesting the parser can take, no object with
    a key twice (:class:`RecordUnreadable`: parsers differ on which value they keep). ``NaN``,
    ``Infinity``, numbers that overflow and integers of too many digits are kept as non-finite
    floats for :func:`number_problems` to report where they are. Raises
    :class:`RecordUnreadable`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordUnreadable(
            f"{name} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        return json.loads(text, parse_int=_parse_int, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise RecordUnreadable(
            f"{name} has the key {exc.key!r} twice in one object: parsers disagree on which "
            "value such a record holds"
        ) from None
    except json.JSONDecodeError as exc:
        raise RecordUnreadable(
            f"{name} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    except RecursionError:
        raise RecordUnreadable(f"{name} is nested too deeply to be a record") from None
    except ValueError as exc:  # a number the parser cannot convert
        raise RecordUnreadable(f"{name} holds a number out of range: {exc}") from None


def read_record(path: Path) -> Any:
    """:func:`parse_record` of :func:`read_record_bytes`."""
    return parse_record(read_record_bytes(path), path)


def number_problems(record: Any, limit: int = 10) -> list[VerifyProblem]:
    """``V004`` for every number of ``record`` that is not finite (NaN, infinity, a literal
    that overflows such as 1e400), every integer above :data:`MAX_INT` in magnitude or of more
    than :data:`MAX_INT_DIGITS` digits, and nesting deeper than :data:`MAX_RECORD_DEPTH`
    (at most ``limit`` of them). Iterative, so any depth is safe."""
    out: list[VerifyProblem] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(record, ())]
    while stack and len(out) < limit:
        value, where = stack.pop()
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        name = "/".join(map(str, where)) or "(top level)"
        if len(where) > MAX_RECORD_DEPTH:
            out.append(
                VerifyProblem("V004", f"{name}: nested more than {MAX_RECORD_DEPTH} levels deep")
            )
            continue
        if isinstance(value, Mapping):
            stack.extend((v, (*where, str(k))) for k, v in reversed(list(value.items())))
        elif isinstance(value, list | tuple):
            stack.extend((v, (*where, i)) for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, _OversizedInt):
            digits = f"{value.digits:,}"
            out.append(VerifyProblem("V004", f"{name}: an integer of {digits} digits is too long"))
        elif isinstance(value, float) and not math.isfinite(value):
            what = "NaN" if math.isnan(value) else "infinite (or overflows a double)"
            out.append(VerifyProblem("V004", f"{name}: the number is {what}"))
        elif isinstance(value, int) and abs(value) > MAX_INT:
            out.append(VerifyProblem("V004", f"{name}: the integer is out of range (above 2^63)"))
    return out


def _delta_problems(budget: Mapping[str, Any], spent: Mapping[str, Any]) -> list[VerifyProblem]:
    """``V004``: a delta outside :data:`DELTA_RANGE` (0, subnormal, 1...), before any
    arithmetic on it."""
    lo, hi = DELTA_RANGE
    return [
        VerifyProblem(
            "V004",
            f"privacy/{part}/delta: {section['delta']!r} is outside [{lo:g}, {hi:g}], the range "
            "of a spec's delta",
        )
        for part, section in (("budget", budget), ("spent", spent))
        if not lo <= float(section["delta"]) <= hi
    ]


def verify_record(record: Mapping[str, Any], synthetic: Path | None = None) -> list[VerifyProblem]:
    """Validate a record against the schema, recompute its accounting and hashes; an empty
    list means it verifies. Every number's range is checked before any arithmetic on it
    (``V004``), and no record makes it raise. It does not re-plan the embedded spec nor check
    a signature (:mod:`dpql.release.verify` does, for ``dpql verify``)."""
    problems: list[VerifyProblem] = []
    if not isinstance(record, Mapping):
        return [VerifyProblem("V001", f"not a dpql provenance record of version {RECORD_VERSION}")]
    out_of_range = number_problems(record)
    if out_of_range:
        return out_of_range
    if record.get("dpql_provenance") != RECORD_VERSION:
        return [VerifyProblem("V001", f"not a dpql provenance record of version {RECORD_VERSION}")]
    invalid = schema_problems(record)
    if invalid:
        return invalid
    try:
        privacy = record["privacy"]
        events = [PrivacyEvent.from_json(e) for e in privacy["events"]]
        budget = privacy["budget"]
        spent = privacy["spent"]
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        return [VerifyProblem("V002", f"malformed record: {exc}")]
    bad_delta = _delta_problems(budget, spent)
    if bad_delta:
        return bad_delta
    try:
        accounted = epsilon_from_events(events, float(spent["delta"]))
        problems += _accounting_problems(accounted, budget, spent)
        problems += _rho_and_curve_problems(accounted, spent, privacy["rdp"])
    except (ValueError, ArithmeticError, RuntimeError) as exc:  # the accountant refuses them
        problems.append(VerifyProblem("V002", f"the events cannot be accounted: {exc}"))
    if sha256_json(record.get("spec")) != record.get("spec_sha256"):
        problems.append(VerifyProblem("V020", "the spec in the record does not match spec_sha256"))
    if synthetic is not None:
        problems += _table_problems(record, synthetic)
    return problems


def _accounting_problems(
    accounted: AccountingResult, budget: Mapping[str, Any], spent: Mapping[str, Any]
) -> list[VerifyProblem]:
    """``V010`` - ``V012``: the spend recomputed from the events against the record's."""
    problems = []
    if not math.isclose(
        accounted.epsilon, float(spent["epsilon"]), rel_tol=0, abs_tol=EPS_TOLERANCE
    ):
        problems.append(
            VerifyProblem(
                "V010",
                f"epsilon recomputed from the ledger is {accounted.epsilon:.12g}, "
                f"the record says {float(spent['epsilon']):.12g}",
            )
        )
    if accounted.epsilon > float(budget["epsilon"]) + EPS_TOLERANCE:
        problems.append(
            VerifyProblem(
                "V011",
                f"spent epsilon {accounted.epsilon:.6g} exceeds the budget {budget['epsilon']}",
            )
        )
    if float(spent["delta"]) > float(budget["delta"]):
        problems.append(VerifyProblem("V012", "spent delta exceeds the budget"))
    return problems


def _table_problems(record: Mapping[str, Any], synthetic: Path) -> list[VerifyProblem]:
    """``V031`` when the table cannot be read (missing, a directory, a FIFO...), ``V030`` when
    its sha256 is not the record's."""
    try:
        if not synthetic.is_file():  # never open a FIFO or device: it could block forever
            why = "no such file" if not synthetic.exists() else "not a regular file"
            return [VerifyProblem("V031", f"cannot read the table {synthetic}: {why}")]
        digest = sha256_file(synthetic)
    except OSError as exc:
        return [
            VerifyProblem("V031", f"cannot read the table {synthetic}: {exc.strerror or exc}")
        ]
    if digest != record.get("output", {}).get("sha256"):
        return [
            VerifyProblem(
                "V030", f"{synthetic} does not match the record's output sha256 (modified table?)"
            )
        ]
    return []


def _rho_and_curve_problems(
    accounted: AccountingResult, spent: Mapping[str, Any], stored: Mapping[str, Any]
) -> list[VerifyProblem]:
    """``V013``: ``spent.rho`` is not the recomputed rho (null unless every event is zCDP).
    ``V014``: the stored RDP curve is not the one the events give, or does not convert to
    ``spent.epsilon``."""
    out: list[VerifyProblem] = []
    rho, recorded = accounted.rho, spent.get("rho")
    if (rho is None) != (recorded is None) or (
        rho is not None and not math.isclose(rho, float(recorded), rel_tol=1e-9, abs_tol=0)
    ):
        why = "null: some event is not zCDP" if rho is None else f"{rho:.12g}"
        out.append(VerifyProblem("V013", f"rho recomputed is {why}, the record says {recorded}"))
    expected = accounted.curve
    orders, epsilons = list(stored["orders"]), list(stored["epsilons"])
    # orders within 1e-9 relative: the grid holds the zCDP optimum, found by root finding
    same = (
        len(orders) == len(epsilons) == len(expected["orders"])
        and all(
            math.isclose(a, b, rel_tol=1e-9, abs_tol=0)
            for a, b in zip(orders, expected["orders"], strict=True)
        )
        and all(
            math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
            for a, b in zip(epsilons, expected["epsilons"], strict=True)
        )
        and all(
            math.isclose(float(stored[k]), float(expected[k]), rel_tol=1e-12, abs_tol=0)
            for k in ("external_epsilon", "external_delta")
        )
    )
    if not same:
        out.append(
            VerifyProblem("V014", "the RDP curve in the record is not the one its events give")
        )
        return out
    rdp_delta = float(spent["delta"]) - float(stored["external_delta"])
    if orders and rdp_delta > 0:
        eps = epsilon_from_rdp(orders, epsilons, rdp_delta)[0] + float(stored["external_epsilon"])
        if not math.isclose(eps, float(spent["epsilon"]), rel_tol=0, abs_tol=EPS_TOLERANCE):
            out.append(
                VerifyProblem(
                    "V014",
                    f"the record's RDP curve converts to epsilon {eps:.12g}, the record says "
                    f"{float(spent['epsilon']):.12g}",
                )
            )
    return out
