"""Post-processing on the benchmark suite's tables, MST / AIM / dpql side by side in one run.

For each table (``benchmarks/suite``; data written by ``benchmarks/suite/run.py``) and seed:

* ``mst`` and ``aim`` (mbi 2.x through ``benchmarks/rap/peers.py``, the suite's settings) make a
  table at epsilon 1; dpql then post-processes it as an ``external`` table with the table's
  requirements (``coverage.TABLES`` and the two below) at the rho that dpql's own
  release of the table at epsilon 1 gives post-processing (the planner's share of rho(1)). The
  question is the one outside checks asked: does post-processing make a table worse?
* ``dpql``: the suite spec (RAP) compiled at epsilon 1 without, then with, the requirements and
  ``postprocess: iproj`` (the planner choosing the share): the issue-15 comparison.

Every table is scored against the real one (curator-side, never published): mean 3-way TVD in
the spec's discretisation (``dpql.evaluate.workload.marginal_tvd``, as the suite), ``|corr
error|`` and ``|mean error|`` of the requirements, before and after; verdicts and ESS after.

Usage: ``python benchmarks/iproj/suite_postprocess.py [--tables ...] [--seeds 0 1]
[--generators mst aim dpql] [--out rows.jsonl]`` (needs the ``bench`` extra: mbi). mbi compiles
many small JAX programs and one process's memory grows with them: on 23 GB all five tables x 2
seeds x 3 generators ran out at the last compile, so run a few tables per command.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
SUITE = HERE.parent / "suite"
MBI_SETTINGS = {  # benchmarks/suite/run.py's defaults
    "mst_iters": 5000, "aim_rounds_per_column": 4, "aim_max_rounds": 16,
    "aim_max_model_size": 20.0, "aim_iters": 250, "aim_final_iters": 1000,
}  # fmt: skip


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


suite = _module("suite_run", SUITE / "run.py")
other = _module("coverage", HERE / "coverage.py")

REQUIREMENTS: dict[str, dict[str, Any]] = {
    **other.TABLES,
    "bn1k": {  # bn30k's columns at 1,000 rows; no corr: the plan calls none reachable (sd 0.51)
        "requirements": [
            "logistic(insured ~ age + income + sex + employment) within 0.05",
            'mean(income | sex == "female") within 15000',
        ],
        "mean": ("income", "sex", "female"),
    },
    "fair": {  # Fair (1978); no logistic: the table has no two-valued column
        "requirements": [
            "corr(age, yrs_married) within 0.1",
            "mean(affairs | rate_marriage == 5) within 2",
        ],
        "corr": ("age", "yrs_married"),
        "mean": ("affairs", "rate_marriage", "5"),
    },
}


def real_values(df: pd.DataFrame, cfg: dict[str, Any]) -> tuple[float, float]:
    """The corr (NaN where the table has none) and the conditional mean of ``cfg``."""
    corr = float(df[list(cfg["corr"])].corr().iloc[0, 1]) if "corr" in cfg else float("nan")
    col, by, value = cfg["mean"]
    return corr, float(df.loc[df[by].astype(str) == value, col].mean())


def post_spec(table, base: Path, csv: Path | None, rho: float | None, out: Path) -> Path:
    """The suite spec at ``base`` with the table's requirements and ``postprocess: iproj``;
    with ``csv``, an ``external`` synthesizer over it, declared (1, delta / 2)-DP, and a release
    budget of that plus ``rho`` zCDP at delta / 2 for post-processing (spec/language.md: the
    release's budget holds the external table's)."""
    from dpql.privacy.accountant import eps_from_rho

    spec = yaml.safe_load(base.read_text())
    spec["requirements"] = REQUIREMENTS[table.name]["requirements"]
    spec["postprocess"] = {"method": "iproj"}
    if csv is not None and rho is not None:
        delta = spec["privacy"]["delta"]
        spec["synthesizer"] = {
            "method": "external", "path": str(csv), "rows": table.rows,
            "budget": {"epsilon": 1.0, "delta": delta / 2, "neighbouring": "replace_one"},
        }  # fmt: skip
        spec["privacy"] = {"epsilon": 1.0 + eps_from_rho(rho, delta / 2), "delta": delta}
    spec["output"] = {"path": str(out / "post.csv"), "provenance": str(out / "post.json")}
    path = out / "post.release.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def compile_spec(path: Path, seed: int) -> tuple[Path, dict, float]:
    import dpql

    t = time.perf_counter()
    res = dpql.compile(path, seed=seed, force=True)
    return Path(res.table_path), res.record, time.perf_counter() - t


def score(csv: Path, evaluator, cfg: dict[str, Any], real: tuple[float, float]) -> dict:
    df = pd.read_csv(csv)
    corr, mean = real_values(df, cfg)
    return {
        "tvd": evaluator(csv)["tvd_mean"],
        "corr_error": abs(corr - real[0]),
        "mean_error": abs(mean - real[1]),
    }


def one(table, gen: str, seed: int, work: Path, evaluator, real) -> dict[str, Any]:
    from dpql.privacy.accountant import rho_from_eps_delta

    cfg = REQUIREMENTS[table.name]
    data = table.data_path(SUITE / "data")
    base = suite.write_spec(table, data, 1.0, work, f"{table.name}-{gen}-{seed}")
    row: dict[str, Any] = {"table": table.name, "generator": gen, "seed": seed}
    t = time.perf_counter()
    if gen == "dpql":
        made = suite.method_dpql({"spec": str(base), "run": seed})
    else:
        job = {"method": gen, "rows": table.rows, "run": seed, "settings": MBI_SETTINGS,
               "epsilon": 1.0, "spec": str(base), "data": str(data), "out_dir": str(work),
               "tag": f"{table.name}-{gen}-{seed}"}  # fmt: skip
        made = suite.method_peer(job)
    row["generate_s"] = round(time.perf_counter() - t, 1)
    row["before"] = score(Path(made["csv"]), evaluator, cfg, real)
    post_dir = work / f"post-{gen}-{seed}"
    post_dir.mkdir()
    own = post_spec(table, base, None, None, post_dir)
    if gen == "dpql":
        spec = own
    else:  # the same post-processing rho as dpql's own release at epsilon 1
        share = float(suite.plan_of(own).split.share)
        rho = share * rho_from_eps_delta(1.0, suite.delta_of(table.rows))
        spec = post_spec(table, base, Path(made["csv"]), rho, post_dir)
        row["post_share"] = share
    csv, rec, seconds = compile_spec(spec, seed)
    row["after"] = score(csv, evaluator, cfg, real)
    row["compile_s"] = round(seconds, 1)
    row["verdicts"] = [r["verdict"] for r in rec["requirements"]]
    row["ess"] = rec["postprocess"]["effective_sample_size"]
    row["codes"] = [d["code"] for d in rec["postprocess"]["diagnostics"]]
    row["rows"] = table.rows
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", nargs="+", default=["bn1k", "fair", "compas", "randhie", "bn30k"],
                    choices=sorted(REQUIREMENTS))  # fmt: skip
    ap.add_argument("--generators", nargs="+", default=["mst", "aim", "dpql"],
                    choices=["mst", "aim", "dpql"])  # fmt: skip
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--out", type=Path, default=None, help="append one JSON row per run")
    args = ap.parse_args(argv)
    for name in args.tables:
        table = suite.suite_tables.TABLES[name]
        data = table.data_path(SUITE / "data")
        real = real_values(pd.read_csv(data), REQUIREMENTS[name])
        with tempfile.TemporaryDirectory() as d:
            work = Path(d)
            evaluator = suite.Evaluator(suite.write_spec(table, data, 1.0, work, "eval"), data)
            for seed in args.seeds:
                for gen in args.generators:
                    row = one(table, gen, seed, work, evaluator, real)
                    line = json.dumps(row)
                    print(line, flush=True)
                    if args.out:
                        with args.out.open("a") as f:
                            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
