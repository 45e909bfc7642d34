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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from dpql.codec import decode
from dpql.curator import curator_key, curator_path, curator_record, write_curator_json
from dpql.diagnostics import Diagnostic, DiagnosticError, InternalError, SourcePos
from dpql.domain import EncodedTable
from dpql.io import atomic_path, write_json
from dpql.plan.planner import Budget, ReleasePlan, build_plan
from dpql.privacy.accountant import epsilon_from_events
from dpql.privacy.budget import BudgetExceeded
from dpql.privacy.ledger import EPSILON_RTOL, Ledger
from dpql.privacy.noise import NoiseSource, default_noise
from dpql.provenance import build_record, sha256_json
from dpql.spec.load import LoadedSpec, load_spec, normalised_spec_json
from dpql.synth.base import RunContext, backend

Progress = Callable[[str, int, int], None]


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


def compile_release(
    spec_path: str | os.PathLike[str],
    *,
    seed: int | None = None,
    progress: Progress | None = None,
    noise: NoiseSource | None = None,
    allow_reproducible_noise: bool = False,
    ledger_path: Path | None = None,
    signing_key: Path | None = None,
) -> CompileResult:
    """Run a release end to end. ``seed`` fixes optimisation and row sampling, never DP noise.

    ``noise`` defaults to a fresh OS-entropy source; a test-only reproducible source is refused
    unless ``allow_reproducible_noise`` (tests only: such a release is not private).
    A successful release is appended to the lifetime ledger (``ledger_path``, else the spec's
    ``output.ledger``) that ``dpql check --policy`` enforces. The ledger of mechanism events is
    an odometer created with the plan's budget; a run that would overspend is refused (``E611``)
    and nothing is written. The curator-only facts and the stage timings go to the curator file
    (:mod:`dpql.curator`), never to the published record. With ``signing_key`` (an Ed25519
    private key from ``dpql keygen``) the record is signed (:mod:`dpql.signing`).

    Stages: plan (no data) -> open the private table -> the backend's ``run`` -> post-process
    -> re-check the spend -> write the table, the record, the curator file, the ledger line.
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
    seed = secrets.randbits(31) if seed is None else seed
    noise = noise or default_noise()
    curator_file = curator_path(spec)
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
            run = RunContext(spec, plan.queries, private, noise, ledger, seed, progress)
            with clock("synthesize"):
                synth = backend(plan.method).run(plan.synth, run)
            table, requirements, postprocess = synth.table, [], None
            if plan.measures is not None and "iproj.measure" in plan.phase_rho:
                with clock("postprocess"):
                    post = run_postprocess(plan, private.oracle, table, seed, progress)
                table = post.table
                requirements, postprocess = post.requirements_json(), post.summary_json()
            check_spent(ledger, plan.budget)  # fail closed: nothing is written over budget
            summary = private.curator_summary().to_json()
    except BudgetExceeded as exc:
        raise _refused(spec, exc) from exc
    with clock("write"):
        out, record_path, record = _write_release(
            spec, plan, ledger, {"method": plan.method, "rounding_seed": seed, **synth.info},
            table, requirements, postprocess, signing_key,
        )  # fmt: skip
        key, key_source = curator_key(curator_file.parent)
        write_curator_json(curator_record(summary, timings, key, key_source), curator_file)
        ledger_file = ledger_path or (
            spec.resolve(spec.model.output.ledger) if spec.model.output.ledger else None
        )
        if ledger_file is not None:
            _append_lifetime(spec, record, ledger_file)
    return CompileResult(plan, out, record_path, record, timings, curator_file)


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


def _write_release(
    spec: LoadedSpec,
    plan: ReleasePlan,
    ledger: Ledger,
    synth_info: dict[str, Any],
    table: EncodedTable,
    requirements: list[dict[str, Any]],
    postprocess: dict[str, Any] | None,
    signing_key: Path | None,
) -> tuple[Path, Path, dict[str, Any]]:
    """Write the published table and provenance record (each atomically, mode 0666 & ~umask)."""
    out = spec.resolve(spec.model.output.path)
    record_path = spec.resolve(spec.model.output.provenance)
    write_table(decode(table), out)
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
        output_path=out,
        output_rows=table.n,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    if signing_key is not None:
        from dpql.signing import sign_record

        record = sign_record(record, signing_key)
    write_json(record, record_path)
    return out, record_path, record


def _append_lifetime(spec: LoadedSpec, record: dict[str, Any], ledger_file: Path) -> None:
    """One line for this release in the lifetime ledger that ``dpql check --policy`` enforces."""
    from dpql.check import append_release, release_record

    spent = record["privacy"]["spent"]
    append_release(
        ledger_file,
        release_record(
            spec, spent["epsilon"], spent["delta"], spent["rho"], rdp=record["privacy"]["rdp"]
        ),
    )
