"""Measurement engines: exact *sums* of IR queries over the private table (privacy boundary).

An engine answers ``sums(queries)``: for each query the per-record vector summed over the rows
that survive encoding (the measurer divides by the *public* n). Engines are interchangeable:
the differential test checks that all of them agree to 1e-12 on the same file.

* :class:`InMemoryEngine`: the table encoded by :mod:`dpql.codec` in numpy, answered by
  :mod:`dpql.plan.exact` in row chunks (memory for intermediates bounded by the chunk).
* :class:`DuckDBEngine`: the file scanned out of core by DuckDB; the codec's cell rules run in
  SQL (:mod:`dpql.data.sql`). One scan of the source builds the "cube": the distinct tuples of
  codes and cell states with their multiplicities; validation counts and all marginals are sums
  over it (marginals streamed to numpy in batches). The scaled numeric values are materialised
  only when a non-marginal query comes, answered by ``SUM(CASE ...)`` aggregates batched many per
  SELECT. Tables are temporary: past ``memory_limit`` they spill to a private temporary
  directory that :meth:`close` deletes, so memory is bounded whatever the number of rows.
* :class:`SparkEngine`: the same SQL as DataFrame aggregations on a Spark session (needs Java
  and ``pyspark``, the ``spark`` extra): the session given, the active one, or a local one
  (:func:`local_spark_session`) that :meth:`close` stops.

:func:`open_engine` picks one; ``"auto"`` uses the in-memory engine below
:data:`AUTO_THRESHOLD_BYTES` of file size (200 MiB of CSV, 25 MiB of Parquet) and DuckDB above.

Besides sums, every engine streams the kept rows in the public encoding
(:meth:`MeasurementEngine.encoded_batches`): DP-SGD's input (:mod:`dpql.data.rows`), the one
other consumer of private rows.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from dpql.codec import (
    WHITESPACE,
    ColumnIssues,
    CuratorLog,
    MissingPolicy,
    check_policies,
    column_diagnostics,
    column_set_diagnostics,
    raise_if_any,
)
from dpql.data import sql
from dpql.data.load import (
    SHOW_MESSAGE,
    DataFormat,
    check_readable,
    csv_header,
    data_format,
    error,
    file_sha256,
    load_table,
    ragged_row_error,
)
from dpql.diagnostics import DiagnosticError
from dpql.domain import Domain, EncodedTable
from dpql.plan.exact import grid_sums_all
from dpql.plan.ir import Marginal, Query

EngineName = Literal["auto", "memory", "duckdb", "spark"]
# File sizes from which ``auto`` uses DuckDB: about 2 million Adult-like rows either way
# (Parquet is ~8x smaller than CSV; 10M such rows are 150 MiB of Parquet).
AUTO_THRESHOLD_BYTES: dict[str, int] = {"csv": 200 * 2**20, "parquet": 25 * 2**20}
STREAM_ROWS = 1 << 20  # rows per Arrow batch when DuckDB streams codes to numpy
HUGE_METHODS = "-XX:-DontCompileHugeMethods"  # JIT-compile Spark's large generated methods
PANDAS_WARNING = "PySpark does not yet fully support"  # pyspark 4.x has not been tested on pandas 3
SPARK_LOG4J = """\
rootLogger.level = off
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = off
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = off
"""  # local sessions log nothing: failures reach Python as exceptions, turned into diagnostics


class MeasurementEngine(Protocol):
    """Exact sums of queries over the private rows. ``curator_log`` is curator-only."""

    @property
    def curator_log(self) -> CuratorLog: ...

    def sums(self, queries: Sequence[Query]) -> list[np.ndarray]:
        """Per query, the sum over rows of its per-record vector (length ``q.cells``) in whole
        steps of the query's public grid (:func:`dpql.plan.ir.query_grid`): counts for
        integer-valued queries, ``sum round(v(x) / 2^-k)`` for real-valued ones (rounded per
        record, :func:`dpql.plan.exact.grid_sums_all`). Whole numbers, as float64."""
        ...

    def encoded_batches(self, rows: int = STREAM_ROWS) -> Iterator[EncodedTable]:
        """The kept rows in the public encoding (codes and scaled values bit-identical to
        :mod:`dpql.codec`), at most ``rows`` per batch, in an engine-defined order."""
        ...

    def close(self) -> None: ...


def _arrow_table(batch: Any, domain: Domain) -> EncodedTable:
    """An Arrow batch with columns ``c{i}`` (and ``u{i}`` for numeric columns) as a table."""
    names = batch.schema.names
    codes, scaled = {}, {}
    for i, col in enumerate(domain):
        codes[col.name] = np.asarray(batch.column(names.index(f"c{i}")), dtype=np.int32)
        if col.kind == "numeric":
            u = batch.column(names.index(f"u{i}"))
            scaled[col.name] = np.asarray(u, dtype=np.float64)
    return EncodedTable(domain, codes, scaled)


class InMemoryEngine:
    """An encoded table in memory, answered by the numpy evaluator in chunks of rows."""

    def __init__(self, table: EncodedTable, curator_log: CuratorLog, chunk_rows: int = 1 << 20):
        self._table = table
        self._log = curator_log
        self._chunk = chunk_rows

    @classmethod
    def from_file(
        cls,
        path: Path | str,
        domain: Domain,
        *,
        fmt: DataFormat | None = None,
        missing: Mapping[str, MissingPolicy] | None = None,
        other: Mapping[str, str] | None = None,
    ) -> InMemoryEngine:
        result = load_table(path, domain, fmt=fmt, missing=missing, other=other)
        return cls(result.table, result.curator_log)

    @property
    def curator_log(self) -> CuratorLog:
        return self._log

    @property
    def table(self) -> EncodedTable:
        """The encoded private table (privacy boundary: for DP-SGD only, see dpql.data.rows)."""
        return self._table

    def sums(self, queries: Sequence[Query]) -> list[np.ndarray]:
        total = [np.zeros(q.cells(self._table.domain)) for q in queries]
        for start in range(0, self._table.n, self._chunk):
            part = self._table.slice(start, start + self._chunk)
            for acc, s in zip(total, grid_sums_all(queries, part), strict=True):
                acc += s
        return total

    def encoded_batches(self, rows: int = STREAM_ROWS) -> Iterator[EncodedTable]:
        """Slices (views) of the table in file order."""
        for start in range(0, self._table.n, rows):
            yield self._table.slice(start, start + rows)

    def close(self) -> None:
        pass


class _SQLEngine:
    """The encoding and query protocol shared by the SQL engines (see :mod:`dpql.data.sql`).

    Subclasses connect, expose the raw file as relation ``source`` and implement
    :meth:`_fetch` (run one statement, return rows) and :meth:`_columns`.
    """

    dialect: sql.Dialect
    _enc = False  # whether ``enc`` is materialised (on the first non-marginal query)

    def _fetch(self, statement: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _columns(self) -> list[tuple[str, str]]:
        """``(name, type)`` of the columns of ``source``."""
        raise NotImplementedError

    def _single_threaded(self) -> Callable[[], None]:
        """Make row numbering follow file order; returns the function that undoes it."""
        return lambda: None

    def encoded_batches(self, rows: int = STREAM_ROWS) -> Iterator[EncodedTable]:
        raise NotImplementedError

    def _encode(
        self,
        path: Path,
        domain: Domain,
        fmt: DataFormat,
        missing: Mapping[str, MissingPolicy],
        other: Mapping[str, str],
    ) -> None:
        """Build the cube in one scan of ``source``, validate as the codec does from its counts
        (E403-E408, the same diagnostics), and set the curator log."""
        self._domain = domain
        check_policies(domain, missing, other)
        raw = {name.strip(WHITESPACE): (name, sql.storage_of(t)) for name, t in self._columns()}
        diagnostics, extra = column_set_diagnostics(list(raw), domain, str(path))
        raise_if_any(diagnostics)
        line_offset = 1 if fmt == "csv" else None
        for col in domain:
            if raw[col.name][1] == "other" or (
                raw[col.name][1] == "float" and col.kind == "categorical"
            ):
                issue = ColumnIssues(col.name, stored_as=self._type_of(raw[col.name][0]))
                diagnostics += column_diagnostics(issue, domain, "error", False, str(path), None)
        raise_if_any(diagnostics)

        views = {
            "parsed": sql.parsed_sql(domain, raw, self.dialect, "source"),
            "staged": sql.staged_sql(domain),
            "coded": sql.coded_sql(domain, missing, other),
        }
        for name, select in views.items():
            self._run(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS {select}")
        self._run(self.dialect.materialise("cube", sql.cube_sql(domain)))
        stats = [int(x) for x in self._fetch(sql.stats_sql(domain, self.dialect))[0]]
        rows_read, rows_kept = stats[0], stats[1]
        if rows_read == 0:
            raise error("E403", f"data file '{path}' has no rows", path)
        per: dict[str, tuple[int, ...]] = {}
        for i, col in enumerate(domain):
            k = 2 + sql.STATS_PER_COLUMN * i
            per[col.name] = tuple(stats[k : k + sql.STATS_PER_COLUMN])
            issues = self._issues(i, col.name, per[col.name], missing, other)
            policy = missing.get(col.name, "error")
            diagnostics += column_diagnostics(
                issues, domain, policy, col.name in other, str(path), line_offset
            )
        raise_if_any(diagnostics)
        if rows_kept == 0:
            raise error(
                "E403",
                f"no rows of '{path}' are left after dropping missing values",
                path,
                "check the columns whose missing-value rule is 'drop'",
            )

        self._log = CuratorLog(
            str(path),
            rows_read,
            rows_kept,
            missing={c: s[0] for c, s in per.items() if s[0]},
            undeclared={c: s[1] for c, s in per.items() if s[1]},
            clipped_low={c: s[2] for c, s in per.items() if s[2]},
            clipped_high={c: s[3] for c, s in per.items() if s[3]},
            ignored_columns=extra,
            sha256=file_sha256(path),
        )

    def _issues(
        self,
        i: int,
        name: str,
        counts: tuple[int, ...],
        missing: Mapping[str, MissingPolicy],
        other: Mapping[str, str],
    ) -> ColumnIssues:
        """The column's issues, with examples fetched only where they will be an error (their
        values reach only the curator-only ``Diagnostic.values``, see :mod:`dpql.codec`)."""
        n_missing, n_invalid = counts[0], counts[1]
        issues = ColumnIssues(name, missing=n_missing, invalid=n_invalid)
        if n_missing and missing.get(name, "error") == "error":
            first = self._problem_rows(i, "missing")[0][2]
            issues = replace(issues, missing_first_row=first)
        if n_invalid and (self._domain[name].kind == "numeric" or name not in other):
            rows = self._problem_rows(i, "invalid")
            examples = tuple((str(v), int(c), int(r)) for v, c, r, _ in rows)
            issues = replace(issues, invalid_distinct=int(rows[0][3]), examples=examples)
        return issues

    def _problem_rows(self, i: int, kind: Literal["missing", "invalid"]) -> list[tuple[Any, ...]]:
        undo = self._single_threaded()
        try:
            return self._fetch(sql.problem_rows_sql(i, kind, self.dialect))
        finally:
            undo()

    def _type_of(self, raw_name: str) -> str:
        return dict(self._columns())[raw_name]

    def _run(self, statement: str) -> None:
        self._fetch(statement)

    @property
    def curator_log(self) -> CuratorLog:
        return self._log

    def _stream_marginals(
        self, marginals: Sequence[tuple[int, Marginal]], out: list[np.ndarray]
    ) -> bool:
        """Add marginal counts to ``out`` without SQL GROUP BYs; False if the engine cannot."""
        return False

    def sums(self, queries: Sequence[Query]) -> list[np.ndarray]:
        out = [np.zeros(q.cells(self._domain)) for q in queries]
        marginals = [(i, q) for i, q in enumerate(queries) if isinstance(q, Marginal)]
        streamed = bool(marginals) and self._stream_marginals(marginals, out)
        if len(marginals) < len(queries) and not self._enc:
            self._run(self.dialect.materialise("enc", sql.encoded_sql(self._domain)))
            self._enc = True
        for stmt in sql.query_sql(queries, self._domain):
            if isinstance(stmt, sql.MarginalSQL) and streamed:
                continue
            rows = self._fetch(stmt.sql)
            if isinstance(stmt, sql.MarginalSQL):
                if rows:
                    cells, counts = zip(*rows, strict=True)
                    out[stmt.index][np.asarray(cells, dtype=np.int64)] = np.asarray(
                        counts, dtype=np.float64
                    )
            elif stmt.by_card is None:
                for i, value in zip(stmt.indices, rows[0], strict=True):
                    out[i][0] = float(value or 0)
            else:
                for code, *values in rows:
                    for i, value in zip(stmt.indices, values, strict=True):
                        out[i][int(code)] = float(value or 0)
        return out


class DuckDBEngine(_SQLEngine):
    """CSV/Parquet scanned out of core by DuckDB (see the module docstring).

    ``memory_limit`` (DuckDB syntax, e.g. ``"1GB"``) and ``threads`` bound the resources; what
    does not fit spills to a private (0700) temporary directory that :meth:`close` deletes.
    """

    dialect = sql.DUCKDB

    def __init__(
        self,
        path: Path | str,
        domain: Domain,
        *,
        fmt: DataFormat | None = None,
        missing: Mapping[str, MissingPolicy] | None = None,
        other: Mapping[str, str] | None = None,
        memory_limit: str = "1GB",
        threads: int | None = None,
    ):
        import duckdb

        path = Path(path)
        fmt = data_format(path, fmt)
        check_readable(path)
        self._threads = threads or os.cpu_count() or 1
        self._dir = tempfile.mkdtemp(prefix="dpql-duckdb-")  # 0700: it holds private codes
        # removed at close(), or when the engine is garbage-collected without one
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        # In-memory database: temporary tables spill to temp_directory past memory_limit, which
        # measured ~40% faster than writing a database file.
        self._con = duckdb.connect()
        try:
            self._con.execute(f"SET memory_limit = '{memory_limit}'")
            self._con.execute(f"SET threads = {int(self._threads)}")
            self._con.execute(f"SET temp_directory = '{os.path.join(self._dir, 'spill')}'")
            if fmt == "parquet":
                scan = f"read_parquet({sql.DUCKDB.string(str(path))})"
            else:  # the header is read here: DuckDB's sniffer may skip leading rows silently
                columns = ", ".join(f"{sql.DUCKDB.string(c)}: 'VARCHAR'" for c in csv_header(path))
                scan = (
                    f"read_csv({sql.DUCKDB.string(str(path))}, header = true, auto_detect = false, "
                    f"columns = {{{columns}}}, delim = ',', quote = '\"', escape = '\"')"
                )
            self._guard(
                path,
                fmt,
                lambda: self._con.execute(
                    f"CREATE OR REPLACE TEMPORARY VIEW source AS SELECT * FROM {scan}"
                ),
            )
            self._guard(
                path,
                fmt,
                lambda: self._encode(path, domain, fmt, dict(missing or {}), dict(other or {})),
            )
        except BaseException:
            self.close()
            raise

    def _guard(self, path: Path, fmt: DataFormat, step: Callable[[], object]) -> None:
        import duckdb

        try:
            step()
        except DiagnosticError:
            raise
        except (duckdb.InvalidInputException, duckdb.IOException, duckdb.ConversionException) as e:
            # DuckDB's message may quote a line or cell of the file: curator-only ``values``
            raise _ragged(path, fmt) or error(
                "E409",
                f"cannot read '{path}' (DuckDB: {type(e).__name__})",
                path,
                "check that the file is valid CSV (UTF-8) or Parquet; " + SHOW_MESSAGE,
                _engine_message("DuckDB", str(e)),
            ) from None
        except duckdb.Error as e:  # out of memory or disk, mostly
            raise error(
                "E410",
                f"DuckDB failed on '{path}' ({type(e).__name__})",
                path,
                "raise the engine's memory_limit or free space in the temporary directory; "
                + SHOW_MESSAGE,
                _engine_message("DuckDB", str(e)),
            ) from None

    def _fetch(self, statement: str) -> list[tuple[Any, ...]]:
        return self._con.execute(statement).fetchall()

    def _columns(self) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self._fetch("DESCRIBE SELECT * FROM source")]

    def _stream_marginals(
        self, marginals: Sequence[tuple[int, Marginal]], out: list[np.ndarray]
    ) -> bool:
        """All marginals in one pass over the kept rows of ``cube``, streamed in Arrow batches
        of :data:`STREAM_ROWS`: a weighted ``bincount`` of the row-major cell index per marginal
        and batch. Measured ~3x faster than one GROUP BY per marginal; memory stays bounded by
        the batch."""
        k = len(self._domain)
        select = ", ".join(f"c{j}" for j in range(k))
        query = f"SELECT {select}, w FROM cube WHERE keep"
        names = self._domain.names
        for batch in self._con.sql(query).to_arrow_reader(STREAM_ROWS):
            codes = [batch.column(j).to_numpy() for j in range(k)]
            weights = batch.column(k).to_numpy().astype(np.float64)
            for i, q in marginals:
                cell = np.zeros(batch.num_rows, dtype=np.int64)
                for name in q.columns:
                    cell *= self._domain.card(name)
                    cell += codes[names.index(name)]
                out[i] += np.bincount(cell, weights=weights, minlength=out[i].size)
        return True

    def encoded_batches(self, rows: int = STREAM_ROWS) -> Iterator[EncodedTable]:
        """One more scan of the source (``coded``), streamed in Arrow batches."""
        for batch in self._con.sql(sql.encoded_sql(self._domain)).to_arrow_reader(rows):
            yield _arrow_table(batch, self._domain)

    def _single_threaded(self) -> Callable[[], None]:
        self._con.execute("SET threads = 1")
        return lambda: self._con.execute(f"SET threads = {int(self._threads)}")

    def close(self) -> None:
        con = getattr(self, "_con", None)
        if con is not None:
            con.close()
            self._con = None
        self._cleanup()


def spark_unavailable() -> str | None:
    """Why the Spark engine cannot run here (``None`` when it can): pyspark or Java missing."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'dpql[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if java_home:  # Spark's launcher uses $JAVA_HOME/bin/java when JAVA_HOME is set
        if not os.path.isfile(os.path.join(java_home, "bin", "java")):
            return f"JAVA_HOME={java_home} has no bin/java"
    elif shutil.which("java") is None:
        return "Java is not installed (Spark needs a JDK 17+ on PATH or in JAVA_HOME)"
    return None


def local_spark_session(workdir: str, *, threads: int = 2, driver_memory: str = "1g") -> Any:
    """A quiet local Spark session: ``local[threads]``, ``driver_memory``, no web UI, no console
    progress, no logging (failures surface as exceptions), loopback networking, huge generated
    methods JIT-compiled (the encoding's are; measured 4x faster); scratch and spill files go to
    ``workdir``, which the caller creates private (0700) and removes.

    Static settings apply only when no Spark context runs in this process yet (Spark keeps one
    per process); otherwise the running one is returned as it is.
    """
    from pyspark.sql import SparkSession

    log4j = os.path.join(workdir, "log4j2.properties")
    with open(log4j, "w", encoding="utf-8") as f:
        f.write(SPARK_LOG4J)
    builder = (
        SparkSession.builder.master(f"local[{int(threads)}]")
        .appName("dpql")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.local.dir", os.path.join(workdir, "local"))
        # Spark creates its SQL warehouse folder in the working directory unless told otherwise.
        .config("spark.sql.warehouse.dir", os.path.join(workdir, "warehouse"))
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile=file:{log4j} {HUGE_METHODS}",
        )
        .config("spark.sql.shuffle.partitions", str(2 * int(threads)))
        .config("spark.pyspark.python", sys.executable)  # tasks run numpy in this interpreter
        .config("spark.pyspark.driver.python", sys.executable)
    )
    with warnings.catch_warnings():  # pyspark warns that it has not been tested with pandas 3
        warnings.filterwarnings("ignore", PANDAS_WARNING, FutureWarning)
        return builder.getOrCreate()


class SparkEngine(_SQLEngine):
    """The SQL engine on Spark: the file is read by Spark (CSV as text with the header's column
    names, Parquet with its types), ``cube`` and ``enc`` are cached (memory and disk), the
    queries run as Spark SQL aggregations, all marginals in one job of per-partition
    ``bincount``s (:meth:`_stream_marginals`). Needs ``pyspark`` >= 3.5 and Java 17+.

    Session: ``session`` when given, else the process's active or default one, else a local one
    (:func:`local_spark_session` with ``threads`` and ``driver_memory``) that :meth:`close`
    stops. The engine works in a ``newSession()`` of it, so its temporary views and settings do
    not collide with other engines or the caller's. Scratch files (spills of a local session,
    the encoded rows exported by :meth:`encoded_batches`) live in a private (0700) temporary
    directory that :meth:`close` deletes. CSV files are read by one task (``multiLine``, so
    quoted line breaks parse as the other engines do): prefer Parquet at scale.
    """

    dialect = sql.SPARK

    def __init__(
        self,
        path: Path | str,
        domain: Domain,
        *,
        fmt: DataFormat | None = None,
        missing: Mapping[str, MissingPolicy] | None = None,
        other: Mapping[str, str] | None = None,
        session: Any = None,
        threads: int | None = None,
        driver_memory: str = "1g",
    ):
        path = Path(path)
        fmt = data_format(path, fmt)
        check_readable(path)
        why = spark_unavailable()
        if why is not None:
            raise error("E410", f"the spark engine cannot run: {why}", path, SPARK_HINT)
        from pyspark.sql import SparkSession

        self._dir = tempfile.mkdtemp(prefix="dpql-spark-")  # 0700: it holds private codes
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        self._owned = None
        try:
            base = session or _running_session(SparkSession)
            if base is None:
                base = local_spark_session(
                    self._dir, threads=threads or os.cpu_count() or 1, driver_memory=driver_memory
                )
                self._owned = base
            self._spark = base.newSession()
            self._spark.conf.set("spark.sql.ansi.enabled", "false")  # DuckDB's NULL-on-error
            java_options = self._spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
            if HUGE_METHODS not in (java_options or ""):
                # The encoding compiles to methods beyond the JVM's JIT limit (8000 bytes), which
                # would run interpreted (~4x slower): fall back from whole-stage codegen there.
                self._spark.conf.set("spark.sql.codegen.hugeMethodLimit", "8000")
            self._spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(STREAM_ROWS))
            self._guard(path, fmt, lambda: self._open(path, fmt))
            self._guard(
                path,
                fmt,
                lambda: self._encode(path, domain, fmt, dict(missing or {}), dict(other or {})),
            )
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path, fmt: DataFormat) -> None:
        reader = self._spark.read
        if fmt == "parquet":
            frame = reader.parquet(str(path))
        else:
            from pyspark.sql.types import StringType, StructField, StructType

            header = csv_header(path)
            schema = StructType([StructField(name, StringType()) for name in header])
            frame = reader.csv(
                str(path),
                schema=schema,
                header=True,
                enforceSchema=True,
                multiLine=True,
                quote='"',
                escape='"',
                encoding="UTF-8",
                mode="FAILFAST",
            )
        frame.createOrReplaceTempView("source")
        self._frame = frame

    def _guard(self, path: Path, fmt: DataFormat, step: Callable[[], object]) -> None:
        """Run ``step``; Spark failures become E409 (unreadable file) or E410."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        try:
            step()
        except DiagnosticError:
            raise
        except (PySparkException, Py4JJavaError) as e:
            # Spark's message may quote a record of the file: curator-only ``values``
            text = _spark_message(e)
            kind = _spark_kind(e, text)
            if any(k in text for k in ("MALFORMED", "FAILED_READ_FILE", "PATH_NOT_FOUND")):
                raise _ragged(path, fmt) or error(
                    "E409",
                    f"cannot read '{path}' (Spark: {kind})",
                    path,
                    "check that the file is valid CSV (UTF-8) or Parquet; " + SHOW_MESSAGE,
                    _engine_message("Spark", text),
                ) from None
            raise error(
                "E410",
                f"Spark failed on '{path}' ({kind})",
                path,
                "raise the driver memory or free space in the temporary directory; " + SHOW_MESSAGE,
                _engine_message("Spark", text),
            ) from None

    def _fetch(self, statement: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._spark.sql(statement).collect()]

    def _columns(self) -> list[tuple[str, str]]:
        return [(f.name, f.dataType.simpleString()) for f in self._frame.schema.fields]

    def _stream_marginals(
        self, marginals: Sequence[tuple[int, Marginal]], out: list[np.ndarray]
    ) -> bool:
        """All marginals in one Spark job: each task adds weighted ``bincount``s of the kept
        rows of its partition of ``cube`` (Arrow batches, :func:`_marginal_counts`) and returns
        one dense vector of all cells; the driver adds the vectors. Replaces one GROUP BY job
        per marginal, whose scheduling dominated."""
        names = self._domain.names
        layout = [
            (
                tuple(names.index(c) for c in q.columns),
                tuple(self._domain.card(c) for c in q.columns),
            )
            for _, q in marginals
        ]
        k = len(self._domain)
        select = ", ".join(f"c{j}" for j in range(k))
        frame = self._spark.sql(f"SELECT {select}, w FROM cube WHERE keep")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", PANDAS_WARNING, FutureWarning)
            counts = frame.mapInArrow(partial(_marginal_counts, layout), "counts binary")
        sizes = [out[i].size for i, _ in marginals]
        for row in counts.collect():
            parts = np.split(np.frombuffer(row[0], dtype=np.float64), np.cumsum(sizes)[:-1])
            for (i, _), part in zip(marginals, parts, strict=True):
                out[i] += part
        return True

    def encoded_batches(self, rows: int = STREAM_ROWS) -> Iterator[EncodedTable]:
        """Spark writes the kept rows to Parquet in the private directory; read back in
        batches (the driver never holds more than a batch)."""
        import pyarrow.parquet as pq

        out = os.path.join(self._dir, "encoded")
        shutil.rmtree(out, ignore_errors=True)
        self._spark.sql(sql.encoded_sql(self._domain)).write.parquet(out)
        try:
            for part in sorted(Path(out).glob("*.parquet")):
                for batch in pq.ParquetFile(part).iter_batches(rows):
                    yield _arrow_table(batch, self._domain)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def close(self) -> None:
        spark = getattr(self, "_spark", None)
        if spark is not None:
            for table in ("cube", "enc"):
                try:
                    spark.sql(self.dialect.drop(table))
                except Exception:  # the session may be gone already
                    pass
            self._spark = None
        if self._owned is not None:
            self._owned.stop()
            self._owned = None
        self._cleanup()


def _running_session(spark_session: Any) -> Any:
    """The process's active or default Spark session, ``None`` when there is none."""
    try:
        return spark_session.active()
    except Exception:  # pyspark raises NO_ACTIVE_OR_DEFAULT_SESSION
        return None


SPARK_HINT = "install the spark extra (pip install 'dpql[spark]') and a JDK, or set data.engine"


def _marginal_counts(
    layout: Sequence[tuple[tuple[int, ...], tuple[int, ...]]], batches: Iterator[Any]
) -> Iterator[Any]:
    """Spark task body: the cell counts of every marginal (``(column indices, cards)`` of
    ``layout``) over Arrow batches of ``c0..c{k-1}, w``, as one float64 vector in one row."""
    import pyarrow as pa

    sizes = [int(np.prod(cards)) for _, cards in layout]
    total = np.zeros(sum(sizes))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    for batch in batches:
        codes = [np.asarray(c, dtype=np.int64) for c in batch.columns[:-1]]
        weights = np.asarray(batch.columns[-1], dtype=np.float64)
        for m, (columns, cards) in enumerate(layout):
            cell = np.zeros(batch.num_rows, dtype=np.int64)
            for j, card in zip(columns, cards, strict=True):
                cell *= card
                cell += codes[j]
            total[offsets[m] : offsets[m + 1]] += np.bincount(
                cell, weights=weights, minlength=sizes[m]
            )
    yield pa.RecordBatch.from_arrays([pa.array([total.tobytes()], pa.binary())], ["counts"])


def _ragged(path: Path, fmt: DataFormat) -> DiagnosticError | None:
    """Where a CSV the engine could not parse goes wrong (its messages carry no line)."""
    return ragged_row_error(path) if fmt == "csv" else None


def _engine_message(engine: str, text: str) -> str:
    """An engine's own message, for the curator-only ``Diagnostic.values`` (it may quote data)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{engine}'s message: {first}"


def _spark_kind(e: BaseException, text: str) -> str:
    """A Spark failure's error class (``[CLASS]`` at the start of its message) or the innermost
    exception's class name: what failed, without the message's text (which may quote data)."""
    found = re.match(r"\[([A-Z0-9_.]+)\]", text)
    if found:
        return found.group(1)
    cause = getattr(e, "java_exception", None)
    if cause is not None:
        while cause.getCause() is not None:
            cause = cause.getCause()
        return str(cause.getClass().getSimpleName())
    return type(e).__name__


def _spark_message(e: BaseException) -> str:
    """The innermost cause's first line of a Spark exception (no Java stack trace)."""
    java = getattr(e, "java_exception", None)
    if java is not None:
        cause = java
        while cause.getCause() is not None:
            cause = cause.getCause()
        text = str(cause.getMessage() or java.getMessage() or "")
    else:
        text = str(e)
    return text.strip().splitlines()[0] if text.strip() else type(e).__name__


def open_engine(
    path: Path | str,
    domain: Domain,
    *,
    engine: EngineName = "auto",
    fmt: DataFormat | None = None,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
    memory_limit: str = "1GB",
    threads: int | None = None,
) -> MeasurementEngine:
    """Open the private table with the named engine (``auto``: by file size, see module doc).

    ``memory_limit`` bounds DuckDB; ``threads`` bounds DuckDB and a local Spark session.
    Raises :class:`DiagnosticError` (E401-E410) for files that cannot be read or encoded.
    """
    path = Path(path)
    if engine == "auto":
        check_readable(path)
        limit = AUTO_THRESHOLD_BYTES[data_format(path, fmt)]
        engine = "memory" if path.stat().st_size < limit else "duckdb"
    if engine == "memory":
        return InMemoryEngine.from_file(path, domain, fmt=fmt, missing=missing, other=other)
    if engine == "duckdb":
        return DuckDBEngine(
            path,
            domain,
            fmt=fmt,
            missing=missing,
            other=other,
            memory_limit=memory_limit,
            threads=threads,
        )
    return SparkEngine(path, domain, fmt=fmt, missing=missing, other=other, threads=threads)
