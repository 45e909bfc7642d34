"""Issue 15 acceptance on the bundled example (examples/adult/adult.release.yaml, epsilon 1).

For each seed, two compiles of the same spec: as shipped (RAP + requirements + I-projection
post-processing, the planner choosing the post-processing share: dpql/plan/split.py) and
without the ``requirements`` / ``postprocess`` sections (the whole budget to RAP).
Each table is scored against the *real* table (curator-side figures, never published):

* the mean TVD over all 3-way marginals (numeric columns in the spec's public bins);
* |corr(age, hours_per_week) error|, |mean(hours_per_week | Female) error|;
* the logistic requirement: accuracy on the real table of the model fitted on the synthetic table
  vs. the real table's own model (``gap``), and the issue's figure, the synthetic model's real
  accuracy vs. its own accuracy on the synthetic table (``self_gap``);
* dpql's verdicts, the post-processing ESS / shrink / W-codes and the record's workload error.

Usage: ``python benchmarks/iproj/issue15_adult.py [--seeds 0 1 2] [--out results.json]
[--share S --only-requirements] [--epsilon E]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "adult"
LOGIT_X = ["age", "education_num", "hours_per_week", "sex", "marital_status"]


SHARE: float | None = None  # --share: set postprocess.share (the spec lets the planner choose)
EPSILON: float | None = None  # --epsilon: set privacy.epsilon (both compiles of a seed)
PLANNED: dict = {}  # the last compile's post-processing split (dpql.plan.split), for the rows


def _spec(tmp: Path, requirements: bool) -> Path:
    spec = yaml.safe_load((EXAMPLE / "adult.release.yaml").read_text())
    spec["data"]["path"] = str(EXAMPLE / spec["data"]["path"])
    if EPSILON is not None:
        spec["privacy"]["epsilon"] = EPSILON
    if SHARE is not None and "postprocess" in spec:
        spec["postprocess"]["share"] = SHARE
    if not requirements:
        spec.pop("requirements", None)
        spec.pop("postprocess", None)
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def compile_once(
    seed: int, requirements: bool
) -> tuple[pd.DataFrame, dict, float, np.ndarray | None]:
    """The released table, its record, the seconds taken and (with requirements) the codes of
    the table post-processing started from (RAP's output at its reduced budget)."""
    import dpql.postprocess.run as run
    from dpql.cli import main

    seen: list[np.ndarray] = []
    original = run.run_postprocess

    def spy(plan, oracle, table, *a, **k):
        seen.append(
            np.column_stack([np.asarray(table.codes[c]) for c in table.domain.names])
        )
        return original(plan, oracle, table, *a, **k)

    run.run_postprocess = spy
    try:
        return (*_compile(seed, requirements, main), seen[0] if seen else None)
    finally:
        run.run_postprocess = original


def _compile(seed: int, requirements: bool, main) -> tuple[pd.DataFrame, dict, float]:
    from dpql.plan.planner import build_plan
    from dpql.spec.load import load_spec

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        spec = _spec(tmp, requirements)
        split = build_plan(load_spec(spec)).split
        PLANNED.clear()
        if split is not None:
            PLANNED.update(split.to_json())
        t0 = time.time()
        args = ["compile", str(spec), "--seed", str(seed), "--quiet"]
        rc = main([*args, "--ledger", str(tmp / "ledger.jsonl")])
        if rc != 0:
            raise SystemExit(f"compile failed ({rc})")
        elapsed = time.time() - t0
        out = tmp / "out"
        table = pd.read_csv(out / "adult_synthetic.csv")
        record = json.loads((out / "adult_synthetic.provenance.json").read_text())
    return table, record, elapsed


def codes(df: pd.DataFrame, domain) -> np.ndarray:
    from dpql.codec import encode_frame

    t = encode_frame(df[list(domain.names)], domain).table
    return np.column_stack([np.asarray(t.codes[c]) for c in domain.names]).astype(np.int64)


def mean_tvd3(real: np.ndarray, syn: np.ndarray) -> float:
    sizes = np.maximum(real.max(axis=0), syn.max(axis=0)) + 1
    out = []
    for a, b, c in itertools.combinations(range(real.shape[1]), 3):
        dims = (sizes[a], sizes[b], sizes[c])
        kr = np.ravel_multi_index((real[:, a], real[:, b], real[:, c]), dims)
        ks = np.ravel_multi_index((syn[:, a], syn[:, b], syn[:, c]), dims)
        m = int(np.prod(dims))
        pr = np.bincount(kr, minlength=m) / len(kr)
        ps = np.bincount(ks, minlength=m) / len(ks)
        out.append(0.5 * np.abs(pr - ps).sum())
    return float(np.mean(out))


def _design(df: pd.DataFrame, spec) -> np.ndarray:
    cols = []
    for c in LOGIT_X:
        col = spec["schema"][c]
        if col["type"] == "numeric":
            cols.append(((df[c] - col["min"]) / (col["max"] - col["min"])).to_numpy()[:, None])
        else:
            cols.append(np.column_stack([(df[c] == v).to_numpy() for v in col["values"][1:]]))
    return np.hstack(cols).astype(np.float64)


def scores(real: pd.DataFrame, syn: pd.DataFrame, spec: dict, real_model) -> dict:
    from sklearn.linear_model import LogisticRegression

    def corr(df: pd.DataFrame) -> float:
        return float(np.corrcoef(df["age"], df["hours_per_week"])[0, 1])

    def mean(df: pd.DataFrame) -> float:
        return float(df.loc[df["sex"] == "Female", "hours_per_week"].mean())

    Xr, yr = _design(real, spec), (real["income"] == ">50K").to_numpy()
    Xs, ys = _design(syn, spec), (syn["income"] == ">50K").to_numpy()
    model = LogisticRegression(max_iter=2000).fit(Xs, ys)
    acc_real = float(model.score(Xr, yr))
    return {
        "corr_error": abs(corr(syn) - corr(real)),
        "mean_error": abs(mean(syn) - mean(real)),
        "logit_gap": abs(float(real_model.score(Xr, yr)) - acc_real),
        "logit_self_gap": abs(float(model.score(Xs, ys)) - acc_real),
    }


def main(argv: list[str] | None = None) -> int:
    from sklearn.linear_model import LogisticRegression

    from dpql.spec.load import load_spec

    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--share", type=float, default=None, help="fix postprocess.share")
    ap.add_argument("--only-requirements", action="store_true", help="skip the baseline")
    ap.add_argument("--epsilon", type=float, default=None, help="set privacy.epsilon")
    args = ap.parse_args(argv)
    global SHARE, EPSILON
    SHARE, EPSILON = args.share, args.epsilon
    spec_path = EXAMPLE / "adult.release.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    domain = load_spec(spec_path).domain
    real = pd.read_csv(EXAMPLE / "adult_train.csv.gz")
    real_codes = codes(real, domain)
    real_model = LogisticRegression(max_iter=2000).fit(
        _design(real, spec), (real["income"] == ">50K").to_numpy()
    )
    rows = []
    for seed in args.seeds:
        for req in (True,) if args.only_requirements else (False, True):
            load0 = os.getloadavg()[0]
            table, record, elapsed, before = compile_once(seed, req)
            row = {
                "seed": seed,
                "requirements": req,
                "seconds": round(elapsed, 1),
                "load": round(load0, 2),
                "tvd3": mean_tvd3(real_codes, codes(table, domain)),
                "tvd3_before_postprocess": (
                    None if before is None else mean_tvd3(real_codes, before.astype(np.int64))
                ),
                **scores(real, table, spec, real_model),
            }
            post = record.get("postprocess")
            if post:
                row["verdicts"] = [r["verdict"] for r in record["requirements"]]
                row["ess"] = post["effective_sample_size"]
                row["shrink"] = post.get("shrink")
                row["resampling_shift_sd"] = post.get("resampling_shift_sd")
                row["workload"] = post.get("workload")
                row["codes"] = [d["code"] for d in post["diagnostics"]]
                row["postprocess_s"] = record.get("timings", {}).get("postprocess")
                row["post_share"] = PLANNED.get("share")
                row["share_chosen"] = PLANNED.get("chosen")
                row["test_sd"] = [r.get("sigma") for r in record["requirements"]]
                row["real_noisy"] = [r.get("real_noisy") for r in record["requirements"]]
                row["synthetic_after"] = [
                    r.get("synthetic_after") for r in record["requirements"]
                ]
                row["pilots"] = [
                    {"measure": m, "noisy": a, "sigma": sd, "before": b, "after": c}
                    for m, a, sd, b, c in zip(
                        post["measures"], post["noisy"], post["noise_sigma"],
                        post["synthetic_before"], post["synthetic_after"], strict=True,
                    )
                    if m.startswith("model_accuracy")
                ]  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    by = {r: [x for x in rows if x["requirements"] == r] for r in (False, True)}
    ratio = [p["tvd3"] / b["tvd3"] for b, p in zip(by[False], by[True], strict=False)]
    print(json.dumps({"tvd3_ratio": ratio, "mean_ratio": float(np.mean(ratio))}))
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "tvd3_ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
