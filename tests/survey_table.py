"""A small generated survey table with real-looking missingness, and release specs over it: the
fixture of the missing-value acceptance tests (tests/test_missing_release.py).

Income is empty in about 40% of rows, more often for women and part-timers (not missing
completely at random, so the rows with an income differ from all rows); gender and full-time
status have a few empty cells; age and region are complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

REGIONS = ("north", "south", "east", "west")


def survey_frame(rows: int = 20000, seed: int = 30) -> pd.DataFrame:
    """The table as text cells (empty = missing)."""
    rng = np.random.default_rng(seed)
    female = rng.random(rows) < 0.55
    age = rng.integers(18, 81, rows)
    region = rng.choice(REGIONS, rows, p=[0.4, 0.3, 0.2, 0.1])
    fulltime = rng.random(rows) < np.where(female, 0.6, 0.8)
    income = 20000 + 600 * (age - 18) + 15000 * fulltime - 8000 * female
    income = np.clip(income + rng.normal(0, 9000, rows), 0, 150000).round(-2)
    df = pd.DataFrame(
        {
            "gender": np.where(female, "Female", "Male"),
            "age": age.astype(str),
            "region": region,
            "fulltime": np.where(fulltime, "yes", "no"),
            "income": income.astype(int).astype(str),
        }
    )
    p_missing = 0.25 + 0.15 * female + 0.15 * ~fulltime + 0.1 * (region == "west")
    df.loc[rng.random(rows) < p_missing, "income"] = ""
    df.loc[rng.random(rows) < 0.02, "gender"] = ""
    df.loc[rng.random(rows) < 0.03, "fulltime"] = ""
    return df


def survey_spec(
    folder: Path,
    *,
    income: str = "keep",
    tolerance: float = 3000.0,
    rows: int = 20000,
    seed: int = 30,
    keep_everywhere: bool = False,
) -> Path:
    """Write the table and a spec over it into ``folder``; ``income`` is the income column's
    missing rule (the other columns with empty cells keep theirs; with ``keep_everywhere``,
    ``missing: keep`` is also the top-level default, so complete columns are nullable too).
    Returns the spec's path."""
    df = survey_frame(rows, seed)
    df.to_csv(folder / "survey.csv", index=False)
    keep = "keep"
    requirement = (
        f'  - mean(income | gender == "Female") within {tolerance:g}\n' if income == "keep" else ""
    )
    text = f"""dpql: 1
name: survey
data:
  path: survey.csv
  rows: {rows}
schema:
  gender:   {{type: categorical, values: [Female, Male], missing: {keep}}}
  age:      {{type: numeric, min: 18, max: 80, integer: true, bins: 8}}
  region:   {{type: categorical, values: [north, south, east, west]}}
  fulltime: {{type: categorical, values: ["yes", "no"], missing: {keep}}}
  income:   {{type: numeric, min: 0, max: 150000, bins: 10, missing: {income}}}
privacy:
  epsilon: 1.0
  delta: 1e-9
workload:
  - marginals(3)
requirements:
{requirement or '  []'}
synthesizer:
  method: rap
  rows: {rows}
  options: {{rounds: 4, iterations: 200, warm_iterations: 100, relaxed_rows: 500}}
postprocess:
  method: iproj
output:
  path: out/survey_synthetic.csv
  provenance: out/survey_synthetic.provenance.json
"""
    if not requirement:
        text = text.replace("requirements:\n  []\n", "").replace(
            "postprocess:\n  method: iproj\n", ""
        )
    if keep_everywhere:
        text = text.replace("\nschema:", "\nmissing: keep\nschema:", 1)
    spec = folder / "survey.release.yaml"
    spec.write_text(text)
    return spec
