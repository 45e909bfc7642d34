"""Declared missing values (``schema.COLUMN.missing_values``): the sentinels a file uses for
"unknown" (father's age 0, "NA") are missing cells like empty ones, under the column's rule,
in a release end to end and in ``dpql validate``; none of it changes what is public."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpql
from dpql.cli import main

ROWS = 3000


def _table(rows: int = ROWS, seed: int = 7) -> pd.DataFrame:
    """Father's age coded 0 when unknown (30% of rows, more often where race is "b") and race
    coded "NA" (10%), next to a few truly empty cells."""
    rng = np.random.default_rng(seed)
    race = rng.choice(["a", "b", "c"], rows, p=[0.5, 0.3, 0.2])
    fage = rng.integers(18, 60, rows).astype(str)
    fage[rng.random(rows) < np.where(race == "b", 0.5, 0.2)] = "0"
    fage[rng.random(rows) < 0.02] = ""
    race = race.astype(object)
    race[rng.random(rows) < 0.1] = "NA"
    sex = rng.choice(["F", "M"], rows)
    return pd.DataFrame({"fage": fage, "race": race, "sex": sex})


def _spec(folder: Path, rule: str, df: pd.DataFrame | None = None) -> Path:
    (df if df is not None else _table()).to_csv(folder / "births.csv", index=False)
    spec = folder / "births.release.yaml"
    spec.write_text(
        f"""dpql: 1
name: births
data: {{path: births.csv, rows: {ROWS}}}
schema:
  fage: {{type: numeric, min: 12, max: 70, integer: true, bins: 6, missing_values: [0],
          missing: {rule}}}
  race: {{type: categorical, values: [a, b, c], missing_values: [NA], missing: {rule}}}
  sex:  {{type: categorical, values: [F, M]}}
privacy: {{epsilon: 2.0, delta: 1e-9}}
workload:
  - marginals(2)
synthesizer:
  method: aim
  rows: {ROWS}
output:
  path: out/births.csv
  provenance: out/births.provenance.json
"""
    )
    return spec


def _compile(spec: Path) -> pd.DataFrame:
    release = dpql.compile(str(spec), seed=0)
    assert dpql.verify(release.record_path, synthetic=release.table_path) == []
    return pd.read_csv(release.table_path, dtype=str, keep_default_na=False)


@pytest.mark.e2e
def test_keep_releases_sentinel_cells_as_empty_at_their_share(
    tmp_path: Path, seeded_dp_noise: None
) -> None:
    real = _table()
    synth = _compile(_spec(tmp_path, "keep"))
    assert "0" not in set(synth.fage) and "NA" not in set(synth.race)  # never a sentinel
    ages = pd.to_numeric(synth.fage[synth.fage != ""])
    assert ages.between(12, 70).all()  # the 0s were not clipped to 12
    share = {"fage": real.fage.isin(["0", ""]).mean(), "race": (real.race == "NA").mean()}
    for col, want in share.items():
        got = (synth[col] == "").mean()
        print(col, "empty share real", want, "released", got)
        assert abs(got - want) <= 0.03, (col, got, want)
    # the association between an unknown father's age and race survives (a 2-way marginal)
    got = (synth.fage[synth.race == "b"] == "").mean() - (synth.fage[synth.race == "a"] == "").mean()
    want = (real.fage[real.race == "b"].isin(["0", ""])).mean() - (
        real.fage[real.race == "a"].isin(["0", ""])
    ).mean()
    print("gap in fage's empty share between race b and a: real", want, "released", got)
    assert abs(got - want) <= 0.08, (got, want)


@pytest.mark.e2e
def test_drop_describes_the_rows_with_a_known_fathers_age(
    tmp_path: Path, seeded_dp_noise: None
) -> None:
    real = _table()
    synth = _compile(_spec(tmp_path, "drop"))
    assert (synth.fage != "").all() and (synth.race != "").all()
    kept = real[~real.fage.isin(["0", ""]) & (real.race != "NA")]
    want = kept.race.value_counts(normalize=True)
    got = synth.race.value_counts(normalize=True)
    print("race among complete cases", want.to_dict(), "released", got.to_dict())
    assert (want - got).abs().max() <= 0.04, (want.to_dict(), got.to_dict())
    record = json.loads((tmp_path / "out" / "births.provenance.json").read_text())
    population = record["output"]["population"]
    assert population["complete_in"] == ["fage", "race"]
    share = len(kept) / len(real)
    assert abs(population["kept_share"] - share) <= 4 * population["kept_share_sd"]


def test_validate_counts_declared_missing_cells_apart_from_empty_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    df = pd.DataFrame(
        {"fage": ["30", "0", "", " 0 ", "5"], "race": ["a", "NA", "b", "NA", "zz"],
         "sex": ["F", "M", "F", "M", "F"]}
    )  # fmt: skip
    spec = _spec(tmp_path, "keep", df)
    capsys.readouterr()
    assert main(["validate", str(spec), "--format", "json"]) == 1
    found = json.loads(capsys.readouterr().out)["columns"]
    assert found["fage"]["declared"] == {"count": 2, "rows": [2, 4]}
    assert found["fage"]["empty"] == {"count": 1, "rows": [3]}
    assert found["fage"]["below"] == {"count": 1, "rows": [5]}  # 5 is no sentinel: clipped
    assert found["race"]["declared"] == {"count": 2, "rows": [2, 4]}
    assert found["race"]["unreadable"]["count"] == 1 and "empty" not in found["race"]
    assert main(["validate", str(spec)]) == 1
    text = capsys.readouterr().out
    assert "fage: 2 cell(s) holding a declared missing value, rows 2, 4 -> missing: keep" in text
    clean = df.assign(fage=["30", "40", "50", "60", "20"], race=["a", "b", "c", "a", "b"])
    assert main(["validate", str(_spec(tmp_path, "keep", clean))]) == 0
