"""Diagnostics about the private table never show its data, and the docs never tell the
custodian to derive the public n from it.

No cell is an error any more (design invariant 6, tests/test_record_independence.py): an odd
cell follows its column's rule and ``dpql compile`` says nothing about it. What is left are
errors about the file (a column absent, a file that cannot be decoded), which never quote a
line of the data file (it holds columns outside the schema too) nor a "did you mean" computed
from a data column name; ``--show-values`` shows the reader's own words on the curator's own
terminal. ``dpql validate`` shows the offending cell (not the line), only with
``--show-values``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dpql.cli import main
from dpql.data import engines
from dpql.data.engines import DuckDBEngine, open_engine
from dpql.data.load import load_table
from dpql.diagnostics import DiagnosticError
from dpql.domain import CategoricalColumn, Domain, NumericColumn
from dpql.spec import load_spec

SECRET = "Zq9Secret"  # every marker starts with it: no output may contain it
CAT_MARK = SECRET + "Country"  # an undeclared category
NUM_MARK = SECRET + "Age"  # an unparsable number
OUT_MARK = SECRET + "Note"  # a cell of a column outside the schema, on every row
BAD_ROW = 7  # data row of the bad cell: line 8 of the CSV (after the header)

SPEC = """\
dpql: 1
name: private-diagnostics
data:
  path: data.csv
  rows: 30
  engine: {engine}
schema:
  age: {{type: numeric, min: 17, max: 90, integer: true, bins: 4}}
  country: {{type: categorical, values: [France, Peru]{country_rules}}}
privacy: {{epsilon: 1.0, delta: 1e-9}}
workload:
  - marginals(2)
synthesizer:
  method: rap
  rows: 30
  options: {{rounds: 1, relaxed_rows: 10, iterations: 5}}
output:
  path: out/synthetic.csv
  provenance: out/synthetic.provenance.json
"""


def _engines() -> list[object]:
    why = engines.spark_unavailable()
    unavailable = pytest.mark.skipif(why is not None, reason=str(why))
    spark = pytest.param("spark", marks=[unavailable, pytest.mark.slow])  # starts a JVM
    return ["memory", "duckdb", spark]


def write_release(
    tmp_path: Path,
    *,
    engine: str = "memory",
    age: str = "40",
    country: str = "Peru",
    country_rules: str = "",
) -> Path:
    """A 30-row CSV whose row BAD_ROW has the given age and country cells, and a column
    outside the schema holding OUT_MARK on every row; the spec beside it."""
    lines = ["age,country,note"]
    for row in range(1, 31):
        cells = (age, country) if row == BAD_ROW else (str(20 + row), "France")
        lines.append(f"{cells[0]},{cells[1]},{OUT_MARK}{row}")
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = tmp_path / "release.yaml"
    spec.write_text(SPEC.format(engine=engine, country_rules=country_rules), encoding="utf-8")
    return spec


def compile_err(spec: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, str]:
    """Run ``dpql compile`` expecting an input error; its (stdout, stderr)."""
    assert main(["compile", str(spec), "--quiet", *extra]) == 1
    captured = capsys.readouterr()
    return captured.out, captured.err


@pytest.mark.parametrize("engine", _engines())
def test_odd_cells_are_encoded_without_a_word_and_counted_for_the_curator(
    tmp_path: Path, engine: str
) -> None:
    write_release(tmp_path, age=NUM_MARK, country=CAT_MARK)
    domain = load_spec(tmp_path / "release.yaml").domain
    eng = open_engine(tmp_path / "data.csv", domain, engine=engine)  # type: ignore[arg-type]
    try:
        log = eng.curator_log
        assert log.undeclared == {"age": 1, "country": 1} and log.rows_read == 30
        assert SECRET not in repr(log)
    finally:
        eng.close()


def test_validate_shows_the_cell_but_never_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_release(tmp_path, country=CAT_MARK, age=NUM_MARK)
    assert main(["validate", str(spec)]) == 1
    out = capsys.readouterr().out
    assert SECRET not in out and f"rows {BAD_ROW}" in out
    assert main(["validate", str(spec), "--show-values"]) == 1
    out = capsys.readouterr().out
    assert CAT_MARK in out and NUM_MARK in out
    assert OUT_MARK not in out  # the data line (with a column outside the schema) never
    assert "did you mean" not in out


def test_missing_column_does_not_name_the_data_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_release(tmp_path)
    data = tmp_path / "data.csv"
    # the declared column 'country' is spelt differently in the data: a column outside the
    # schema, whose name a did-you-mean would print
    data.write_text(data.read_text().replace("age,country,", f"age,{SECRET}country,", 1))
    _, err = compile_err(spec, capsys)
    assert "error[E404]" in err and "'country'" in err and SECRET not in err
    _, err = compile_err(spec, capsys, "--show-values")
    assert f"{SECRET}country" in err and OUT_MARK not in err


def test_decode_errors_do_not_quote_the_file(tmp_path: Path) -> None:
    domain = Domain(
        (NumericColumn("x", 0.0, 9.0, True, (0.0, 10.0)), CategoricalColumn("c", ("a",)))
    )
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes("x,\xe9Zq\n1,a\n".encode("latin-1"))  # the header is not UTF-8
    not_gzip = tmp_path / "fake.csv.gz"
    not_gzip.write_bytes(b"Zq,x\n1,a\n")
    corrupt = tmp_path / "corrupt.csv.gz"
    corrupt.write_bytes(gzip.compress(b"x,c\n" + b"1,Zq\n" * 1000)[:-30])
    for path in (latin1, not_gzip, corrupt):
        with pytest.raises(DiagnosticError) as err:
            load_table(path, domain)
        (d,) = err.value.diagnostics
        assert (
            d.code == "E409" and d.private and "Zq" not in d.message and "Zq" not in (d.hint or "")
        )
    gz = tmp_path / "ok.csv.gz"
    gz.write_bytes(gzip.compress(b"x,c\n1,a\n"))
    assert load_table(gz, domain).table.n == 1


def test_engine_messages_are_curator_only(tmp_path: Path) -> None:
    """DuckDB's and Spark's own messages can quote cells: only the error's class is shown."""
    import duckdb

    path = tmp_path / "t.parquet"
    for exc, code in (
        (duckdb.ConversionException(f"Could not convert string '{SECRET}' to INT64"), "E409"),
        (duckdb.OutOfMemoryException(f"out of memory near '{SECRET}'"), "E410"),
    ):

        def step(exc: Exception = exc) -> None:
            raise exc

        with pytest.raises(DiagnosticError) as err:
            DuckDBEngine._guard(None, path, "parquet", step)  # type: ignore[arg-type]
        (d,) = err.value.diagnostics
        assert d.code == code and type(exc).__name__ in d.message and SECRET not in d.message
        assert d.values is not None and SECRET in d.values
    text = f"[MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION] Malformed record: [{SECRET}, 1]"
    assert engines.spark._spark_kind(RuntimeError(text), text) == (
        "MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION"
    )
    assert engines.spark._spark_kind(RuntimeError(SECRET), SECRET) == "RuntimeError"


def test_spec_errors_keep_their_did_you_mean(tmp_path: Path) -> None:
    """Spec text is public: its suggestions stay (only suggestions from data went)."""
    spec = write_release(tmp_path)
    text = spec.read_text().replace("Peru]}", "Peru], fil: France}")
    spec.write_text(text)
    with pytest.raises(DiagnosticError) as err:
        load_spec(spec)
    d = err.value.diagnostics[0]
    assert d.code == "E010" and d.hint is not None and "did you mean 'fill'" in d.hint
    assert not d.private


def test_the_public_row_count_is_never_derived_from_the_data() -> None:
    """Item 3: the docs of ``rows`` and of ``missing: drop`` say n is public and fixed."""
    import dpql.spec.models as models

    rows = models.DataSpec.model_fields["rows"].description or ""
    assert "never computed from the data" in rows
    doc = " ".join((models.__doc__ or "").split())
    assert "should set it to the count after dropping" not in doc
    assert "must never depend on the data" in doc and "DP count" in doc
