"""Issue 15 speed check: post-processing of 32k rows x ~60 measures with compile's settings
(noise-aware MAP projection with the synthetic table as a prior of its own row count, ESS floor
50%), target < 5 s on CPU.

Run from the repository root:  python benchmarks/iproj/issue15_speed.py
The "synthetic" input is the Adult train table (examples/adult); the targets are its own
moments (near: nothing to move) and those moments each moved by 0.03 with 1/10 the noise
(far, precise: the ESS floor binds, so the bisection's extra solves are timed too), plus Gaussian
noise of the measures' sd.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from dpql.data.load import load_table
from dpql.plan.exact import answer_all
from dpql.plan.ir import ModelRequirement, Tolerance
from dpql.plan.planner import build_plan
from dpql.plan.requirements import expand_requirements
from dpql.postprocess import iproj
from dpql.postprocess.run import with_pilots
from dpql.spec.load import load_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adult"


def main() -> None:
    spec = load_spec(EXAMPLE / "adult.release.yaml")
    syn = load_table(EXAMPLE / "adult_train.csv.gz", spec.domain).table
    plan = build_plan(spec)
    # the example's requirement measures, its pilot fitted on the table, plus the logistic's 54
    # moments (measured by a model without a pilot, e.g. an accuracy bound): about 60 in all,
    # the size
    measures, _ = with_pilots(plan.measures, plan.requirements, syn)
    logit = next(r for r in plan.requirements if isinstance(r, ModelRequirement))
    bound = replace(logit, tolerance=Tolerance(op=">=", bound=0.8))
    moments = expand_requirements([bound], spec.domain).queries
    queries = tuple(dict.fromkeys((*measures.queries, *moments)))
    k = len(queries)
    print(f"load {os.getloadavg()[0]:.2f}; rows={syn.n} measures={k}")
    rng = np.random.default_rng(0)
    sigma = 2.2e-3  # the example's per-measure sd at epsilon 1
    truth = np.concatenate(answer_all(queries, syn))
    far = truth.copy()
    far += 0.03 * np.sign(rng.standard_normal(k))  # every measure moved: a far target
    for name, target, sd in (("near", truth, sigma), ("far", far, sigma / 10)):
        m = iproj.Measurement(queries, target + rng.normal(0, sd, k), sd, 0.05, syn.n)
        for run in ("cold", "warm"):
            t = time.perf_counter()
            res = iproj.iproject(syn, m, seed=1, prior_rows=syn.n, ess_floor=0.5)
            dt = time.perf_counter() - t
            print(
                f"  {name} {run}: {dt:.2f} s  iters={res.iterations} ess={res.ess:.0f} "
                f"shrink={res.shrink:.3f} kkt={res.kkt_violation:.1e} "
                f"resampling_shift={res.resampling_shift:.2f} sd "
                f"codes={[d.code for d in res.diagnostics]}"
            )


if __name__ == "__main__":
    main()
