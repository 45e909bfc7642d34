"""The tables of RESULTS.md from results.jsonl (python benchmarks/missing/summary.py)."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    rows = [json.loads(line) for line in (HERE / "results.jsonl").read_text().splitlines()]
    print("| config | seed | wall s | CPU s | mean / max 3-way TVD | verdicts |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        verdicts = ", ".join(q["verdict"] for q in r["requirements"]) or "-"
        tvd = f"{r['tvd3_mean']:.4f} / {r['tvd3_max']:.4f}"
        times = f"{r['wall_s']} | {r['cpu_s']}"
        print(f"| {r['config']} | {r['seed']} | {times} | {tvd} | {verdicts} |")
    print()
    print("| config | seed | real mean (clipped) | noisy +- sd | released | error vs clipped |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        for q in r["requirements"]:
            if "real" not in q:
                continue
            err = abs(q["synthetic"] - q["real_clipped"])
            print(
                f"| {r['config']} | {r['seed']} | {q['real']:.2f} ({q['real_clipped']:.2f}) | "
                f"{q['noisy']:.2f} +- {q['sd']:.2f} | {q['synthetic']:.2f} | {err:.2f} |"
            )
    print()
    print("| config | seed | empty share real -> synthetic (columns with any) | max category gap |")
    print("|---|---|---|---|")
    for r in rows:
        shares = ", ".join(
            f"{c} {a:.4f} -> {b:.4f}" for c, (a, b) in r["empty_share"].items() if a or b
        )
        gaps = r.get("category_gap_vs_kept") or {}
        gap = f"{max(gaps.values()):.4f}" if gaps else "-"
        print(f"| {r['config']} | {r['seed']} | {shares or 'none'} | {gap} |")


if __name__ == "__main__":
    main()
