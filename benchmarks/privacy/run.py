"""Time measuring all 3-way marginals of the bundled Adult example through dpql's private measurer.

Splits the wall time into loading the private file, the engine's exact sums (the same for every
sampler) and the noise (the mechanism), so the cost of the exact discrete Gaussian sampler is
visible on its own. Reports the best of ``--repeats`` runs of each part.

    python3 benchmarks/privacy/bench_measure.py [--repeats 5] [--engine memory|duckdb]
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import time
from pathlib import Path

import numpy as np

from dpql.data.engines import open_engine
from dpql.data.measure import PrivateMeasurer
from dpql.ir.queries import Marginal
from dpql.privacy.ledger import Ledger
from dpql.privacy.noise import NoiseSource
from dpql.spec.load import load_spec

SPEC = Path(__file__).resolve().parents[2] / "examples" / "adult" / "adult.release.yaml"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engine", default="memory")
    args = ap.parse_args()
    spec = load_spec(SPEC)
    queries = [Marginal(c) for c in itertools.combinations(spec.domain.names, 3)]
    cells = sum(q.cells(spec.domain) for q in queries)
    rows = []
    for _ in range(args.repeats):
        t_load = time.perf_counter()
        engine = open_engine(spec.data_path, spec.domain, engine=args.engine)
        measurer = PrivateMeasurer(engine, spec.rows, Ledger(), NoiseSource())
        t0 = time.perf_counter()
        measurer._answers(queries)  # exact sums, cached: the engine's share
        t1 = time.perf_counter()
        noisy = measurer.measure(queries, 0.5, phase="bench", label="all 3-way marginals")
        t2 = time.perf_counter()
        measurer.close()
        assert len(noisy) == len(queries)
        rows.append(
            {
                "load_s": t0 - t_load,
                "sums_s": t1 - t0,
                "noise_s": t2 - t1,
                "measure_s": t2 - t0,
                "total_s": t2 - t_load,
            }
        )
    best = {k: min(r[k] for r in rows) for k in rows[0]}
    print(
        json.dumps(
            {
                "queries": len(queries),
                "cells": int(cells),
                "engine": args.engine,
                "machine": f"{platform.machine()}, {platform.processor() or '?'}",
                "runs": rows,
                "best": best,
                "numpy": np.__version__,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
