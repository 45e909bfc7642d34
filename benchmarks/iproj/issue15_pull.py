"""Issue 15, third part: post-processing variants on one captured RAP table.

Re-runs ``dpql.postprocess.run.run_postprocess`` on the table captured by
``issue15_workload.py --cache FILE`` (RAP's output, its noisy workload answers and the plan)
with fresh test-only noise (``ExactOracle``, seeded; its own ledger: a curator-side experiment,
nothing is released), under a re-plan of the example (``--share``: fixed, else the planner's
choice) and settings of ``dpql.postprocess.run`` (``--settings``: a JSON list of dicts, e.g.
``'[{}, {"MOMENT_PULL": 1.0}, {"MOMENT_PULL": 0.1}]'``). Prints, per draw: the requirements'
errors against the real table after post-processing, each moment requirement's (noisy error,
test sd, error before, error after), the verdicts and the ESS.

Usage: ``python benchmarks/iproj/issue15_pull.py --cache /tmp/wl_capture.pkl [--share S]
[--settings JSON] [--draws 3]``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from issue15_adult import EXAMPLE


def replan(share: float | None):
    from dpql.plan.planner import build_plan
    from dpql.spec.load import load_spec

    spec = yaml.safe_load((EXAMPLE / "adult.release.yaml").read_text())
    spec["data"]["path"] = str(EXAMPLE / spec["data"]["path"])
    if share is not None:
        spec["postprocess"]["share"] = share
    path = Path(tempfile.mkdtemp()) / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return build_plan(load_spec(path))


def main(argv: list[str] | None = None) -> int:
    from test_iproj_support import ExactOracle

    import dpql.postprocess.run as run
    from dpql.codec import encode_frame

    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", type=Path, required=True, help="issue15_workload.py --cache")
    ap.add_argument("--share", type=float, default=None)
    ap.add_argument("--settings", default="[{}]")
    ap.add_argument("--draws", type=int, default=3)
    args = ap.parse_args(argv)
    _, before, workload = pickle.loads(args.cache.read_bytes())
    plan = replan(args.share)
    domain = before.domain
    real_df = pd.read_csv(EXAMPLE / "adult_train.csv.gz")
    real = encode_frame(real_df[list(domain.names)], domain).table
    true_corr = float(np.corrcoef(real_df["age"], real_df["hours_per_week"])[0, 1])
    true_mean = float(real_df.loc[real_df["sex"] == "Female", "hours_per_week"].mean())
    print(json.dumps({"share": float(plan.split.share), "given": list(plan.split.given)}))
    defaults = {k: getattr(run, k) for k in ("MOMENT_PULL", "KEEP_WORKLOAD",
                                             "PRIOR_ROWS_WITH_WORKLOAD")}  # fmt: skip
    for setting in json.loads(args.settings):
        for k, v in setting.items():
            setattr(run, k, v)
        for draw in range(args.draws):
            t0 = time.time()
            out = run.run_postprocess(plan, ExactOracle(real, seed=200 + draw), before, 0,
                                      None, workload)  # fmt: skip
            acc = [a.to_json() for a in out.acceptance]
            row = {
                "setting": setting,
                "draw": draw,
                "seconds": round(time.time() - t0, 1),
                "verdicts": [a["verdict"] for a in acc],
                "ess": round(out.iproj.ess),
            }
            logit = acc[0]
            row["logistic"] = [round(logit["real_noisy"], 4), round(logit["sigma"], 4),
                               round(logit["synthetic_before"], 4),
                               round(logit["synthetic_after"], 4)]  # fmt: skip
            for a, true in zip(acc[1:], (true_corr, true_mean), strict=False):
                row[a["kind"]] = [round(a["real_noisy"] - true, 4), round(a["sigma"], 4),
                                  round(a["synthetic_before"] - true, 4),
                                  round(a["synthetic_after"] - true, 4)]  # fmt: skip
            print(json.dumps(row), flush=True)
        for k, v in defaults.items():
            setattr(run, k, v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
