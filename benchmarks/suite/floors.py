"""What a small generated table allows with no privacy at all (issue 19's "never worse than
independent columns"): the mean 3-way TVD against the real table of

* fresh samples of the true Bayesian network with as many rows (the floor of any generator
  that knows the true distribution), and
* the exact 1-way counts with independent columns (each column's real values shuffled),

each also with 100 times as many rows (``--expected``), which approximates the distribution
itself: what a generator's *expected* marginals score, without its own sampling noise (the
headroom ``dpql.synth.aim.graphical.balance_rows`` works in).

    python benchmarks/suite/floors.py [--table bn1k] [--draws 3] [--expected]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402
import tables  # noqa: E402

ROWS = {"bn1k": 1000, "bn30k": 30000}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", choices=sorted(ROWS), default="bn1k")
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=HERE / "work" / "floors")
    ap.add_argument("--expected", action="store_true", help="also 100 x n rows")
    a = ap.parse_args()
    n = ROWS[a.table]
    data = HERE / "data" / f"bn_{n}.csv"
    ev = run.Evaluator(HERE / "specs" / f"{a.table}.release.yaml", data)
    real = pd.read_csv(data)
    a.workdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    fresh, shuffled = [], []
    for d in range(a.draws):
        path = a.workdir / f"{a.table}_fresh{d}.csv"
        tables.bn_sample(n, seed=100 + d).to_csv(path, index=False)
        fresh.append(ev(path)["tvd_mean"])
        cols = {c: rng.permutation(real[c].to_numpy()) for c in real}
        path = a.workdir / f"{a.table}_shuffled{d}.csv"
        pd.DataFrame(cols).to_csv(path, index=False)
        shuffled.append(ev(path)["tvd_mean"])
    print(f"{a.table}: fresh sample of the true network {np.round(fresh, 4).tolist()}")
    print(f"{a.table}: exact 1-way counts, independent columns {np.round(shuffled, 4).tolist()}")
    if a.expected:
        big = 100 * n
        path = a.workdir / f"{a.table}_fresh_expected.csv"
        tables.bn_sample(big, seed=300).to_csv(path, index=False)
        fresh_big = ev(path)["tvd_mean"]
        cols = {c: rng.choice(real[c].to_numpy(), size=big) for c in real}
        path = a.workdir / f"{a.table}_shuffled_expected.csv"
        pd.DataFrame(cols).to_csv(path, index=False)
        print(f"{a.table}, {big:,} rows: the true network {fresh_big:.4f}, "
              f"independent columns {ev(path)['tvd_mean']:.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
