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


def test_keep_meets_a_mean_over_present_values(tmp_path: Path) -> None:
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


def test_drop_describes_the_rows_with_an_income(tmp_path: Path) -> None:
    real, synth, record = _compile(survey_spec(tmp_path, income="drop"))
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
