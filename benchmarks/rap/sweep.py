"""RAP++ option sweep on UCI Adult (all 3-way marginals, epsilon = 1): the evidence behind the
defaults in ``dpql.synth.rap.plan.RapOptions`` and the planner's selection share.

Each configuration runs ``dpql.synth.rap.run_rap`` in its own process per noise seed, behind the
real measurement layer (``compile.open_measurer``) with a *seeded* noise source
(``NoiseSource.for_testing``) so configurations see the same noise draws: a benchmark device,
never a release. It prints the mean / max 3-way TVD against the train split, the wall time of
``run_rap`` and the fit's wall and CPU time (the CPU time is the steadier figure on a shared
machine).

    python benchmarks/rap/sweep.py --seeds 0 1 2 \
        --config base='{}' sel50='{"split": {"selection": 0.5, "measurement": 0.5}}'

A configuration is JSON: ``split`` goes to ``privacy.split``, every other key to
``synthesizer.options``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent.parent / "examples" / "adult" / "adult.release.yaml"
TRAIN = HERE.parent.parent / "examples" / "adult" / "adult_train.csv.gz"


def write_spec(config: dict, path: Path) -> None:
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["data"]["path"] = str(TRAIN)
    spec["workload"] = ["marginals(3)"]
    for key in ("requirements", "postprocess"):
        spec.pop(key, None)
    config = dict(config)
    if "split" in config:
        spec["privacy"]["split"] = config.pop("split")
    spec["synthesizer"]["options"] = config
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def worker(spec_path: str, noise_seed: int) -> dict:
    import jax

    import dpql.synth.rap.program as rap
    from dpql.data.load import load_table, rules_from_spec
    from dpql.pipeline import open_measurer
    from dpql.plan.planner import build_plan
    from dpql.privacy.ledger import Ledger
    from dpql.privacy.noise import NoiseSource
    from dpql.spec.load import load_spec

    spec = load_spec(spec_path)
    plan = build_plan(spec)
    measurer = open_measurer(spec, Ledger(), NoiseSource.for_testing(noise_seed))
    fit_wall, fit_cpu = [], []
    original = rap._Fitter.fit

    def timed(self, params, measured, iterations):
        t, c = time.perf_counter(), time.process_time()
        out = jax.block_until_ready(original(self, params, measured, iterations))
        fit_wall.append(time.perf_counter() - t)
        fit_cpu.append(time.process_time() - c)
        return out

    rap._Fitter.fit = timed
    t = time.perf_counter()
    res = rap.run_rap(
        measurer,
        spec.domain,
        plan.queries,
        *plan.synth.config,  # the RAP++ schedule and options
        spec.model.synthesizer.rows,
        0,
    )
    wall = time.perf_counter() - t
    measurer.close()
    missing, other = rules_from_spec(spec.model)
    real = load_table(spec.data_path, spec.domain, missing=missing, other=other).table
    tvd = []
    for cols in itertools.combinations(spec.domain.names, 3):
        cards = [spec.domain.card(c) for c in cols]

        def hist(t, cols=cols, cards=cards):
            idx = np.ravel_multi_index([t.codes[c] for c in cols], cards)
            return np.bincount(idx, minlength=int(np.prod(cards))) / len(idx)

        tvd.append(0.5 * np.abs(hist(real) - hist(res.table)).sum())
    return {
        "mean_tvd": float(np.mean(tvd)),
        "max_tvd": float(np.max(tvd)),
        "rap_wall_s": wall,
        "fit_wall_s": sum(fit_wall),
        "fit_cpu_s": sum(fit_cpu),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--config", nargs="+", default=["base={}"], help="name=JSON")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        for item in args.config:
            name, _, text = item.partition("=")
            spec = Path(tmp) / f"{name}.yaml"
            write_spec(json.loads(text or "{}"), spec)
            rows = []
            for seed in args.seeds:
                out = subprocess.run(
                    [sys.executable, __file__, "--worker", str(spec), str(seed)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                rows.append(json.loads(out.strip().splitlines()[-1]))
                r = rows[-1]
                print(
                    f"{name} seed {seed}: mean TVD {r['mean_tvd']:.4f} max {r['max_tvd']:.3f} "
                    f"run_rap {r['rap_wall_s']:.1f} s (fit {r['fit_wall_s']:.1f} s wall, "
                    f"{r['fit_cpu_s']:.1f} s CPU)",
                    flush=True,
                )
            mean = np.mean([r["mean_tvd"] for r in rows])
            print(f"{name}: mean TVD over seeds {mean:.4f}", flush=True)


if __name__ == "__main__":
    main()
