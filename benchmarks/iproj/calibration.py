"""Is a requirement's reported sd its noisy value's error sd? (docs/postprocess.md)

Each compile of a spec (``dpql.compile``, a temporary copy of the spec with its data path made
absolute, its own ledger; DP noise from OS entropy) gives, per requirement, its noisy value
``real_noisy`` and sd ``sigma`` from the record and its exact value on the real table (dpql's
own definitions: ``coverage.real_values``; for a logistic, its test's metric, the accuracy on
the real rows of the model refitted on the released table). Per requirement over the compiles:
``z = (real_noisy - real) / sigma`` (mean, sd, max |z|, how many beyond 2; a reported sd
that is the error's sd gives z an sd near 1 and about 4.6% beyond 2), how many noisy values
were undefined, and the released error ``|released value - real value|`` (mean, max).
Curator-side figures, never published.

Usage (rows appended to ``calibration.jsonl``, one compile at a time):
``python benchmarks/iproj/calibration.py run --spec S.release.yaml --runs 30 --tag X``;
``python benchmarks/iproj/calibration.py summary [--tag X]`` prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from machine import commit  # noqa: E402

ROWS = HERE / "calibration.jsonl"


def _spec_copy(src: Path, folder: Path) -> Path:
    """The spec in ``folder`` with its input paths (the data, an external table) absolute and
    its outputs inside ``folder``."""
    head, _, _ = src.read_text().partition("\noutput:")

    def absolute(m: re.Match) -> str:
        return f"{m.group(1)}{(src.parent / m.group(2)).resolve()}"

    head = re.sub(r"(\n\s+path:\s*)\"?([^\s\"]+)\"?", absolute, head)
    out = folder / "spec.release.yaml"
    out.write_text(f"{head}\noutput:\n  path: out/t.csv\n  provenance: out/t.provenance.json\n")
    return out


def _tested_metric(req, released, real, seed: int) -> float:
    """The acceptance test's metric (``accept.build_test``: the model refitted on the released
    rows) computed exactly on the real table."""
    from dpql.ir.exact import answer_all
    from dpql.postprocess.accept import build_test, finite_rows

    t = build_test(req, finite_rows(released, (*req.features, req.label)), seed=seed)
    parts = [float(np.ravel(a)[0]) for a in answer_all(list(t.parts), real)]
    return t.metric_of(parts, real.domain)


def compile_once(spec: Path, seed: int) -> dict:
    from coverage import real_values

    import dpql
    from dpql.data.load import load_table, rules_from_spec
    from dpql.ir.queries import ModelRequirement
    from dpql.plan.planner import build_plan
    from dpql.spec.load import load_spec

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        path = _spec_copy(spec, tmp)
        loaded = load_spec(path)
        plan = build_plan(loaded)
        rel = dpql.compile(path, seed=seed, ledger_path=tmp / "ledger.jsonl", progress=False)
        missing, other = rules_from_spec(loaded.model)
        def load(p: Path):
            return load_table(p, loaded.domain, missing=missing, other=other).table

        real, released = load(loaded.data_path), load(tmp / "out/t.csv")
        rec = rel.record
    reqs = []
    for req, acc in zip(plan.requirements, rec["requirements"], strict=True):
        v, v_real = real_values(req, released, real)
        if isinstance(req, ModelRequirement):  # what the test's noisy value estimates
            v_real = _tested_metric(req, released, real, seed)
        noisy, sd = acc.get("real_noisy"), acc.get("sigma")
        ok = noisy is not None and sd is not None and sd > 0
        reqs.append({
            "text": req.text, "verdict": acc["verdict"], "noisy": noisy, "sd": sd,
            "real": v_real, "released": v, "error": abs(v - v_real),
            "z": (noisy - v_real) / sd if ok else None,
        })  # fmt: skip
    return {"spec": spec.name, "seed": seed, "requirement": reqs}


def run(args: argparse.Namespace) -> None:
    for i in range(args.runs):
        row = compile_once(Path(args.spec).resolve(), args.first_seed + i)
        row["tag"], row["commit"] = args.tag, commit()
        with ROWS.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def summary(args: argparse.Namespace) -> None:
    rows = [json.loads(x) for x in ROWS.read_text().splitlines() if x.strip()]
    if args.tag is not None:
        rows = [r for r in rows if r["tag"] == args.tag]
    print("| tag | spec | requirement | compiles | pass | undefined | z mean | z sd | max abs z | "
          "abs z > 2 | released error mean | max |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    keys = dict.fromkeys((r["tag"], r["spec"], q["text"]) for r in rows for q in r["requirement"])
    for tag, spec, text in keys:
        qs = [q for r in rows if (r["tag"], r["spec"]) == (tag, spec)
              for q in r["requirement"] if q["text"] == text]  # fmt: skip
        z = np.array([q["z"] for q in qs if q["z"] is not None and math.isfinite(q["z"])])
        err = np.array([q["error"] for q in qs])
        passed = sum(q["verdict"] == "pass" for q in qs)
        print(f"| {tag} | {spec} | {text} | {len(qs)} | {passed} | {len(qs) - z.size} "
              f"| {z.mean():.2f} "
              f"| {z.std(ddof=1):.2f} | {np.abs(z).max():.2f} | {int(np.sum(np.abs(z) > 2))} "
              f"| {err.mean():.4g} | {err.max():.4g} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--spec", required=True)
    r.add_argument("--runs", type=int, default=30)
    r.add_argument("--first-seed", type=int, default=100)
    r.add_argument("--tag", default="")
    s = sub.add_parser("summary")
    s.add_argument("--tag", default=None)
    args = ap.parse_args()
    (run if args.cmd == "run" else summary)(args)


if __name__ == "__main__":
    main()
