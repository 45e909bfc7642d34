"""Scale benchmark of the measurement engines: all 3-way marginals of an upsampled Adult table.

    python benchmarks/scale/run.py --rows 1000000 10000000 --engines memory duckdb

1. Upsamples ``adult_train.csv`` to each row count with perturbation (rows drawn with
   replacement; numeric values jittered by up to 5% (and +-1 for integer columns), clipped to
   the public bounds; each categorical cell resampled uniformly from the declared values with
   probability 2%) and writes Parquet to ``--workdir`` (a temporary directory, never committed).
2. For each (rows, engine) runs a fresh child process that opens the engine on the file
   (validation + encoding) and computes the exact sums of all C(15, 3) = 455 three-way marginals,
   and reports wall times and peak RSS of the child (Linux ``VmHWM``).
3. Checks that every engine returned identical counts (sha256 of the concatenated cells).

The domain comes from the example spec via ``dpql.spec.load_spec`` (no data is read to plan).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SPEC = Path("/work/shared/spec-examples/adult.release.yaml")
TRAIN = Path("/work/shared/data/adult/adult_train.csv")
CHUNK = 1_000_000


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


def child(engine: str, path: Path, memory_limit: str, threads: int) -> dict[str, object]:
    """Open ``engine`` on ``path``, answer all 3-way marginals; times, peak RSS, checksum."""
    from dpql.data.engines import open_engine
    from dpql.plan.ir import Marginal

    dom = domain()
    queries = [Marginal(c) for c in itertools.combinations(dom.names, 3)]
    baseline = peak_rss_mib()  # after imports
    t0 = time.perf_counter()
    eng = open_engine(path, dom, engine=engine, memory_limit=memory_limit, threads=threads)  # type: ignore[arg-type]
    t1 = time.perf_counter()
    sums = eng.sums(queries)
    t2 = time.perf_counter()
    rows = eng.curator_log.rows_kept
    eng.close()
    assert all(s.sum() == rows for s in sums)
    digest = hashlib.sha256(np.concatenate(sums).astype(np.int64).tobytes()).hexdigest()
    return {
        "engine": engine,
        "rows": rows,
        "marginals": len(queries),
        "open_s": round(t1 - t0, 2),
        "marginals_s": round(t2 - t1, 2),
        "total_s": round(t2 - t0, 2),
        "baseline_rss_mb": round(baseline),
        "peak_rss_mb": round(peak_rss_mib()),
        "sha256": digest[:16],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--engines", nargs="+", default=["memory", "duckdb"])
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "dpql-scale")
    ap.add_argument("--memory-limit", default="1GB", help="DuckDB memory_limit")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(
            json.dumps(child(args.child[0], Path(args.child[1]), args.memory_limit, args.threads))
        )
        return

    args.workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, threads={args.threads}, duckdb memory_limit="
        f"{args.memory_limit}",
        flush=True,
    )
    results = []
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
            cmd = [
                sys.executable,
                __file__,
                "--child",
                engine,
                str(path),
                "--memory-limit",
                args.memory_limit,
                "--threads",
                str(args.threads),
            ]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"# {engine} at {rows} rows failed:\n{out.stderr[-2000:]}", flush=True)
                continue
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    print(
        "\n| rows | engine | open (s) | 455 marginals (s) | total (s) | RSS after imports (MiB) "
        "| peak RSS (MiB) | sha256 |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for r in results:
        print(
            f"| {r['rows']:,} | {r['engine']} | {r['open_s']} | {r['marginals_s']} | "
            f"{r['total_s']} | {r['baseline_rss_mb']} | {r['peak_rss_mb']} | `{r['sha256']}` |"
        )
    for rows in args.rows:
        digests = {r["sha256"] for r in results if r["rows"] == rows}
        print(f"# {rows:,} rows: engines {'agree' if len(digests) == 1 else 'DISAGREE'}")


if __name__ == "__main__":
    main()
