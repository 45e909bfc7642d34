"""Releases of a table with real missingness (the acceptance of the missing-values work): under
``keep`` a mean over present values is tested and met and every column keeps its share of empty
cells; under ``drop`` the table describes the rows where the dropped column is present."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from survey_table import survey_spec

import dpql


def _compile(spec: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    release = dpql.compile(str(spec), seed=0)
    real = pd.read_csv(spec.parent / "survey.csv")
    synth = pd.read_csv(release.table_path)
    record = json.loads(Path(release.record_path).read_text())
    assert dpql.verify(release.record_path, synthetic=release.table_path) == []
    return real, synth, record


def test_keep_meets_a_mean_over_present_values(tmp_path: Path, seeded_dp_noise: None) -> None:
    t = 3000.0
    real, synth, record = _compile(survey_spec(tmp_path, income="keep", tolerance=t))
    (req,) = record["requirements"]
    assert req["verdict"] == "pass", req
    women = real.gender == "Female"
    truth = real.loc[women, "income"].mean()  # pandas skips the empty cells (na.rm)
    released = synth.loc[synth.gender == "Female", "income"].mean()
    assert abs(released - truth) <= t, (released, truth)
    for col in real:
        assert abs(real[col].isna().mean() - synth[col].isna().mean()) <= 0.01, col
    assert record["output"]["population"]["rows"] == "all"


def test_drop_describes_the_rows_with_an_income(tmp_path: Path, seeded_dp_noise: None) -> None:
    """With keep as the top-level default, the complete columns (age, region) are nullable
    too, and still get no empty cell."""
    real, synth, record = _compile(survey_spec(tmp_path, income="drop", keep_everywhere=True))
    assert synth.income.notna().all()
    assert synth.age.notna().all() and synth.region.notna().all()
    kept = real[real.income.notna()]
    for col in ("gender", "region", "fulltime"):
        want = kept[col].value_counts(normalize=True, dropna=False)
        got = synth[col].value_counts(normalize=True, dropna=False)
        gap = want.sub(got, fill_value=0.0).abs().max()
        assert gap <= 0.03, (col, want.to_dict(), got.to_dict())
    population = record["output"]["population"]
    assert population["rows"] == "complete cases" and population["complete_in"] == ["income"]
    assert abs(population["kept_share"] - len(kept) / len(real)) <= 4 * population["kept_share_sd"]


def test_plan_says_what_drop_and_code_columns_represent(tmp_path: Path) -> None:
    """W102 names the population a drop rule releases; W103 flags an integer column that looks
    like codes or years binned coarser than one value per bin (from the spec alone)."""
    spec = survey_spec(tmp_path, income="drop")
    text = spec.read_text().replace(
        "  region:",
        "  survey_year: {type: numeric, min: 1990, max: 2020, integer: true, "
        "bins: 6}\n  occ_code: {type: numeric, min: 1, max: 999, integer: true, bins: 10}\n"
        "  region:",
    )
    spec.write_text(text)
    warnings = {d.code: d for d in dpql.build_plan(dpql.load_spec(spec)).warnings}
    assert "rows where income is present" in warnings["W102"].message
    codes = [d.message.split("'")[1] for d in dpql.build_plan(dpql.load_spec(spec)).warnings
             if d.code == "W103"]  # fmt: skip
    assert codes == ["survey_year", "occ_code"]
    # one bin per integer invents nothing; age (a quantity) is not flagged
    spec.write_text(text.replace("bins: 6}", "bins: 31}").replace("missing: drop", "missing: keep"))
    warnings = [d.code for d in dpql.build_plan(dpql.load_spec(spec)).warnings]
    assert "W102" not in warnings and warnings.count("W103") == 1
