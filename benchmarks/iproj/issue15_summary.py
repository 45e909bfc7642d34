"""Summarise ``issue15_adult.py`` results against the issue's acceptance figures.

Usage: ``python benchmarks/iproj/issue15_summary.py RESULTS.json [BASELINE.json]``. The RAP-only
rows (``requirements: false``) of RESULTS, else of BASELINE (a run with them, for results made
with ``--only-requirements``), give each seed's reference 3-way TVD.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def summary(rows: list[dict], baseline: dict[int, float]) -> dict:
    """Counts of passes and of real-table errors within the issue's bounds, the TVD ratio
    (mean over seeds of ours / RAP-only, and per consecutive 3-seed group) and the largest
    ``|gap| + 2 sd`` of the corr and the mean against their tolerances."""
    ours = [r for r in rows if r["requirements"]]
    tvd = np.array([r["tvd3"] for r in ours])
    ref = np.array([baseline[r["seed"]] for r in ours])
    groups = [slice(i, i + 3) for i in range(0, len(ours) - 2, 3)]

    def margin(i: int) -> float:
        return max(abs(r["synthetic_after"][i] - r["real_noisy"][i]) + 2 * r["test_sd"][i]
                   for r in ours)  # fmt: skip

    return {
        "compiles": len(ours),
        "share": ours[0]["post_share"],
        "all_pass": sum(all(v == "pass" for v in r["verdicts"]) for r in ours),
        "pass_per_requirement": [sum(r["verdicts"][i] == "pass" for r in ours) for i in range(3)],
        "corr_error_le_0.03": sum(r["corr_error"] <= 0.03 for r in ours),
        "mean_error_le_0.5": sum(r["mean_error"] <= 0.5 for r in ours),
        "logit_gap_le_0.02": sum(r["logit_gap"] <= 0.02 for r in ours),
        "tvd3_ratio_mean": float(np.mean(tvd / ref)),
        "tvd3_ratio_groups": [float(tvd[g].mean() / ref[g].mean()) for g in groups],
        "corr_gap_plus_2sd_max": margin(1),
        "mean_gap_plus_2sd_max": margin(2),
        "ess_min": min(r["ess"] for r in ours),
    }


def main(argv: list[str]) -> int:
    rows = json.loads(Path(argv[0]).read_text())["rows"]
    base_rows = rows + (json.loads(Path(argv[1]).read_text())["rows"] if len(argv) > 1 else [])
    baseline: dict[int, float] = {}
    for r in base_rows:
        if not r["requirements"]:
            baseline.setdefault(r["seed"], r["tvd3"])
    print(json.dumps(summary(rows, baseline), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
