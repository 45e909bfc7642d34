"""Diagnostics about the private table never show its data (issue 14, item 2), and the docs
never tell the custodian to derive the public n from it (item 3).

Data errors name the file, the row and the column: never a cell's value, never a line of the
data file (which holds columns outside the schema too), never a "did you mean" computed from a
data value, and their hints point to the data-independent rules (``other``, ``drop``,
``fill``), never to declaring a value seen in the data. ``dpql compile --show-values`` shows
the offending cell (not the line) on the curator's own terminal.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dpql.cli import main
from dpql.data import engines
from dpql.data.engines import DuckDBEngine, open_engine
from dpql.data.load import load_table
from dpql.diagnostics import DiagnosticError, render_all
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
    spark = pytest.param("spark", marks=pytest.mark.skipif(why is not None, reason=str(why)))
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


def hint_of(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if line.strip().startswith("= hint"))


@pytest.mark.parametrize("engine", _engines())
def test_undeclared_category_names_file_row_and_column_not_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    spec = write_release(tmp_path, engine=engine, country=CAT_MARK)
    out, err = compile_err(spec, capsys)
    assert SECRET not in err and SECRET not in out  # neither the cell nor the line
    assert f"{tmp_path / 'data.csv'}:{BAD_ROW + 1}:" in err and "error[E405]" in err
    assert f"row {BAD_ROW}" in err and "'country'" in err
    hint = hint_of(err)
    assert "schema.country.other" in hint and "did you mean" not in err
    # never "declare the value": the old hint sent a private value into the published spec
    assert "declare" not in hint and "under schema.country.values" not in hint
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("engine", _engines())
def test_unparsable_number_names_file_row_and_column_not_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    spec = write_release(tmp_path, engine=engine, age=NUM_MARK)
    out, err = compile_err(spec, capsys)
    assert SECRET not in err and SECRET not in out
    assert f"data.csv:{BAD_ROW + 1}:" in err and "error[E406]" in err
    assert f"row {BAD_ROW}" in err and "'age'" in err
    hint = hint_of(err)
    assert "drop" in hint and "fill" in hint and "declare" not in hint


@pytest.mark.parametrize("engine", _engines())
def test_missing_value_hint_points_to_the_data_independent_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    spec = write_release(tmp_path, engine=engine, country="")
    out, err = compile_err(spec, capsys)
    assert SECRET not in err and SECRET not in out
    assert f"data.csv:{BAD_ROW + 1}:" in err and "error[E407]" in err
    assert f"row {BAD_ROW}" in err and "'country'" in err
    hint = hint_of(err)
    assert all(rule in hint for rule in ("drop", "fill", "other"))
    assert "data.rows stays the public count" in hint and "declare" not in hint


@pytest.mark.parametrize("engine", ["memory", "duckdb"])
def test_engines_raise_value_free_messages_and_keep_values_curator_only(
    tmp_path: Path, engine: str
) -> None:
    write_release(tmp_path, age=NUM_MARK, country=CAT_MARK)
    domain = load_spec(tmp_path / "release.yaml").domain
    with pytest.raises(DiagnosticError) as err:
        open_engine(tmp_path / "data.csv", domain, engine=engine)  # type: ignore[arg-type]
    assert err.value.codes == ["E406", "E405"]
    assert SECRET not in str(err.value) and SECRET not in repr(err.value)
    for d in err.value.diagnostics:
        assert d.private and SECRET not in d.message and SECRET not in (d.hint or "")
        assert d.pos is not None and d.pos.line == BAD_ROW + 1
    assert SECRET not in render_all(err.value.diagnostics)
    shown = render_all(err.value.diagnostics, show_values=True)
    assert NUM_MARK in shown and CAT_MARK in shown and OUT_MARK not in shown


def test_show_values_shows_the_cell_but_never_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_release(tmp_path, country=CAT_MARK)
    _, err = compile_err(spec, capsys, "--show-values")
    assert CAT_MARK in err and f"row {BAD_ROW}" in err
    assert OUT_MARK not in err  # the data line (with a column outside the schema) never
    assert "declare" not in hint_of(err) and "did you mean" not in err


def test_json_diagnostics_carry_values_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_release(tmp_path, age=NUM_MARK)
    out, _ = compile_err(spec, capsys, "--format", "json")
    (d,) = json.loads(out)["diagnostics"]
    assert d["code"] == "E406" and d["line"] == BAD_ROW + 1 and "values" not in d
    assert SECRET not in out
    out, _ = compile_err(spec, capsys, "--format", "json", "--show-values")
    (d,) = json.loads(out)["diagnostics"]
    assert NUM_MARK in d["values"] and NUM_MARK not in d["message"] and OUT_MARK not in out


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


def test_ragged_row_is_located_but_never_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_release(tmp_path)
    data = tmp_path / "data.csv"
    lines = data.read_text().splitlines()
    lines[BAD_ROW] += ",extra"
    data.write_text("\n".join(lines) + "\n")
    for engine in ("memory", "duckdb"):
        spec.write_text(spec.read_text().replace("engine: memory", f"engine: {engine}"))
        for extra in ((), ("--show-values",)):
            _, err = compile_err(spec, capsys, *extra)
            assert f"data.csv:{BAD_ROW + 1}:" in err and "error[E409]" in err, engine
            assert SECRET not in err, engine


def test_decode_errors_do_not_quote_the_file(tmp_path: Path) -> None:
    domain = Domain(
        (NumericColumn("x", 0.0, 9.0, True, (0.0, 10.0)), CategoricalColumn("c", ("a",)))
    )
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes("x,c\n1,\xe9\n".encode("latin-1"))
    not_gzip = tmp_path / "fake.csv.gz"
    not_gzip.write_bytes(b"Zq,x\n1,a\n")
    for path, quoted in ((latin1, "0xe9"), (not_gzip, "b'Zq'")):
        with pytest.raises(DiagnosticError) as err:
            load_table(path, domain)
        (d,) = err.value.diagnostics
        assert d.code == "E409" and d.private and quoted not in d.message
        assert d.values is not None and quoted in d.values  # for --show-values only
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
