"""Policy check of a release spec (``dpql check release.yaml --policy policy.yaml``).

Reads the spec, the policy and the policy's release ledger; never the data (DESIGN invariant 1).
Each rule that fails gives one :class:`Violation` (codes ``P0xx`` in :mod:`dpql.spec.codes`).

The release's (epsilon, delta) is the spec's ``privacy`` block, or for a rho-only spec the
epsilon the privacy layer converts rho to, passed in as ``requested_epsilon``. For
``synthesizer: external`` the privacy block is the release total, the external table's budget
included (the planner spends only the remainder on post-processing).

Lifetime budget. The ledger (JSONL, one :class:`ReleaseRecord` per line) lists earlier releases
of the same data source. The check **enforces basic composition**: the sum of recorded epsilons
plus this release's must stay within ``lifetime.epsilon``. Basic composition holds whatever
each release's accounting was (zCDP, RDP, an external tool), so it is the rule we can always
defend. When every record carries its zCDP rho, :class:`LifetimeBudget` also reports the
tighter zCDP composition, rho_total = sum of rho, epsilon = rho + 2 sqrt(rho log(1/delta)) with
delta the summed deltas (Bun & Steinke 2016, Prop. 1.3; rap_pp.md §4.2), for information only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dpql.diagnostics import Diagnostic, DiagnosticError, InternalError, SourcePos
from dpql.domain import NumericColumn
from dpql.spec.load import LoadedPolicy, LoadedSpec
from dpql.spec.models import ExternalSynthesizer

_SLACK = 1e-12  # float round-off in sums of epsilons must not fail a release at the limit


@dataclass(frozen=True)
class Violation:
    """One failed policy rule: a stable code and a one-line message."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ReleaseRecord(BaseModel):
    """One line of the release ledger: a release of the data source and what it spent."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    spec_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    epsilon: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    delta: Annotated[float, Field(ge=0, lt=1)]
    rho: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    time: str = Field(description="ISO 8601 time of the release, UTC.")

    @field_validator("time")
    @classmethod
    def _iso_time(cls, v: str) -> str:
        datetime.fromisoformat(v)  # raises ValueError with a clear message
        return v


def release_record(
    spec: LoadedSpec,
    epsilon: float,
    delta: float,
    rho: float | None = None,
    time: datetime | None = None,
) -> ReleaseRecord:
    """The ledger record of releasing ``spec`` at the (epsilon, delta[, rho]) actually spent."""
    when = (time or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds")
    return ReleaseRecord(
        name=spec.model.name,
        spec_sha256=spec.spec_hash,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        time=when,
    )


def read_ledger(path: str | os.PathLike[str]) -> list[ReleaseRecord]:
    """The records of a release ledger; a missing file is an empty ledger. Blank lines are
    skipped. Raises DiagnosticError (E020 at ``file:line``) for every malformed line."""
    file = os.fspath(path)
    try:
        text = Path(file).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise DiagnosticError(
            [Diagnostic("E005", f"cannot read ledger {file}: {e}", SourcePos(file))]
        ) from None
    records: list[ReleaseRecord] = []
    errors: list[Diagnostic] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(ReleaseRecord.model_validate(json.loads(line)))
        except json.JSONDecodeError as e:
            errors.append(_ledger_error(file, number, e.colno, f"not JSON: {e.msg}"))
        except ValidationError as e:
            first = e.errors(include_url=False)[0]
            field = ".".join(str(p) for p in first["loc"]) or "record"
            errors.append(_ledger_error(file, number, 1, f"{field}: {first['msg']}"))
    if errors:
        raise DiagnosticError(errors)
    return records


def _ledger_error(file: str, line: int, col: int, what: str) -> Diagnostic:
    return Diagnostic(
        "E020",
        f"malformed ledger line: {what}",
        SourcePos(file, line, col),
        "each line must be one JSON object with name, spec_sha256, epsilon, delta, rho, time; "
        "fix the line by hand from the release's provenance record",
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def append_release(path: str | os.PathLike[str], record: ReleaseRecord) -> None:
    """Append ``record`` to the ledger at ``path``, atomically.

    How: take an exclusive ``flock`` on ``<ledger>.lock`` (concurrent appends cannot lose each
    other's line), re-read and validate the ledger (never extend a corrupt one), write the old
    lines plus the new one to a temporary file in the same folder, fsync it, ``os.replace`` it
    over the ledger (atomic on POSIX: a reader sees the old or the new ledger, never half a
    line) and fsync the folder so the rename survives a crash.
    """
    ledger = Path(path)
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with _locked(ledger):
        old = [r.model_dump_json() for r in read_ledger(ledger)]
        lines = [*old, record.model_dump_json()]
        fd, tmp = tempfile.mkstemp(prefix=f".{ledger.name}.", dir=ledger.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, ledger)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        folder = os.open(ledger.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


@dataclass(frozen=True)
class ReleaseBudget:
    """What one release spends in total (for ``external``, the external table's budget
    included, as ``privacy`` states it; see :func:`release_budget`)."""

    epsilon: float
    delta: float
    rho: float | None


def release_budget(
    spec: LoadedSpec,
    requested_epsilon: float | None = None,
    requested_delta: float | None = None,
    requested_rho: float | None = None,
) -> ReleaseBudget:
    """The release's total budget.

    ``requested_epsilon`` defaults to the spec's ``privacy.epsilon``; a rho-only spec must pass
    the epsilon the privacy layer computed at ``requested_delta`` (default:
    ``spec.target_delta``). For ``synthesizer: external`` the privacy block is the release's
    total, the external table's budget included (the planner spends only the rest), so nothing
    is added here; the zCDP rho of such a release is unknown (the external accounting is not
    zCDP as far as we know) and is reported as None.
    """
    privacy = spec.model.privacy
    epsilon = requested_epsilon if requested_epsilon is not None else privacy.epsilon
    if epsilon is None:
        raise InternalError("a rho-only spec needs requested_epsilon from dpql.privacy")
    delta = requested_delta if requested_delta is not None else spec.target_delta
    rho = requested_rho if requested_rho is not None else privacy.rho
    if isinstance(spec.model.synthesizer, ExternalSynthesizer):
        rho = None
    return ReleaseBudget(epsilon, delta, rho)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """(epsilon, delta)-DP of rho-zCDP: rho + 2 sqrt(rho log(1/delta)) (rap_pp.md §4.2)."""
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


@dataclass(frozen=True)
class LifetimeBudget:
    """Earlier releases in the ledger plus this one, against ``lifetime.epsilon``."""

    limit: float
    releases: int
    recorded_epsilon: float
    this: ReleaseBudget
    recorded_delta: float
    recorded_rho: float | None  # None when some record (or this release) has no rho

    @property
    def total_epsilon(self) -> float:
        """Basic composition: epsilons add. This is what the policy enforces."""
        return self.recorded_epsilon + self.this.epsilon

    @property
    def total_delta(self) -> float:
        return self.recorded_delta + self.this.delta

    @property
    def zcdp_total_epsilon(self) -> float | None:
        """zCDP composition of the rhos converted at the summed delta (information only)."""
        if self.recorded_rho is None or self.this.rho is None:
            return None
        return zcdp_epsilon(self.recorded_rho + self.this.rho, self.total_delta)

    @property
    def exceeded(self) -> bool:
        return self.total_epsilon > self.limit + _SLACK

    def describe(self) -> str:
        """One line: requested vs recorded vs limit, and the composition used."""
        zcdp = self.zcdp_total_epsilon
        alt = (
            f"; zCDP composition would give {zcdp:.4g} (not enforced)"
            if zcdp is not None
            else "; zCDP composition n/a (a release without rho)"
        )
        return (
            f"lifetime epsilon {self.total_epsilon:.4g} of {self.limit:g} (recorded: "
            f"{self.releases} release(s), {self.recorded_epsilon:.4g}; this release: "
            f"{self.this.epsilon:.4g}; basic composition, epsilons add){alt}"
        )


def lifetime_budget(
    limit: float, records: list[ReleaseRecord], this: ReleaseBudget
) -> LifetimeBudget:
    rhos = [r.rho for r in records]
    return LifetimeBudget(
        limit=limit,
        releases=len(records),
        recorded_epsilon=math.fsum(r.epsilon for r in records),
        this=this,
        recorded_delta=math.fsum(r.delta for r in records),
        recorded_rho=None if None in rhos else math.fsum(r for r in rhos if r is not None),
    )


def check_policy(
    spec: LoadedSpec,
    policy: LoadedPolicy,
    ledger_path: str | os.PathLike[str] | None = None,
    requested_epsilon: float | None = None,
    *,
    requested_delta: float | None = None,
    requested_rho: float | None = None,
) -> list[Violation]:
    """Every rule of ``policy`` that ``spec`` breaks (empty list: the spec passes).

    ``ledger_path`` defaults to the policy's ``lifetime.ledger`` (relative to the policy file).
    See :func:`release_budget` for ``requested_*``. Raises DiagnosticError (E020) when the
    ledger is malformed: a budget we cannot read is not a budget we can check.
    """
    rules = policy.model
    spend = release_budget(spec, requested_epsilon, requested_delta, requested_rho)
    out: list[Violation] = []
    if spend.epsilon > rules.max_epsilon + _SLACK:
        out.append(
            Violation(
                "P001", f"epsilon {spend.epsilon:g} exceeds max_epsilon {rules.max_epsilon:g}"
            )
        )
    if spend.delta > rules.max_delta:
        out.append(
            Violation("P002", f"delta {spend.delta:g} exceeds max_delta {rules.max_delta:g}")
        )
    forbidden = {c.casefold() for c in rules.forbidden_columns}
    for name in spec.domain.names:
        if name.casefold() in forbidden:
            out.append(Violation("P003", f"column '{name}' is forbidden by the policy"))
    methods = [("synthesizer", spec.model.synthesizer.method)]
    if spec.model.postprocess is not None:
        methods.append(("postprocess", spec.model.postprocess.method))
    for role, method in methods:
        if method not in rules.allowed_methods:
            out.append(Violation("P004", f"{role} method '{method}' is not allowed by the policy"))
    if rules.require.public_bounds:
        out += _public_bounds(spec)
    if rules.require.delta_below_inverse_rows and spend.delta >= 1.0 / spec.rows:
        out.append(
            Violation("P006", f"delta {spend.delta:g} is not below 1/rows = {1.0 / spec.rows:.3g}")
        )
    budget = lifetime_report(policy, spend, ledger_path)
    if budget is not None and budget.exceeded:
        out.append(Violation("P007", f"exceeded: {budget.describe()}"))
    return out


def lifetime_report(
    policy: LoadedPolicy, spend: ReleaseBudget, ledger_path: str | os.PathLike[str] | None = None
) -> LifetimeBudget | None:
    """The lifetime budget with this release added (None when the policy sets no lifetime).
    ``ledger_path`` defaults to the policy's ``lifetime.ledger``; E020 if it is malformed."""
    lifetime = policy.model.lifetime
    path = ledger_path if ledger_path is not None else policy.ledger_path
    if lifetime is None or path is None:
        return None
    return lifetime_budget(lifetime.epsilon, read_ledger(path), spend)


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
            out.append(Violation("P005", f"column '{col.name}' lacks {what}"))
    return out
