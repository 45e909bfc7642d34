"""Speed of the I-projection step: 32k synthetic rows x 20 moment measures (target < 5 s, CPU).

Run from the repository root:  python benchmarks/iproj/bench_speed.py
Times the whole post-processing after measurement (per-row features, NNLS denoising, Newton
dual, resampling) on the Adult train table as the "synthetic" input and noisy moments of the
Adult test table as the target, cold (first call, includes JAX compilation) and warm.
"""

from __future__ import annotations

import math
import platform
import time
from pathlib import Path

import numpy as np

from dpql.data.load import load_table
from dpql.ir.exact import answer_all
from dpql.ir.queries import CorrRequirement, Tolerance
from dpql.plan.requirements import expand_requirements
from dpql.postprocess import iproj
from dpql.spec.load import load_spec

SHARED = Path(__file__).resolve().parents[3] / "shared"
SPEC = SHARED / "spec-examples" / "adult.release.yaml"
COLS = ("age", "education_num", "hours_per_week", "capital_gain", "income")
EXTRA = ("capital_loss",)  # a sixth column: 25 measures, above the 20 of the target


def main() -> None:
    domain = load_spec(SPEC).domain
    syn = load_table(SHARED / "data/adult/adult_train.csv", domain).table
    test = load_table(SHARED / "data/adult/adult_test.csv", domain).table
    print(f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}")
    for cols in (COLS, COLS + EXTRA):
        pairs = [(a, b) for i, a in enumerate(cols) for b in cols[i + 1 :]]
        reqs = [CorrRequirement(a, b, Tolerance(within=0.05)) for a, b in pairs]
        queries = expand_requirements(reqs, domain).queries
        k = len(queries)
        sigma = math.sqrt(k) / test.n / math.sqrt(2 * 0.05)
        noisy = np.concatenate(answer_all(queries, test))
        noisy += np.random.default_rng(0).normal(0, sigma, k)
        m = iproj.Measurement(queries, noisy, sigma, 0.05, test.n)
        print(f"rows={syn.n} measures={k} sigma={sigma:.2e}")
        for run in ("cold", "warm", "warm"):
            t = time.perf_counter()
            res = iproj.iproject(syn, m, seed=1)
            dt = time.perf_counter() - t
            print(
                f"  {run}: {dt:.2f} s  method={res.method} iters={res.iterations} "
                f"kkt={res.kkt_violation:.1e} proj_dist={res.projection_distance:.1e} "
                f"ess={res.ess:.0f}"
            )


if __name__ == "__main__":
    main()
