"""Issue 16: the GAN backend's fidelity on Adult, paper (min-max) encoding vs public-bin encoding.

Compiles a copy of ``examples/adult-gan/adult-gan.release.yaml`` (workload ``marginals(3)``,
delta 1e-5 unless ``--delta``, the given epsilon) through ``dpql.pipeline.compile_release``
once per variant and scores the synthetic table against the real training table: mean and
max TVD over the 455 3-way marginals (``dpql.evaluate.workload.marginal_tvd``), every
column's 1-way TVD, and the accuracy of a logistic regression trained on it and tested on
``examples/adult/adult_test.csv.gz`` (``dpql.evaluate.models.tstr_scores``, as
``benchmarks/rap/run.py``).

Variants: ``minmax`` (the paper's encoding and DP-SGD setting), ``bins`` (public-bin
encoding, paper setting), ``bins+marginals`` (public-bin encoding, paper setting, 10% of the
rho on DP 1-way marginals and resampling to them), ``bins+fit`` (the example's options since
issue 16: half the rho on DP 1-way and workload 2-way marginals, the generator fitted to them,
fewer and larger DP-SGD steps), ``default`` (no options: the defaults, bins+fit's configuration).

    python benchmarks/gan/encoding_benchmark.py --epsilon 1 --variants bins+fit minmax
"""

from __future__ import annotations

import argparse
import json
import os
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
#: the paper's ADULT DP-SGD setting (App. E.1), for the variants of the earlier measurement
PAPER: dict[str, Any] = {
    "ae_batch_size": 64, "ae_steps": 10_000, "critic_batch_size": 128, "critic_steps": 15_000,
    "critic_steps_per_generator_step": 15, "marginal_share": 0.0, "finetune_steps": 0,
}  # fmt: skip
VARIANTS: dict[str, dict[str, Any] | None] = {
    "minmax": {**PAPER, "encoding": "minmax"},
    "bins": {**PAPER, "encoding": "bins"},
    "bins+marginals": {**PAPER, "encoding": "bins", "marginal_share": 0.1, "marginal_ways": 1,
                       "marginal_weight": 0.0},
    # issue 16's "fidelity by design", the example's options: half the rho on 1-way + workload
    # 2-way marginals, the generator fitted to them; fewer, larger DP-SGD steps (calibrated)
    "bins+fit": {"encoding": "bins", "marginal_share": 0.5, "marginal_ways": 2,
                 "ae_batch_size": 256, "ae_steps": 1000, "critic_batch_size": 256,
                 "critic_steps": 1000, "critic_steps_per_generator_step": 5,
                 "finetune_steps": 2000},
    # `method: gan` with no options at all: the defaults, which are bins+fit's configuration
    "default": None,
}


def write_spec(variant: str, eps: float, workdir: Path, delta: float = 1e-5) -> Path:
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["data"]["path"] = str(TRAIN)
    spec["workload"] = ["marginals(3)"]
    spec["privacy"] = {"epsilon": float(eps), "delta": float(delta), **{
        k: v for k, v in spec["privacy"].items() if k == "split"}}  # fmt: skip
    if VARIANTS[variant] is None:
        spec["synthesizer"].pop("options")
    else:
        spec["synthesizer"]["options"].update(VARIANTS[variant])
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


def run(variant: str, eps: float, workdir: Path, seed: int, delta: float = 1e-5) -> dict[str, Any]:
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
        "loadavg_before": os.getloadavg(),
    }
    out.update(score(spec, res.table_path, seed))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, nargs="+", default=[1.0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--delta", type=float, default=1e-5, help="e.g. 9.43e-10 = 1/n^2 (rap/run.py)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=Path, default=None, help="JSON results file")
    a = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for eps in a.epsilon:
            for variant in a.variants:
                load = os.getloadavg()
                r = run(variant, eps, Path(tmp), a.seed, a.delta)
                r["loadavg_before"] = load
                results.append(r)
                print(json.dumps(r), flush=True)
    if a.output:
        a.output.write_text(json.dumps(results, indent=2) + "\n")
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
