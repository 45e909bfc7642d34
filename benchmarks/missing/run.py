"""Releases of a table with real missingness beside the Adult example (docs/missing.md).

Configurations (epsilon 1, the specs as shipped, seeds 0..R-1; DP noise from OS entropy):

* ``adult``: ``examples/adult/adult.release.yaml`` (no empty cells);
* ``flights-keep``: ``examples/flights/flights.release.yaml`` (``missing: keep`` on the three
  columns with empty cells, ``mean(arr_delay | origin == "JFK") within 3``);
* ``flights-drop``: the same spec with ``missing: drop`` on ``arr_delay``: the release
  describes the flights with an arrival delay.

Figures per compile: wall and CPU seconds of ``dpql.compile`` (one process, other jobs on the
machine included in wall time), each requirement's verdict, its real value (over present
values; the release clips to the public bounds, so the clipped real value is given too) and
the released table's, the mean and max TVD over every 3-way marginal of the spec (real vs
synthetic, both encoded with the spec's rules: under drop the real table is its complete
cases), and each column's share of empty cells, real vs synthetic (under drop, real among the
kept rows). Each compile's row goes into ``results.json`` as soon as it finishes, replacing the
row of the same configuration and seed.

    python benchmarks/missing/run.py --runs 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

import dpql
from dpql.data.load import load_table, rules_from_spec
from dpql.evaluate.workload import marginal_tvd
from dpql.ir.queries import Marginal

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results.json"
sys.path.insert(0, str(HERE.parent))

from machine import describe, write_results  # noqa: E402

CONFIGS = {
    "adult": (ROOT / "examples/adult/adult.release.yaml", {}),
    "flights-keep": (ROOT / "examples/flights/flights.release.yaml", {}),
    "flights-drop": (ROOT / "examples/flights/flights.release.yaml", {"arr_delay": "drop"}),
}


def _spec_copy(src: Path, rules: dict[str, str], folder: Path) -> Path:
    """The spec in ``folder`` with its data path made absolute and ``rules`` applied."""
    text = src.read_text()
    data = re.search(r"\n  path: (\S+)", text)
    assert data is not None
    text = text.replace(data.group(0), f"\n  path: {(src.parent / data.group(1)).resolve()}", 1)
    for col, rule in rules.items():
        text = re.sub(rf"(\n  {col}:\s*\{{.*)missing: \w+\}}", rf"\1missing: {rule}}}", text)
    spec = folder / src.name
    spec.write_text(text)
    return spec


def _empty(df: pd.DataFrame, col: str) -> float:
    return round(float(df[col].isna().mean()), 4)


def _share_gap(real: pd.Series, synth: pd.Series) -> float:
    """Largest gap between the two columns' category shares (empty cells a category)."""
    want = real.astype(str).value_counts(normalize=True, dropna=False)
    got = synth.astype(str).value_counts(normalize=True, dropna=False)
    return float(want.sub(got, fill_value=0.0).abs().max())


def run_one(name: str, seed: int) -> dict:
    src, rules = CONFIGS[name]
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = _spec_copy(src, rules, Path(tmp))
        wall, cpu = time.perf_counter(), time.process_time()
        release = dpql.compile(str(spec_path), seed=seed)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        spec = dpql.load_spec(spec_path)
        missing, other = rules_from_spec(spec.model)
        real = load_table(spec.data_path, spec.domain, missing=missing, other=other).table
        synth = load_table(release.table_path, spec.domain, missing=missing, other=other).table
        names = spec.domain.names
        marginals = [Marginal(c) for c in itertools.combinations(names, 3)]
        tvd = marginal_tvd(real, synth, marginals)
        real_df = pd.read_csv(spec.data_path)
        synth_df = pd.read_csv(release.table_path)
        dropped = [c for c, r in rules.items() if r == "drop"]
        kept = real_df.dropna(subset=dropped) if dropped else real_df
        reqs = []
        for r in release.record["requirements"]:
            out = {"requirement": r["requirement"], "verdict": r["verdict"]}
            m = re.match(r'mean\((\w+) \| (\w+) == "([^"]+)"\)', r["requirement"])
            if m:
                col, by, value = m.groups()
                lo, hi = spec.model.columns[col].min, spec.model.columns[col].max
                x = kept.loc[kept[by].astype(str) == value, col]
                y = synth_df.loc[synth_df[by].astype(str) == value, col]
                out |= {
                    "real": float(x.mean()),
                    "real_clipped": float(x.clip(lo, hi).mean()),
                    "synthetic": float(y.mean()),
                    "noisy": r["real_noisy"],
                    "sd": r["sigma"],
                }
            reqs.append(out)
        return {
            "config": name,
            "seed": seed,
            "rows": spec.rows,
            "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1),
            "requirements": reqs,
            "tvd3_mean": tvd.mean,
            "tvd3_max": tvd.max,
            "empty_share": {c: [_empty(kept, c), _empty(synth_df, c)] for c in real_df.columns},
            "category_gap_vs_kept": {
                c: _share_gap(kept[c], synth_df[c])
                for c in real_df.columns
                if not pd.api.types.is_numeric_dtype(real_df[c])
            },
            "population": release.record["output"].get("population"),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0)
    args = ap.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"rows": []}
    for name in args.configs:
        for seed in range(args.first_seed, args.first_seed + args.runs):
            row = run_one(name, seed) | {"machine": describe()}
            results["rows"] = [
                r for r in results["rows"] if (r["config"], r["seed"]) != (name, seed)
            ] + [row]
            results["command"] = " ".join(["python", *sys.argv])
            write_results(RESULTS, results)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
