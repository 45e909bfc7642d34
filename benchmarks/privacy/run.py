"""What does exact discrete Gaussian noise cost? All 3-way marginals of the Adult example measured
through dpql's private measurer, timed per part.

Splits the wall time into loading the private file, the engine's exact sums (the same for every
sampler) and the noise (the mechanism), so the cost of the exact discrete Gaussian sampler is
visible on its own. Records the best of ``--repeats`` runs of each part, per engine, in
``results.json`` beside this file.

    python3 benchmarks/privacy/run.py [--repeats 5] [--engines memory duckdb]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from dpql.data.engines import open_engine
from dpql.data.measure import PrivateMeasurer
from dpql.ir.queries import Marginal
from dpql.privacy.ledger import Ledger
from dpql.privacy.noise import NoiseSource
from dpql.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "adult" / "adult.release.yaml"
RESULTS = Path(__file__).resolve().parent / "results.json"
RHO = 0.5  # sigma about 30 rows per cell on the 455 marginals
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import describe, write_results  # noqa: E402


def time_engine(engine_name: str, repeats: int) -> dict:
    """Best-of-``repeats`` seconds of each part for one engine, and every run's."""
    spec = load_spec(SPEC)
    queries = [Marginal(c) for c in itertools.combinations(spec.domain.names, 3)]
    cells = sum(q.cells(spec.domain) for q in queries)
    rows = []
    for _ in range(repeats):
        t_load = time.perf_counter()
        engine = open_engine(spec.data_path, spec.domain, engine=engine_name)
        measurer = PrivateMeasurer(engine, spec.rows, Ledger(), NoiseSource())
        t0 = time.perf_counter()
        measurer._answers(queries)  # exact sums, cached: the engine's share
        t1 = time.perf_counter()
        noisy = measurer.measure(queries, RHO, phase="bench", label="all 3-way marginals")
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
    return {"queries": len(queries), "cells": int(cells), "rho": RHO, "runs": rows, "best": best}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engines", nargs="+", default=["memory", "duckdb"])
    args = ap.parse_args()
    results = {
        "command": " ".join(["python3", *sys.argv]),
        "machine": describe(),
        "numpy": np.__version__,
        "engines": {e: time_engine(e, args.repeats) for e in args.engines},
    }
    write_results(RESULTS, results)
    print(json.dumps({e: r["best"] for e, r in results["engines"].items()}, indent=1))


if __name__ == "__main__":
    main()
