"""`missing: keep`: missingness as a public null state of a column."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpql
from dpql.data.codec import decode, encode_frame
from dpql.diagnostics import DiagnosticError
from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges
from dpql.ir.queries import Count, TruePred
from dpql.plan.describe import describe_query
from dpql.spec.load import build_domain

ROOT = Path(__file__).resolve().parents[1]
ADULT = ROOT / "examples" / "adult"
BLANK = {"hours_per_week": 0.10, "occupation": 0.30}


def _nullable_domain() -> Domain:
    return Domain(
        (
            NumericColumn("a", 0, 10, True, numeric_edges(0, 10, True, 5), nullable=True),
            CategoricalColumn("b", ("x", "y"), nullable=True),
        )
    )


def test_null_code_is_the_last_and_data_independent() -> None:
    d = _nullable_domain()
    assert (d["a"].card, d["a"].null_code, d["b"].card, d["b"].null_code) == (6, 5, 3, 2)
    # the null state exists whether or not the data has missing cells
    full = encode_frame(pd.DataFrame({"a": ["1", "7"], "b": ["x", "y"]}), d, {"a": "keep"})
    assert full.table.domain.cells(("a", "b")) == 18


def test_keep_round_trips_missing_cells_as_empty() -> None:
    d = _nullable_domain()
    df = pd.DataFrame({"a": ["1", "", "7"], "b": ["x", "y", " "]})
    t = encode_frame(df, d, {"a": "keep", "b": "keep"}).table
    assert t.codes["a"].tolist() == [0, 5, 3] and t.codes["b"].tolist() == [0, 1, 2]
    assert t.scaled["a"].tolist() == [0.1, 0.0, 0.7]  # NULL_SCALED: 0 in every moment
    out = decode(t).to_csv(index=False)
    assert out.splitlines() == ["a,b", "1,x", ",y", "7,"]


def _spec_with_blanks(tmp_path: Path, epsilon: float = 1.0) -> Path:
    rng = np.random.default_rng(18)
    with gzip.open(ADULT / "adult_train.csv.gz", "rt") as f:
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
    for col, share in BLANK.items():
        df.loc[rng.random(len(df)) < share, col] = ""
    df.to_csv(tmp_path / "adult_blank.csv", index=False)
    text = (ADULT / "adult.release.yaml").read_text()
    text = text.replace("path: adult_train.csv.gz", "path: adult_blank.csv")
    text = re.sub(r"epsilon: 1\.0", f"epsilon: {epsilon}", text)
    for col in BLANK:
        text = re.sub(rf"(\n  {col}:\s*\{{)(.*)\}}", r"\1\2, missing: keep}", text)
    # the other columns fill (keep is the default; fill leaves them out of the null state and,
    # unlike drop, lets requirements over them be estimated)
    model = dpql.load_spec(ADULT / "adult.release.yaml").model
    for name, col in model.columns.items():
        if name not in BLANK:
            fill = col.min if col.type == "numeric" else f'"{col.values[0]}"'  # type: ignore[union-attr]
            text = re.sub(
                rf"(\n  {name}:\s*\{{)(.*)\}}", rf"\1\2, missing: fill, fill: {fill}}}", text
            )
    # requirements over a kept column are refused (see test_requirement_on_kept_column_...)
    req = "\nrequirements:\n  - corr(age, education_num) within 0.05\n"
    text = re.sub(r"\nrequirements:\n(  - .*\n)+", req, text)
    text = text.replace("marginals(3)", "marginals(2)")
    text = text.replace("halfspaces(500)", "halfspaces(50)")
    spec = tmp_path / "adult_blank.release.yaml"
    spec.write_text(text)
    return spec


def test_kept_columns_are_nullable_in_the_domain(tmp_path: Path) -> None:
    loaded = dpql.load_spec(_spec_with_blanks(tmp_path))
    dom = build_domain(loaded.model)
    assert dom["hours_per_week"].nullable and dom["occupation"].nullable
    assert not dom["age"].nullable


@pytest.mark.e2e
def test_release_keeps_the_missingness_rate(tmp_path: Path, seeded_dp_noise: None) -> None:
    spec = _spec_with_blanks(tmp_path)
    release = dpql.compile(str(spec), seed=0)
    real = pd.read_csv(tmp_path / "adult_blank.csv", dtype=str, keep_default_na=False)
    synth = pd.read_csv(release.table_path, dtype=str, keep_default_na=False)
    rates = {}
    for col in BLANK:
        r, s = float((real[col] == "").mean()), float((synth[col] == "").mean())
        rates[col] = (r, s)
        assert abs(r - s) <= 0.02, (col, r, s)
    print("missingness real vs synthetic:", rates)
    assert dpql.verify(release.record_path, synthetic=release.table_path) == []


def test_keep_with_gan_is_refused(tmp_path: Path) -> None:
    spec = _spec_with_blanks(tmp_path)
    spec.write_text(spec.read_text().replace("method: rap ", "method: gan "))
    with pytest.raises(DiagnosticError) as err:
        dpql.build_plan(dpql.load_spec(spec))  # the gan backend's plan refuses it
    assert [d.code for d in err.value.diagnostics if "gan" in d.message] == ["E109", "E109"]


def test_requirement_on_kept_column_is_planned_over_present_rows(tmp_path: Path) -> None:
    """A corr over a kept column is no longer refused: its measures are sums over the rows
    where both columns are present, with their count (a ratio estimator)."""
    spec = _spec_with_blanks(tmp_path)
    spec.write_text(
        spec.read_text().replace(
            "corr(age, education_num) within 0.05", "corr(age, hours_per_week) within 0.05"
        )
    )
    plan = dpql.build_plan(dpql.load_spec(spec))
    assert plan.measures is not None
    text = [describe_query(q, plan.spec.domain) for q in plan.measures.queries]
    assert all("hours_per_week is present" in t for t in text), text
    assert text[-1] == "count(hours_per_week is present)"


def test_drop_estimates_every_requirement_over_the_kept_rows(tmp_path: Path) -> None:
    """Under drop the release describes the complete cases: corr, mean and count are ratios
    to the kept rows' count (count(true)), not refused."""
    spec = _spec_with_blanks(tmp_path)
    text = spec.read_text().replace("missing: keep", "missing: drop")
    req = (
        "requirements:\n  - corr(age, education_num) within 0.05\n"
        '  - mean(age) within 1\n  - mean(age | sex == "Female") within 1\n'
        "  - count(age > 40) within 0.01\n"
    )
    text = re.sub(r"requirements:\n(  - .*\n)+", req, text)
    spec.write_text(text)
    plan = dpql.build_plan(dpql.load_spec(spec))
    assert plan.measures is not None
    kept = plan.measures.queries.index(Count(TruePred()))
    assert all(kept in cells for cells in plan.measures.index)


def test_decode_bins_keeps_the_null_and_codes_a_value_by_its_bin() -> None:
    """The one numeric-bin decoding (rap's and aim's sampled rows): a value inside the drawn
    bin, coded by that bin; a null keeps the null code and NULL_SCALED."""
    col = _nullable_domain()["a"]
    bins = np.array([0, 4, col.null_code, 2])
    codes, scaled = col.decode_bins(bins, np.array([0.0, 0.99, 0.5, 0.5]))
    assert codes.dtype == np.int32
    assert codes.tolist() == [0, 4, col.null_code, 2]
    assert scaled[2] == 0.0  # NULL_SCALED
    x = col.lo + scaled * col.span
    pairs = zip([0, 4, 2], x[[0, 1, 3]], strict=True)
    assert all(col.edges[b] <= v <= col.edges[b + 1] for b, v in pairs)


def test_take_picks_rows_by_index_or_mask() -> None:
    d = _nullable_domain()
    t = encode_frame(pd.DataFrame({"a": ["1", "", "7"], "b": ["x", "y", " "]}), d, {
        "a": "keep", "b": "keep"}).table  # fmt: skip
    again = t.take(np.array([2, 0, 0]))
    assert again.codes["b"].tolist() == [t.codes["b"][2], t.codes["b"][0], t.codes["b"][0]]
    assert again.scaled["a"].tolist() == [t.scaled["a"][2], t.scaled["a"][0], t.scaled["a"][0]]
    assert t.take(np.array([True, False, True])).n == 2
