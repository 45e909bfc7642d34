"""Issue 15 item 5: what the controlled rounding (``iproj.balanced_counts``, the statistics of
``run.kept_statistics``) does, against plain systematic resampling, on the same reweighting.

For each capture seed, one compile of the bundled example (examples/adult, epsilon 1) captures
the table post-processing starts from (RAP's output), RAP's noisy workload answers and the plan
(``issue15_workload.capture``). Post-processing is then re-run on that table with fresh
measurements of the *real* table (a seeded test-only noise source and its own ledger: a
curator-side experiment, nothing is released), each draw twice: resampling keeping the verdicts'
statistics, and plain systematic resampling (``kept_statistics`` returning no column). Both
runs of a draw share the noise and the reweighting, so they differ by the rounding alone.
Reported per run: each requirement's |table value - noisy value| (the gap a verdict adds to
2 sd), the verdicts, the real-table errors, the 3-way TVD, the largest shift of a measure from
its reweighted value (``resampling_shift_sd``) and the seconds taken.

Usage: ``python benchmarks/iproj/issue15_rounding.py [--captures 0 1] [--draws 8]
[--out results.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from issue15_adult import EXAMPLE, codes, mean_tvd3
from issue15_workload import capture


def main(argv: list[str] | None = None) -> int:
    from test_iproj_support import ExactOracle

    import dpql.postprocess.run as run
    from dpql.codec import encode_frame

    ap = argparse.ArgumentParser()
    ap.add_argument("--captures", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    real_df = pd.read_csv(EXAMPLE / "adult_train.csv.gz")
    kept = run.kept_statistics
    rows = []
    for cap in args.captures:
        plan, before, workload = capture(cap)
        domain = before.domain
        real = encode_frame(real_df[list(domain.names)], domain).table
        real_codes = codes(real_df, domain)
        for draw in range(args.draws):
            for keep in (True, False):
                run.kept_statistics = kept if keep else (
                    lambda m, *a: np.zeros((len(m.queries), 0)))  # fmt: skip
                t0 = time.time()
                out = run.run_postprocess(plan, ExactOracle(real, seed=500 + draw), before,
                                          cap, None, workload)  # fmt: skip
                seconds = time.time() - t0
                run.kept_statistics = kept
                t = out.table
                c = np.column_stack([np.asarray(t.codes[k]) for k in domain.names])
                acc = out.acceptance
                row = {
                    "capture": cap,
                    "draw": draw,
                    "keep": keep,
                    "seconds": round(seconds, 2),
                    "gaps": [abs(a.synthetic_after - a.real_noisy) for a in acc],
                    "two_sd": [2 * a.sigma for a in acc],
                    "verdicts": [a.verdict for a in acc],
                    "tvd3": mean_tvd3(real_codes, c.astype(np.int64)),
                    "resampling_shift_sd": out.iproj.resampling_shift,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    for keep in (True, False):
        mine = [r for r in rows if r["keep"] is keep]
        gaps = np.array([r["gaps"] for r in mine])
        print(
            f"keep={keep}: runs {len(mine)}, all pass "
            f"{sum(r['verdicts'] == ['pass'] * len(r['verdicts']) for r in mine)}, "
            f"max gap per requirement {np.round(gaps.max(axis=0), 4).tolist()}, "
            f"mean gap {np.round(gaps.mean(axis=0), 4).tolist()}, "
            f"shift sd {min(r['resampling_shift_sd'] for r in mine):.2f}-"
            f"{max(r['resampling_shift_sd'] for r in mine):.2f}, "
            f"TVD {np.mean([r['tvd3'] for r in mine]):.5f}, "
            f"seconds {np.mean([r['seconds'] for r in mine]):.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
