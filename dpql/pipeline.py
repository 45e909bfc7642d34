"""`dpql compile`: plan, measure, synthesize, post-process, write table + provenance atomically.

The pipeline is a straight line of stage calls between frozen values (:func:`compile_release`).
The privacy boundary is the data layer's handle (:func:`dpql.data.private.open_private`): the
synthesizer backend and post-processing see the private table only through its measurement
oracle (and DP-SGD through its row access); every other stage sees the plan and noisy outputs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import pandas as pd

from dpql.codec import decode
from dpql.curator import curator_key, curator_path, curator_record
from dpql.diagnostics import Diagnostic, DiagnosticError, InternalError, SourcePos
from dpql.domain import EncodedTable
from dpql.io import CURATOR_MODE, atomic_path, public_mode
from dpql.plan.planner import Budget, ReleasePlan, build_plan
from dpql.privacy.accountant import epsilon_from_events
from dpql.privacy.budget import BudgetExceeded
from dpql.privacy.ledger import EPSILON_RTOL, Ledger
from dpql.privacy.noise import NoiseSource, default_noise
from dpql.progress import Progress
from dpql.provenance import build_record, sha256_json
from dpql.spec.load import LoadedPolicy, LoadedSpec, load_policy, load_spec, normalised_spec_json
from dpql.synth.base import RunContext, backend


@dataclass
class CompileResult:
    plan: ReleasePlan
    table_path: Path
    record_path: Path
    record: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    curator_path: Path | None = None


def write_table(df: pd.DataFrame, path: Path) -> None:
    """CSV or Parquet by the output's extension, written atomically, mode 0666 & ~umask."""
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)


def open_measurer(spec: LoadedSpec, ledger: Ledger, noise: NoiseSource) -> Any:
    """The private table's measurement oracle alone (benchmarks and tests; a release uses
    :func:`dpql.data.private.open_private`)."""
    from dpql.data.private import DataSource, PrivateTable

    return PrivateTable(DataSource.from_spec(spec), ledger, noise).oracle


def check_spent(ledger: Ledger, budget: Budget) -> None:
    """Fail closed: the spend recomputed from the ledger's events by the accountant must be
    within the plan's budget (epsilon up to the odometer's relative slack ``EPSILON_RTOL``, the
    zCDP rho of dpql's own mechanisms exactly); else :class:`BudgetExceeded`.

    The ledger already refuses each over-budget event (it is created with the budget); this is
    the independent re-check ``compile_release`` makes before it writes anything.
    """
    try:
        spent = epsilon_from_events(ledger.events, budget.delta).epsilon
    except ValueError as exc:  # e.g. external tables use up delta
        raise BudgetExceeded(
            math.inf, 0.0, "the release", unit="epsilon", message=f"privacy budget exceeded: {exc}"
        ) from exc
    if not spent <= budget.epsilon * (1 + EPSILON_RTOL):
        raise BudgetExceeded(
            spent,
            budget.epsilon,
            "the release",
            unit="epsilon",
            message=f"privacy budget exceeded: the ledger's {len(ledger)} events compose to "
            f"epsilon={spent:.12g} at delta={budget.delta:g}, over the budget "
            f"epsilon={budget.epsilon:g}",
        )
    rho = ledger.total_rho()
    if rho > budget.rho:
        raise BudgetExceeded(
            rho,
            budget.rho,
            "the release",
            message=f"privacy budget exceeded: the zCDP events spend rho={rho!r}, over the "
            f"budget rho={budget.rho!r}",
        )


def _refused(spec: LoadedSpec, exc: BudgetExceeded) -> DiagnosticError:
    return DiagnosticError(
        [
            Diagnostic(
                "E611",
                f"release refused, nothing was written: {exc}",
                SourcePos(str(spec.path)),
                "the run tried to spend more than the plan allocated, which is a bug in dpql, "
                "not in the spec; please report it with the spec",
            )
        ]
    )


def default_ledger_path(spec: LoadedSpec) -> Path:
    """The lifetime ledger a compile records in when nothing else names one:
    ``<spec stem>.ledger.jsonl`` beside the spec (``adult.release.yaml`` ->
    ``adult.release.ledger.jsonl``)."""
    return spec.resolve(f"{Path(spec.path).stem}.ledger.jsonl")


def resolve_ledger(
    spec: LoadedSpec, ledger_path: Path | None, policy: LoadedPolicy | None
) -> tuple[Path, str, bool]:
    """The ledger this compile records in, where it was named, and whether it must exist:
    ``--ledger``, else ``output.ledger``, else the policy's ``lifetime.ledger``, else
    :func:`default_ledger_path`. With a policy that names a ledger, it must be that one (E615
    otherwise: the caps are enforced on the ledger the release is recorded in) and exist."""
    policy_ledger = policy.ledger_path if policy is not None else None
    if ledger_path is not None:
        path, named = Path(ledger_path).absolute(), "--ledger"
    elif spec.model.output.ledger:
        path, named = spec.resolve(spec.model.output.ledger), "output.ledger"
    elif policy_ledger is not None:
        path, named = policy_ledger, f"lifetime.ledger of {policy.path}"  # type: ignore[union-attr]
    else:
        path, named = default_ledger_path(spec), "the default ledger beside the spec"
    if policy_ledger is not None and path.resolve() != policy_ledger.resolve():
        raise DiagnosticError(
            [
                Diagnostic(
                    "E615",
                    f"this compile would record in {path} ({named}), but the policy's lifetime "
                    f"caps are kept in {policy_ledger}",
                    SourcePos(str(policy.path)),  # type: ignore[union-attr]
                    "record the release in the policy's ledger: drop --ledger/output.ledger or "
                    "make them name the policy's lifetime.ledger",
                )
            ]
        )
    return path, named, policy_ledger is not None


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


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a compile, with what is on disk (``message``)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def compile_release(
    spec_path: str | os.PathLike[str],
    *,
    seed: int | None = None,
    progress: Progress | None = None,
    noise: NoiseSource | None = None,
    allow_reproducible_noise: bool = False,
    ledger_path: Path | None = None,
    signing_key: Path | None = None,
    force: bool = False,
    policy_path: Path | None = None,
    notify: Callable[[str], None] | None = None,
) -> CompileResult:
    """Run a release end to end. ``seed`` fixes optimisation and row sampling, never DP noise.

    ``noise`` defaults to a fresh OS-entropy source; a test-only reproducible source is refused
    unless ``allow_reproducible_noise`` (tests only: such a release is not private).
    Every release is recorded in a lifetime ledger (:func:`resolve_ledger`: ``ledger_path``,
    ``output.ledger``, the policy's ``lifetime.ledger`` or ``<spec stem>.ledger.jsonl`` beside
    the spec). The ledger of mechanism events is an odometer created with the plan's budget; a
    run that would overspend is refused (``E611``) and nothing is written. The curator-only
    facts and the stage timings go to the curator file (:mod:`dpql.curator`), never to the
    published record. With ``signing_key`` (an Ed25519 private key from ``dpql keygen``) the
    record is signed (:mod:`dpql.signing`).

    Before any private data is read: every output location and the ledger are validated
    (E613, E615, E005, E020), an earlier release at the same outputs is refused unless
    ``force`` (E614), and with ``policy_path`` the policy is enforced, lifetime caps included
    (P0xx). ``notify`` receives notes (interrupted releases recovered from the ledger).

    Stages: plan (no data) -> preflight -> open the private table -> the backend's ``run`` ->
    post-process -> re-check the spend -> commit (:func:`_commit`: staged files, pending
    ledger line, renames, committed; docs/architecture.md "Writing a release").
    """
    if noise is not None and getattr(noise, "reproducible", False) and not allow_reproducible_noise:
        raise InternalError("refusing to release with a reproducible (test-only) noise source")
    from dpql.data.private import DataSource, open_private
    from dpql.postprocess.run import run_postprocess

    timings: dict[str, float] = {}
    clock = _Clock(timings)
    with clock("plan"):
        spec = load_spec(spec_path)
        plan = build_plan(spec)
        policy = load_policy(policy_path) if policy_path is not None else None
        targets = _targets(spec)
        ledger_file = _preflight(spec, plan, targets, ledger_path, policy, force, notify)
        if signing_key is not None:
            _check_signing_key(signing_key)
    seed = secrets.randbits(31) if seed is None else seed
    noise = noise or default_noise()
    # the odometer: refuses any event that would take the spend over the plan's budget
    ledger = Ledger.for_budget(
        epsilon=plan.budget.epsilon, delta=plan.budget.delta, rho=plan.budget.rho
    )
    try:
        with ExitStack() as stack:
            with clock("load"):
                private = stack.enter_context(
                    open_private(DataSource.from_spec(spec), ledger, noise)
                )
            _note_ignored_columns(private, notify)
            run = RunContext(spec, plan.queries, private, noise, ledger, seed, progress)
            with clock("synthesize"):
                synth = backend(plan.method).run(plan.synth, run)
            table, requirements, postprocess = synth.table, [], None
            if plan.measures is not None and "iproj.measure" in plan.phase_rho:
                with clock("postprocess"):
                    post = run_postprocess(
                        plan, private.oracle, table, seed, progress, synth.measurements
                    )
                table = post.table
                requirements, postprocess = post.requirements_json(), post.summary_json()
            check_spent(ledger, plan.budget)  # fail closed: nothing is written over budget
            summary = private.curator_summary().to_json()
    except BudgetExceeded as exc:
        raise _refused(spec, exc) from exc
    except KeyboardInterrupt:
        raise Interrupted(
            "interrupted before the release was written; no output was written and nothing "
            "was recorded in the ledger"
        ) from None
    txid = f"{os.getpid()}-{secrets.token_hex(6)}"
    staged = {role: _staged_path(target, txid) for role, target in targets.items()}
    try:
        with clock("write"):
            record = _stage_release(
                spec, plan, ledger, {"method": plan.method, "rounding_seed": seed, **synth.info},
                table, requirements, postprocess, signing_key, targets, staged,
            )  # fmt: skip
            key, key_source = curator_key(targets["curator file"].parent)  # folder mode 0700
            curator = json.dumps(curator_record(summary, timings, key, key_source), indent=2)
            _stage(staged["curator file"], _writer(curator + "\n", CURATOR_MODE), CURATOR_MODE)
    except BaseException as exc:
        for path in staged.values():
            path.unlink(missing_ok=True)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(
                "interrupted before the release was written; no output was written and "
                "nothing was recorded in the ledger"
            ) from None
        raise
    _commit(spec, record, targets, staged, txid, ledger_file, policy, plan)
    return CompileResult(
        plan, targets["table"], targets["record"], record, timings, targets["curator file"]
    )


def _targets(spec: LoadedSpec) -> dict[str, Path]:
    return {
        "table": spec.resolve(spec.model.output.path),
        "record": spec.resolve(spec.model.output.provenance),
        "curator file": curator_path(spec),
    }


def _preflight(
    spec: LoadedSpec,
    plan: ReleasePlan,
    targets: dict[str, Path],
    ledger_path: Path | None,
    policy: LoadedPolicy | None,
    force: bool,
    notify: Callable[[str], None] | None,
) -> Path:
    """Everything that can refuse the release without the data, before it is read; returns the
    ledger to record in. Finishes interrupted releases found in the ledger first."""
    from dpql.check import ledger_location_error, locked_ledger, recover_ledger

    ledger_file, named, must_exist = resolve_ledger(spec, ledger_path, policy)
    problem = ledger_location_error(ledger_file, must_exist=must_exist, named_by=named)
    errors = [problem] if problem is not None else []
    errors += [d for d in output_location_errors(spec, targets, force=True) if d.code == "E613"]
    if errors:
        raise DiagnosticError(errors)
    with locked_ledger(ledger_file) as locked:  # E005/E020: never extend a corrupt ledger
        for note in recover_ledger(locked):
            if notify is not None:
                notify(f"{ledger_file}: {note}")
        remove_orphans(list(targets.values()))
    errors = output_location_errors(spec, targets, force=force)
    if errors:
        raise DiagnosticError(errors)
    if policy is not None:
        _enforce_policy(spec, plan, policy, ledger_file)
    return ledger_file


def _enforce_policy(
    spec: LoadedSpec,
    plan: ReleasePlan,
    policy: LoadedPolicy,
    ledger_file: Path,
    records: Sequence[Any] | None = None,
) -> None:
    """Refuse the release (P0xx at the policy) if it breaks ``policy``, lifetime caps included,
    over the ledger's lines (every status counts as spent; ``records``: as read under the
    ledger's lock)."""
    from dpql.check import check_policy, lifetime_budget, lifetime_violations, planned_spend

    if records is None:
        violations = check_policy(spec, policy, ledger_file, plan.budget.epsilon)
    elif policy.model.lifetime is not None:
        lifetime = policy.model.lifetime
        spend = planned_spend(spec, plan.budget.epsilon)
        violations = lifetime_violations(
            lifetime_budget(lifetime.epsilon, list(records), spend, lifetime.delta)
        )
    else:
        violations = []
    late = "a concurrent release was recorded meanwhile; nothing of this run was written"
    diagnostics = [
        Diagnostic(
            v.code,
            f"compile refused by the policy: {v.message}",
            SourcePos(str(policy.path)),
            (late if records is not None else "nothing was read or spent")
            + "; the lifetime total counts every ledger line (pending ones included)",
        )
        for v in violations
    ]
    if diagnostics:
        raise DiagnosticError(diagnostics)


class _Clock:
    """``with clock("stage"):`` adds the stage's wall time to ``timings`` (curator-only)."""

    def __init__(self, timings: dict[str, float]):
        self.timings = timings

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - t


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
) -> dict[str, Any]:
    """Write the published table and provenance record to their staged paths (beside their
    targets, mode 0666 & ~umask); the record names the table's final file name."""
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
) -> None:
    """Make the staged release the release, as one unit (docs/architecture.md "Writing a
    release"): with the ledger locked, re-check the policy's lifetime caps over the ledger as
    it is now (a concurrent compile may have recorded meanwhile), append the release's line as
    ``pending`` (naming each staged file and its SHA-256; fsynced), rename every staged file
    onto its target, fsync the folders, mark the line ``committed``. A SIGKILL before the
    pending line leaves only staged files (removed by the next compile: nothing was
    released); after it, the next compile rolls the release forward."""
    from dpql.check import StagedOutput, fsync_folder, locked_ledger, release_record

    spent = record["privacy"]["spent"]
    line = release_record(
        spec, spent["epsilon"], spent["delta"], spent["rho"], rdp=record["privacy"]["rdp"]
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
                _enforce_policy(spec, plan, policy, ledger_file, locked.records)
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


def _note_ignored_columns(private: object, notify: Callable[[str], None] | None) -> None:
    """W601 on the curator's terminal: data columns outside the schema are ignored. Their names
    are the file's header (never cell values); the note goes to ``notify`` only, never to the
    table, the record or the ledger."""
    ignored = private.curator_summary().log.ignored_columns  # type: ignore[attr-defined]
    if notify is None or not ignored:
        return
    d = Diagnostic(
        "W601",
        f"the data has {len(ignored)} column(s) not in the schema, ignored: "
        + ", ".join(repr(c) for c in ignored),
        hint="add a column to the schema to release it (curator-only note)",
        severity="warning",
        private=True,
    )
    notify(f"{d.severity}[{d.code}]: {d.message} (hint: {d.hint})")


def _check_signing_key(path: Path) -> None:
    """A signing key that cannot be used is refused before any data is read (V045)."""
    from dpql.signing import SigningError, load_private_key

    try:
        load_private_key(Path(path))
    except SigningError as exc:
        raise DiagnosticError([Diagnostic("V045", str(exc), SourcePos(str(path)))]) from None
