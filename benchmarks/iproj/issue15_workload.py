"""Issue 15 item 3: what keeping the synthesizer's workload answers does to post-processing.

One compile of the bundled example (examples/adult, epsilon 1, the planner's split) captures the
table post-processing starts from (RAP's output), RAP's noisy workload answers and the plan. The
post-processing step is then re-run on that same table with fresh measurements of the *real*
table (a seeded test-only noise source and its own ledger: a curator-side experiment, nothing is
released) for each setting: the synthetic table as a prior worth ``PRIOR_ROWS`` x its rows, with
and without the workload penalties. Scored against the real table: mean 3-way TVD, |corr err|,
|mean err|, RAP's workload error (vs its noisy answers) before/after, ESS, verdicts, seconds.

Usage: ``python benchmarks/iproj/issue15_workload.py [--draws 3] [--prior 1.0 0.1]
[--out results.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from issue15_adult import EXAMPLE, codes, mean_tvd3


def capture(seed: int) -> tuple:
    """(plan, RAP's table, RAP's measurements) of one compile of the example."""
    import tempfile

    import yaml

    import dpql.postprocess.run as run
    from dpql.cli import main

    seen: list = []
    original = run.run_postprocess

    def spy(plan, oracle, table, s, progress=None, workload=()):
        seen.append((plan, table, tuple(workload)))
        return original(plan, oracle, table, s, progress, workload)

    run.run_postprocess = spy
    try:
        with tempfile.TemporaryDirectory() as d:
            spec = yaml.safe_load((EXAMPLE / "adult.release.yaml").read_text())
            spec["data"]["path"] = str(EXAMPLE / spec["data"]["path"])
            path = Path(d) / "spec.yaml"
            path.write_text(yaml.safe_dump(spec, sort_keys=False))
            args = ["compile", str(path), "--seed", str(seed), "--quiet"]
            assert main([*args, "--ledger", str(Path(d) / "l.jsonl")]) == 0
    finally:
        run.run_postprocess = original
    return seen[0]


def main(argv: list[str] | None = None) -> int:
    from test_iproj_support import ExactOracle

    import dpql.postprocess.run as run
    from dpql.codec import encode_frame

    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--prior", type=float, nargs="+", default=[1.0, 0.1])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=None, help="pickle of the captured compile")
    ap.add_argument(
        "--model-sd", type=float, nargs="+", default=None,
        help="re-plan with a model requirement's per-moment sd t / D for each D given "
        "(dpql.plan.split._model_target_sd; default Z = 2), workload kept at the default prior",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.cache is not None and args.cache.exists():
        plan, before, workload = pickle.loads(args.cache.read_bytes())
    else:
        plan, before, workload = capture(args.seed)
        if args.cache is not None:
            args.cache.write_bytes(pickle.dumps((plan, before, workload)))
    domain = before.domain
    real_df = pd.read_csv(EXAMPLE / "adult_train.csv.gz")
    real = encode_frame(real_df[list(domain.names)], domain).table
    real_codes = codes(real_df, domain)

    def score(t) -> dict:
        c = np.column_stack([np.asarray(t.codes[k]) for k in domain.names]).astype(np.int64)
        age, hrs = domain["age"], domain["hours_per_week"]
        a = age.lo + t.scaled["age"] * age.span
        h = hrs.lo + t.scaled["hours_per_week"] * hrs.span
        fem = t.codes["sex"] == 0
        ra, rh = real_df["age"].to_numpy(), real_df["hours_per_week"].to_numpy()
        rf = (real_df["sex"] == "Female").to_numpy()
        return {
            "tvd3": mean_tvd3(real_codes, c),
            "corr_error": abs(np.corrcoef(a, h)[0, 1] - np.corrcoef(ra, rh)[0, 1]),
            "mean_error": abs(h[fem].mean() - rh[rf].mean()),
        }

    rows = [{"setting": "before post-processing", **score(before)}]
    print(json.dumps(rows[0]), flush=True)
    if args.model_sd:
        rows += model_sd_rows(plan, before, workload, real, score, args)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
        return 0
    for prior in args.prior:
        for keep in (False, True):
            for draw in range(args.draws):
                run.PRIOR_ROWS = run.PRIOR_ROWS_WITH_WORKLOAD = prior
                run.KEEP_WORKLOAD = keep
                load = os.getloadavg()[0]
                t0 = time.time()
                out = run.run_postprocess(plan, ExactOracle(real, seed=100 + draw), before,
                                          args.seed, None, workload)  # fmt: skip
                post = out.summary_json()
                row = {
                    "setting": f"prior {prior:g} x rows, workload {'kept' if keep else 'not kept'}",
                    "prior_rows": prior,
                    "keep_workload": keep,
                    "draw": draw,
                    "seconds": round(time.time() - t0, 1),
                    "load": round(load, 2),
                    **score(out.table),
                    "workload_before": post["workload"]["mean_abs_error_before"],
                    "workload_after": post["workload"]["mean_abs_error_after"],
                    "ess": post["effective_sample_size"],
                    "iterations": post["iterations"],
                    "kkt": post["kkt_violation"],
                    "shrink": post["shrink"],
                    "codes": [d["code"] for d in post["diagnostics"]],
                    "verdicts": [a.verdict for a in out.acceptance],
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


def model_sd_rows(plan, before, workload, real, score, args) -> list[dict]:
    """The same table post-processed under plans whose model requirements' moments have
    per-moment sd t / D (the synthesizer's table stays the captured one)."""
    from test_iproj_support import ExactOracle

    import dpql.plan.split as split
    import dpql.postprocess.run as run
    from dpql.plan.planner import build_plan

    original = split._model_target_sd
    out = []
    for div in args.model_sd:
        split._model_target_sd = lambda r, d=div: (
            r.tolerance.within / d if r.tolerance.within is not None else split.MODEL_BOUND_SD
        )
        try:
            replanned = build_plan(plan.spec)
        finally:
            split._model_target_sd = original
        for draw in range(args.draws):
            t0 = time.time()
            res = run.run_postprocess(replanned, ExactOracle(real, seed=100 + draw), before,
                                      args.seed, None, workload)  # fmt: skip
            logit = res.acceptance[0].to_json()
            row = {
                "setting": f"model moments sd t/{div:g}",
                "post_share": float(replanned.split.share),
                "model_rho": replanned.split.given[0],
                "draw": draw,
                "seconds": round(time.time() - t0, 1),
                "load": round(os.getloadavg()[0], 2),
                **score(res.table),
                "logit_self_before": logit["synthetic_before"],
                "logit_self_after": logit["synthetic_after"],
                "logit_real_noisy": logit["real_noisy"],
                "verdicts": [a.verdict for a in res.acceptance],
            }
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
