"""`dpql compile`: plan, measure, synthesize, post-process, write table + provenance atomically.

The pipeline is a straight line of stages; the privacy boundary is :func:`open_measurer` (and
DP-SGD inside the GAN backend): every other stage sees only the plan and noisy outputs.
"""

from __future__ import annotations

import json
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
from dpql.diagnostics import InternalError
from dpql.domain import EncodedTable
from dpql.plan.exact import answer_all
from dpql.plan.planner import ReleasePlan, build_plan
from dpql.privacy.ledger import Ledger, PrivacyEvent
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


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temp path beside ``target``; rename it over ``target`` only on success."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_table(df: pd.DataFrame, path: Path) -> None:
    """CSV or Parquet by the output's extension, written atomically."""
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)


def write_json(obj: Any, path: Path) -> None:
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
    ``output.ledger``) that ``dpql check --policy`` enforces.
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
    ledger = Ledger()
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
            timings=timings,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        write_json(record, record_path)
        write_json(measurer.curator_summary().to_json(), record_path.with_suffix(".curator.json"))
        ledger_file = ledger_path or (
            spec.resolve(spec.model.output.ledger) if spec.model.output.ledger else None
        )
        if ledger_file is not None:
            from dpql.check import append_release, release_record

            spent = record["privacy"]["spent"]
            append_release(
                ledger_file, release_record(spec, spent["epsilon"], spent["delta"], spent["rho"])
            )
        timings["write"] = time.perf_counter() - t
    finally:
        measurer.close()
    return CompileResult(plan, out, record_path, record, timings)
