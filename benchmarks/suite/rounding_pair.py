"""Paired before/after of issue 19's rounding fix: the *same* relaxed rows rounded both ways.

For each table and noise seed, ``run_rap`` runs once behind the real measurement layer with a
*seeded* noise source (``NoiseSource.for_testing``: a benchmark device, never a release), and
its final relaxed rows are rounded twice, by ``dpql.synth.rap.round_rows`` (one shift per
relaxed row and column) and by the pre-fix function (one shift per relaxed row, shared by all
columns; ``legacy_rounding.py``), with the same rounding seed. Differences are then due to the
rounding alone, not to DP noise. Reported per table: mean 3-way TVD of both, and the mean
pairwise Pearson correlation of the columns' codes (declared value order) in the real table
and in both outputs, the diagnostic of issue 19.

    python benchmarks/suite/rounding_pair.py --tables fair bn1k --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as suite  # noqa: E402
import tables as suite_tables  # noqa: E402


def mean_code_corr(table, names) -> float:
    codes = np.stack([table.codes[c] for c in names]).astype(np.float64)
    keep = codes.std(axis=1) > 0
    corr = np.corrcoef(codes[keep])
    return float(corr[np.triu_indices(corr.shape[0], 1)].mean())


def paired(spec_path: Path, data: Path, noise_seed: int, seed: int) -> dict:
    import legacy_rounding

    import dpql.synth.rap.program as rap
    from dpql.evaluate.workload import marginal_tvd
    from dpql.pipeline import open_measurer
    from dpql.privacy.ledger import Ledger
    from dpql.privacy.noise import NoiseSource
    from dpql.spec.load import load_spec

    spec = load_spec(spec_path)
    plan = suite.plan_of(spec_path)
    measurer = open_measurer(spec, Ledger(), NoiseSource.for_testing(noise_seed))
    tables = {}
    fixed = rap.round_rows

    def both(layout, params, rows, s):
        tables["legacy"] = legacy_rounding.round_rows_shared_shift(layout, params, rows, s)
        tables["fixed"] = fixed(layout, params, rows, s)
        return tables["fixed"]

    rap.round_rows = both
    try:
        t = time.perf_counter()
        rap.run_rap(
            measurer, spec.domain, plan.queries, *plan.synth.config,
            spec.model.synthesizer.rows, seed,
        )  # fmt: skip
        wall = time.perf_counter() - t
    finally:
        rap.round_rows = fixed
        measurer.close()
    real = suite.load_encoded(spec_path, data)
    names = list(spec.domain.names)
    copies = spec.model.synthesizer.rows / plan.synth.config[1].relaxed_rows
    out = {"run_rap_s": wall, "copies": copies, "corr_real": mean_code_corr(real, names)}
    for k, tab in tables.items():
        out[f"tvd_{k}"] = marginal_tvd(real, tab, plan.queries).mean
        out[f"corr_{k}"] = mean_code_corr(tab, names)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", nargs="+", default=["adult", "compas", "fair", "randhie", "bn1k"])
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--workdir", type=Path, default=HERE / "work")
    p.add_argument("--data-dir", type=Path, default=suite_tables.DEFAULT_DATA)
    p.add_argument("--out", type=Path, default=HERE / "rounding_pair.json")
    a = p.parse_args()
    results = []
    for name in a.tables:
        table = suite_tables.TABLES[name]
        data = table.data_path(a.data_dir)
        spec = suite.write_spec(table, data, a.epsilon, a.workdir / "pair", f"{name}_pair")
        for s in a.seeds:
            r = {"table": name, "epsilon": a.epsilon, "noise_seed": s}
            r.update(paired(spec, data, s, s))
            results.append(r)
            print(json.dumps(r), flush=True)
    a.out.write_text(json.dumps(results, indent=1))
    print("\n| table | copies per relaxed row | mean 3-way TVD, fixed | shared shift | "
          "code corr. real | fixed | shared shift |\n|---|---|---|---|---|---|---|")
    for name in dict.fromkeys(r["table"] for r in results):
        rs = [r for r in results if r["table"] == name]

        def m(k, rs=rs):
            return np.mean([r[k] for r in rs])

        print(f"| {name} | {m('copies'):.1f} | {m('tvd_fixed'):.4f} | {m('tvd_legacy'):.4f} | "
              f"{m('corr_real'):+.3f} | {m('corr_fixed'):+.3f} | {m('corr_legacy'):+.3f} |")


if __name__ == "__main__":
    main()
