"""Scale benchmark of the measurement engines: all 3-way marginals of an upsampled Adult table.

    python benchmarks/scale/run.py --rows 1000000 10000000 --engines memory duckdb spark
    python benchmarks/scale/run.py --rows 10000000 --engines --compile example marginals
    python benchmarks/scale/run.py --rows 10000000 --engines --dpsgd 500

1. Upsamples ``adult_train.csv`` to each row count with perturbation (rows drawn with
   replacement; numeric values jittered by up to 5% (and +-1 for integer columns), clipped to
   the public bounds; each categorical cell resampled uniformly from the declared values with
   probability 2%) and writes Parquet to ``--workdir`` (a temporary directory, never committed).
2. For each (rows, engine) runs a fresh child process that opens the engine on the file
   (validation + encoding) and computes the exact sums of all C(15, 3) = 455 three-way marginals,
   and reports wall times and peak RSS of the child (Linux ``VmHWM``).
   Spark runs on a local session (``local[threads]``, ``--spark-memory`` driver memory) that the
   child starts first (reported apart); its peak memory is the sum of the peak RSS of the child,
   the JVM and Spark's Python workers (each process's ``VmHWM``, read before the session stops).
3. Checks that every engine returned identical counts (sha256 of the concatenated cells).
4. With ``--compile [VARIANT ...]``: a whole ``dpql compile`` (``synthesizer.method: auto``,
   the default method) per row count and variant (:data:`VARIANTS`: ``example``, the example
   spec ``examples/adult/adult.release.yaml`` with ranges, halfspaces, requirements and
   ``postprocess: iproj``, so auto picks RAP; ``marginals``, the suite's Adult spec with the
   workload ``marginals(3)`` only, so auto picks AIM), pointed at the upsampled file
   (``data.rows`` its row count, ``synthesizer.rows`` the release size 32,561; ``engine: auto``:
   DuckDB for the 10M-row file), in a fresh child. Per phase: plan, opening and encoding the
   data, measurement (the exact answers computed in the engine, wherever they are asked for),
   synthesis and post-processing (each without the measurement inside it), writing; the peak
   RSS of the process tree and the load average at the child's start and end. JAX's persistent
   compilation cache starts empty in each child (a user's first compile).
5. With ``--dpsgd STEPS``: the GAN backend's DP-SGD (Adult options, STEPS steps per phase) fed
   by ``dpql.data.rows.open_private_rows`` with ``--dpsgd-engine`` (DuckDB: the rows streamed
   into the out-of-core row store, each step's Poisson sample fetched by row number).

The domain comes from the example spec via ``dpql.spec.load_spec`` (no data is read to plan).
Every result goes into ``results.json`` beside this file as soon as it is measured, replacing
the entry of the same row count (and engine), with the machine and its load at that moment.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "adult" / "adult.release.yaml"
TRAIN = ROOT / "examples" / "adult" / "adult_train.csv.gz"
CHUNK = 1_000_000
RESULTS = Path(__file__).resolve().parent / "results.json"
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import describe, write_results  # noqa: E402


def domain():
    from dpql.spec.load import load_spec

    return load_spec(SPEC).domain


def upsample(rows: int, out: Path, seed: int = 0) -> None:
    """Write ``rows`` perturbed Adult rows to ``out`` (Parquet), one row group per chunk."""
    from dpql.domain import NumericColumn

    dom = domain()
    base = pd.read_csv(TRAIN, dtype=str, keep_default_na=False)
    rng = np.random.default_rng(seed)
    tmp = out.with_suffix(".partial")
    writer = None
    for start in range(0, rows, CHUNK):
        size = min(CHUNK, rows - start)
        pick = base.iloc[rng.integers(0, len(base), size)].reset_index(drop=True)
        columns: dict[str, np.ndarray] = {}
        for col in dom:
            if isinstance(col, NumericColumn):
                x = pick[col.name].astype(np.float64).to_numpy()
                x = x * (1 + rng.uniform(-0.05, 0.05, size))
                if col.integer:
                    x = np.rint(x + rng.integers(-1, 2, size))
                x = np.clip(x, col.lo, col.hi)
                columns[col.name] = x.astype(np.int64) if col.integer else x
            else:
                v = pick[col.name].to_numpy(dtype=object)
                swap = rng.random(size) < 0.02
                v[swap] = rng.choice(np.asarray(col.values, dtype=object), int(swap.sum()))
                columns[col.name] = v
        table = pa.table(columns)
        writer = writer or pq.ParquetWriter(tmp, table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()
    tmp.rename(out)


def peak_rss_mib() -> float:
    """Peak resident memory of this process (Linux VmHWM; ru_maxrss elsewhere). ru_maxrss alone
    would be wrong here: Linux carries the parent's peak over into a forked child."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tree_peak_rss_mib() -> float:
    """Sum of the peak RSS (VmHWM) of this process and all its live descendants (Spark's JVM
    and Python workers): an upper bound on the peak of their total."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parent[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    me, total = os.getpid(), 0.0
    for pid in parent:
        p = pid
        while p not in (0, 1, me) and p in parent:
            p = parent[p]
        if p != me:
            continue
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def child(
    engine: str, path: Path, memory_limit: str, threads: int, spark_memory: str
) -> dict[str, object]:
    """Open ``engine`` on ``path``, answer all 3-way marginals; times, peak RSS, checksum."""
    from dpql.data.engines import local_spark_session, open_engine
    from dpql.ir.queries import Marginal

    dom = domain()
    queries = [Marginal(c) for c in itertools.combinations(dom.names, 3)]
    baseline = peak_rss_mib()  # after imports
    startup, session, work = 0.0, None, ""
    if engine == "spark":
        t = time.perf_counter()
        work = tempfile.mkdtemp(prefix="dpql-bench-spark-")
        session = local_spark_session(work, threads=threads, driver_memory=spark_memory)
        startup = time.perf_counter() - t
    t0 = time.perf_counter()
    eng = open_engine(path, dom, engine=engine, memory_limit=memory_limit, threads=threads)  # type: ignore[arg-type]
    t1 = time.perf_counter()
    sums = eng.sums(queries)
    t2 = time.perf_counter()
    rows = eng.curator_log.rows_kept
    peak = tree_peak_rss_mib()
    eng.close()
    if session is not None:
        session.stop()
        shutil.rmtree(work, ignore_errors=True)
    assert all(s.sum() == rows for s in sums)
    digest = hashlib.sha256(np.concatenate(sums).astype(np.int64).tobytes()).hexdigest()
    return {
        "engine": engine,
        "rows": rows,
        "marginals": len(queries),
        "startup_s": round(startup, 2),
        "open_s": round(t1 - t0, 2),
        "marginals_s": round(t2 - t1, 2),
        "total_s": round(t2 - t0, 2),
        "baseline_rss_mb": round(baseline),
        "peak_rss_mb": round(peak),
        "sha256": digest[:16],
    }


#: the whole-compile variants (``--compile``): name -> (template spec, what it is)
VARIANTS: dict[str, tuple[Path, str]] = {
    "example": (
        SPEC,
        "the example spec with `synthesizer.method: auto` (ranges and halfspaces: rap), "
        "requirements and `postprocess: iproj`",
    ),
    "marginals": (
        ROOT / "benchmarks" / "suite" / "specs" / "adult.release.yaml",
        "workload `marginals(3)` only, `synthesizer.method: auto` (aim), no requirements",
    ),
}


def compile_spec(data: Path, rows: int, variant: str) -> Path:
    """The ``variant``'s template spec pointed at ``data`` with ``rows`` public rows and
    ``synthesizer.method: auto`` (the default method), written beside the data. The synthetic
    table keeps the release size (32,561 rows); outputs go beside the spec."""
    text = VARIANTS[variant][0].read_text()
    lines = text.splitlines()
    section, out = "", []
    for line in lines:
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            section = line.rstrip()[:-1]
        stripped = line.strip()
        if section == "data" and stripped.startswith("path:"):
            line = f"  path: {data.name}"
        elif section == "data" and stripped.startswith("rows:"):
            line = f"  rows: {rows}"
        elif section == "synthesizer" and stripped.startswith("method:"):
            line = "  method: auto"
        elif section == "privacy" and stripped.startswith("delta:") and variant == "marginals":
            line = "  delta: 1e-9"
        elif section == "output" and stripped.split(":")[0] in ("path", "provenance"):
            key = stripped.split(":")[0]
            name = Path(stripped.split(":", 1)[1].split("#")[0].strip()).name
            line = f"  {key}: out-{variant}-{rows}/{name}"
        out.append(line)
    text = "\n".join(out) + "\n"
    assert f"path: {data.name}" in text and f"rows: {rows}" in text and "method: auto" in text
    assert "rows: 32561" in text  # the synthetic table's size
    spec = data.with_name(f"adult_{variant}_{rows}.release.yaml")
    spec.write_text(text)
    return spec


def compile_child(spec: Path) -> dict[str, object]:
    """``dpql compile SPEC --seed 0`` in this process: the compile's own phase timings, the
    time spent computing exact answers in the engine per phase (the measurement; what is left
    of each phase is synthesis or post-processing proper) and the peak RSS of the process
    tree (DuckDB runs in this process)."""
    from dpql.data.measure import PrivateMeasurer
    from dpql.pipeline import compile_release

    exact: dict[str, float] = {}  # phase label -> seconds in the engine's exact sums
    grid_sums = PrivateMeasurer._grid_sums

    def timed(self, queries):  # type: ignore[no-untyped-def]
        phase = "postprocess" if _in_postprocess() else "synthesize"
        t = time.perf_counter()
        try:
            return grid_sums(self, queries)
        finally:
            exact[phase] = exact.get(phase, 0.0) + time.perf_counter() - t

    PrivateMeasurer._grid_sums = timed  # type: ignore[method-assign]
    load_start = [round(x, 1) for x in os.getloadavg()]
    t = time.perf_counter()
    result = compile_release(spec, seed=0, force=True)
    total = time.perf_counter() - t
    events = result.record["privacy"]["events"]
    timings = result.timings
    ms, mp = exact.get("synthesize", 0.0), exact.get("postprocess", 0.0)
    phases = {
        "plan_s": timings.get("plan", 0.0),
        "open_encode_s": timings.get("load", 0.0),
        "measure_s": ms + mp,
        "synthesis_s": timings.get("synthesize", 0.0) - ms,
        "postprocess_s": timings.get("postprocess", 0.0) - mp,
        "write_s": timings.get("write", 0.0),
    }
    return {
        "spec": spec.name,
        "method": result.record.get("synthesizer", {}).get("chosen")
        or result.plan.synth.options.get("chosen"),
        "total_s": round(total, 1),
        **{k: round(v, 1) for k, v in phases.items()},
        "measure_in_postprocess_s": round(mp, 1),
        "events": len(events),
        "epsilon": round(result.record["privacy"]["spent"]["epsilon"], 4),
        "peak_rss_mb": round(tree_peak_rss_mib()),
        "jax_cache": "cold" if os.environ.get("DPQL_JAX_CACHE_DIR") else "the user's",
        "load_avg_start": load_start,
        "load_avg_end": [round(x, 1) for x in os.getloadavg()],
    }


def _in_postprocess() -> bool:
    """Whether the caller's stack is inside post-processing (``dpql.postprocess``)."""
    frame = sys._getframe(2)
    while frame is not None:
        if "/dpql/postprocess/" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def dpsgd_child(path: Path, steps: int, engine: str) -> dict[str, object]:
    """DP-SGD on the file (the GAN backend's two phases, ``steps`` steps each, Adult options):
    the rows reach DP-SGD through ``dpql.data.rows.open_private_rows`` with ``engine``."""
    from types import SimpleNamespace

    from dpql.data.rows import open_private_rows
    from dpql.privacy.ledger import Ledger
    from dpql.privacy.noise import NoiseSource
    from dpql.synth.gan import GanOptions, plan_gan, train_gan

    dom = domain()
    options = GanOptions.from_mapping(
        {"preset": "paper", "ae_steps": steps, "critic_steps": steps,
         "noise_multipliers": [1.0, 1.0]}
    )
    baseline = peak_rss_mib()
    t0 = time.perf_counter()
    with open_private_rows(path, dom, engine=engine) as rows:  # type: ignore[arg-type]
        t1 = time.perf_counter()
        plan = plan_gan(options, rows.n, SimpleNamespace(epsilon=1e9, delta=1e-9))
        train_gan(rows, plan, noise=NoiseSource(), ledger=Ledger())
        t2 = time.perf_counter()
        peak = tree_peak_rss_mib()
    return {
        "engine": engine,
        "rows": plan.n_public,
        "steps": 2 * steps,
        "open_s": round(t1 - t0, 1),
        "train_s": round(t2 - t1, 1),
        "ms_per_step": round(1000 * (t2 - t1) / (2 * steps), 2),
        "baseline_rss_mb": round(baseline),
        "peak_rss_mb": round(peak),
    }


def run_child(args: list[str], env: dict[str, str] | None = None) -> dict[str, object] | None:
    """Run this script with ``args`` in a fresh process (``env`` added to its environment);
    its last stdout line as JSON."""
    out = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    if out.returncode != 0:
        print(f"# {' '.join(args[:3])} failed:\n{out.stderr[-3000:]}", flush=True)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--engines", nargs="*", default=["memory", "duckdb", "spark"])
    ap.add_argument(
        "--compile", nargs="*", choices=sorted(VARIANTS), metavar="VARIANT",
        help=f"also time a whole dpql compile per size of each VARIANT (default: all; "
        f"{'; '.join(f'{k}: {v[1]}' for k, v in VARIANTS.items())})",
    )
    ap.add_argument("--dpsgd", type=int, metavar="STEPS", help="also time STEPS DP-SGD steps")
    ap.add_argument("--dpsgd-engine", default="duckdb", help="engine that feeds DP-SGD")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "dpql-scale")
    ap.add_argument("--memory-limit", default="1GB", help="DuckDB memory_limit")
    ap.add_argument("--spark-memory", default="2g", help="Spark driver memory (local session)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--compile-child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--profile", type=Path, help="with --compile-child: cProfile stats here")
    ap.add_argument("--dpsgd-child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        engine, path = args.child[0], Path(args.child[1])
        result = child(engine, path, args.memory_limit, args.threads, args.spark_memory)
        print(json.dumps(result))
        return
    if args.compile_child:
        if args.profile is None:
            print(json.dumps(compile_child(args.compile_child)))
            return
        import cProfile

        with cProfile.Profile() as prof:
            result = compile_child(args.compile_child)
        prof.dump_stats(args.profile)
        print(json.dumps(result))
        return
    if args.dpsgd_child:
        print(json.dumps(dpsgd_child(args.dpsgd_child, args.dpsgd, args.dpsgd_engine)))
        return

    args.workdir.mkdir(parents=True, exist_ok=True)
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    settings = {k: getattr(args, k) for k in ("memory_limit", "spark_memory", "threads")}

    def keep(part: str, entry: dict, key: tuple[str, ...]) -> None:
        """``entry`` into ``results.json``'s ``part``, replacing the one with the same key."""
        entry = {**entry, "machine": describe(), "settings": settings}
        old = [e for e in saved.get(part, []) if any(e.get(k) != entry.get(k) for k in key)]
        saved[part] = [*old, entry]
        saved["command"] = " ".join(["python", *sys.argv])
        write_results(RESULTS, saved)

    load = os.getloadavg()
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, threads={args.threads}, duckdb memory_limit="
        f"{args.memory_limit}, spark driver memory={args.spark_memory}, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        flush=True,
    )
    results, compiles, trainings = [], [], []
    for rows in args.rows:
        path = args.workdir / f"adult_{rows}.parquet"
        if not path.exists():
            t = time.perf_counter()
            upsample(rows, path)
            print(
                f"# wrote {path} ({path.stat().st_size / 2**20:.0f} MiB) in "
                f"{time.perf_counter() - t:.1f} s",
                flush=True,
            )
        for engine in args.engines:
            common = ["--memory-limit", args.memory_limit, "--threads", str(args.threads)]
            common += ["--spark-memory", args.spark_memory]
            result = run_child(["--child", engine, str(path), *common])
            if result is not None:
                results.append(result)
                keep("measure", result, ("rows", "engine"))
                print(json.dumps(result), f"load {os.getloadavg()[0]:.1f}", flush=True)
        if args.dpsgd:
            dpsgd_args = ["--dpsgd", str(args.dpsgd), "--dpsgd-engine", args.dpsgd_engine]
            result = run_child(["--dpsgd-child", str(path), *dpsgd_args])
            if result is not None:
                trainings.append(result)
                keep("dpsgd", {"rows": rows, **result}, ("rows", "engine"))
                print(json.dumps(result), f"load {os.getloadavg()[0]:.1f}", flush=True)
        for variant in [] if args.compile is None else args.compile or sorted(VARIANTS):
            spec = compile_spec(path, rows, variant)
            with tempfile.TemporaryDirectory(prefix="dpql-scale-jax-") as cache:
                # a user's first compile: JAX's persistent compilation cache starts empty
                result = run_child(["--compile-child", str(spec)], {"DPQL_JAX_CACHE_DIR": cache})
            if result is not None:
                compiles.append({"rows": rows, "variant": variant, **result})
                keep("compile", compiles[-1], ("rows", "variant"))
                print(json.dumps(compiles[-1]), f"load {os.getloadavg()[0]:.1f}", flush=True)
    if results:
        print(
            "\n| rows | engine | startup (s) | open (s) | 455 marginals (s) | total (s) "
            "| RSS after imports (MiB) | peak RSS (MiB) | sha256 |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        print(
            f"| {r['rows']:,} | {r['engine']} | {r['startup_s']} | {r['open_s']} | "
            f"{r['marginals_s']} | {r['total_s']} | {r['baseline_rss_mb']} | {r['peak_rss_mb']} "
            f"| `{r['sha256']}` |"
        )
    for rows in args.rows:
        digests = {r["sha256"] for r in results if r["rows"] == rows}
        if digests:
            print(f"# {rows:,} rows: engines {'agree' if len(digests) == 1 else 'DISAGREE'}")
    for c in compiles:
        print(f"# compile {c}")
    for d in trainings:
        print(f"# dpsgd {d}")


if __name__ == "__main__":
    main()
