"""The Spark engine: the SQL engine's queries as Spark SQL on a session (needs Java and
``pyspark``, the ``spark`` extra), and a quiet local session (see :mod:`dpql.data.engines`)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dpql.data import sql
from dpql.data.codec import MissingPolicy
from dpql.data.engines.base import STREAM_ROWS, arrow_table, engine_message
from dpql.data.engines.sql_engine import SQLEngine
from dpql.data.load import (
    MAX_LINE_BYTES,
    SHOW_MESSAGE,
    DataFormat,
    check_readable,
    csv_header,
    data_format,
    error,
)
from dpql.diagnostics import DiagnosticError
from dpql.domain import Domain, EncodedTable
from dpql.ir.queries import Marginal

CORRUPT = "_dpql_malformed_record"  # the reader's column for a malformed record's text
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


class SparkEngine(SQLEngine):
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
        max_rows: int | None = None,
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
                lambda: self._encode(
                    path, domain, fmt, dict(missing or {}), dict(other or {}), max_rows
                ),
            )
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path, fmt: DataFormat) -> None:
        reader = self._spark.read
        self._flag: str | None = None
        if fmt == "parquet":
            frame = reader.parquet(str(path))
        else:
            from pyspark.sql.types import StringType, StructField, StructType

            header = csv_header(path)
            # malformed records (wrong field count) keep their text in a column of their own
            self._flag = CORRUPT
            while self._flag in header:
                self._flag += "_"
            fields = [*header, self._flag]
            schema = StructType([StructField(name, StringType()) for name in fields])
            frame = reader.csv(
                str(path),
                schema=schema,
                header=True,
                enforceSchema=True,
                multiLine=True,
                quote='"',
                escape='"',
                encoding="UTF-8",
                mode="PERMISSIVE",
                columnNameOfCorruptRecord=self._flag,
                maxCharsPerColumn=MAX_LINE_BYTES,
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
                raise error(
                    "E409",
                    f"cannot read '{path}' (Spark: {kind})",
                    path,
                    "check that the file is valid CSV (UTF-8) or Parquet; " + SHOW_MESSAGE,
                    engine_message("Spark", text),
                ) from None
            raise error(
                "E410",
                f"Spark failed on '{path}' ({kind})",
                path,
                "raise the driver memory or free space in the temporary directory; " + SHOW_MESSAGE,
                engine_message("Spark", text),
            ) from None

    def _malformed(self) -> str | None:
        if self._flag is None:
            return None
        names = [f.name for f in self._frame.schema.fields if f.name != self._flag]
        return sql.malformed_sql(names, self.dialect, self._flag)

    def _fetch(self, statement: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._spark.sql(statement).collect()]

    def _columns(self) -> list[tuple[str, str]]:
        fields = self._frame.schema.fields
        return [(f.name, f.dataType.simpleString()) for f in fields if f.name != self._flag]

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
                    yield arrow_table(batch, self._domain)
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
