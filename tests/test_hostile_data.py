"""Hostile data files: every engine gives the same located error for the file, or the same
release for an odd record, never a traceback, a hang or a silently wrong value (a FIFO, a
symlink loop, a duplicate header name, an overflowing number, a short row, a header of 200,000
duplicate names)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from dpql.cli import main

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ["memory", "duckdb"]


def _spec(tmp_path: Path, data: str, engine: str) -> Path:
    text = (ROOT / "examples" / "adult" / "adult.release.yaml").read_text(encoding="utf-8")
    head, _, _ = text.partition("\nworkload:")
    _, _, tail = text.partition("\nsynthesizer:")
    head = head.replace("path: adult_train.csv.gz", f"path: {data}\n  engine: {engine}")
    head = head.replace("rows: 32561", "rows: 300")
    spec = tmp_path / f"{engine}.release.yaml"
    spec.write_text(
        head
        + '\nworkload:\n  - "marginals(2) over [age, sex]"\n'
        + "\nsynthesizer:\n  method: rap\n  rows: 300\n  options: {rounds: 1, iterations: 5, "
        + "warm_iterations: 5, relaxed_rows: 20}\n\noutput:"
        + tail.partition("\noutput:")[2],
        encoding="utf-8",
    )
    return spec


def _rows(tmp_path: Path) -> list[str]:
    df = pd.read_csv(ROOT / "examples" / "adult" / "adult_train.csv.gz").head(300)
    path = tmp_path / "rows.csv"
    df.to_csv(path, index=False)
    return path.read_text(encoding="utf-8").splitlines()


def _compile(spec: Path, capsys) -> tuple[int, str]:
    code = main(["compile", str(spec), "--seed", "0", "--quiet"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    return code, err


@pytest.mark.parametrize("engine", ENGINES)
def test_a_fifo_is_refused_not_read(tmp_path: Path, capsys, engine: str) -> None:
    os.mkfifo(tmp_path / "pipe.csv")
    code, err = _compile(_spec(tmp_path, "pipe.csv", engine), capsys)
    assert code == 1 and "error[E401]" in err and "not a regular file" in err


@pytest.mark.parametrize("engine", ENGINES)
def test_a_symlink_loop_is_a_located_error(tmp_path: Path, capsys, engine: str) -> None:
    (tmp_path / "a.csv").symlink_to(tmp_path / "b.csv")
    (tmp_path / "b.csv").symlink_to(tmp_path / "a.csv")
    code, err = _compile(_spec(tmp_path, "a.csv", engine), capsys)
    assert code == 1 and "error[E401]" in err


@pytest.mark.parametrize("engine", ENGINES)
def test_a_duplicate_header_name_is_one_error_in_every_engine(
    tmp_path: Path, capsys, engine: str
) -> None:
    lines = _rows(tmp_path)
    header = lines[0].split(",")
    header[header.index("capital_loss")] = "age"  # a schema column, named twice
    (tmp_path / "dup.csv").write_text("\n".join([",".join(header), *lines[1:]]), encoding="utf-8")
    code, err = _compile(_spec(tmp_path, "dup.csv", engine), capsys)
    assert code == 1 and "error[E409]" in err and "'age' twice" in err


@pytest.mark.parametrize("engine", ENGINES)
def test_an_overflowing_number_or_a_short_row_is_a_missing_cell(
    tmp_path: Path, capsys, engine: str
) -> None:
    lines = _rows(tmp_path)
    i = lines[0].split(",").index("age")
    cells = lines[5].split(",")
    cells[i] = "1e400"  # a decimal that overflows a double: was clipped to max silently
    lines[5] = ",".join(cells)
    lines[7] = ",".join(lines[7].split(",")[:-3])  # a short row: every cell missing
    (tmp_path / "odd.csv").write_text("\n".join(lines), encoding="utf-8")
    code, err = _compile(_spec(tmp_path, "odd.csv", engine), capsys)
    assert code == 0 and "1e400" not in err and "error[" not in err


def test_a_header_of_200k_duplicate_names_is_refused(tmp_path: Path, capsys) -> None:
    wide = ",".join(["x"] * 200_000)
    (tmp_path / "wide.csv").write_text(wide + "\n" + wide.replace("x", "1") + "\n")
    code, err = _compile(_spec(tmp_path, "wide.csv", "duckdb"), capsys)
    assert code == 1 and "error[E409]" in err and "twice" in err
    assert "'x'" not in err  # not a schema column: its name is not echoed
