"""The small Adult release the end-to-end tests compile (one writer instead of a copy per test
module; ``conftest.small_release`` is the fixture form)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "adult"


def write_small_release(folder: Path, rows: int = 3000) -> Path:
    """The Adult example spec on its first ``rows`` rows (``train.csv`` beside it), with a light
    workload (2-way marginals of four columns and one count) and fast RAP options: a release
    that compiles end to end in seconds. Returns the spec's path, ``folder/release.yaml``."""
    folder.mkdir(parents=True, exist_ok=True)
    pd.read_csv(EXAMPLE / "adult_train.csv.gz").head(rows).to_csv(folder / "train.csv", index=False)
    text = (EXAMPLE / "adult.release.yaml").read_text(encoding="utf-8")
    text = text.replace("adult_train.csv.gz", "train.csv").replace("rows: 32561", f"rows: {rows}")
    text = re.sub(
        r"workload:\n(  - .*\n)+",
        "workload:\n  - marginals(2) over [age, sex, income, race]\n"
        "  - count(age >= 65 and hours_per_week > 40)\n",
        text,
    )
    text = text.replace(
        f"  rows: {rows}\n\npostprocess",
        f"  rows: {rows}\n  options: {{rounds: 2, relaxed_rows: 100, iterations: 50}}\n\npostprocess",
    )
    spec = folder / "release.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec
