"""A/B of a tree's post-processing on the same captured RAP tables (curator-side experiment).

Used for "the pilot alone" (benchmarks/iproj/RESULTS.md): the logistic requirement measured by
its pilot only, against the tree before (``50c0c6c``, its moments measured beside the pilot).
``--capture`` compiles the bundled example at each seed and pickles the table post-processing
starts from and RAP's workload answers (``issue15_workload.capture``) under ``--dir``; then each
tree (``PYTHONPATH`` at its checkout) re-runs post-processing on those tables with its own plan
and ten seeded noise draws (a test-only noise source, nothing released) and prints, per draw,
each requirement's |table value - noisy value|, the verdicts and the logistic's *exact* gap (the
model refitted on the released table: its accuracy there against its accuracy on the real
table).

Usage: ``python benchmarks/iproj/issue15_pilot_ab.py --capture 3 30`` then
``PYTHONPATH=<tree> python benchmarks/iproj/issue15_pilot_ab.py --tag before 3 30``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "adult"


def main(argv: list[str] | None = None) -> int:
    import dpql

    tree = Path(dpql.__file__).resolve().parents[1]
    sys.path.insert(0, str(tree / "tests"))
    sys.path.insert(0, str(HERE))
    ap = argparse.ArgumentParser()
    ap.add_argument("seeds", type=int, nargs="+")
    ap.add_argument("--capture", action="store_true")
    ap.add_argument("--tag", default=str(tree))
    ap.add_argument("--dir", type=Path, default=Path("/tmp"))
    args = ap.parse_args(argv)
    if args.capture:
        from issue15_workload import capture

        for seed in args.seeds:
            _, before, workload = capture(seed)
            (args.dir / f"cap{seed}.pkl").write_bytes(pickle.dumps((before, workload)))
        return 0

    from test_iproj_support import ExactOracle

    import dpql.postprocess.run as run
    from dpql.codec import encode_frame
    from dpql.plan.exact import answer_all
    from dpql.plan.planner import build_plan
    from dpql.postprocess.accept import fit_model
    from dpql.spec.load import load_spec

    plan = build_plan(load_spec(EXAMPLE / "adult.release.yaml"))
    real_df = pd.read_csv(EXAMPLE / "adult_train.csv.gz")
    logit = plan.requirements[0]
    for seed in args.seeds:
        before, workload = pickle.loads((args.dir / f"cap{seed}.pkl").read_bytes())
        real = encode_frame(real_df[list(before.domain.names)], before.domain).table
        for draw in range(10):
            out = run.run_postprocess(plan, ExactOracle(real, seed=700 + draw), before, seed,
                                      None, workload)  # fmt: skip
            q = fit_model(logit, out.table, seed=seed)
            exact = abs(float(answer_all([q], out.table)[0][0] - answer_all([q], real)[0][0]))
            row = {
                "tree": args.tag,
                "capture": seed,
                "draw": draw,
                "gaps": [abs(a.synthetic_after - a.real_noisy) for a in out.acceptance],
                "exact_logit_gap": exact,
                "verdicts": [a.verdict for a in out.acceptance],
            }
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
