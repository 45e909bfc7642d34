"""Measurement engines: every engine gives the same sums, logs and errors on the same file
(the cell contract's corpus of odd cells: tests/test_data_contract.py)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpql.data import engines
from dpql.data.codec import Fill
from dpql.data.engines import (
    DuckDBEngine,
    InMemoryEngine,
    SparkEngine,
    local_spark_session,
    open_engine,
    spark_unavailable,
)
from dpql.diagnostics import DiagnosticError
from dpql.domain import CategoricalColumn, Domain, NumericColumn, numeric_edges
from dpql.ir.queries import (
    And,
    CatIn,
    CentredProduct,
    Count,
    Halfspace,
    Marginal,
    ModelAccuracy,
    Moment,
    Not,
    NumCmp,
    Or,
    Prefix,
    Query,
    TruePred,
    on_centre_grid,
)

ROWS = 300
ODD_VALUES = ["?", "a b", "it's", 'say "x"', "<=50K", "Ünï", "v,1"]


def random_domain(rng: np.random.Generator) -> Domain:
    cols: list[NumericColumn | CategoricalColumn] = []
    for j in range(rng.integers(2, 4)):
        k = int(rng.integers(2, 6))
        values = tuple(rng.choice(ODD_VALUES, size=2, replace=False)) + tuple(
            f"v{i}" for i in range(k - 2)
        )
        cols.append(CategoricalColumn(f"cat {j}", values))
    for j in range(rng.integers(2, 4)):
        lo = float(rng.integers(-50, 10))
        hi = lo + float(rng.integers(5, 60))
        if rng.random() < 0.5:
            edges = numeric_edges(lo, hi, True, int(rng.integers(1, 8)))
            cols.append(NumericColumn(f"int{j}", lo, hi, True, edges))
        else:
            inner = np.sort(rng.uniform(lo, hi, size=int(rng.integers(0, 5))))
            edges = (lo, *map(float, inner), hi)
            cols.append(NumericColumn(f"num{j}", lo, hi, False, edges))
    order = rng.permutation(len(cols))
    return Domain(tuple(cols[i] for i in order))


def random_raw(domain: Domain, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The same table as CSV text cells and as Parquet-native columns (floats, strings)."""
    text: dict[str, list[str]] = {}
    native: dict[str, object] = {}
    for col in domain:
        missing = rng.random(ROWS) < 0.05
        if isinstance(col, CategoricalColumn):
            values = rng.choice([*col.values, "undeclared"], size=ROWS, p=None)
            pads = rng.choice(["", " ", "\t"], size=ROWS)
            text[col.name] = [
                "" if m else f"{p}{v}{p}" for m, v, p in zip(missing, values, pads, strict=True)
            ]
            native[col.name] = pd.array(
                [None if m else str(v) for m, v in zip(missing, values, strict=True)],
                dtype="string",
            )
        else:
            x = rng.uniform(col.lo - 0.2 * col.span, col.hi + 0.2 * col.span, size=ROWS)
            x = np.where(rng.random(ROWS) < 0.2, rng.choice(np.asarray(col.edges), ROWS), x)
            x = np.round(x) if col.integer else x
            text[col.name] = ["" if m else repr(float(v)) for m, v in zip(missing, x, strict=True)]
            native[col.name] = np.where(missing, np.nan, x)
    return pd.DataFrame(text), pd.DataFrame(native)


def with_sentinels(
    domain: Domain, text: pd.DataFrame, native: pd.DataFrame, rng: np.random.Generator
) -> tuple[Domain, pd.DataFrame, pd.DataFrame]:
    """Declare missing values on about half of the columns and write them into about 8% of
    their cells: numbers below the bounds spelt several ways in the text ("-9", " -9.0 ",
    "-9e0"), "NA" or "." with padding in categorical cells."""
    text, native = text.copy(), native.copy()
    cols = []
    for col in domain:
        if rng.random() < 0.5:
            cols.append(col)
            continue
        hit = rng.random(ROWS) < 0.08
        if isinstance(col, CategoricalColumn):
            col = dataclasses.replace(col, missing_values=("NA", "."))
            pick = rng.choice(["NA", " . ", "\tNA"], ROWS)
            text[col.name] = np.where(hit, pick, text[col.name])
            native[col.name] = pd.array(
                np.where(hit, pick, native[col.name].astype(object)), dtype="string"
            )
        else:
            sentinel = col.lo - 9.0
            col = dataclasses.replace(col, missing_values=(sentinel, col.hi + 0.5))
            spelt = [repr(sentinel), f" {sentinel:.1f} ", f"{sentinel:g}e0", repr(col.hi + 0.5)]
            text[col.name] = np.where(hit, rng.choice(spelt, ROWS), text[col.name])
            native[col.name] = np.where(hit, sentinel, native[col.name])
        cols.append(col)
    return Domain(tuple(cols)), text, native


def policies(domain: Domain, rng: np.random.Generator) -> tuple[dict, dict]:
    missing: dict[str, object] = {}
    other: dict[str, str] = {}
    for col in domain:
        if isinstance(col, CategoricalColumn):
            other[col.name] = col.values[-1]
            missing[col.name] = rng.choice(["drop", "fill"])
            if missing[col.name] == "fill":
                missing[col.name] = Fill(col.values[0])
        else:
            missing[col.name] = "drop" if rng.random() < 0.5 else Fill((col.lo + col.hi) / 2)
    return missing, other


def with_keep(domain: Domain, missing: dict, rng: np.random.Generator) -> tuple[Domain, dict]:
    """Turn about half of the fill policies into ``missing: keep`` (the column nullable)."""
    missing = dict(missing)
    cols = []
    for col in domain:
        if isinstance(missing[col.name], Fill) and rng.random() < 0.5:
            missing[col.name] = "keep"
            col = dataclasses.replace(col, nullable=True)
        cols.append(col)
    return Domain(tuple(cols)), missing


def random_pred(domain: Domain, rng: np.random.Generator, depth: int = 0):
    col = domain.columns[rng.integers(len(domain))]
    r = rng.random()
    if depth < 2 and r < 0.3:
        items = tuple(random_pred(domain, rng, depth + 1) for _ in range(rng.integers(0, 3)))
        return And(items) if rng.random() < 0.5 else Or(items)
    if depth < 2 and r < 0.4:
        return Not(random_pred(domain, rng, depth + 1))
    if r < 0.45:
        return TruePred()
    if isinstance(col, CategoricalColumn):
        size = int(rng.integers(0, col.card + 1))
        return CatIn(col.name, frozenset(int(c) for c in rng.choice(col.card, size, False)))
    # thresholds on the scaled bin edges make ties between "<" and "<=" matter
    t = rng.choice(col.scaled_edges) if rng.random() < 0.5 else rng.uniform(-0.1, 1.1)
    return NumCmp(col.name, str(rng.choice(["<", "<=", ">", ">="])), float(t))  # type: ignore[arg-type]


def random_queries(domain: Domain, rng: np.random.Generator) -> list[Query]:
    names = domain.names
    num = [c.name for c in domain.numeric]
    cat = [c.name for c in domain.categorical]
    qs: list[Query] = [Marginal(c) for k in (1, 2) for c in itertools.combinations(names, k)]
    qs += [Marginal(tuple(rng.permutation(names)[:3]))]
    for _ in range(4):
        cols = tuple(rng.choice(num, size=int(rng.integers(1, len(num) + 1)), replace=False))
        thr = tuple(float(rng.choice([*domain[c].scaled_edges, rng.random()])) for c in cols)  # type: ignore[union-attr]
        qs.append(Prefix(cols, thr, rng.choice([None, *cat])))
        theta = tuple(float(v) for v in rng.standard_normal(len(cols)) / np.sqrt(len(cols)))
        qs.append(Halfspace(cols, theta, float(rng.standard_normal() * 0.3), str(rng.choice(cat))))
        qs.append(Count(random_pred(domain, rng)))
        m = tuple(str(c) for c in rng.choice(num, size=int(rng.integers(0, 3)), replace=True))
        qs.append(Moment(m, random_pred(domain, rng)))
    # centred second moments of numeric values and indicators (requirement measures)
    factors = [(c, None) for c in num]
    factors += [(c.name, k) for c in domain.categorical for k in range(c.card)]
    for _ in range(4):
        f, g = (factors[i] for i in rng.choice(len(factors), size=2))
        if f[0] != g[0] or f[1] is None:
            qs.append(CentredProduct(f, g))
            # re-centred at compile time (dpql.postprocess.centre): public centres on the grid
            c, d = (on_centre_grid(rng.random()) if h[1] is None else 0.5 for h in (f, g))
            qs.append(CentredProduct(f, g, (c, c if f == g else d)))
    col = str(rng.choice(num))
    qs.append(Moment((col,), random_pred(domain, rng), centre=on_centre_grid(rng.random())))
    return qs


def random_models(domain: Domain, rng: np.random.Generator) -> list[Query]:
    """Fixed logistic and linear models over random features (possibly none), as
    ``dpql.postprocess.accept`` builds them: some classes never predicted (intercept -1e9), a binary
    model whose first row is all zeros."""
    names, out = domain.names, []
    num = [c.name for c in domain.numeric]
    cat = [c.name for c in domain.categorical]
    for k in range(4):
        features = tuple(str(c) for c in rng.permutation(names)[: int(rng.integers(0, 4))])
        width = sum(1 if domain[f].kind == "numeric" else domain.card(f) for f in features)
        label = str(rng.choice(cat))
        coef = rng.standard_normal((domain.card(label), width))
        intercept = rng.standard_normal(domain.card(label))
        if k == 1:
            intercept[rng.integers(domain.card(label))] = -1e9
        if k == 2:
            coef[0], intercept[0] = 0.0, 0.0
        out.append(
            ModelAccuracy(
                "logistic",
                features,
                label,
                tuple(tuple(map(float, r)) for r in coef),
                tuple(map(float, intercept)),
            )
        )
        w = tuple(float(v) for v in rng.standard_normal(width) * 0.7)
        out.append(
            ModelAccuracy("linear", features, str(rng.choice(num)), (w,), (float(rng.random()),))
        )
    return out


SPARK_SKIP = spark_unavailable()


@pytest.fixture(scope="module")
def spark_session(tmp_path_factory: pytest.TempPathFactory):
    """One local Spark session for the module (starting the JVM takes 10-20 s)."""
    if SPARK_SKIP is not None:
        pytest.skip(f"SparkEngine cannot run: {SPARK_SKIP}")
    t = time.perf_counter()
    session = local_spark_session(str(tmp_path_factory.mktemp("spark")), threads=2)
    print(f"spark session started in {time.perf_counter() - t:.1f} s")
    yield session
    session.stop()


class DuckDBGroupBy(DuckDBEngine):
    """DuckDB answering marginals with SQL GROUP BYs (the SQL path; Spark streams them)."""

    def _stream_marginals(self, *args: object) -> bool:
        return False


SPARK_SEEDS = (0, 1)  # each Spark statement is a job (~0.3 s): two tables of the six suffice


def engine_factories(request: pytest.FixtureRequest, seed: int):
    yield "duckdb", lambda p, d, **kw: DuckDBEngine(p, d, memory_limit="256MB", threads=2, **kw)
    yield "duckdb-groupby", lambda p, d, **kw: DuckDBGroupBy(p, d, **kw)
    if seed in SPARK_SEEDS and SPARK_SKIP is None:
        session = request.getfixturevalue("spark_session")
        yield "spark", lambda p, d, **kw: SparkEngine(p, d, session=session, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_engines_agree_on_random_tables_and_queries(
    seed: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Every engine, on the table as CSV and as Parquet, returns the in-memory engine's sums:
    exactly for counts (marginals, prefixes, halfspaces, predicates, model accuracy), to 1e-12
    (relative to n) for sums of real values (moments, centred products, squared errors)."""
    rng = np.random.default_rng(seed)
    domain = random_domain(rng)
    text, native = random_raw(domain, rng)
    domain, text, native = with_sentinels(domain, text, native, np.random.default_rng(2000 + seed))
    missing, other = policies(domain, rng)
    domain, missing = with_keep(domain, missing, np.random.default_rng(1000 + seed))
    queries = random_queries(domain, rng) + random_models(domain, rng)
    csv, parquet = tmp_path / "t.csv", tmp_path / "t.parquet"
    text.to_csv(csv, index=False)
    native.to_parquet(parquet)

    reference = InMemoryEngine.from_file(csv, domain, missing=missing, other=other)
    expected = reference.sums(queries)
    n = reference.curator_log.rows_kept
    assert 0 < n < ROWS  # the table exercised dropping
    assert reference.curator_log.clipped_low and reference.curator_log.undeclared
    assert any(c.missing_values for c in domain)  # the table exercised declared missing values
    assert [s.shape for s in expected] == [(q.cells(domain),) for q in queries]
    chunked = InMemoryEngine.from_file(csv, domain, missing=missing, other=other)
    chunked._chunk = 7
    candidates = [
        ("memory-chunked", chunked),
        ("memory-parquet", InMemoryEngine.from_file(parquet, domain, missing=missing, other=other)),
    ]
    for name, make in engine_factories(request, seed):
        for path in (csv, parquet):
            candidates.append(
                (f"{name}-{path.suffix}", make(path, domain, missing=missing, other=other))
            )
    for name, engine in candidates:
        try:
            got = engine.sums(queries)
            assert engine.curator_log.rows_kept == n, name
            log, ref = engine.curator_log, reference.curator_log
            assert (log.missing, log.undeclared, log.clipped_low, log.clipped_high) == (
                ref.missing,
                ref.undeclared,
                ref.clipped_low,
                ref.clipped_high,
            ), name
            for q, a, b in zip(queries, expected, got, strict=True):
                real = isinstance(q, Moment | CentredProduct) or (
                    isinstance(q, ModelAccuracy) and q.model == "linear"
                )
                # every engine answers whole grid steps (records rounded before summing)
                np.testing.assert_array_equal(b, np.rint(b), err_msg=f"{name} {q}")
                if real:
                    # one record's value may sit on a rounding tie in one engine's arithmetic
                    np.testing.assert_allclose(b, a, rtol=0, atol=1, err_msg=f"{name} {q}")
                else:
                    np.testing.assert_array_equal(b, a, err_msg=f"{name} {q}")
        finally:
            engine.close()


def test_duckdb_batched_sums_over_distinct_tuples_equal_the_in_memory_engine(
    tmp_path: Path,
) -> None:
    """DuckDB answers a batch of threshold and moment queries over the distinct tuples of the
    columns they read, weighted by their counts: the same sums as the in-memory engine, exactly
    (integer-valued; real-valued moments to one grid step), on a table with repeated tuples."""
    from dpql.data.query_sql import query_sql

    rng = np.random.default_rng(7)
    domain = random_domain(rng)
    _, native = random_raw(domain, rng)
    native = pd.concat([native] * 3, ignore_index=True)  # every tuple three times at least
    path = tmp_path / "t.parquet"
    native.to_parquet(path)
    num = [c.name for c in domain.numeric]
    label = domain.categorical[0].name
    queries: list[Query] = []
    for _ in range(30):
        cols = tuple(rng.permutation(num)[: int(rng.integers(1, len(num) + 1))])
        theta = tuple(float(v) for v in rng.standard_normal(len(cols)))
        queries.append(Halfspace(cols, theta, float(rng.standard_normal() * 0.3), label))
        thr = tuple(float(rng.random()) for _ in cols)
        queries.append(Prefix(cols, thr, label if rng.random() < 0.5 else None))
    queries += [Count(random_pred(domain, rng)) for _ in range(5)]
    queries += [Moment((num[0],)), Moment((num[0], num[-1]), random_pred(domain, rng))]
    queries.append(Moment((num[0],), centre=on_centre_grid(0.3)))
    batched = [s.sql for s in query_sql(queries, domain) if "COUNT(*) AS w" in s.sql]
    assert len(batched) >= 2  # the labelled and the unsplit aggregates, each over tuples
    expected = InMemoryEngine.from_file(path, domain).sums(queries)
    engine = DuckDBEngine(path, domain, memory_limit="256MB", threads=2)
    try:
        got = engine.sums(queries)
    finally:
        engine.close()
    for q, a, b in zip(queries, expected, got, strict=True):
        if isinstance(q, Moment) and q.columns:
            np.testing.assert_allclose(b, a, rtol=0, atol=1, err_msg=str(q))
        else:
            np.testing.assert_array_equal(b, a, err_msg=str(q))


def test_marginal_cells_are_row_major(tmp_path: Path) -> None:
    domain = Domain((CategoricalColumn("a", ("x", "y")), CategoricalColumn("b", ("p", "q", "r"))))
    path = tmp_path / "t.csv"
    path.write_text("a,b\nx,r\ny,p\ny,p\ny,q\n")
    for engine in (InMemoryEngine.from_file(path, domain), DuckDBEngine(path, domain)):
        assert engine.sums([Marginal(("a", "b"))])[0].tolist() == [0, 0, 1, 2, 1, 0]
        engine.close()


def test_wide_domains_pack_cell_states_in_several_words(tmp_path: Path) -> None:
    names = [f"k{j}" for j in range(30)]  # states of 27 columns per BIGINT word
    domain = Domain(tuple(CategoricalColumn(n, ("a", "b")) for n in names))
    rows = [["a"] * 30 for _ in range(5)]
    rows[1][29], rows[2][28], rows[3][0] = "", "zz", ""
    path = tmp_path / "wide.csv"
    path.write_text("\n".join(",".join(r) for r in [names, *rows]) + "\n")
    rules = {"missing": {"k29": "drop", "k0": Fill("b")}, "other": {"k28": "b"}}
    mem = InMemoryEngine.from_file(path, domain, **rules)  # type: ignore[arg-type]
    duck = DuckDBEngine(path, domain, **rules)  # type: ignore[arg-type]
    assert duck.curator_log.missing == mem.curator_log.missing == {"k0": 1, "k29": 1}
    assert duck.curator_log.undeclared == {"k28": 1} and duck.curator_log.rows_kept == 4
    query = [Marginal(("k0", "k28"))]
    assert duck.sums(query)[0].tolist() == mem.sums(query)[0].tolist() == [2, 1, 1, 0]
    duck.close()


def bad_csv(path: Path) -> Domain:
    path.write_text("x,c,extra\n1,a,0\nfoo,a,0\n3,zz,0\n4,zz,0\n5,,0\n6,Q,0\n,b,0\nbar,b,0\n")
    return Domain(
        (NumericColumn("x", 0.0, 9.0, True, (0.0, 5.0, 10.0)), CategoricalColumn("c", ("a", "b")))
    )


def _log(engine) -> tuple:
    log = engine.curator_log
    return (log.rows_read, log.rows_kept, log.missing, log.undeclared, log.malformed_rows)


def test_duckdb_encodes_odd_cells_as_the_codec(tmp_path: Path) -> None:
    domain = bad_csv(tmp_path / "bad.csv")
    mem = InMemoryEngine.from_file(tmp_path / "bad.csv", domain)
    duck = DuckDBEngine(tmp_path / "bad.csv", domain)
    try:
        # no rules, not nullable: a row with an empty or unreadable cell is dropped
        assert _log(mem) == _log(duck) == (8, 1, {"x": 1, "c": 1}, {"x": 2, "c": 3}, 0)
        queries = [Marginal(("x", "c"))]
        assert duck.sums(queries)[0].tolist() == mem.sums(queries)[0].tolist()
    finally:
        duck.close()


def test_duckdb_file_errors_and_a_ragged_row(tmp_path: Path) -> None:
    domain = bad_csv(tmp_path / "bad.csv")
    (tmp_path / "ragged.csv").write_text("x,c\n1,a\n2,b,3,4\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("x,c\n")
    (tmp_path / "noc.csv").write_text("x,C\n1,a\n")
    for name, code in [
        ("empty.csv", "E403"),
        ("header.csv", "E403"),
        ("noc.csv", "E404"),
        ("absent.csv", "E401"),
    ]:
        with pytest.raises(DiagnosticError) as err:
            DuckDBEngine(tmp_path / name, domain)
        assert err.value.codes == [code], name
    engine = DuckDBEngine(tmp_path / "ragged.csv", domain)  # a malformed row: cells missing
    try:
        assert _log(engine) == (2, 1, {"x": 1, "c": 1}, {}, 1)
    finally:
        engine.close()


def test_duckdb_cleans_up_its_private_temp_dir(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,c\n1,a\n")
    domain = Domain(
        (NumericColumn("x", 0.0, 9.0, True, (0.0, 10.0)), CategoricalColumn("c", ("a",)))
    )
    engine = DuckDBEngine(path, domain)
    where = engine._dir
    assert os.path.isdir(where) and oct(os.stat(where).st_mode)[-3:] == "700"
    engine.close()
    assert not os.path.exists(where)


def test_auto_picks_by_file_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,c\n1,a\n")
    domain = Domain(
        (NumericColumn("x", 0.0, 9.0, True, (0.0, 10.0)), CategoricalColumn("c", ("a",)))
    )
    assert isinstance(open_engine(path, domain), InMemoryEngine)
    monkeypatch.setitem(engines.AUTO_THRESHOLD_BYTES, "csv", 4)
    engine = open_engine(path, domain)
    assert isinstance(engine, DuckDBEngine)
    engine.close()


@pytest.mark.slow
def test_spark_engine_reads_errors_and_streams_rows_as_the_other_engines(
    tmp_path: Path, spark_session
) -> None:
    domain = bad_csv(tmp_path / "bad.csv")
    mem = InMemoryEngine.from_file(tmp_path / "bad.csv", domain)
    spark = SparkEngine(tmp_path / "bad.csv", domain, session=spark_session)
    try:
        assert _log(spark) == _log(mem)
    finally:
        spark.close()
    (tmp_path / "ragged.csv").write_text("x,c\n1,a\n2,b,3,4\n")
    spark = SparkEngine(tmp_path / "ragged.csv", domain, session=spark_session)
    try:  # a malformed row: its cells are missing (flagged in SQL, not counted as malformed)
        assert _log(spark)[:4] == (2, 1, {"x": 1, "c": 1}, {})
    finally:
        spark.close()

    path = tmp_path / "ok.csv"
    path.write_text('x,c\n1,a\n7,"b"\n7, a\n3,b\n')
    engine = SparkEngine(path, domain, session=spark_session)
    where = engine._dir
    try:
        assert engine.sums([Marginal(("x", "c"))])[0].tolist() == [1, 1, 1, 1]
        batches = list(engine.encoded_batches(rows=3))
        assert sum(b.n for b in batches) == 4
        x = np.concatenate([b.scaled["x"] for b in batches])
        c = np.concatenate([b.codes["c"] for b in batches])
        assert sorted(zip(x.tolist(), c.tolist(), strict=True)) == [
            (1 / 9, 0),
            (3 / 9, 1),
            (7 / 9, 0),
            (7 / 9, 1),
        ]
    finally:
        engine.close()
    assert not os.path.exists(where)
    assert spark_session.sql("SHOW TABLES").count() == 0  # the engine's views were its own


def test_spark_engine_missing_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a\nx\n")
    monkeypatch.setattr(engines.spark, "spark_unavailable", lambda: "pyspark is not installed")
    with pytest.raises(DiagnosticError) as err:
        open_engine(path, Domain((CategoricalColumn("a", ("x",)),)), engine="spark")
    (d,) = err.value.diagnostics
    assert d.code == "E410" and "pyspark is not installed" in d.message
    assert d.hint is not None and "dpql[spark]" in d.hint


def test_spark_unavailable_names_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    reason = spark_unavailable()
    if reason is None or "pyspark" not in reason:
        assert reason == f"JAVA_HOME={tmp_path} has no bin/java"
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = spark_unavailable()
    assert reason is not None and ("Java is not installed" in reason or "pyspark" in reason)


def test_model_accuracy_sums_over_row_chunks_to_one_value() -> None:
    """Tables longer than one row chunk still give one sum per model query (chunk sums add)."""
    from dpql.domain import EncodedTable
    from dpql.ir.exact import ROW_CHUNK, grid_sums_all, model_scores, sums_all
    from dpql.ir.queries import query_grid

    rng = np.random.default_rng(5)
    domain = random_domain(rng)
    n = ROW_CHUNK + 4321
    codes, scaled = {}, {}
    for c in domain:
        codes[c.name] = rng.integers(0, c.card, n).astype(np.int32)
        if c.kind == "numeric":
            scaled[c.name] = rng.random(n)
    table = EncodedTable(domain, codes, scaled)
    models = random_models(domain, rng)
    for q, got, grid in zip(
        models, sums_all(models, table), grid_sums_all(models, table), strict=True
    ):
        assert got.shape == grid.shape == (1,)
        assert got[0] == pytest.approx(model_scores(q, table).sum(), rel=1e-12)
        step = query_grid(q)
        # rounded per record: within half a step per row of the exact sum, in whole steps
        assert grid[0] == round(grid[0])
        assert abs(grid[0] * step - got[0]) <= n * step / 2
