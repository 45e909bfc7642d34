"""How good is ``method: gan`` on Adult? Its defaults beside the paper's setting.

Compiles a copy of ``examples/adult-gan/adult-gan.release.yaml`` (workload ``marginals(3)``,
the given epsilon, delta 1/n^2 unless ``--delta``) through ``dpql.pipeline.compile_release``
once per variant and scores the synthetic table against the real training table: mean and
max TVD over the 455 3-way marginals (``dpql.evaluate.workload.marginal_tvd``), every
column's 1-way TVD, and the accuracy of a logistic regression trained on it and tested on
``examples/adult/adult_test.csv.gz`` (``dpql.evaluate.models.tstr_scores``).

Variants: ``default`` (the example with its ``options`` block removed: ``method: gan`` as a
spec gets it), ``paper`` (``preset: paper``: Tantipongpipat et al. 2019's Adult setting,
min-max encoding, no measured marginals). Each run's row goes into ``results.json`` beside this
file, replacing the row of the same variant and epsilon.

    python benchmarks/gan/run.py --epsilon 1 --variants default
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "adult-gan" / "adult-gan.release.yaml"
TRAIN = ROOT / "examples" / "adult" / "adult_train.csv.gz"
TEST = ROOT / "examples" / "adult" / "adult_test.csv.gz"
LABEL = "income"
RESULTS = Path(__file__).resolve().parent / "results.json"
DELTA = 1 / 32561**2  # 1/n^2 on the training split
VARIANTS: dict[str, dict[str, Any] | None] = {"default": None, "paper": {"preset": "paper"}}
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import describe, write_results  # noqa: E402


def write_spec(variant: str, eps: float, workdir: Path, delta: float = DELTA) -> Path:
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["data"]["path"] = str(TRAIN)
    spec["workload"] = ["marginals(3)"]
    spec["privacy"] = {"epsilon": float(eps), "delta": float(delta), **{
        k: v for k, v in spec["privacy"].items() if k == "split"}}  # fmt: skip
    spec["synthesizer"].pop("options", None)
    if VARIANTS[variant] is not None:
        spec["synthesizer"]["options"] = dict(VARIANTS[variant])
    tag = f"{variant.replace('+', '_')}_eps{eps:g}"
    spec["output"] = {
        "path": str(workdir / f"gan_{tag}.csv"),
        "provenance": str(workdir / f"gan_{tag}.provenance.json"),
    }
    path = workdir / f"adult_gan_{tag}.release.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def score(spec_path: Path, table: Path, seed: int) -> dict[str, Any]:
    from dpql.evaluate.encode import encode_table
    from dpql.evaluate.models import tstr_scores
    from dpql.evaluate.workload import marginal_tvd
    from dpql.ir.queries import Marginal
    from dpql.plan.planner import build_plan
    from dpql.spec.load import load_spec

    plan = build_plan(load_spec(spec_path))
    domain = plan.spec.domain
    real = encode_table(pd.read_csv(TRAIN), domain)
    df = pd.read_csv(table)
    syn = encode_table(df, domain)
    tvd3 = marginal_tvd(real, syn, list(plan.queries))
    one = {c.name: marginal_tvd(real, syn, [Marginal((c.name,))]).mean for c in domain}
    lr = tstr_scores(df, pd.read_csv(TEST), LABEL, "logistic", domain, seed)
    return {
        "tvd3_mean": tvd3.mean,
        "tvd3_max": tvd3.max,
        "tvd1": one,
        "tvd1_max": max(one.values()),
        "lr_accuracy": lr.accuracy,
    }


def run(variant: str, eps: float, workdir: Path, seed: int, delta: float = DELTA) -> dict[str, Any]:
    from dpql.pipeline import compile_release

    spec = write_spec(variant, eps, workdir, delta)
    t = time.perf_counter()
    phases: dict[str, float] = {}

    def progress(name: str, done: int, total: int) -> None:  # when each phase ends
        if done >= total:
            phases[name] = time.perf_counter() - t

    res = compile_release(spec, seed=seed, force=True, ledger_path=workdir / "ledger.jsonl",
                          progress=progress)  # fmt: skip
    wall = time.perf_counter() - t
    out = {
        "variant": variant,
        "epsilon": eps,
        "delta": delta,
        "compile_wall_s": wall,
        "stage_timings_s": res.timings,
        "phase_end_s": phases,
        "epsilon_spent": res.record["privacy"]["spent"]["epsilon"],
    }
    out.update(score(spec, res.table_path, seed))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, nargs="+", default=[1.0])
    ap.add_argument("--variants", nargs="+", default=["default"], choices=list(VARIANTS))
    ap.add_argument("--delta", type=float, default=DELTA)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"rows": []}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for eps in a.epsilon:
            for variant in a.variants:
                machine = describe()  # the load before the run
                r = run(variant, eps, Path(tmp), a.seed, a.delta) | {"machine": machine}
                results.append(r)
                saved["rows"] = [
                    x for x in saved["rows"] if (x["variant"], x["epsilon"]) != (variant, eps)
                ] + [r]
                saved["command"] = " ".join(["python", *(argv or sys.argv)])
                write_results(RESULTS, saved)
                print(json.dumps(r), flush=True)
    for r in results:
        worst = max(r["tvd1"], key=r["tvd1"].get)
        print(
            f"{r['variant']:>15} eps={r['epsilon']:g}: tvd3 {r['tvd3_mean']:.3f} "
            f"(max {r['tvd3_max']:.3f}), 1-way max {r['tvd1_max']:.3f} ({worst}), "
            f"LR acc {r['lr_accuracy']:.3f}, compile {r['compile_wall_s']:.0f} s",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
