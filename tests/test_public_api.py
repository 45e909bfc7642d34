"""The public Python API (``dpql/__init__.py``): load, plan, compile, verify, table back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import dpql
import dpql.evaluate.cli
import dpql.pipeline
import dpql.plan.planner  # importing the subpackages must not rebind the API's names

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
def test_api_plans_compiles_and_verifies_a_release(tmp_path: Path) -> None:
    spec_path = tmp_path / "release.yaml"
    text = (ROOT / "examples" / "adult" / "adult.release.yaml").read_text(encoding="utf-8")
    shutil.copy(ROOT / "examples" / "adult" / "adult_train.csv.gz", tmp_path)
    # a small, fast release: 2-way marginals, no requirements
    head, _, _ = text.partition("\nworkload:")
    _, _, tail = text.partition("\nsynthesizer:")
    spec_path.write_text(
        head
        + "\nmissing: drop  # no null state: the table has no empty cell\n"
        + '\nworkload:\n  - "marginals(2) over [age, sex, income]"\n'
        + "\nsynthesizer:\n  method: rap\n  rows: 500\n  options: {rounds: 2, iterations: 50, "
        + "warm_iterations: 20, relaxed_rows: 100}\n"
        + "\noutput:"
        + tail.partition("\noutput:")[2],
        encoding="utf-8",
    )
    spec = dpql.load_spec(spec_path)
    plan = dpql.build_plan(spec)
    assert plan.method == "rap" and plan.budget.epsilon == 1.0
    release = dpql.compile(spec_path, seed=0)
    df = release.table()
    assert isinstance(df, pd.DataFrame) and len(df) == 500
    assert set(df["sex"]) <= {"Female", "Male"}
    assert dpql.verify(release.record_path, synthetic=release.table_path) == []
    df.iloc[:10].to_csv(release.table_path, index=False)  # a tampered table does not verify
    assert dpql.verify(release.record_path, synthetic=release.table_path) != []


def test_api_errors_are_diagnostics(tmp_path: Path) -> None:
    bad = tmp_path / "bad.release.yaml"
    bad.write_text("name: x\n", encoding="utf-8")
    with pytest.raises(dpql.DiagnosticError) as err:
        dpql.load_spec(bad)
    assert err.value.diagnostics and all(d.code for d in err.value.diagnostics)
