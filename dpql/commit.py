"""Writing a release as one unit (docs/architecture.md, "Writing a release"): where its outputs
and ledger go and whether they are usable (checked before any data is read), staging the
table, record and curator file beside their targets, the pending ledger line, the renames and
the committed line, and cleaning up after a process that died mid-way. Every outcome is either
nothing or a complete release recorded in the lifetime ledger."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

from dpql.codec import decode
from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.domain import EncodedTable
from dpql.io import public_mode
from dpql.plan.planner import ReleasePlan
from dpql.privacy.ledger import Ledger
from dpql.provenance import build_record, sha256_json
from dpql.spec.load import LoadedPolicy, LoadedSpec, normalised_spec_json


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a compile, with what is on disk (``message``)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _enforce_policy(
    spec: LoadedSpec,
    plan: ReleasePlan,
    policy: LoadedPolicy,
    ledger_file: Path,
    records: Sequence[Any] | None = None,
    data: Path | None = None,
) -> None:
    """Refuse the release (P0xx at the policy) if it breaks ``policy``, lifetime caps included,
    over the ledger's lines of this data source (every status counts as spent; ``records``: as
    read under the ledger's lock; ``data``: the data source, default the spec's data file)."""
    from dpql.check import check_policy, lifetime_budget, lifetime_violations, planned_spend
    from dpql.lifetime import of_source, real_path

    if records is None:
        violations = check_policy(spec, policy, ledger_file, plan.budget.epsilon, data=data)
    elif policy.model.lifetime is not None:
        lifetime = policy.model.lifetime
        spend = planned_spend(spec, plan.budget.epsilon)
        source = data if data is not None else real_path(spec.data_path)
        mine = [r for r in records if of_source(r, ledger_file, source)]
        violations = lifetime_violations(
            lifetime_budget(
                lifetime.epsilon, mine, spend, lifetime.delta, lifetime.composition
            )
        )
    else:
        violations = []
    late = "a concurrent release was recorded meanwhile; nothing of this run was written"
    diagnostics = [
        Diagnostic(
            v.code,
            f"compile refused by the policy: {v.message}",
            SourcePos(str(policy.path)),
            (f"{v.hint}; " if v.hint else "")
            + (late if records is not None else "nothing was read or spent")
            + "; the lifetime total counts every ledger line (pending ones included)",
        )
        for v in violations
    ]
    if diagnostics:
        raise DiagnosticError(diagnostics)


def output_location_errors(
    spec: LoadedSpec, targets: dict[str, Path], *, force: bool
) -> list[Diagnostic]:
    """Why the release cannot be written where the spec says (checked before any data is read):
    ``E613`` a target that is a directory (or not a regular file), two outputs on one path, a
    folder that is not a directory or not writable; ``E614`` the table or record of an earlier
    release is there and ``force`` is not set (a second compile would spend the budget again)."""
    errors: list[Diagnostic] = []
    where = SourcePos(str(spec.path))
    seen: dict[Path, str] = {}
    for role, target in targets.items():
        if target in seen:
            errors.append(
                Diagnostic(
                    "E613",
                    f"the {role} and the {seen[target]} are the same file {target}",
                    where,
                    "give each output its own path (output.path, output.provenance, "
                    "output.curator)",
                )
            )
        seen[target] = role
        folder = _nearest_existing(target.parent)
        if target.is_dir() or (target.exists() and not target.is_file()):
            kind = "a directory" if target.is_dir() else "not a regular file"
            what = f"the {role} path {target} is {kind}"
        elif not folder.is_dir():
            what = f"the {role}'s folder cannot be created: {folder} is not a directory"
        elif not os.access(folder, os.W_OK | os.X_OK):
            what = f"the {role}'s folder {folder} is not writable"
        else:
            continue
        errors.append(
            Diagnostic(
                "E613",
                what,
                where,
                "point the output at a file in a folder you can write (output.path, "
                "output.provenance, output.curator)",
            )
        )
    existing = [
        str(targets[r]) for r in ("table", "record") if r in targets and targets[r].is_file()
    ]
    if existing and not force:
        errors.append(
            Diagnostic(
                "E614",
                "an earlier release is already written here: " + ", ".join(existing),
                where,
                "each compile spends the privacy budget again (and is recorded in the lifetime "
                "ledger); to replace the earlier release anyway run dpql compile --force, or "
                "change output.path and output.provenance",
            )
        )
    return errors


def _nearest_existing(folder: Path) -> Path:
    folder = folder.absolute()
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


STAGED = ".dpql-{txid}.staged"  # a staged output: ``.<name>.dpql-<pid>-<hex>.staged``


def _staged_path(target: Path, txid: str) -> Path:
    return target.with_name(f".{target.name}{STAGED.format(txid=txid)}")


def remove_orphans(targets: Sequence[Path]) -> list[Path]:
    """Remove the staged files of compiles that died before recording their release (their
    process is gone); call after :func:`dpql.check.recover_ledger`, with the ledger locked."""
    removed = []
    for target in targets:
        if not target.parent.is_dir():
            continue
        for staged in target.parent.glob(f".{glob_escape(target.name)}.dpql-*.staged"):
            txid = staged.name[len(target.name) + len(".dpql-") + 1 : -len(".staged")]
            pid = txid.split("-")[0]
            if pid.isdigit() and _alive(int(pid)):
                continue
            staged.unlink(missing_ok=True)
            removed.append(staged)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _stage(path: Path, write: Callable[[Path], None], mode: int) -> str:
    """Write a staged file with ``write(path)``, set its mode, fsync it; its SHA-256."""
    write(path)
    os.chmod(path, mode)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        f.seek(0)
        return hashlib.file_digest(f, "sha256").hexdigest()


def _stage_release(
    spec: LoadedSpec,
    plan: ReleasePlan,
    ledger: Ledger,
    synth_info: dict[str, Any],
    table: EncodedTable,
    requirements: list[dict[str, Any]],
    postprocess: dict[str, Any] | None,
    signing_key: Path | None,
    targets: dict[str, Path],
    staged: dict[str, Path],
    population: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the published table and provenance record to their staged paths (beside their
    targets, mode 0666 & ~umask); the record names the table's final file name and, with
    ``population``, the rows the table describes (``dpql.population``)."""
    out = targets["table"]
    for role in ("table", "record"):  # the curator folder is made 0700 by its writer
        targets[role].parent.mkdir(parents=True, exist_ok=True)
    df = decode(table)
    if out.suffix == ".parquet":
        _stage(staged["table"], lambda p: df.to_parquet(p, index=False), public_mode())
    else:
        _stage(staged["table"], lambda p: df.to_csv(p, index=False), public_mode())
    spec_json = json.loads(normalised_spec_json(spec.model))
    record = build_record(
        spec_json=spec_json,
        spec_sha256=sha256_json(spec_json),
        plan_sha256=sha256_json(plan.to_json()),
        budget={"epsilon": plan.budget.epsilon, "delta": plan.budget.delta, "rho": plan.budget.rho},
        ledger=ledger,
        synthesizer=synth_info,
        requirements=requirements,
        postprocess=postprocess,
        output_path=staged["table"],
        output_rows=table.n,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    record["output"]["file"] = out.name
    if population is not None:
        record["output"]["population"] = population
    if signing_key is not None:
        from dpql.signing import sign_record

        record = sign_record(record, signing_key)
    text = json.dumps(record, indent=2, sort_keys=False) + "\n"
    _stage(staged["record"], _writer(text, public_mode()), public_mode())
    return record


def _writer(text: str, mode: int) -> Callable[[Path], None]:
    """Write ``text`` to a new file created with ``mode`` (a curator file is never readable by
    others, not even for a moment)."""

    def write(path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    return write


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Defer SIGINT/SIGTERM (main thread) so a commit is not cut in the middle by Ctrl-C; a
    signal that arrived is delivered on exit. SIGKILL cannot be deferred: the ledger's pending
    line covers it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    deferred = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, deferred)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _commit(
    spec: LoadedSpec,
    record: dict[str, Any],
    targets: dict[str, Path],
    staged: dict[str, Path],
    txid: str,
    ledger_file: Path,
    policy: LoadedPolicy | None,
    plan: ReleasePlan,
    data_hmac: str | None = None,
    data: Path | None = None,
) -> None:
    """Make the staged release the release, as one unit (docs/architecture.md "Writing a
    release"): with the ledger locked, re-check the policy's lifetime caps over the ledger as
    it is now (a concurrent compile may have recorded meanwhile), append the release's line as
    ``pending`` (naming each staged file and its SHA-256; fsynced), rename every staged file
    onto its target, fsync the folders, mark the line ``committed``. A SIGKILL before the
    pending line leaves only staged files (removed by the next compile: nothing was
    released); after it, the next compile rolls the release forward. The line names the data
    source (its path and ``data_hmac``, the curator file's keyed fingerprint)."""
    from dpql.lifetime import (
        StagedOutput,
        fsync_folder,
        locked_ledger,
        release_record,
        source_ref,
    )

    spent = record["privacy"]["spent"]
    line = release_record(
        spec,
        spent["epsilon"],
        spent["delta"],
        spent["rho"],
        rdp=record["privacy"]["rdp"],
        data_source=source_ref(data or spec.data_path, ledger_file, data_hmac),
    )
    outputs = [
        StagedOutput(path=str(targets[r]), staged=str(staged[r]), sha256=_sha256(staged[r]))
        for r in ("curator file", "table", "record")  # the record last: it names the table
    ]
    pending = line.model_copy(update={"status": "pending", "txid": txid, "outputs": outputs})
    recorded = False
    try:
        with _signals_deferred(), locked_ledger(ledger_file) as locked:
            if policy is not None:
                _enforce_policy(spec, plan, policy, ledger_file, locked.records, data)
            before = list(locked.records)
            locked.write([*before, pending])
            recorded = True  # from here on the release is recorded: roll forward, never back
            folders = set()
            for out in outputs:
                os.replace(out.staged, out.path)
                folders.add(Path(out.path).parent)
            for folder in folders:
                fsync_folder(folder)
            locked.write([*before, pending.model_copy(update={"status": "committed"})])
    except BaseException as exc:
        if not recorded:
            for path in staged.values():
                path.unlink(missing_ok=True)
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Interrupted):
            raise Interrupted(
                f"interrupted; the release was written and recorded in {ledger_file}: "
                f"{targets['table']}, {targets['record']}"
                if recorded
                else "interrupted before the release was written; no output was written and "
                "nothing was recorded in the ledger"
            ) from None
        raise


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
