"""How long does post-processing take? The I-projection of 32k rows to 10 and 15 correlations.

Times ``dpql.postprocess.iproj.iproject`` (per-row features, the dual solve, resampling) on the
Adult train table as the "synthetic" input and noisy moments of the Adult test table as the
target, cold (first call, includes JAX compilation) and warm; writes ``speed.json`` beside
this file.

    python benchmarks/iproj/speed.py
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from dpql.data.load import load_table
from dpql.ir.exact import answer_all
from dpql.ir.queries import CorrRequirement, Tolerance
from dpql.plan.requirements import expand_requirements
from dpql.postprocess import iproj
from dpql.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "adult" / "adult.release.yaml"
RESULTS = Path(__file__).resolve().parent / "speed.json"
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import describe, write_results  # noqa: E402

COLS = ("age", "education_num", "hours_per_week", "capital_gain", "income")
EXTRA = ("capital_loss",)  # a sixth column: 25 measures, above the 20 of the target


def main() -> None:
    domain = load_spec(SPEC).domain
    syn = load_table(ROOT / "examples/adult/adult_train.csv.gz", domain).table
    test = load_table(ROOT / "examples/adult/adult_test.csv.gz", domain).table
    results: dict = {"command": "python benchmarks/iproj/speed.py", "machine": describe()}
    results["rows"] = []
    for cols in (COLS, COLS + EXTRA):
        pairs = [(a, b) for i, a in enumerate(cols) for b in cols[i + 1 :]]
        reqs = [CorrRequirement(a, b, Tolerance(within=0.05)) for a, b in pairs]
        queries = expand_requirements(reqs, domain).queries
        k = len(queries)
        sigma = math.sqrt(k) / test.n / math.sqrt(2 * 0.05)
        noisy = np.concatenate(answer_all(queries, test))
        noisy += np.random.default_rng(0).normal(0, sigma, k)
        m = iproj.Measurement(queries, noisy, sigma, 0.05, test.n)
        for run in ("cold", "warm", "warm"):
            t = time.perf_counter()
            res = iproj.iproject(syn, m, seed=1)
            row = {
                "rows": syn.n, "measures": k, "run": run, "seconds": time.perf_counter() - t,
                "method": res.method, "iterations": res.iterations,
                "kkt": res.kkt_violation, "ess": res.ess,
            }  # fmt: skip
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
    write_results(RESULTS, results)


if __name__ == "__main__":
    main()
