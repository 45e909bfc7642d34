"""One cell contract for every engine: a corpus of odd cells and records, read by the in-memory,
DuckDB and (when Java is there) Spark engines, gives the same codes, scaled values and curator
counts, and never an error (design invariant 6: no record decides whether a release happens)."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import numpy as np
import pytest

from dpql.data.codec import Fill
from dpql.data.engines import (
    DuckDBEngine,
    InMemoryEngine,
    SparkEngine,
    local_spark_session,
    spark_unavailable,
)
from dpql.data.load import MAX_LINE_BYTES, read_csv_text
from dpql.diagnostics import DiagnosticError
from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn, numeric_edges

SPARK_SKIP = spark_unavailable()


def _domain(nullable: bool) -> Domain:
    return Domain(
        (
            NumericColumn("age", 0.0, 100.0, True, numeric_edges(0.0, 100.0, True, 4), nullable),
            CategoricalColumn("sex", ("F", "M"), nullable=nullable),
            CategoricalColumn("job", ("a", "b", "Other")),
        )
    )


# One odd record per line after a clean one; the comment says what every engine makes of it.
CORPUS = [
    "39,F,a",  # clean
    " 39 ,\tM ,b",  # surrounding whitespace: 39, M, b
    "39.5,F,a",  # a fraction in an integer column: taken as written
    "abc,F,a",  # unparsable number: missing under the column's rule
    "NaN,F,a",  # not a finite number: missing
    "-inf,F,a",
    "1e400,F,a",  # overflows a double: missing
    "9" * 4400 + ",F,a",  # 4,400 digits: overflows, missing
    "-5,F,a",  # below the bounds: clipped to 0
    "250,F,a",  # above: clipped to 100
    ",F,a",  # empty numeric cell
    "40,,a",  # empty categorical cell
    "41,X,zzz",  # undeclared: sex has no other (missing), job goes to Other
    "42,F",  # too few fields: every cell missing
    "43,F,a,extra",  # too many fields: every cell missing
    "44,\ufffd,a",  # U+FFFD (what readers make of bytes that are not UTF-8): malformed
    '45,"M",b',  # quoted
    "",  # a blank line is no record
    "46,F,a",
]
BAD_BYTES = b"47,\xff\xfe,a\n"  # invalid UTF-8: malformed, like U+FFFD


def _write(path: Path) -> Path:
    body = ("age,sex,job\n" + "\n".join(CORPUS) + "\n").encode("utf-8") + BAD_BYTES
    path.write_bytes(body)
    return path


RULES = {
    "keep": ({"age": "keep", "sex": "keep", "job": Fill("a")}, True),
    "mixed": ({"age": "keep", "sex": "drop", "job": "drop"}, True),
    "drop": ({"age": "drop", "sex": "drop", "job": "drop"}, False),
    "fill": ({"age": Fill(30.0), "sex": Fill("F"), "job": Fill("a")}, False),
}


@pytest.fixture(scope="module")
def spark_session(tmp_path_factory: pytest.TempPathFactory):
    if SPARK_SKIP is not None:
        pytest.skip(f"SparkEngine cannot run: {SPARK_SKIP}")
    t = time.perf_counter()
    session = local_spark_session(str(tmp_path_factory.mktemp("spark")), threads=1)
    print(f"spark session started in {time.perf_counter() - t:.1f} s")
    yield session
    session.stop()


def _rows(engine) -> EncodedTable:
    batches = list(engine.encoded_batches())
    domain = batches[0].domain
    codes = {c.name: np.concatenate([b.codes[c.name] for b in batches]) for c in domain}
    scaled = {
        c.name: np.concatenate([b.scaled[c.name] for b in batches])
        for c in domain
        if c.kind == "numeric"
    }
    return EncodedTable(domain, codes, scaled)


def _sorted(table: EncodedTable) -> np.ndarray:
    """Rows as tuples in a canonical order (engines may stream rows in any order)."""
    cols = [table.codes[c.name].astype(np.float64) for c in table.domain]
    cols += [table.scaled[c.name] for c in table.domain if c.kind == "numeric"]
    rows = np.stack(cols, axis=1)
    return rows[np.lexsort(rows.T[::-1])]


def _read(kind: str, path: Path, rule: str, spark_session=None):
    missing, nullable = RULES[rule]
    domain = _domain(nullable)
    other = {"job": "Other"}
    if kind == "memory":
        return InMemoryEngine.from_file(path, domain, missing=missing, other=other, max_rows=30)
    if kind == "duckdb":
        return DuckDBEngine(path, domain, missing=missing, other=other, max_rows=30, threads=1)
    return SparkEngine(
        path, domain, missing=missing, other=other, max_rows=30, session=spark_session
    )


@pytest.mark.parametrize("rule", sorted(RULES))
def test_memory_and_duckdb_agree_on_every_odd_cell(tmp_path: Path, rule: str) -> None:
    path = _write(tmp_path / "odd.csv")
    mem = _read("memory", path, rule)
    duck = _read("duckdb", path, rule)
    try:
        np.testing.assert_array_equal(_sorted(_rows(mem)), _sorted(_rows(duck)))
        m, d = mem.curator_log, duck.curator_log
        assert (m.rows_read, m.rows_kept) == (d.rows_read, d.rows_kept)
        assert (m.clipped_low, m.clipped_high) == (d.clipped_low, d.clipped_high)
        assert m.undeclared == d.undeclared
        assert m.malformed_rows == 4  # two field counts, U+FFFD, invalid UTF-8
    finally:
        duck.close()


def test_the_contract_on_the_corpus(tmp_path: Path) -> None:
    """What the contract makes of each record (in-memory engine, keep rules)."""
    engine = _read("memory", _write(tmp_path / "odd.csv"), "keep")
    t = engine.table
    age, sex, job = _domain(True)
    assert t.n == len(CORPUS)  # the blank line is no record; the invalid UTF-8 line is one
    ages = t.scaled["age"] * 100.0
    null_age = t.codes["age"] == age.null_code
    # unparsable, NaN, -inf, 1e400, 4,400 digits, empty, then the 3 malformed
    assert np.flatnonzero(null_age).tolist() == [3, 4, 5, 6, 7, 10, 13, 14, 15, 18]
    assert ages[[0, 1, 2, 8, 9]].tolist() == pytest.approx([39.0, 39.0, 39.5, 0.0, 100.0])
    assert np.flatnonzero(t.codes["sex"] == sex.null_code).tolist() == [11, 12, 13, 14, 15, 18]
    assert t.codes["job"][12] == job.code_of_label("Other")
    assert engine.curator_log.undeclared == {"age": 5, "sex": 1, "job": 1}


@pytest.mark.skipif(SPARK_SKIP is not None, reason=f"SparkEngine cannot run: {SPARK_SKIP}")
def test_spark_agrees_with_the_in_memory_engine(tmp_path: Path, spark_session) -> None:
    path = _write(tmp_path / "odd.csv")
    for rule in ("keep", "fill"):
        mem = _read("memory", path, rule)
        spark = _read("spark", path, rule, spark_session)
        try:
            np.testing.assert_array_equal(_sorted(_rows(mem)), _sorted(_rows(spark)))
            m, s = mem.curator_log, spark.curator_log
            assert (m.rows_read, m.rows_kept) == (s.rows_read, s.rows_kept)
            assert (m.clipped_low, m.clipped_high) == (s.clipped_low, s.clipped_high)
        finally:
            spark.close()


@pytest.mark.parametrize("kind", ["memory", "duckdb"])
def test_more_rows_than_data_rows_is_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "long.csv"
    path.write_text("age,sex,job\n" + "39,F,a\n" * 31)
    with pytest.raises(DiagnosticError) as e:
        _read(kind, path, "keep").close()
    assert [d.code for d in e.value.diagnostics] == ["E411"]


def test_a_gzip_bomb_is_refused_after_data_rows(tmp_path: Path) -> None:
    """A gzip stream of ~300 MiB of rows: refused once row 31 is read, not read whole."""
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b"age,sex,job\n")
        block = b"39,F,a\n" * (1 << 20)
        for _ in range(40):
            f.write(block)
    for kind in ("memory", "duckdb"):
        with pytest.raises(DiagnosticError) as e:
            _read(kind, path, "keep").close()
        assert [d.code for d in e.value.diagnostics] == ["E411"]


@pytest.mark.parametrize("kind", ["memory", "duckdb"])
def test_a_line_without_end_is_refused_at_the_line_bound(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "noline.csv"
    path.write_bytes(b"age,sex,job\n39,F,a\n" + b"9" * (MAX_LINE_BYTES + 10))
    with pytest.raises(DiagnosticError) as e:
        _read(kind, path, "keep").close()
    d = e.value.diagnostics[0]
    assert d.code == "E409" and "MiB" in d.message and "999" not in d.message


def test_a_header_without_end_is_refused_without_reading_the_file(tmp_path: Path) -> None:
    path = tmp_path / "header.csv"
    path.write_bytes(b"a" * (MAX_LINE_BYTES + 10))
    with pytest.raises(DiagnosticError) as e:
        read_csv_text(path)
    assert e.value.diagnostics[0].code == "E409"


# Declared missing values (sentinels) next to the odd cells they could be confused with.
SENTINEL_CORPUS = [
    "30,a,1",
    "0,NA,2",  # declared in both columns
    " -9 , . ,99",  # declared, with whitespace around
    "0.0,na,1",  # 0.0 equals 0 as a double; "na" is not "NA": undeclared
    "-0,a,2",  # -0 equals 0 as a double
    "-9.000e0,b,",  # -9 written otherwise; an empty cell
    "5,99,1",  # 5 is below the bounds (clipped); "99" is declared in kids only: undeclared
    "-8.9999999999999999999,a,1",  # rounds to the double -9: declared in every engine
    "abc,zzz,99.0",  # unreadable, undeclared; "99.0" is not the text "99"
    "1e400,a,1",  # not finite: unreadable, never a declared value
    "40,b",  # malformed: every cell empty
]


def _sentinel_domain(nullable: bool) -> Domain:
    return Domain(
        (
            NumericColumn(
                "fage", 12.0, 70.0, True, numeric_edges(12.0, 70.0, True, 4), nullable, (0.0, -9.0)
            ),
            CategoricalColumn(
                "race", ("a", "b", "Other"), nullable=nullable, missing_values=("NA", ".")
            ),
            CategoricalColumn("kids", ("1", "2"), nullable=nullable, missing_values=("99",)),
        )
    )


SENTINEL_RULES = {
    "keep": ({"fage": "keep", "race": "keep", "kids": "keep"}, True),
    "drop": ({"fage": "drop", "race": "drop", "kids": "drop"}, False),
    "fill": ({"fage": Fill(40.0), "race": Fill("Other"), "kids": Fill("1")}, False),
}


def _read_sentinels(kind: str, path: Path, rule: str):
    missing, nullable = SENTINEL_RULES[rule]
    domain = _sentinel_domain(nullable)
    other = {"race": "Other"}
    if kind == "memory":
        return InMemoryEngine.from_file(path, domain, missing=missing, other=other, max_rows=30)
    return DuckDBEngine(path, domain, missing=missing, other=other, max_rows=30, threads=1)


@pytest.mark.parametrize("rule", sorted(SENTINEL_RULES))
def test_engines_agree_on_declared_missing_values(tmp_path: Path, rule: str) -> None:
    path = tmp_path / "sentinels.csv"
    path.write_text("fage,race,kids\n" + "\n".join(SENTINEL_CORPUS) + "\n")
    mem = _read_sentinels("memory", path, rule)
    duck = _read_sentinels("duckdb", path, rule)
    try:
        np.testing.assert_array_equal(_sorted(_rows(mem)), _sorted(_rows(duck)))
        m, d = mem.curator_log, duck.curator_log
        assert (m.rows_read, m.rows_kept) == (d.rows_read, d.rows_kept)
        assert (m.missing, m.undeclared) == (d.missing, d.undeclared)
        assert (m.clipped_low, m.clipped_high) == (d.clipped_low, d.clipped_high)
        # declared or empty (the malformed row's cells included), per column
        assert m.missing == {"fage": 7, "race": 3, "kids": 3}
        assert m.undeclared == {"fage": 2, "race": 3, "kids": 1}
        if rule == "keep":
            fage = mem.table.codes["fage"] == mem.table.domain["fage"].null_code
            assert np.flatnonzero(fage).tolist() == [1, 2, 3, 4, 5, 7, 8, 9, 10]
        if rule == "drop":
            # the first record, and "5,99,1" (5 clipped, race's undeclared 99 to its Other)
            assert m.rows_kept == 2
    finally:
        duck.close()


def test_engines_agree_on_declared_missing_values_in_parquet(tmp_path: Path) -> None:
    import pandas as pd

    path = tmp_path / "sentinels.parquet"
    pd.DataFrame(
        {
            "fage": [30.0, 0.0, -0.0, np.nan, -9.0, 5.0, np.inf],
            "race": ["a", "NA", " . ", None, "b", "zzz", "a"],
            "kids": pd.array([1, 99, 2, None, 99, 1, 3], dtype="Int64"),
        }
    ).to_parquet(path)
    mem = _read_sentinels("memory", path, "keep")
    duck = _read_sentinels("duckdb", path, "keep")
    try:
        np.testing.assert_array_equal(_sorted(_rows(mem)), _sorted(_rows(duck)))
        missing = {"fage": 4, "race": 3, "kids": 3}
        assert mem.curator_log.missing == duck.curator_log.missing == missing
    finally:
        duck.close()
