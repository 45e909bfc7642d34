"""`dpql compile`: plan, measure, synthesize, post-process, write table + provenance atomically.

The pipeline is a straight line of stages; the privacy boundary is :func:`open_measurer` (and
DP-SGD inside the GAN backend): every other stage sees only the plan and noisy outputs.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpql.codec import decode
from dpql.curator import curator_key, curator_path, curator_record, write_curator_json
from dpql.diagnostics import Diagnostic, DiagnosticError, InternalError, SourcePos
from dpql.domain import EncodedTable
from dpql.plan.exact import answer_all
from dpql.plan.planner import Budget, ReleasePlan, build_plan
from dpql.privacy.accountant import epsilon_from_events
from dpql.privacy.budget import BudgetExceeded
from dpql.privacy.ledger import EPSILON_RTOL, Ledger, PrivacyEvent
from dpql.privacy.noise import NoiseSource, default_noise
from dpql.provenance import build_record, sha256_json
from dpql.spec.load import LoadedSpec, load_spec, normalised_spec_json

Progress = Callable[[str, int, int], None]


@dataclass
class CompileResult:
    plan: ReleasePlan
    table_path: Path
    record_path: Path
    record: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    curator_path: Path | None = None


def public_mode() -> int:
    """The mode of a file meant for publication: ``0666`` less the process umask (0644 under
    the usual umask 022), what ``open()`` would give a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_path(target: Path, mode: int | None = None) -> Iterator[Path]:
    """Yield a temp path beside ``target``; rename it over ``target`` only on success.

    The renamed file gets ``mode``, by default :func:`public_mode`: the synthetic table and the
    provenance record are published (``mkstemp`` alone would leave them 0600). Curator-only
    files are written elsewhere with 0600 (:func:`dpql.curator.write_curator_json`).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, public_mode() if mode is None else mode)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_table(df: pd.DataFrame, path: Path) -> None:
    """CSV or Parquet by the output's extension, written atomically, mode 0666 & ~umask."""
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)


def write_json(obj: Any, path: Path) -> None:
    """``obj`` as indented JSON, written atomically, mode 0666 & ~umask (published files)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def open_measurer(spec: LoadedSpec, ledger: Ledger, noise: NoiseSource):
    """The privacy boundary: the private table behind a DP measurement oracle (dpql.data)."""
    from dpql.data.engines import open_engine
    from dpql.data.load import rules_from_spec
    from dpql.data.measure import PrivateMeasurer

    missing, other = rules_from_spec(spec.model)
    engine = open_engine(
        spec.data_path,
        spec.domain,
        engine=spec.model.data.engine,
        fmt=spec.model.data.format,
        missing=missing,
        other=other,
    )
    return PrivateMeasurer(engine, spec.rows, ledger, noise)


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


def fit_metrics(table: EncodedTable, measured: list[tuple[Any, np.ndarray]]) -> dict[str, float]:
    """Errors of the synthetic table against the *noisy* measurements (never the real data)."""
    if not measured:
        return {}
    answers = answer_all([q for q, _ in measured], table)
    err = np.concatenate([np.abs(a - m) for a, (_, m) in zip(answers, measured, strict=True)])
    return {
        "mean_abs_error_vs_noisy": float(err.mean()),
        "max_abs_error_vs_noisy": float(err.max()),
    }


def compile_release(
    spec_path: str | os.PathLike[str],
    *,
    seed: int | None = None,
    progress: Progress | None = None,
    noise: NoiseSource | None = None,
    allow_reproducible_noise: bool = False,
    ledger_path: Path | None = None,
) -> CompileResult:
    """Run a release end to end. ``seed`` fixes optimisation and row sampling, never DP noise.

    ``noise`` defaults to a fresh OS-entropy source; a test-only reproducible source is refused
    unless ``allow_reproducible_noise`` (tests only: such a release is not private).
    A successful release is appended to the lifetime ledger (``ledger_path``, else the spec's
    ``output.ledger``) that ``dpql check --policy`` enforces. The ledger of mechanism events is
    an odometer created with the plan's budget; a run that would overspend is refused (``E611``)
    and nothing is written. The curator-only facts and the stage timings go to the curator file
    (:mod:`dpql.curator`), never to the published record.
    """
    if noise is not None and getattr(noise, "reproducible", False) and not allow_reproducible_noise:
        raise InternalError("refusing to release with a reproducible (test-only) noise source")
    timings: dict[str, float] = {}
    t = time.perf_counter()
    spec = load_spec(spec_path)
    plan = build_plan(spec)
    timings["plan"] = time.perf_counter() - t
    seed = secrets.randbits(31) if seed is None else seed
    noise = noise or default_noise()
    curator_file = curator_path(spec)
    # the odometer: refuses any event that would take the spend over the plan's budget
    ledger = Ledger.for_budget(
        epsilon=plan.budget.epsilon, delta=plan.budget.delta, rho=plan.budget.rho
    )
    t = time.perf_counter()
    measurer = open_measurer(spec, ledger, noise)
    try:
        timings["load"] = time.perf_counter() - t
        synth_info: dict[str, Any] = {"method": plan.method, "rounding_seed": seed}
        model = spec.model.synthesizer
        t = time.perf_counter()
        if plan.method == "rap":
            from dpql.synth.rap import run_rap

            assert plan.rap is not None and plan.rap_options is not None
            res = run_rap(
                measurer,
                spec.domain,
                plan.queries,
                plan.rap,
                plan.rap_options,
                model.rows,
                seed,
                progress,
            )
            table = res.table
            synth_info.update(
                options=plan.rap_options.__dict__,
                rounds=res.rounds,
                measured_queries=len(res.measured),
            )
            synth_info.update(fit_metrics(table, list(zip(res.measured, res.noisy, strict=True))))
        elif plan.method == "gan":
            from dpql.data.load import rules_from_spec
            from dpql.data.rows import open_private_rows
            from dpql.synth.gan import sample, train_gan

            # DP-SGD is the second privacy boundary: it reads the private rows (DESIGN inv. 2),
            # in memory, or for large files from an out-of-core row store (dpql.data.rows).
            missing, other = rules_from_spec(spec.model)
            with open_private_rows(
                spec.data_path,
                spec.domain,
                engine=spec.model.data.engine,
                fmt=spec.model.data.format,
                missing=missing,
                other=other,
            ) as private:
                gan_model = train_gan(
                    private, plan.gan, noise=noise, ledger=ledger, progress=progress
                )
            table = sample(gan_model, model.rows, seed)
            synth_info.update(options=dict(model.options))
        else:
            from dpql.data.load import load_table

            # an external synthetic table is public input checked against the schema, not private
            table = load_table(spec.resolve(model.path), spec.domain).table
            ledger.append(
                PrivacyEvent.external(
                    "external",
                    f"external table {model.path}",
                    epsilon=model.budget.epsilon,
                    delta=model.budget.delta,
                    neighbouring=model.budget.neighbouring,  # charged under replace-one
                )
            )
        timings["synthesize"] = time.perf_counter() - t
        requirements: list[dict[str, Any]] = []
        postprocess: dict[str, Any] | None = None
        if plan.measures is not None and "iproj.measure" in plan.phase_rho:
            from dpql.accept import run_postprocess

            t = time.perf_counter()
            post = run_postprocess(plan, measurer, table, seed, progress)
            table = post.table
            requirements, postprocess = post.requirements_json(), post.summary_json()
            timings["postprocess"] = time.perf_counter() - t
        out = spec.resolve(spec.model.output.path)
        record_path = spec.resolve(spec.model.output.provenance)
        t = time.perf_counter()
        check_spent(ledger, plan.budget)  # fail closed: nothing is written over budget
        key, key_source = curator_key(curator_file.parent)
        write_table(decode(table), out)
        spec_json = json.loads(normalised_spec_json(spec.model))
        record = build_record(
            spec_json=spec_json,
            spec_sha256=sha256_json(spec_json),
            plan_sha256=sha256_json(plan.to_json()),
            budget={
                "epsilon": plan.budget.epsilon,
                "delta": plan.budget.delta,
                "rho": plan.budget.rho,
            },
            ledger=ledger,
            synthesizer=synth_info,
            requirements=requirements,
            postprocess=postprocess,
            output_path=out,
            output_rows=table.n,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        write_json(record, record_path)
        summary = measurer.curator_summary().to_json()
        write_curator_json(curator_record(summary, timings, key, key_source), curator_file)
        ledger_file = ledger_path or (
            spec.resolve(spec.model.output.ledger) if spec.model.output.ledger else None
        )
        if ledger_file is not None:
            from dpql.check import append_release, release_record

            spent = record["privacy"]["spent"]
            append_release(
                ledger_file,
                release_record(
                    spec,
                    spent["epsilon"],
                    spent["delta"],
                    spent["rho"],
                    rdp=record["privacy"]["rdp"],
                ),
            )
        timings["write"] = time.perf_counter() - t
    except BudgetExceeded as exc:
        raise _refused(spec, exc) from exc
    finally:
        measurer.close()
    return CompileResult(plan, out, record_path, record, timings, curator_file)
