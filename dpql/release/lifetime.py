"""The lifetime release ledger: one JSON line per release (its budget, spend, RDP curve and,
while it is being written, its staged outputs), appended under an exclusive lock and rewritten
atomically, so concurrent compiles lose nothing and a crash leaves a pending line that the next
compile recovers (docs/architecture.md, "Writing a release"). ``dpql check --policy`` composes
it (:mod:`dpql.release.policy`)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.io import atomic_path
from dpql.spec.load import LoadedSpec

_Order = Annotated[float, Field(gt=1, allow_inf_nan=False)]
_NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class RdpCurve(BaseModel):
    """A release's spend in composable form (the provenance record's ``privacy.rdp``): the RDP
    epsilon of its non-external events at each order, and the external (epsilon, delta), in
    replace-one terms, that it added by basic composition."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    orders: list[_Order] = Field(min_length=1)
    epsilons: list[_NonNeg] = Field(min_length=1)
    external_epsilon: _NonNeg = 0.0
    external_delta: Annotated[float, Field(ge=0, lt=1)] = 0.0

    @model_validator(mode="after")
    def _one_epsilon_per_order(self) -> RdpCurve:
        if len(self.orders) != len(self.epsilons):
            raise ValueError("orders and epsilons must have the same length")
        if len(set(self.orders)) != len(self.orders):
            raise ValueError("orders must be distinct")
        return self


class StagedOutput(BaseModel):
    """One file of a release being committed (a ``pending`` ledger line): its final ``path``,
    the ``staged`` file beside it that is renamed onto it, and the staged bytes' SHA-256."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    path: str
    staged: str
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class DataSourceRef(BaseModel):
    """The data source a release read, the data file resolved (symlinks followed): ``path``,
    relative to the ledger's folder (POSIX separators), which survives moving the project with
    its data; ``absolute``, which survives moving the ledger alone; ``data_hmac_sha256``, the
    keyed fingerprint of the file's bytes that the curator file holds
    (:mod:`dpql.release.curator`), for the curator to tell two paths of one file apart (never a
    plain hash: anyone could confirm a guessed dataset). :func:`of_source` says which lines count
    against a data file."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    path: Annotated[str, Field(min_length=1)]
    absolute: Annotated[str, Field(min_length=1)] | None = None
    data_hmac_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None


def real_path(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute with its symlinks followed as far as they go: never raises (a
    symlink loop or a missing file is reported where the file is opened, as a located error)."""
    return Path(os.path.realpath(path))


def source_ref(data: Path, ledger: Path, data_hmac: str | None = None) -> DataSourceRef:
    """The :class:`DataSourceRef` of the data file ``data`` in the ledger at ``ledger``."""
    resolved = real_path(data)
    rel = os.path.relpath(resolved, real_path(ledger).parent)
    return DataSourceRef(
        path=Path(rel).as_posix(), absolute=str(resolved), data_hmac_sha256=data_hmac
    )


def source_path(ref: DataSourceRef, ledger: Path) -> Path:
    """The absolute path of a ledger line's data source, as its ``path`` relative to the
    ledger's folder says."""
    return Path(os.path.normpath(real_path(ledger).parent / ref.path))


def of_source(record: ReleaseRecord, ledger: Path, data: Path) -> bool:
    """Whether ``record`` (a line of ``ledger``) counts against the data file ``data``. Fail
    safe: it does unless it names a data source that exists and is another file. So a line
    that names ``data`` (by its path relative to the ledger or its absolute path) counts, and so
    does a line that names no data source (written before lines named one, or by hand) or one
    whose file is at neither path any more (the ledger or the data moved: dpql cannot tell)."""
    ref = record.data_source
    if ref is None:
        return True
    data = real_path(data)
    named = [source_path(ref, ledger)] + ([Path(ref.absolute)] if ref.absolute else [])
    if data in named:
        return True
    return not any(p.exists() for p in named)


#: a ledger line's state (docs/architecture.md, "Writing a release"): ``pending`` (appended
#: before the outputs are renamed into place), ``committed`` (every output in place) or
#: ``abandoned`` (a pending release whose staged files vanished). All three count as spent.
LedgerStatus = Literal["pending", "committed", "abandoned"]


class ReleaseRecord(BaseModel):
    """One line of the release ledger: a release of the data source and what it spent.

    ``rho`` is the release's zCDP rho only when all of it was zCDP (else null, informational).
    ``rdp`` is its RDP curve (absent: the release composes by basic composition only).
    ``status``/``txid``/``outputs`` belong to the commit protocol of ``dpql compile`` (a line
    without them is a committed release); every line counts as spent whatever its status.
    ``data_source`` names the data file the release read (absent on older or hand-written
    lines: such a line counts against every data source of the ledger, :func:`of_source`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    spec_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    epsilon: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    delta: Annotated[float, Field(ge=0, lt=1)]
    rho: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    rdp: RdpCurve | None = None
    time: str = Field(description="ISO 8601 time of the release, UTC.")
    status: LedgerStatus = "committed"
    txid: Annotated[str, Field(pattern=r"^[0-9A-Za-z-]{1,64}$")] | None = None
    outputs: list[StagedOutput] | None = None
    data_source: DataSourceRef | None = None

    @field_validator("time")
    @classmethod
    def _iso_time(cls, v: str) -> str:
        datetime.fromisoformat(v)  # raises ValueError with a clear message
        return v

    @model_validator(mode="after")
    def _curve_within_delta(self) -> ReleaseRecord:
        if self.rdp is not None and not self.rdp.external_delta < self.delta:
            raise ValueError("rdp.external_delta must be below the release's delta")
        return self


def release_record(
    spec: LoadedSpec,
    epsilon: float,
    delta: float,
    rho: float | None = None,
    time: datetime | None = None,
    *,
    rdp: RdpCurve | Mapping[str, Any] | None = None,
    data_source: DataSourceRef | None = None,
) -> ReleaseRecord:
    """The ledger record of releasing ``spec`` at the (epsilon, delta[, rho]) actually spent,
    with its RDP curve ``rdp`` (the provenance record's ``privacy.rdp``) when known and the
    data source it read (:func:`source_ref`)."""
    when = (time or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds")
    curve = rdp if rdp is None or isinstance(rdp, RdpCurve) else RdpCurve.model_validate(rdp)
    return ReleaseRecord(
        name=spec.model.name,
        spec_sha256=spec.spec_hash,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        rdp=curve,
        time=when,
        data_source=data_source,
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
        "each line must be one JSON object with name, spec_sha256, epsilon, delta, rho, time "
        "and optionally rdp and data_source; fix the line by hand from the release's "
        "provenance record",
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class LockedLedger:
    """The release ledger while its ``flock`` is held (:func:`locked_ledger`): ``records`` as
    read under the lock, and :meth:`write` to replace them atomically."""

    def __init__(self, path: Path, records: list[ReleaseRecord]):
        self.path = path
        self.records = records

    def write(self, records: Sequence[ReleaseRecord]) -> None:
        """Write ``records`` as the whole ledger: a temporary file in the same folder, fsync,
        ``os.replace`` over the ledger (a reader sees the old or the new ledger, never half a
        line), fsync of the folder (the rename survives a crash)."""
        lines = [r.model_dump_json() for r in records]
        with atomic_path(self.path, fsync=True) as tmp:
            tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        fsync_folder(self.path.parent)
        self.records = list(records)


def fsync_folder(folder: Path) -> None:
    """Flush a folder's entries (renames, new files) to disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked_ledger(path: str | os.PathLike[str]) -> Iterator[LockedLedger]:
    """Hold the exclusive ``flock`` on ``<ledger>.lock`` and yield the ledger read under it
    (E020 for a malformed one: never extend a corrupt ledger). Every writer of the ledger goes
    through here, so "lock, then check, then append" is one step for concurrent compiles; a
    killed process releases its lock."""
    ledger = Path(path)
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with _locked(ledger):
        yield LockedLedger(ledger, read_ledger(ledger))


def append_release(path: str | os.PathLike[str], record: ReleaseRecord) -> None:
    """Append ``record`` to the ledger at ``path``, atomically, under the ledger's lock
    (:func:`locked_ledger`): concurrent appends cannot lose each other's line."""
    with locked_ledger(path) as ledger:
        ledger.write([*ledger.records, record])


def ledger_location_error(
    path: str | os.PathLike[str], *, must_exist: bool, named_by: str
) -> Diagnostic | None:
    """Why the lifetime ledger at ``path`` cannot be used (``E615``), or None. Checked before
    any private data is read: a directory, a file that is not a regular file, a missing ledger
    that a policy names (``must_exist``: a typo in the policy must not read as "no earlier
    releases"), a folder that cannot be created or written (the ledger is rewritten atomically
    beside itself). ``named_by`` says where the path came from, for the message."""
    file = Path(path)
    hint = None
    if file.is_dir():
        what = f"the lifetime ledger {file} ({named_by}) is a directory"
        hint = "name a JSONL file, e.g. privacy-ledger.jsonl"
    elif file.exists() and not file.is_file():
        what = f"the lifetime ledger {file} ({named_by}) is not a regular file"
    elif not file.exists() and must_exist:
        what = f"the lifetime ledger {file} ({named_by}) does not exist"
        hint = (
            "check the path for a typo; if no release of this data source has been made yet, "
            f"create the ledger empty first (touch {file})"
        )
    else:
        folder = _nearest_existing(file.parent)
        if not folder.is_dir():
            what = f"the lifetime ledger's folder {folder} ({named_by}) is not a directory"
        elif not os.access(folder, os.W_OK | os.X_OK):
            what = f"the lifetime ledger's folder {folder} ({named_by}) is not writable"
        elif file.exists() and not os.access(file, os.R_OK):
            what = f"the lifetime ledger {file} ({named_by}) is not readable"
        else:
            return None
    return Diagnostic(
        "E615",
        what,
        SourcePos(str(file)),
        hint or "give a ledger path in a folder you can write (--ledger, output.ledger or the "
        "policy's lifetime.ledger)",
    )


def _nearest_existing(folder: Path) -> Path:
    """``folder`` or its nearest ancestor that exists (what ``mkdir -p`` would create in)."""
    folder = folder.absolute()
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def recover_ledger(ledger: LockedLedger) -> list[str]:
    """Finish the interrupted releases of a locked ledger; returns one note per line changed.

    A ``pending`` line is written only after every output of its release was staged and
    fsynced, so it is rolled forward: each output whose final file does not have the staged
    SHA-256 gets its staged file renamed into place; then the line is marked ``committed``. If
    a staged file is gone (removed by hand), the release cannot be completed: its remaining
    staged files are removed and the line is marked ``abandoned`` (it still counts as spent:
    part of it may have been published). Call with the ledger's lock held."""
    def digest(path: Path) -> str | None:
        try:
            with open(path, "rb") as f:
                return hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            return None

    notes: list[str] = []
    changed = False
    records = list(ledger.records)
    for i, record in enumerate(records):
        if record.status != "pending":
            continue
        complete = True
        for out in record.outputs or []:
            target, staged = Path(out.path), Path(out.staged)
            if digest(target) == out.sha256:
                continue
            if digest(staged) == out.sha256:
                os.replace(staged, target)
                fsync_folder(target.parent)
            else:
                complete = False
        status: LedgerStatus = "committed" if complete else "abandoned"
        if not complete:
            for out in record.outputs or []:
                Path(out.staged).unlink(missing_ok=True)
        records[i] = record.model_copy(update={"status": status})
        changed = True
        notes.append(
            f"release '{record.name}' of {record.time} (txid {record.txid}) was interrupted "
            + (
                "after it was recorded; its outputs were put in place and it is now committed"
                if complete
                else "and its staged files are gone; marked abandoned (still counted as spent)"
            )
        )
    if changed:
        ledger.write(records)
    return notes
