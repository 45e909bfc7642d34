"""`dpql compile`: plan, measure, synthesize, post-process, write table + provenance atomically.

The pipeline is a straight line of stage calls between frozen values (:func:`compile_release`).
The privacy boundary is the data layer's handle (:func:`dpql.data.private.open_private`): the
synthesizer backend and post-processing see the private table only through its measurement
oracle (and DP-SGD through its row access); every other stage sees the plan and noisy outputs.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpql.answers import NoisyAnswer
from dpql.diagnostics import Diagnostic, DiagnosticError, InternalError, SourcePos
from dpql.io import CURATOR_MODE, atomic_path
from dpql.plan.planner import Budget, ReleasePlan, build_plan
from dpql.population import (
    PopulationOracle,
    WithOracle,
    dropped_columns,
    full_population,
    without_unsupported_nulls,
)
from dpql.privacy.accountant import epsilon_from_events
from dpql.privacy.budget import BudgetExceeded
from dpql.privacy.ledger import EPSILON_RTOL, Ledger
from dpql.privacy.noise import NoiseSource, default_noise
from dpql.progress import Progress
from dpql.quality import QualityHeadline, compile_headline
from dpql.release.commit import (
    Interrupted,
    commit_release,
    enforce_policy,
    output_location_errors,
    release_inputs,
    remove_orphans,
    stage_release,
    stage_text,
    staged_path,
)
from dpql.release.curator import curator_key, curator_path, curator_record
from dpql.release.project import LedgerChoice, choose_ledger
from dpql.release.table_file import write_frame
from dpql.spec.load import LoadedSpec, load_spec
from dpql.synth.base import RunContext, backend

if TYPE_CHECKING:
    from dpql.postprocess.policy import PostprocessPolicy


@dataclass
class CompileResult:
    plan: ReleasePlan
    table_path: Path
    record_path: Path
    record: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    curator_path: Path | None = None
    #: the released table against the synthesizer's noisy 1-way answers (post-processing of DP
    #: outputs; :func:`dpql.quality.compile_headline`), None when it measured none
    quality: QualityHeadline | None = None
    ledger_path: Path | None = None
    policy_path: Path | None = None


def write_table(df: pd.DataFrame, path: Path) -> None:
    """CSV, gzip CSV or Parquet by the output's extension, written atomically, mode 0666 &
    ~umask."""
    with atomic_path(path) as tmp:
        write_frame(df, tmp, path.name)


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


def compile_release(
    spec_path: str | os.PathLike[str] | LoadedSpec,
    *,
    data: Any = None,
    seed: int | None = None,
    progress: Progress | None = None,
    noise: NoiseSource | None = None,
    allow_reproducible_noise: bool = False,
    ledger_path: Path | None = None,
    signing_key: Path | None = None,
    force: bool = False,
    policy_path: Path | None = None,
    notify: Callable[[str], None] | None = None,
    postprocess_policy: PostprocessPolicy | None = None,
) -> CompileResult:
    """Run a release end to end. ``seed`` fixes optimisation and row sampling, never DP noise.

    ``noise`` defaults to a fresh OS-entropy source; a test-only reproducible source is refused
    unless ``allow_reproducible_noise`` (tests only: such a release is not private).
    Every release is recorded in the lifetime ledger of its data source and answers to the
    policy that :func:`dpql.release.project.choose_ledger` finds (``ledger_path`` and
    ``policy_path`` override what is found; the release's line names its data source). The ledger of
    mechanism events is an odometer created with the plan's budget; a run that would overspend is
    refused (``E611``) and nothing is written. The curator-only
    facts and the stage timings go to the curator file (:mod:`dpql.release.curator`), never to the
    published record. With ``signing_key`` (an Ed25519 private key from ``dpql keygen``) the
    record is signed (:mod:`dpql.release.signing`). ``postprocess_policy`` overrides the default
    :class:`~dpql.postprocess.policy.PostprocessPolicy` (benchmarks); the record reports it.

    Before any private data is read: every output location and the ledger are validated,
    against each other and every input (E613, E618, E619, E615, E005, E020), an earlier
    release at the same outputs is refused unless ``force`` (E614), and the policy, given or
    found, is enforced, lifetime caps included (P0xx). ``notify`` receives notes (interrupted
    releases recovered from the ledger).

    ``spec_path`` is a spec file or an already loaded spec; ``data`` (a path, or a pandas
    DataFrame held in memory, :mod:`dpql.data.frame`) replaces the spec's ``data.path``: the
    same schema, public row count and rules apply, and its curator fingerprint is the file's,
    or the frame's content hash. The data source the ledger counts against is that path, or for
    a frame the spec's ``data.path``.

    Stages: plan (no data) -> preflight -> open the private table -> the backend's ``run`` ->
    post-process -> re-check the spend -> commit (:func:`commit_release`: staged files, pending
    ledger line, renames, committed; docs/architecture.md "Writing a release").
    """
    if noise is not None and getattr(noise, "reproducible", False) and not allow_reproducible_noise:
        raise InternalError("refusing to release with a reproducible (test-only) noise source")
    from dpql.data.load import require_spec_data_file
    from dpql.data.private import DataSource, open_private
    from dpql.postprocess.policy import DEFAULT_POLICY
    from dpql.postprocess.run import run_postprocess

    timings: dict[str, float] = {}
    clock = _Clock(timings)
    with clock("plan"):
        spec = spec_path if isinstance(spec_path, LoadedSpec) else load_spec(spec_path)
        plan = build_plan(spec)
        targets = _targets(spec)
        source = Path(data) if isinstance(data, (str, os.PathLike)) else None
        inputs = release_inputs(spec, policy_path, signing_key, data=source)
        _refuse_outputs_on_inputs(spec, targets, ledger_path, inputs)  # before a ledger is read
        if data is None:  # before the ledger's lock file is made
            require_spec_data_file(spec)
        choice = choose_ledger(spec, ledger=ledger_path, policy=policy_path, data=source)
        policy, ledger_file = choice.policy, choice.ledger
        _preflight(spec, plan, targets, choice, force, notify, inputs)
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
                if progress is not None:  # loading a large file can take minutes
                    progress("load data", 0, 1)
                private = stack.enter_context(
                    open_private(DataSource.from_spec(spec, data), ledger, noise)
                )
                if progress is not None:
                    progress("load data", 1, 1)
                    private.oracle.progress = progress
            _refuse_public_copies(spec, private)
            _note_ignored_columns(private, notify)
            # under missing: drop, every answer is renormalised to the complete cases, once,
            # as post-processing of the noisy outputs (dpql.population)
            dropped = dropped_columns(spec.model)
            oracle = PopulationOracle(private.oracle, dropped) if dropped else private.oracle
            handle = WithOracle(private, oracle) if dropped else private
            run = RunContext(spec, plan.queries, handle, noise, ledger, seed, progress)
            with clock("synthesize"):
                synth = backend(plan.method).run(plan.synth, run)
            measurements = _rescaled(synth.measurements, getattr(oracle, "sd_scale", 1.0))
            table = without_unsupported_nulls(synth.table, measurements, seed)
            requirements, postprocess = [], None
            if plan.measures is not None and "iproj.measure" in plan.phase_rho:
                with clock("postprocess"):
                    post = run_postprocess(
                        plan, oracle, table, seed, progress, measurements,
                        postprocess_policy or DEFAULT_POLICY,
                    )
                table = post.table
                requirements, postprocess = post.requirements_json(), post.summary_json()
            check_spent(ledger, plan.budget)  # fail closed: nothing is written over budget
            quality = compile_headline(table, measurements)  # DP outputs and the table
            summary = private.curator_summary().to_json()
            if private.source.frame is not None:
                from dpql.data.frame import FRAME_FINGERPRINT

                summary["fingerprint_of"] = FRAME_FINGERPRINT
    except BudgetExceeded as exc:
        raise _refused(spec, exc) from exc
    except KeyboardInterrupt:
        raise Interrupted(
            "interrupted before the release was written; no output was written and nothing "
            "was recorded in the ledger"
        ) from None
    txid = f"{os.getpid()}-{secrets.token_hex(6)}"
    staged = {role: staged_path(target, txid) for role, target in targets.items()}
    try:
        with clock("write"):
            record = stage_release(
                spec, plan, ledger, {"method": plan.method, "rounding_seed": seed, **synth.info},
                table, requirements, postprocess, signing_key, targets, staged,
                population=oracle.to_json() if dropped else full_population(),
            )  # fmt: skip
            key, key_source = curator_key(targets["curator file"].parent)  # folder mode 0700
            facts = curator_record(summary, timings, key, key_source)
            curator = json.dumps(facts, indent=2)
            stage_text(staged["curator file"], curator + "\n", CURATOR_MODE)
    except BaseException as exc:
        for path in staged.values():
            path.unlink(missing_ok=True)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(
                "interrupted before the release was written; no output was written and "
                "nothing was recorded in the ledger"
            ) from None
        raise
    hmac = facts.get("data_hmac_sha256")
    commit_release(
        spec, record, targets, staged, txid, ledger_file, policy, plan, hmac, choice.data
    )
    return CompileResult(
        plan, targets["table"], targets["record"], record, timings, targets["curator file"],
        quality, ledger_file, policy.path if policy is not None else None,
    )  # fmt: skip


def _rescaled(
    measurements: tuple[NoisyAnswer, ...], sd_scale: float
) -> tuple[NoisyAnswer, ...]:
    """The synthesizer's measurements with their noise sds in the units of the answers it got
    (renormalised answers carry ``sd_scale`` times the release's sd; ``dpql.population``)."""
    if sd_scale == 1.0:
        return measurements
    return tuple(NoisyAnswer(m.query, m.value, m.sd * sd_scale) for m in measurements)


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
    choice: LedgerChoice,
    force: bool,
    notify: Callable[[str], None] | None,
    inputs: dict[str, Path],
) -> None:
    """Everything that can refuse the release without the data, before it is read: every
    output and the ledger checked against each other and the ``inputs``. Finishes interrupted
    releases found in the ledger first."""
    from dpql.release.lifetime import locked_ledger, recover_ledger

    ledger_file, policy = choice.ledger, choice.policy
    errors = output_location_errors(spec, targets, force=True, ledger=ledger_file, inputs=inputs)
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
        enforce_policy(spec, plan, policy, ledger_file, data=choice.data)


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
    from dpql.release.signing import SigningError, load_private_key

    try:
        load_private_key(Path(path))
    except SigningError as exc:
        raise DiagnosticError([Diagnostic("V045", str(exc), SourcePos(str(path)))]) from None


def _refuse_outputs_on_inputs(
    spec: LoadedSpec, targets: dict[str, Path], ledger: Path | None, inputs: dict[str, Path]
) -> None:
    """E613/E618/E619 for the outputs and the ledger the spec or ``--ledger`` names, before
    the ledger is looked up and read (a ledger that is the data file is never opened)."""
    if ledger is None and spec.model.output.ledger:
        ledger = spec.resolve(spec.model.output.ledger)
    elif ledger is not None:
        ledger = Path(ledger).absolute()
    errors = output_location_errors(spec, targets, force=True, ledger=ledger, inputs=inputs)
    if errors:
        raise DiagnosticError(errors)


def output_problems(
    spec: LoadedSpec, ledger: Path, policy_path: Path | None = None
) -> list[Diagnostic]:
    """What :func:`compile` refuses about the outputs the spec names before any data is read
    (E613, E618, E619), for ``dpql check``: not what depends on the machine it runs on (a
    folder that cannot be written, an earlier release there: E614, where ``--force``
    decides), since a check may run where the release is never written (CI)."""
    inputs = release_inputs(spec, policy_path)
    return output_location_errors(
        spec, _targets(spec), force=True, ledger=ledger, inputs=inputs, here=False
    )


def _refuse_public_copies(spec: LoadedSpec, private: Any) -> None:
    """E122 before anything is measured when a public input file has the data file's bytes
    (:func:`dpql.spec.files.public_copies_of_data`; the same path or inode is refused at load).
    The data file's hash is the one the data layer computed when it opened the file."""
    from dpql.spec.files import public_copies_of_data

    digest = private.curator_summary().log.sha256
    if not digest:
        return
    errors = public_copies_of_data(spec.model, spec.doc, spec.path.parent, digest)
    if errors:
        raise DiagnosticError(errors)
