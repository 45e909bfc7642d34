"""How close independent columns from *DP* 1-way marginals can come (issue 19's "never worse
than independent columns at epsilon >= 1"): the mean 3-way TVD against the real table of

* ``independent (no privacy)``: the suite's baseline, each column's real values shuffled
  (``n`` rows);
* ``expected, exact 1-ways``: the product of the exact 1-way marginals itself (no sampling);
* ``expected, DP 1-ways``: the product of every column's 1-way marginal measured with the
  *whole* budget in one Gaussian release (replace-one, L2 sensitivity ``sqrt(2 d) / n`` for
  ``d`` columns), rare cells pooled (``dpql.synth.aim.program.pool_rare``), clipped and normalised;
  the mean over ``--draws`` noise draws (benchmark-seeded noise, nothing is released).

The last is what a DP release gains nothing from structure would score at best. Where it is
above the first, no DP method beats independent columns without learning dependence worth more
than the 1-way noise costs.

    python benchmarks/suite/one_way_floor.py --spec specs/bn1k.release.yaml \\
        --data data/bn_1000.csv [--epsilons 1 3] [--draws 5]
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


def expected_tvd(ev: run.Evaluator, probs: dict[str, np.ndarray]) -> float:
    """Mean TVD between the product of ``probs`` and the real table on the evaluator's
    marginals (row-major cells, as ``dpql.ir.exact`` answers them)."""
    from dpql.ir.exact import answer_all

    real = answer_all(ev.queries, ev.real)
    out = []
    for q, r in zip(ev.queries, real, strict=True):
        p = np.ones(1)
        for c in q.columns:
            p = np.multiply.outer(p, probs[c]).ravel()
        out.append(0.5 * float(np.abs(p - np.ravel(r)).sum()))
    return float(np.mean(out))


def main() -> None:
    from dpql.privacy.accountant import rho_from_eps_delta
    from dpql.synth.aim.program import pool_rare

    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 3.0])
    ap.add_argument("--draws", type=int, default=5)
    a = ap.parse_args()
    ev = run.Evaluator(a.spec, a.data)
    t = ev.real
    n = len(next(iter(t.codes.values())))
    cols = list(t.domain.names)
    exact = {c: np.bincount(t.codes[c], minlength=t.domain.card(c)) / n for c in cols}
    rng = np.random.default_rng(0)
    real = pd.read_csv(a.data)
    shuffled = a.data.parent / f".{a.data.stem}_shuffled.csv"
    pd.DataFrame({c: rng.permutation(real[c].to_numpy()) for c in real}).to_csv(
        shuffled, index=False
    )
    print(f"{a.spec.name}: {n:,} rows, {len(cols)} columns, {len(ev.queries)} marginals")
    print(f"  independent (no privacy)   {ev(shuffled)['tvd_mean']:.4f}")
    shuffled.unlink()
    print(f"  expected, exact 1-ways     {expected_tvd(ev, exact):.4f}")
    for eps in a.epsilons:
        rho = rho_from_eps_delta(eps, 1.0 / n**2)
        sigma = np.sqrt(2 * len(cols)) / n / np.sqrt(2 * rho)  # per cell, fraction of n
        scores = []
        for _ in range(a.draws):
            probs = {}
            for c in cols:
                y = pool_rare(exact[c] + rng.normal(0.0, sigma, exact[c].size), sigma)
                y = np.clip(y, 0.0, None)
                probs[c] = y / y.sum() if y.sum() > 0 else np.full(y.size, 1.0 / y.size)
            scores.append(expected_tvd(ev, probs))
        print(f"  expected, DP 1-ways, eps {eps:g}: {np.mean(scores):.4f} ± {np.std(scores):.4f}"
              f" (sigma {sigma * n:.1f} rows per cell)")  # fmt: skip


if __name__ == "__main__":
    main()
