"""Reading data files (dpql.data.load): formats, fingerprints, file-level errors, and records
that are never errors (malformed ones become rows of empty cells)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from adult_domain import adult_domain, adult_rows

from dpql.data.codec import Fill
from dpql.data.load import load_public_table, load_table, read_csv_text, rules_from_spec
from dpql.diagnostics import DiagnosticError
from dpql.domain import CategoricalColumn, Domain, NumericColumn

DOMAIN = Domain(
    (
        NumericColumn("x", 0.0, 10.0, True, (0.0, 5.0, 11.0)),
        CategoricalColumn("c", ("a", "b")),
    )
)
CSV = "x,c\n1,a\n7, b\n10,a\n"
ADULT_TRAIN = Path(__file__).resolve().parents[1] / "examples" / "adult" / "adult_train.csv.gz"


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def codes(path: Path, **kw: object) -> tuple[list[int], list[int]]:
    t = load_table(path, DOMAIN, **kw).table  # type: ignore[arg-type]
    return t.codes["x"].tolist(), t.codes["c"].tolist()


def test_csv_gzip_and_parquet_give_the_same_table(tmp_path: Path) -> None:
    plain = write(tmp_path, "d.csv", CSV)
    zipped = write(tmp_path, "d.csv.gz", gzip.compress(CSV.encode()))
    parquet = tmp_path / "d.parquet"
    pd.DataFrame({"x": [1, 7, 10], "c": ["a", "b", "a"]}).to_parquet(parquet)
    expected = ([0, 1, 1], [0, 1, 0])
    assert codes(plain) == codes(zipped) == codes(parquet) == expected
    assert codes(write(tmp_path, "d.data", CSV), fmt="csv") == expected
    log = load_table(plain, DOMAIN).curator_log
    assert log.sha256 == hashlib.sha256(CSV.encode()).hexdigest()
    assert log.rows_read == 3 and log.source == str(plain)


def test_csv_cells_are_never_type_guessed(tmp_path: Path) -> None:
    dom = Domain((CategoricalColumn("c", ("NA", "null", "007")),))
    t = load_table(write(tmp_path, "d.csv", "c\nNA\nnull\n007\n"), dom).table
    assert t.codes["c"].tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("name", "content", "code"),
    [
        ("empty.csv", "", "E403"),
        ("header.csv", "x,c\n", "E403"),
        ("latin1.csv", "x,\xe9\n1,a\n".encode("latin-1"), "E409"),  # the header
        ("bad.csv.gz", b"not gzip at all", "E409"),
        ("bad.parquet", b"PAR1 nonsense", "E409"),
        ("d.xlsx", CSV, "E402"),
    ],
)
def test_file_level_errors(tmp_path: Path, name: str, content: str | bytes, code: str) -> None:
    with pytest.raises(DiagnosticError) as err:
        load_table(write(tmp_path, name, content), DOMAIN)
    assert err.value.codes == [code]
    assert err.value.diagnostics[0].pos is not None
    assert err.value.diagnostics[0].pos.file.endswith(name)


def test_a_malformed_record_is_a_row_of_empty_cells(tmp_path: Path) -> None:
    body = b'x,c\n1,a\n\n2,b,zzz\n3\n4,\xe9\n5,"a,b"\n6,b\n'
    text = read_csv_text(write(tmp_path, "r.csv", body))
    assert text.malformed.tolist() == [2, 3, 4]  # data rows; the blank line is no record
    assert text.frame.iloc[1:4].isna().all().all() and len(text.frame) == 6
    r = load_table(tmp_path / "r.csv", DOMAIN, missing={"x": Fill(0.0), "c": Fill("a")})
    assert r.table.n == 6 and r.curator_log.malformed_rows == 3
    assert r.curator_log.undeclared == {"c": 1}  # "a,b" is one (undeclared) cell


def test_unreadable_paths(tmp_path: Path) -> None:
    for path in (tmp_path / "absent.csv", tmp_path):
        with pytest.raises(DiagnosticError) as err:
            load_table(path, DOMAIN, fmt="csv")
        assert err.value.codes == ["E401"]


def test_no_cell_is_an_error_and_no_rows_left_is_a_table(tmp_path: Path) -> None:
    path = write(tmp_path, "d.csv", "x,c\n1,a\n2,z\n")
    assert load_table(path, DOMAIN).table.n == 1  # z: missing; no rule, not nullable: drop
    path = write(tmp_path, "d.csv", "x,c\n,a\n,b\n")
    assert load_table(path, DOMAIN, missing={"x": "drop"}).table.n == 0


def test_rules_from_spec() -> None:
    cat = SimpleNamespace(missing="other", other="b", fill=None)
    num = SimpleNamespace(missing="fill", fill=2.0)
    plain = SimpleNamespace(missing=None, fill=None)
    spec = SimpleNamespace(missing="drop", columns={"c": cat, "x": num, "y": plain})
    missing, other = rules_from_spec(spec)  # type: ignore[arg-type]
    assert missing == {"c": Fill("b"), "x": Fill(2.0), "y": "drop"}
    assert other == {"c": "b"}


def test_adult_train_loads_without_problems() -> None:
    r = load_table(ADULT_TRAIN, adult_domain())
    assert r.table.n == adult_rows() == r.curator_log.rows_kept
    assert not (r.curator_log.missing or r.curator_log.undeclared or r.curator_log.clipped_low)
    assert np.all(r.table.scaled["age"] <= 1.0)


def test_a_public_table_is_read_strictly(tmp_path: Path) -> None:
    """An external synthetic table is public: a cell outside the schema is an error (E412)
    that names the row, the column and the value."""
    ok = write(tmp_path, "ok.csv", "x,c\n1,a\n7,b\n")
    assert load_public_table(ok, DOMAIN).table.n == 2
    for body, said in [
        ("x,c\n1,a\n7,zz\n", "'c' row 2 holds 'zz'"),
        ("x,c\n1,a\nabc,b\n", "'x' row 2 holds 'abc'"),
        ("x,c\n1,a\n,b\n", "'x' row 2 is empty"),
        ("x,c\n1,a\n70,b\n", "'x' row 2 is above"),
        ("x,c\n1,a\n7,b,3\n", "row 2 is malformed"),
    ]:
        with pytest.raises(DiagnosticError) as err:
            load_public_table(write(tmp_path, "bad.csv", body), DOMAIN)
        assert set(err.value.codes) == {"E412"}, body
        assert said in err.value.diagnostics[0].message, body


def test_a_public_tables_declared_missing_value_is_missing(tmp_path: Path) -> None:
    """A declared missing value in an external table is a missing cell: an error (E412) in a
    column without missing: keep, the null state in one with it."""
    x, c = DOMAIN
    strict = Domain((dataclasses.replace(x, missing_values=(-9.0,)), c))
    path = write(tmp_path, "ext.csv", "x,c\n1,a\n-9,b\n")
    with pytest.raises(DiagnosticError) as err:
        load_public_table(path, strict)
    assert "'x' row 2 holds a declared missing value" in err.value.diagnostics[0].message
    kept = Domain((dataclasses.replace(x, missing_values=(-9.0,), nullable=True), c))
    codes = load_public_table(path, kept, missing={"x": "keep"}).table.codes["x"]
    assert codes.tolist()[1] == kept["x"].null_code
