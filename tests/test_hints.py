"""Hints that fit their context."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpql
from dpql.domain import CategoricalColumn, Domain
from dpql.ir.queries import CatIn, Count
from dpql.postprocess.iproj import _support_warnings

ROOT = Path(__file__).resolve().parents[1]
ADULT = ROOT / "examples" / "adult"


def _spec(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    text = (ADULT / "adult.release.yaml").read_text()
    text = text.replace("path: adult_train.csv.gz", f"path: {ADULT / 'adult_train.csv.gz'}")
    spec = tmp_path / "s.release.yaml"
    spec.write_text(edit(text))
    return spec


def _warnings(spec: Path, code: str) -> list:  # type: ignore[type-arg]
    plan = dpql.build_plan(dpql.load_spec(spec))
    return [d for d in plan.warnings if d.code == code]


def test_unreachable_correlation_tolerance_is_not_loosened_past_its_range(
    tmp_path: Path,
) -> None:
    def edit(text: str) -> str:
        text = text.replace("epsilon: 1.0", "epsilon: 0.0001")
        return text

    ws = [d for d in _warnings(_spec(tmp_path, edit), "W506") if "corr" in d.message]
    assert ws, "expected W506 for the correlation"
    hint = ws[0].hint or ""
    assert "loosen the tolerance" not in hint and "no tolerance can be met" in hint, hint
    assert "range of width 2" in hint


def test_sparse_marginal_of_categorical_columns_does_not_suggest_bins(tmp_path: Path) -> None:
    def edit(text: str) -> str:
        text = text.replace("rows: 32561                ", "rows: 100                  ")
        return text.replace("- marginals(3)", "- marginal(education, native_country)")

    ws = _warnings(_spec(tmp_path, edit), "W302")
    assert ws and "bins" not in (ws[0].hint or ""), ws
    assert "native_country" in (ws[0].hint or "")


def test_sparse_marginal_with_numeric_column_names_it(tmp_path: Path) -> None:
    def edit(text: str) -> str:
        text = text.replace("rows: 32561                ", "rows: 100                  ")
        return text.replace("- marginals(3)", "- marginal(education, fnlwgt)")

    ws = _warnings(_spec(tmp_path, edit), "W302")
    assert ws and "bins" in (ws[0].hint or "") and "'fnlwgt'" in (ws[0].hint or "")
    assert "'education'" not in (ws[0].hint or "")


def test_w502_names_the_measure_in_the_language() -> None:
    cat = CategoricalColumn("savings", ("A61", "A62", "A63"))
    d = Domain((cat,))
    qs = [Count(CatIn("savings", frozenset({2}))), Count(CatIn("savings", frozenset({0})))]
    F = np.c_[np.zeros(5), np.arange(5.0)]  # the first measure is constant
    (w,) = [x for x in _support_warnings(F, qs, d) if x.code == "W502"]
    assert 'count(savings == "A63")' in w.message and "CatIn" not in w.message


@pytest.mark.parametrize("rows", [40])
def test_w601_names_ignored_columns_on_the_terminal_only(tmp_path: Path, rows: int) -> None:
    df = pd.DataFrame({"a": ["x", "y"] * (rows // 2), "secret_extra": ["1"] * rows})
    df.to_csv(tmp_path / "d.csv", index=False)
    spec = tmp_path / "s.release.yaml"
    spec.write_text(
        f"""dpql: 1
name: t
data: {{path: d.csv, rows: {rows}}}
schema:
  a: {{type: categorical, values: [x, y]}}
privacy: {{epsilon: 1.0, delta: 1e-6}}
workload:
  - marginals(1)
synthesizer: {{method: rap, rows: {rows}, options: {{rounds: 1, iterations: 5,
  warm_iterations: 5, relaxed_rows: 20}}}}
output: {{path: out/t.csv, provenance: out/t.provenance.json}}
"""
    )
    notes: list[str] = []
    from dpql.pipeline import compile_release

    release = compile_release(str(spec), seed=0, notify=notes.append)
    assert any("W601" in n and "'secret_extra'" in n for n in notes), notes
    record = Path(release.record_path).read_text()
    assert "secret_extra" not in record
    assert "secret_extra" not in Path(release.table_path).read_text()
