"""RAP++ benchmark on UCI Adult (issue "compile", item 7): dpql RAP++ vs MST / AIM (mbi 2.x).

Workload: all 455 3-way marginals of the 15 Adult columns, numeric columns by the public bins of
``examples/adult/adult.release.yaml``; epsilon in {0.3, 1, 3}, delta = 1/n^2, n = 32561.

Per method and epsilon it reports the mean and max TVD of the synthetic table's 3-way marginals
against the real train split, wall time, peak memory, and train-on-synthetic / test-on-real
logistic regression (accuracy, AUC) for ``income``. Evaluation reuses ``dpql.evaluate``
(``workload.marginal_tvd``, ``models.tstr_scores``, ``encode.encode_table``); every table, real or
synthetic, goes through the same path: CSV/DataFrame in original units -> encode_table -> metrics.

Methods:

* ``rap``: ``dpql.compile`` (the public API) on a per-epsilon copy of the example spec with the
  workload ``marginals(3)`` only (no requirements, no post-processing).
* ``mst``, ``aim``: ``peers.py`` on mbi 2.x, same rho (tight conversion) and replace-one.
* ``independent``: product of the real 1-way marginals (each column resampled independently
  from the train split), n rows; non-private reference.
* ``real``: TVD of the real *test* split against the train split; LR trained on the train split.

Every (method, epsilon) synthesis runs in its own Python process (``--worker``), sequentially,
so wall time includes JAX compilation and peak RSS is that method's alone.

    python benchmarks/rap/run.py --eps 0.3 1 3 --out benchmarks/rap/results.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EXAMPLE = ROOT / "examples" / "adult" / "adult.release.yaml"
DATA = Path("/work/shared/data/adult")
TRAIN, TEST = DATA / "adult_train.csv", DATA / "adult_test.csv"
N = 32561
LABEL = "income"
METHODS = ("rap", "mst", "aim", "independent", "real")
PRIVATE = ("rap", "mst", "aim")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def encode(df: pd.DataFrame, domain):
    """A table in original units -> dpql's public encoding (the evaluator's own encoder)."""
    try:
        from dpql.evaluate.encode import encode_table
    except ImportError:  # older layout of dpql.evaluate.encode
        from dpql.evaluate.encode import encode_frame as encode_table
    return encode_table(df, domain)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ------------------------------------------------------------------------------------------
# specs and the public domain


def write_spec(eps: float, workdir: Path) -> Path:
    """The example spec with workload marginals(3) only, no requirements/postprocess."""
    import yaml

    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["data"]["path"] = str(TRAIN)
    spec["data"]["rows"] = N
    spec["workload"] = ["marginals(3)"]
    spec.pop("requirements", None)
    spec.pop("postprocess", None)
    spec["privacy"] = {"epsilon": float(eps), "delta": 1.0 / N**2}
    tag = f"eps{eps:g}"
    spec["output"] = {
        "path": str(workdir / f"rap_{tag}.csv"),
        "provenance": str(workdir / f"rap_{tag}.provenance.json"),
    }
    path = workdir / f"adult_{tag}.release.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def plan_of(spec_path: Path):
    import dpql

    return dpql.build_plan(spec_path)


# ------------------------------------------------------------------------------------------
# workers (one process per synthesis)


def _frame_from_bins(codes: dict[str, np.ndarray], domain, rng: np.random.Generator):
    """Original units from mbi's codes: categoricals by value, numeric bins by a uniform draw
    inside the public bin (integer columns: a uniform integer of the bin)."""
    from dpql.domain import CategoricalColumn

    out: dict[str, Any] = {}
    for col in domain:
        c = np.asarray(codes[col.name], dtype=np.int64)
        null = c == col.null_code if col.nullable else np.zeros(c.size, bool)
        if isinstance(col, CategoricalColumn):
            out[col.name] = np.asarray([*col.values, None][: col.card], dtype=object)[c]
            continue
        c = np.minimum(c, len(col.edges) - 2)  # the null code decodes to NaN below
        lo_e = np.asarray(col.edges[:-1])[c]
        hi_e = np.asarray(col.edges[1:])[c]
        if col.integer:
            first = np.ceil(lo_e)
            last = np.where(c == len(col.edges) - 2, np.floor(hi_e), np.ceil(hi_e) - 1)
            last = np.minimum(np.maximum(last, first), col.hi)
            x = np.clip(first + np.floor(rng.random(c.size) * (last - first + 1)), col.lo, col.hi)
            out[col.name] = pd.array(np.where(null, 0, x).astype(np.int64), dtype="Int64")
            out[col.name][null] = pd.NA
        else:
            x = np.clip(lo_e + rng.random(c.size) * (hi_e - lo_e), col.lo, col.hi)
            out[col.name] = np.where(null, np.nan, x)
    return pd.DataFrame(out)


def worker_rap(eps: float, workdir: Path, seed: int) -> dict[str, Any]:
    import dpql

    spec = write_spec(eps, workdir)
    layer = "dpql.pipeline.open_measurer (dpql.data.measure.PrivateMeasurer)"
    t = time.perf_counter()
    res = dpql.compile(spec, seed=seed, force=True)
    wall = time.perf_counter() - t
    rec = res.record
    return {
        "csv": str(res.table_path),
        "synth_wall_s": wall,
        "measurement_layer": layer,
        "stage_timings_s": res.timings,
        "rho_budget": rec["privacy"]["budget"]["rho"],
        "rho_spent": rec["privacy"]["spent"]["rho"],
        "epsilon_spent": rec["privacy"]["spent"]["epsilon"],
        "synthesizer": {k: v for k, v in rec["synthesizer"].items() if k != "options"},
        "rap_options": rec["synthesizer"].get("options"),
    }


def worker_peer(method: str, eps: float, workdir: Path, seed: int, a) -> dict[str, Any]:
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import mbi
    import peers

    from dpql.privacy.accountant import eps_from_rho, rho_from_eps_delta
    from dpql.privacy.noise import default_noise

    delta = 1.0 / N**2
    rho = rho_from_eps_delta(eps, delta)
    plan = plan_of(write_spec(eps, workdir))
    domain = plan.spec.domain
    t = time.perf_counter()
    enc = encode(pd.read_csv(TRAIN), domain)  # public bins of the spec
    names = list(domain.names)
    mdom = mbi.Domain(names, [domain.card(c) for c in names])
    data = mbi.Dataset({c: enc.codes[c] for c in names}, mdom)
    np.random.seed(seed)  # mbi's synthetic_data / decompress use the global numpy state
    budget = rho * (1 - 1e-12)  # headroom for float rounding of the budget splits
    noise = default_noise()
    if method == "mst":
        res = peers.mst(data, budget, N, noise, iters=a.mst_iters, log=log)
    else:
        workload = [q.columns for q in plan.queries]
        res = peers.aim(
            data, workload, budget, N, noise, rounds=a.aim_rounds, max_rounds=a.aim_max_rounds,
            max_model_size=a.aim_max_model_size, iters=a.aim_iters,
            final_iters=a.aim_final_iters, log=log,
        )  # fmt: skip
    spent = res.ledger.total_rho()
    assert spent <= rho, (spent, rho)
    df = _frame_from_bins(res.data.to_dict(), domain, np.random.default_rng(seed))
    wall = time.perf_counter() - t
    out = workdir / f"{method}_eps{eps:g}.csv"
    df.to_csv(out, index=False)
    return {
        "csv": str(out),
        "synth_wall_s": wall,
        "rho_budget": rho,
        "rho_spent": spent,
        "epsilon_spent": eps_from_rho(spent, delta),
        "events": len(res.ledger),
        "mbi_version": getattr(mbi, "__version__", None) or _dist_version("mbi"),
        **res.info,
    }


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def run_worker(a) -> None:
    sys.path.insert(0, str(HERE))
    workdir = Path(a.workdir)
    if a.worker == "rap":
        info = worker_rap(a.eps[0], workdir, a.seed)
    else:
        info = worker_peer(a.worker, a.eps[0], workdir, a.seed, a)
    info["peak_rss_mb"] = peak_rss_mb()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    info["process_cpu_s"] = ru.ru_utime + ru.ru_stime  # all threads, imports included
    Path(a.worker_out).write_text(json.dumps(info, indent=2, default=str))


def spawn(method: str, eps: float, workdir: Path, a) -> dict[str, Any]:
    out = workdir / f"{method}_eps{eps:g}.info.json"
    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--worker", method, "--eps", str(eps),
        "--workdir", str(workdir), "--worker-out", str(out), "--seed", str(a.seed),
        "--mst-iters", str(a.mst_iters), "--aim-rounds", str(a.aim_rounds),
        "--aim-max-rounds", str(a.aim_max_rounds),
        "--aim-max-model-size", str(a.aim_max_model_size), "--aim-iters", str(a.aim_iters),
        "--aim-final-iters", str(a.aim_final_iters),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=sys.stderr, stderr=sys.stderr)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        return {"error": f"worker exited with {proc.returncode}", "process_wall_s": wall}
    info = json.loads(out.read_text())
    info["process_wall_s"] = wall
    return info


# ------------------------------------------------------------------------------------------
# evaluation (dpql.evaluate)


class Evaluator:
    def __init__(self, spec_path: Path, seed: int) -> None:
        plan = plan_of(spec_path)
        self.domain = plan.spec.domain
        self.queries = list(plan.queries)  # the 455 Marginal queries of marginals(3)
        self.train = pd.read_csv(TRAIN)
        self.test = pd.read_csv(TEST)
        self.real = encode(self.train, self.domain)
        self.seed = seed

    def __call__(self, df: pd.DataFrame, lr_train: pd.DataFrame | None = None) -> dict[str, Any]:
        from dpql.evaluate.models import tstr_scores
        from dpql.evaluate.workload import marginal_tvd

        t = time.perf_counter()
        tvd = marginal_tvd(self.real, encode(df, self.domain), self.queries)
        lr = tstr_scores(
            df if lr_train is None else lr_train, self.test, LABEL, "logistic", self.domain,
            self.seed,
        )  # fmt: skip
        return {
            "marginals": tvd.count,
            "tvd_mean": tvd.mean,
            "tvd_max": tvd.max,
            "lr_accuracy": lr.accuracy,
            "lr_auc": lr.auc,
            "eval_s": time.perf_counter() - t,
        }


def independent_table(train: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Product of the real 1-way marginals: every column resampled independently, N rows."""
    return pd.DataFrame(
        {c: train[c].to_numpy()[rng.integers(0, len(train), N)] for c in train.columns}
    )


# ------------------------------------------------------------------------------------------
# driver


def fmt_row(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"| {name} | error: {r['error']} |"
    t = r.get("synth_wall_s")
    mem = r.get("peak_rss_mb")
    return (
        f"| {name} | {r['tvd_mean']:.4f} | {r['tvd_max']:.4f} | "
        f"{'-' if t is None else f'{t:.1f}'} | {'-' if mem is None else f'{mem:.0f}'} | "
        f"{r['lr_accuracy']:.4f} | {r['lr_auc']:.4f} |"
    )


def print_tables(results: dict[str, Any]) -> str:
    lines = []
    for key, rows in results["by_epsilon"].items():
        lines += [
            f"\nepsilon = {key}, delta = 1/n^2, rho = {results['rho'][key]:.6g}",
            "| method | mean TVD | max TVD | time (s) | peak RSS (MB) | LR acc | LR AUC |",
            "|---|---|---|---|---|---|---|",
        ]
        for m, r in rows.items():
            lines.append(fmt_row(m, r))
    lines += ["\nreferences (no privacy)", "| method | mean TVD | max TVD | time (s) | "
              "peak RSS (MB) | LR acc | LR AUC |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for m, r in results["references"].items():
        lines.append(fmt_row(m, r))
    text = "\n".join(lines)
    print(text)
    return text


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--eps", type=float, nargs="+", default=[0.3, 1.0, 3.0])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--out", default=str(HERE / "results.json"))
    p.add_argument(
        "--merge", action="store_true",
        help="start from the rows already in --out; replace only the methods run now",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="optimisation/sampling seed (not DP)")
    p.add_argument("--workdir", default=None, help="specs and synthetic CSVs (default: temp)")
    p.add_argument("--mst-iters", type=int, default=5000)
    p.add_argument("--aim-rounds", type=int, default=0, help="AIM's T (0: 16 d = 240)")
    p.add_argument("--aim-max-rounds", type=int, default=0, help="cap on AIM rounds (0: none)")
    p.add_argument("--aim-max-model-size", type=float, default=80.0)
    p.add_argument("--aim-iters", type=int, default=1000)
    p.add_argument("--aim-final-iters", type=int, default=0)
    p.add_argument("--worker", choices=PRIVATE, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        a.aim_rounds = a.aim_rounds or None
        a.aim_final_iters = a.aim_final_iters or None
        a.aim_max_rounds = a.aim_max_rounds or None
        run_worker(a)
        return
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="rapbench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"workdir {workdir}")
    from dpql.privacy.accountant import rho_from_eps_delta

    ev = Evaluator(write_spec(1.0, workdir), a.seed)
    results: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()},
        "delta": 1.0 / N**2,
        "rho": {},
        "by_epsilon": {},
        "references": {},
        "settings": {k: v for k, v in vars(a).items() if not k.startswith("worker")},
    }
    if a.merge and Path(a.out).exists():
        old = json.loads(Path(a.out).read_text())
        for k in ("by_epsilon", "references", "rho"):
            results[k] = old.get(k, {})
        earlier = {k: old.get(k) for k in ("command", "machine", "settings")}
        results["earlier_runs"] = [*old.get("earlier_runs", []), earlier]
    for eps in a.eps:
        key = f"{eps:g}"
        results["rho"][key] = rho_from_eps_delta(eps, 1.0 / N**2)
        rows: dict[str, Any] = results["by_epsilon"].get(key, {})
        for m in (m for m in a.methods if m in PRIVATE):
            log(f"== {m} eps={eps:g}")
            info = spawn(m, eps, workdir, a)
            if "error" not in info:
                info.update(ev(pd.read_csv(info["csv"])))
            rows[m] = info
            log(f"   {fmt_row(m, info)}")
        results["by_epsilon"][key] = rows
        Path(a.out).write_text(json.dumps(results, indent=2, default=str))
    rng = np.random.default_rng(a.seed)
    if "independent" in a.methods:
        t = time.perf_counter()
        df = independent_table(ev.train, rng)
        r = {"synth_wall_s": time.perf_counter() - t}
        r.update(ev(df))
        results["references"]["independent columns"] = r
    if "real" in a.methods:
        r = ev(ev.test, lr_train=ev.train)
        r["note"] = "TVD: real test split vs train split; LR: trained on the real train split"
        results["references"]["real (test split)"] = r
    results["machine"]["load_avg_at_end"] = os.getloadavg()
    results["table"] = print_tables(results)
    Path(a.out).write_text(json.dumps(results, indent=2, default=str))
    log(f"wrote {a.out}")


if __name__ == "__main__":
    main()
