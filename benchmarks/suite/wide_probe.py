"""A probe beyond the suite: a generated 21-column, 1,000-row categorical table with weak
chain dependencies (the shape of the credit table in issue 19, where independent columns
scored 0.141 and MST / AIM 0.215 / 0.195). Writes the table and its spec under ``--workdir``,
compiles ``method: auto`` at epsilon 1 for ``--seeds``, and prints each release's mean 3-way
TVD next to independent columns (no privacy) and ``one_way_floor.py``'s figures.

    python benchmarks/suite/wide_probe.py [--seeds 0 1 2] [--workdir benchmarks/suite/work/wide]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402

CARDS = [4, 10, 5, 10, 3, 5, 5, 4, 4, 3, 4, 4, 10, 3, 3, 4, 4, 2, 2, 2, 2]
ROWS = 1000


def write_table(workdir: Path) -> Path:
    """The table (fixed seed 7) and its spec; every third column starts a new chain, the others
    copy the previous column's code (mod their cardinality) with probability 0.3."""
    rng = np.random.default_rng(7)
    cols: dict[str, np.ndarray] = {}
    prev = None
    for i, k in enumerate(CARDS):
        base = rng.choice(k, size=ROWS, p=rng.dirichlet(np.ones(k) * 2))
        x = base if prev is None or i % 3 == 0 else np.where(
            rng.random(ROWS) < 0.7, base, cols[prev] % k)  # fmt: skip
        prev = f"c{i:02d}"
        cols[prev] = x
    workdir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({c: [f"v{v}" for v in x] for c, x in cols.items()}).to_csv(
        workdir / "wide.csv", index=False
    )
    spec = {
        "dpql": 1,
        "name": "wide-probe",
        "data": {"path": "wide.csv", "rows": ROWS},
        "schema": {c: {"type": "categorical", "values": [f"v{j}" for j in range(k)]}
                   for c, k in zip(cols, CARDS, strict=True)},
        "privacy": {"epsilon": 1.0, "delta": 1.0 / ROWS**2},
        "workload": ["marginals(3)"],
        "synthesizer": {"method": "auto", "rows": ROWS},
        "output": {"path": "out/wide.csv", "provenance": "out/wide.provenance.json"},
    }
    path = workdir / "wide.release.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workdir", type=Path, default=HERE / "work" / "wide")
    a = ap.parse_args()
    spec = write_table(a.workdir)
    ev = run.Evaluator(spec, a.workdir / "wide.csv")
    for s in a.seeds:
        cmd = ["dpql", "compile", str(spec), "--seed", str(s), "--quiet", "--force"]
        subprocess.run(cmd, check=True, cwd=a.workdir, capture_output=True)
        print(f"auto, seed {s}: {ev(a.workdir / 'out' / 'wide.csv')['tvd_mean']:.4f}", flush=True)
    subprocess.run([sys.executable, str(HERE / "one_way_floor.py"), "--spec", str(spec),
                    "--data", str(a.workdir / "wide.csv"), "--epsilons", "1", "3"], check=True)


if __name__ == "__main__":
    main()
