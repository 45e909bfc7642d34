"""`dpql init`: a draft spec from a data file's header, never a cell value; its TODOs are located
errors (E030); filled in, it plans and compiles; an existing file is never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpql.cli import main
from dpql.diagnostics import DiagnosticError
from dpql.plan.planner import build_plan
from dpql.spec.load import load_spec


def _people(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame(
        {
            "person_id": [f"id-{rng.integers(10**9, 10**10)}-{i}" for i in range(n)],
            "age": rng.integers(18, 90, n),
            "pet": rng.choice(["zebra", "yak"], n),
            "income": rng.normal(51234.5, 999.0, n).round(3),
        }
    )


@pytest.fixture()
def people_csv(tmp_path: Path) -> Path:
    path = tmp_path / "people.csv"
    _people().to_csv(path, index=False)
    return path


def _cells(df: pd.DataFrame) -> set[str]:
    return {str(v) for col in df.columns for v in df[col]}


def test_draft_names_every_column_and_no_cell_value(people_csv: Path, capsys) -> None:
    assert main(["init", str(people_csv)]) == 0
    draft = (people_csv.parent / "people.release.yaml").read_text(encoding="utf-8")
    df = pd.read_csv(people_csv)
    for name in df.columns:
        assert f'"{name}":' in draft
    leaked = {c for c in _cells(df) if c in draft}
    assert leaked == set()
    assert "no cell of the data was read" in capsys.readouterr().out


def test_the_drafts_todos_are_located_errors(people_csv: Path) -> None:
    spec = people_csv.parent / "people.release.yaml"
    assert main(["init", str(people_csv), "--output", str(spec)]) == 0
    lines = spec.read_text(encoding="utf-8").splitlines()
    with pytest.raises(DiagnosticError) as err:
        load_spec(spec)
    found = err.value.diagnostics
    assert {d.code for d in found} == {"E030"}
    todo_lines = {i + 1 for i, line in enumerate(lines) if "TODO" in line.partition("#")[0]}
    assert {d.pos.line for d in found} == todo_lines  # one per line that has a blank
    for d in found:
        assert lines[d.pos.line - 1][d.pos.col - 1 :].startswith("TODO")
        assert d.hint


def test_an_existing_file_is_never_overwritten(people_csv: Path, capsys) -> None:
    spec = people_csv.parent / "mine.release.yaml"
    spec.write_text("mine\n", encoding="utf-8")
    assert main(["init", str(people_csv), "--output", str(spec)]) == 1
    assert "E031" in capsys.readouterr().err
    assert spec.read_text(encoding="utf-8") == "mine\n"


@pytest.mark.e2e
def test_parquet_gives_storage_types_and_filled_in_it_compiles(tmp_path: Path, capsys) -> None:
    data = tmp_path / "people.parquet"
    df = _people().drop(columns=["person_id"])
    df.to_parquet(data, index=False)
    spec = tmp_path / "people.release.yaml"
    assert main(["init", str(data), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["columns"] == ["age", "pet", "income"] and doc["todos"] == 7
    text = spec.read_text(encoding="utf-8")
    assert '"age": {type: numeric, min: TODO, max: TODO, integer: true}  # int64' in text
    assert '"pet": {type: categorical, values: [TODO]}' in text
    values = "\n".join(line.partition("#")[0] for line in text.splitlines())  # no comments
    assert {c for c in _cells(df) if c in values} == set()
    filled = (
        text.replace("rows: TODO", "rows: 300")
        .replace("min: TODO, max: TODO, integer", "min: 0, max: 120, integer")
        .replace("min: TODO, max: TODO}", "min: 0, max: 200000}")
        .replace("values: [TODO]", "values: [zebra, yak]")
    )
    assert "TODO" not in "".join(line.partition("#")[0] for line in filled.splitlines())
    spec.write_text(filled, encoding="utf-8")
    build_plan(load_spec(spec))
    assert main(["compile", str(spec), "--seed", "0", "--quiet"]) == 0
    out = pd.read_csv(tmp_path / "out" / "people_synthetic.csv")
    assert list(out.columns) == ["age", "pet", "income"] and len(out) == 300


@pytest.mark.parametrize("kind", ["yaml", "csv"])
def test_a_codebook_fills_types_bounds_and_categories(people_csv: Path, kind: str) -> None:
    book = people_csv.parent / f"codebook.{kind}"
    if kind == "yaml":
        book.write_text(
            "rows: 300\ncolumns:\n  age: {type: numeric, min: 0, max: 120, integer: true}\n"
            "  pet: {type: categorical, values: [zebra, yak]}\n"
            "  income: {type: numeric, min: 0, max: 200000}\n",
            encoding="utf-8",
        )
    else:
        book.write_text(
            "column,type,min,max,integer,values\nage,numeric,0,120,true,\n"
            "pet,categorical,,,,zebra|yak\nincome,numeric,0,200000,,\n",
            encoding="utf-8",
        )
    spec = people_csv.parent / "people.release.yaml"
    assert main(["init", str(people_csv), "--codebook", str(book)]) == 0
    text = spec.read_text(encoding="utf-8")
    assert '"pet": {"type": "categorical", "values": ["zebra", "yak"]}' in text
    # the identifier is left for the curator to drop or describe
    with pytest.raises(DiagnosticError) as err:
        load_spec(spec)
    left = [d.message.split(" ")[0] for d in err.value.diagnostics]
    rows = [] if kind == "yaml" else ["data.rows", "synthesizer.rows"]  # a CSV book has no rows
    assert left == [*rows[:1], "schema.person_id:", *rows[1:]]
    text = text.replace("rows: TODO", "rows: 300")
    lines = [ln for ln in text.splitlines() if '"person_id"' not in ln]
    spec.write_text("\n".join(lines) + "\n", encoding="utf-8")
    build_plan(load_spec(spec))


def test_a_codebook_column_not_in_the_header_is_refused(people_csv: Path, capsys) -> None:
    book = people_csv.parent / "codebook.yaml"
    book.write_text("columns:\n  shoe_size: {type: numeric, min: 1, max: 60}\n", encoding="utf-8")
    assert main(["init", str(people_csv), "--codebook", str(book)]) == 1
    assert "E032" in capsys.readouterr().err
    assert not (people_csv.parent / "people.release.yaml").exists()


def test_a_quoted_todo_is_a_value(people_csv: Path) -> None:
    spec = people_csv.parent / "people.release.yaml"
    assert main(["init", str(people_csv), "--codebook", str(_book(people_csv))]) == 0
    text = spec.read_text(encoding="utf-8").replace('"yak"]', '"TODO"]')
    lines = [ln for ln in text.splitlines() if '"person_id"' not in ln]
    spec.write_text("\n".join(lines).replace("rows: TODO", "rows: 300") + "\n", encoding="utf-8")
    assert load_spec(spec).domain["pet"].values == ("zebra", "TODO")


def _book(people_csv: Path) -> Path:
    book = people_csv.parent / "codebook.yaml"
    book.write_text(
        "columns:\n  age: {type: numeric, min: 0, max: 120, integer: true}\n"
        "  pet: {type: categorical, values: [zebra, yak]}\n"
        "  income: {type: numeric, min: 0, max: 200000}\n",
        encoding="utf-8",
    )
    return book
