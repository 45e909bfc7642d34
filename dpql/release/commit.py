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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

from dpql.data.codec import decode
from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.domain import EncodedTable
from dpql.io import public_mode
from dpql.plan.planner import ReleasePlan
from dpql.privacy.ledger import Ledger
from dpql.release.provenance import build_record, sha256_json
from dpql.release.table_file import write_frame
from dpql.spec.load import LoadedPolicy, LoadedSpec, normalised_spec_json


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a compile, with what is on disk (``message``)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def enforce_policy(
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
    from dpql.release.lifetime import of_source, real_path
    from dpql.release.policy import (
        check_policy,
        lifetime_budget,
        lifetime_violations,
        planned_spend,
        violation_pos,
    )

    if records is None:
        seconds = plan.resources.seconds if plan.resources is not None else None
        violations = check_policy(
            spec, policy, ledger_file, plan.budget.epsilon, data=data, estimated_seconds=seconds
        )
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
            violation_pos(v, spec, policy),
            (f"{v.hint}; " if v.hint else "")
            + (late if records is not None else "nothing was read or spent")
            + "; the lifetime total counts every ledger line (pending ones included)",
        )
        for v in violations
    ]
    if diagnostics:
        raise DiagnosticError(diagnostics)


#: Characters a staged output's name adds to its target's (``.<name>.dpql-<pid>-<hex>.staged``,
#: or the ``.<name>.<random>.tmp`` of an atomic write): the longest file name written.
_STAGED_EXTRA = len(".") + len(".dpql-") + 10 + len("-") + 12 + len(".staged")

#: Where each output's path is written in the spec (for a located message).
_SPEC_KEYS = {
    "table": ("output", "path"),
    "record": ("output", "provenance"),
    "curator file": ("output", "curator"),
    "lifetime ledger": ("output", "ledger"),
}


def release_inputs(
    spec: LoadedSpec,
    policy: Path | None = None,
    signing_key: Path | None = None,
    *,
    data: Path | None = None,
) -> dict[str, Path]:
    """Every file a release reads, by role: the spec, the data file (``data``, default the
    spec's), the public values and group files, an external table, the policy and the signing
    key. No output may be one of them."""
    model = spec.model
    inputs = {"spec": spec.path, "data file": Path(data).absolute() if data else spec.data_path}
    for name, col in model.columns.items():
        values_file = getattr(col, "values_file", None)
        group = getattr(col, "group", None)
        if values_file:
            inputs[f"values_file of '{name}'"] = spec.resolve(values_file)
        if group is not None and group.file:
            inputs[f"group file of '{name}'"] = spec.resolve(group.file)
    if getattr(model.synthesizer, "method", None) == "external":
        inputs["external table"] = spec.resolve(model.synthesizer.path)  # type: ignore[union-attr]
    if policy is not None:
        inputs["policy"] = Path(policy).absolute()
    if signing_key is not None:
        inputs["signing key"] = Path(signing_key).absolute()
    return inputs


def overwrites_release_file(spec: LoadedSpec, target: Path, what: str) -> list[Diagnostic]:
    """E618 when ``target``, a file a command writes beside a release (``what``: "the plan
    file"), is one of the release's inputs (:func:`release_inputs`) or outputs."""
    from dpql.release.curator import curator_path
    from dpql.spec.files import same_file

    files = release_inputs(spec) | {
        "table": spec.resolve(spec.model.output.path),
        "record": spec.resolve(spec.model.output.provenance),
        "curator file": curator_path(spec),
    }
    return [
        Diagnostic(
            "E618",
            f"{what} {target} is the {role}: writing it would destroy it",
            SourcePos(str(target)),
            "give it a file of its own, e.g. plan.json",
        )
        for role, path in files.items()
        if same_file(target.absolute(), path)
    ][:1]


def curator_key_path(targets: dict[str, Path]) -> Path | None:
    """The curator HMAC key file a compile may create (none with ``$DPQL_CURATOR_KEY``)."""
    from dpql.release.curator import CURATOR_KEY_ENV, KEY_FILE_NAME

    if os.environ.get(CURATOR_KEY_ENV) or "curator file" not in targets:
        return None
    return targets["curator file"].parent / KEY_FILE_NAME


def output_location_errors(
    spec: LoadedSpec,
    targets: dict[str, Path],
    *,
    force: bool,
    ledger: Path | None = None,
    inputs: dict[str, Path] | None = None,
    here: bool = True,
) -> list[Diagnostic]:
    """Why the release cannot be written where the spec says (checked before any data is read),
    over every file a compile writes: ``targets`` (table, record, curator file), the curator
    HMAC key, and ``ledger``.

    ``E613``: a path that cannot name a file (a NUL byte, a file name longer than the folder's
    file system allows once staged, a path over ``PATH_MAX``), two outputs that are one file (by
    path, after resolving links, or by inode), a target that is a directory (or not a regular
    file), a folder that is not a directory or not writable. ``E618``: an output that is one of
    ``inputs`` (:func:`release_inputs`: writing it would destroy the spec, the data or a public
    file). ``E619``: the curator file or its key inside a published folder (the table's or the
    record's, when that folder holds neither the spec nor the data). ``E614``: the table or
    record of an earlier release is there and ``force`` is not set (a second compile would spend
    the budget again). ``here=False`` leaves out what depends on this machine's folders (a
    target that is a directory, a folder that cannot be made or written): ``dpql check`` may
    run where the release is never written (CI)."""
    from dpql.spec.files import same_file

    outputs = dict(targets)
    key = curator_key_path(targets)
    if key is not None:
        outputs["curator HMAC key"] = key
    if ledger is not None:
        outputs["lifetime ledger"] = ledger
    errors: list[Diagnostic] = []
    invalid = set()
    for role, target in outputs.items():
        problem = _path_problem(target)
        if problem is not None:
            invalid.add(role)
            errors.append(
                Diagnostic(
                    "E613",
                    f"the {role} path cannot be written: {problem}",
                    _where(spec, role),
                    "use a shorter path of ordinary characters",
                )
            )
    items = [(r, p) for r, p in outputs.items() if r not in invalid]
    for i, (role, target) in enumerate(items):
        for other, path in items:
            if other != role and _inside(target, path) and not same_file(target, path):
                errors.append(
                    Diagnostic(
                        "E613",
                        f"the {role} {target} is inside the path of the {other} {path}",
                        _where(spec, role),
                        "give each output its own path, none below another",
                    )
                )
        for other, path in items[:i]:
            if same_file(target, path):
                errors.append(
                    Diagnostic(
                        "E613",
                        f"the {role} and the {other} are the same file {target}",
                        _where(spec, role),
                        "give each output its own path (output.path, output.provenance, "
                        "output.curator, output.ledger)",
                    )
                )
        for what, source in (inputs or {}).items():
            if same_file(target, source):
                errors.append(
                    Diagnostic(
                        "E618",
                        f"the {role} {target} is the {what}: writing it would destroy an input",
                        _where(spec, role),
                        "write every output to a new file, away from the spec, the data and "
                        "the public files it names",
                    )
                )
    errors += _curator_published_errors(spec, dict(items), inputs or {})
    for role, target in items if here else ():
        if role == "lifetime ledger":
            continue  # its own checks: lifetime.ledger_location_error (E615)
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
                _where(spec, role),
                "point the output at a file in a folder you can write (output.path, "
                "output.provenance, output.curator)",
            )
        )
    existing = [
        str(targets[r])
        for r in ("table", "record")
        if r in targets and r not in invalid and targets[r].is_file()
    ]
    if existing and not force:
        errors.append(
            Diagnostic(
                "E614",
                "an earlier release is already written here: " + ", ".join(existing),
                SourcePos(str(spec.path)),
                "each compile spends the privacy budget again (and is recorded in the lifetime "
                "ledger); to replace the earlier release anyway run dpql compile --force, or "
                "change output.path and output.provenance",
            )
        )
    return errors


def _where(spec: LoadedSpec, role: str) -> SourcePos:
    """The position of ``role``'s path in the spec, or the spec file."""
    path = _SPEC_KEYS.get(role)
    if path is not None and spec.doc.has(path):
        return spec.doc.value_pos(path)
    return SourcePos(str(spec.path))


def _path_problem(target: Path) -> str | None:
    """Why ``target`` cannot name a file that dpql writes atomically beside itself, or None."""
    text = str(target)
    if "\x00" in text:
        return "it contains a NUL byte"
    folder = _nearest_existing(target.parent)
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
        path_max = os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    longest = max(len(part.encode("utf-8", "surrogateescape")) for part in target.parts)
    if longest + _STAGED_EXTRA > name_max:
        return (
            f"a file or folder name of {longest:,} bytes, over the {name_max - _STAGED_EXTRA:,} "
            f"this file system allows (its limit is {name_max:,}, less what staging adds)"
        )
    if len(text.encode("utf-8", "surrogateescape")) + _STAGED_EXTRA > path_max:
        return f"the path is longer than the {path_max - _STAGED_EXTRA:,} bytes allowed here"
    return None


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError, ValueError):
        return False


def published_folder_of(spec: LoadedSpec, path: Path) -> Path | None:
    """The folder of the release's table or record that ``path`` lies in when that folder is
    published whole (E619's rule: ``path`` is that folder, or the folder holds neither the
    spec nor the data file), else None."""
    folders = (spec.resolve(spec.model.output.path).parent,
               spec.resolve(spec.model.output.provenance).parent)  # fmt: skip
    return _published_folder(path, path, folders, (spec.path, spec.data_path))


def _published_folder(
    path: Path, home: Path, folders: Iterable[Path], private: Iterable[Path]
) -> Path | None:
    """The first of ``folders`` (published whole) that ``path`` is in: ``home`` (``path``
    itself, or a file's folder) is that folder, or ``path`` is inside it and it holds none of
    the ``private`` files (a folder that holds them is a working folder)."""
    for folder in folders:
        if (_inside(home, folder) and _inside(folder, home)) or (
            _inside(path, folder) and not any(_inside(p, folder) for p in private)
        ):
            return folder
    return None


def _curator_published_errors(
    spec: LoadedSpec, outputs: dict[str, Path], inputs: dict[str, Path]
) -> list[Diagnostic]:
    """E619 for the curator file or its key inside a folder that is published whole: the
    folder of the table or the record, when it holds neither the spec nor the data file (a
    folder that holds them is a working folder, where the default ``curator/`` lives)."""
    private = [p for r, p in inputs.items() if r in ("spec", "data file")]
    folders = {outputs[r].parent for r in ("table", "record") if r in outputs}
    errors = []
    for role in ("curator file", "curator HMAC key"):
        if role not in outputs:
            continue
        folder = _published_folder(outputs[role], outputs[role].parent, folders, private)
        if folder is not None:
            errors.append(
                Diagnostic(
                    "E619",
                    f"the {role} {outputs[role]} is inside the published folder {folder}",
                    _where(spec, "curator file"),
                    "the curator file and its key are never published: put them outside "
                    "the folder of the table and record (the default is curator/ beside "
                    "the spec)",
                )
            )
    return errors


def _nearest_existing(folder: Path) -> Path:
    folder = folder.absolute()
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


STAGED = ".dpql-{txid}.staged"  # a staged output: ``.<name>.dpql-<pid>-<hex>.staged``


def staged_path(target: Path, txid: str) -> Path:
    """Where ``target``'s staged file of transaction ``txid`` is written: beside it, hidden,
    named so that :func:`remove_orphans` and ledger recovery recognise it."""
    return target.with_name(f".{target.name}{STAGED.format(txid=txid)}")


def remove_orphans(targets: Sequence[Path]) -> list[Path]:
    """Remove the staged files of compiles that died before recording their release (their
    process is gone); call after :func:`dpql.release.lifetime.recover_ledger`, with the ledger
    locked."""
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


def stage_release(
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
    _stage(staged["table"], lambda p: write_frame(df, p, out.name), public_mode())
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
        from dpql.release.signing import sign_record

        record = sign_record(record, signing_key)
    text = json.dumps(record, indent=2, sort_keys=False) + "\n"
    stage_text(staged["record"], text, public_mode())
    return record


def stage_text(path: Path, text: str, mode: int) -> str:
    """Stage ``text`` at ``path`` (a new file created with ``mode``, fsynced); its SHA-256."""
    return _stage(path, _writer(text, mode), mode)


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


def commit_release(
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
    from dpql.release.lifetime import (
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
                enforce_policy(spec, plan, policy, ledger_file, locked.records, data)
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
