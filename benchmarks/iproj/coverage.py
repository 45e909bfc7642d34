"""When dpql says `pass`, does the requirement hold on the real table? (docs/postprocess.md)

For each compile of a spec with requirements and ``postprocess: iproj`` (the example,
``examples/adult/adult.release.yaml``, or a suite table with the requirements of
:data:`TABLES`), every requirement's verdict and whether it holds on the real
table within its tolerance: ``|value on the released table - value on the real table| <= t``
for a corr / mean, and for a logistic the gap between the accuracy of the model refitted on the
released table (``accept.fit_model``) on the released rows and on the real ones. Each value is
computed exactly by dpql's own definitions (``requirement_value`` on exact answers). Also the
mean 3-way TVD against the real table, here and for the same spec without requirements and
post-processing (``--baseline``: the whole budget to the synthesizer). Curator-side figures,
never published.

Usage (rows appended to ``coverage.jsonl``; one compile at a time, each 1-3 minutes):
``python benchmarks/iproj/coverage.py run --table adult --seeds 0 1 2 [--baseline]``;
``python benchmarks/iproj/coverage.py summary`` writes ``coverage.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import commit  # noqa: E402

ROWS = HERE / "coverage.jsonl"
SUMMARY = HERE / "coverage.json"
# Each suite table's requirements (tolerances the plan calls reachable at epsilon 1).
TABLES: dict[str, dict] = {
    "bn30k": {
        "requirements": [
            "logistic(insured ~ age + income + sex + employment) within 0.02",
            "corr(age, hours) within 0.05",
            'mean(income | sex == "female") within 2000',
        ],
        "corr": ("age", "hours"),
        "mean": ("income", "sex", "female"),
    },
    "compas": {
        "requirements": [
            "logistic(two_year_recid ~ age + priors_count + sex + c_charge_degree) within 0.03",
            "corr(priors_count, decile_score) within 0.2",
            'mean(decile_score | race == "African-American") within 0.5',
        ],
        "corr": ("priors_count", "decile_score"),
        "mean": ("decile_score", "race", "African-American"),
    },
    "randhie": {
        "requirements": [
            "logistic(idp ~ lncoins + lpi + fmde + hlthg) within 0.02",
            "corr(lpi, fmde) within 0.1",
            "mean(disea | hlthg == 1) within 1.5",
        ],
        "corr": ("lpi", "fmde"),
        "mean": ("disea", "hlthg", "1"),
    },
}


def spec_text(table: str, requirements: bool) -> str:
    """The spec: the example as shipped, or a suite spec with its requirements (its own
    synthesizer); without ``requirements`` both sections are dropped."""
    if table in ("adult", "adult-share0.2"):
        spec = yaml.safe_load((ROOT / "examples/adult/adult.release.yaml").read_text())
        spec["data"]["path"] = str(ROOT / "examples/adult" / spec["data"]["path"])
        if table == "adult-share0.2":  # the shared spec example: a fixed post-processing share
            spec["postprocess"]["share"] = 0.2
    else:
        text = (ROOT / "benchmarks/suite/specs" / f"{table}.release.yaml").read_text()
        spec = yaml.safe_load(text)
        spec["data"]["path"] = str(_suite_csv(table))
        spec["requirements"] = list(TABLES[table]["requirements"])
        spec["postprocess"] = {"method": "iproj"}
    if not requirements:
        spec.pop("requirements", None)
        spec.pop("postprocess", None)
    spec["output"] = {"path": "out/t.csv", "provenance": "out/t.provenance.json"}
    return yaml.safe_dump(spec, sort_keys=False)


def _suite_csv(table: str) -> Path:
    sys.path.insert(0, str(ROOT / "benchmarks/suite"))
    from tables import DEFAULT_DATA, TABLES

    return TABLES[table].data_path(DEFAULT_DATA)


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


def _codes(table) -> np.ndarray:
    return np.column_stack([np.asarray(table.codes[c]) for c in table.domain.names])


def real_values(req, released, real) -> tuple[float, float]:
    """The requirement's value on the released and on the real table (exact)."""
    from dpql.ir.exact import answer_all, per_row
    from dpql.ir.queries import ModelRequirement
    from dpql.plan.estimates import requirement_value
    from dpql.plan.requirements import requirement_queries
    from dpql.postprocess.accept import finite_rows, fit_model

    if isinstance(req, ModelRequirement):
        model = fit_model(req, finite_rows(released, (*req.features, req.label)))
        return tuple(float(np.nanmean(per_row(model, t))) for t in (released, real))
    qs = requirement_queries(req, real.domain)
    out = []
    for t in (released, real):
        answers = {q: float(np.ravel(a)[0]) for q, a in zip(qs, answer_all(qs, t), strict=True)}
        out.append(requirement_value(req, answers, real.domain))
    return out[0], out[1]


def compile_once(table: str, seed: int, requirements: bool) -> dict:
    import dpql.postprocess.run as run_module
    from dpql.cli import main as dpql
    from dpql.data.codec import encode_frame
    from dpql.plan.planner import build_plan
    from dpql.spec.load import load_spec

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        spec_path = tmp / "spec.yaml"
        spec_path.write_text(spec_text(table, requirements))
        loaded = load_spec(spec_path)
        plan = build_plan(loaded)
        t0 = time.time()
        argv = ["compile", str(spec_path), "--seed", str(seed), "--quiet"]
        seen = []  # the table post-processing starts from (the synthesizer's output)
        original = run_module.run_postprocess

        def spy(plan, oracle, table, *a, **k):
            seen.append(_codes(table))
            return original(plan, oracle, table, *a, **k)

        run_module.run_postprocess = spy
        try:
            if dpql([*argv, "--ledger", str(tmp / "ledger.jsonl")]) != 0:
                raise SystemExit("compile failed")
        finally:
            run_module.run_postprocess = original
        elapsed = time.time() - t0
        df = pd.read_csv(tmp / "out/t.csv", keep_default_na=False, na_values=[""])
        rec = json.loads((tmp / "out/t.provenance.json").read_text())
    domain = loaded.domain
    data = Path(yaml.safe_load(spec_text(table, False))["data"]["path"])
    real_df = pd.read_csv(data, keep_default_na=False, na_values=[""])
    real = encode_frame(real_df[list(domain.names)], domain).table
    released = encode_frame(df[list(domain.names)], domain).table
    row = {"table": table, "seed": seed, "requirements": requirements,
           "tvd3": mean_tvd3(_codes(real), _codes(released)), "seconds": round(elapsed, 1)}
    if not requirements:
        return row
    post = rec["postprocess"]
    roles = {r["requirement"]: r["role"] for r in post.get("roles", [])}
    reqs = []
    for i, (req, acc) in enumerate(zip(plan.requirements, rec["requirements"], strict=True)):
        v, v_real = real_values(req, released, real)
        t = req.tolerance.within
        reqs.append({
            "text": req.text, "tolerance": t, "verdict": acc["verdict"], "role": roles.get(i),
            "released": v, "real": v_real, "error": abs(v - v_real),
            "holds": bool(abs(v - v_real) <= t) if t is not None else None,
        })  # fmt: skip
    if seen:  # post-processing's own effect on the 3-way marginals
        row["tvd3_before_postprocess"] = mean_tvd3(_codes(real), seen[0])
    row.update({
        "share": float(plan.split.share) if plan.split is not None else None,
        "ess": post["effective_sample_size"], "rows": len(df),
        "warnings": sorted({x["code"] for x in post["diagnostics"]}), "requirement": reqs,
    })  # fmt: skip
    return row


def run(args: argparse.Namespace) -> None:
    for seed in args.seeds:
        for table in args.table:
            row = compile_once(table, seed, not args.baseline)
            row["tag"] = args.tag
            row["commit"] = commit()
            with ROWS.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


def summary(args: argparse.Namespace) -> None:
    rows = [json.loads(x) for x in ROWS.read_text().splitlines() if x.strip()]
    if args.tag is not None:
        rows = [r for r in rows if r.get("tag") == args.tag]
    out = {}
    for table in sorted({r["table"] for r in rows}):
        withr = [r for r in rows if r["table"] == table and r["requirements"]]
        same_data = table.split("-")[0]  # a variant's baseline is its table's
        base = [r for r in rows if r["table"] == same_data and not r["requirements"]]
        reqs = [q for r in withr for q in r["requirement"] if q["tolerance"] is not None]
        passed = [q for q in reqs if q["verdict"] == "pass"]
        tvd, tvd0 = (float(np.mean([r["tvd3"] for r in x])) if x else None
                     for x in (withr, base))  # fmt: skip
        out[table] = {
            "compiles": len(withr), "baseline_compiles": len(base),
            "requirements": len(reqs), "passed": len(passed),
            "pass_rate": len(passed) / len(reqs) if reqs else None,
            "coverage": sum(q["holds"] for q in passed) / len(passed) if passed else None,
            "all_pass_compiles": sum(
                all(q["verdict"] == "pass" for q in r["requirement"]) for r in withr
            ),
            "per_requirement": {
                text: {
                    "pass": sum(q["verdict"] == "pass" for q in reqs if q["text"] == text),
                    "holds_when_pass": sum(q["holds"] for q in passed if q["text"] == text),
                    "max_error": max(q["error"] for q in reqs if q["text"] == text),
                }
                for text in dict.fromkeys(q["text"] for q in reqs)
            },
            "tvd3": tvd, "tvd3_baseline": tvd0,
            "postprocess_tvd3_factor": float(np.mean(
                [r["tvd3"] / r["tvd3_before_postprocess"] for r in withr
                 if r.get("tvd3_before_postprocess")]
            )) if any(r.get("tvd3_before_postprocess") for r in withr) else None,
            "tvd3_ratio": tvd / tvd0 if tvd and tvd0 else None,
            "min_ess_fraction": min((r["ess"] / r["rows"] for r in withr), default=None),
        }
    SUMMARY.write_text(json.dumps(out, indent=1) + "\n")
    print("| table | compiles (baseline) | pass rate | coverage of passes | all pass | "
          "3-way TVD ratio | smallest ESS |")
    print("|---|---|---|---|---|---|---|")
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for t, s in out.items():
        print(f"| {t} | {s['compiles']} ({s['baseline_compiles']}) | {s['passed']}/"
              f"{s['requirements']} | {num(s['coverage'])} "
              f"| {s['all_pass_compiles']}/{s['compiles']} | {num(s['tvd3_ratio'])} | "
              f"{num(s['min_ess_fraction'])} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--table", nargs="+", default=["adult"],
                   choices=["adult", "adult-share0.2", "randhie", "bn30k", "compas"])  # fmt: skip
    r.add_argument("--seeds", type=int, nargs="+", default=[0])
    r.add_argument("--baseline", action="store_true")
    r.add_argument("--tag", default="")
    s = sub.add_parser("summary")
    s.add_argument("--tag", default=None)
    args = ap.parse_args()
    (run if args.cmd == "run" else summary)(args)


if __name__ == "__main__":
    main()
