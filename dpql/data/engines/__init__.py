"""Measurement engines: exact *sums* of IR queries over the private table (privacy boundary).

An engine answers ``sums(queries)``: for each query the per-record vector summed over the rows
that survive encoding (the measurer divides by the *public* n). Engines are interchangeable:
the differential test checks that all of them agree to 1e-12 on the same file.

* :class:`InMemoryEngine`: the table encoded by :mod:`dpql.data.codec` in numpy, answered by
  :mod:`dpql.ir.exact` in row chunks (memory for intermediates bounded by the chunk).
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

Modules: :mod:`.base` (the protocol and shared helpers), :mod:`.memory`, :mod:`.sql_engine` (the
SQL engines' shared encoding and query protocol), :mod:`.duckdb`, :mod:`.spark`; every name is
re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from dpql.data.codec import MissingPolicy
from dpql.data.engines.base import STREAM_ROWS, MeasurementEngine
from dpql.data.engines.duckdb import DuckDBEngine
from dpql.data.engines.memory import InMemoryEngine
from dpql.data.engines.spark import (
    HUGE_METHODS,
    PANDAS_WARNING,
    SPARK_HINT,
    SparkEngine,
    local_spark_session,
    spark_unavailable,
)
from dpql.data.load import DataFormat, check_header, check_readable, data_format
from dpql.domain import Domain

__all__ = [
    "AUTO_THRESHOLD_BYTES",
    "HUGE_METHODS",
    "PANDAS_WARNING",
    "SPARK_HINT",
    "STREAM_ROWS",
    "DuckDBEngine",
    "EngineName",
    "InMemoryEngine",
    "MeasurementEngine",
    "SparkEngine",
    "local_spark_session",
    "open_engine",
    "spark_unavailable",
]

EngineName = Literal["auto", "memory", "duckdb", "spark"]
# File sizes from which ``auto`` uses DuckDB: about 2 million Adult-like rows either way
# (Parquet is ~8x smaller than CSV; 10M such rows are 150 MiB of Parquet).
AUTO_THRESHOLD_BYTES: dict[str, int] = {"csv": 200 * 2**20, "parquet": 25 * 2**20}


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
    max_rows: int | None = None,
) -> MeasurementEngine:
    """Open the private table with the named engine (``auto``: by file size, see module doc).

    ``memory_limit`` bounds DuckDB; ``threads`` bounds DuckDB and a local Spark session;
    ``max_rows`` (the public ``data.rows``) bounds the rows read (E411 beyond). Every engine
    reads every cell and record as :mod:`dpql.data.codec` and :mod:`dpql.data.load` say: it raises
    :class:`DiagnosticError` (E401-E411) only for the file, never for one record.
    """
    path = Path(path)
    check_readable(path)
    check_header(path, data_format(path, fmt), domain.names)
    if engine == "auto":
        limit = AUTO_THRESHOLD_BYTES[data_format(path, fmt)]
        engine = "memory" if path.stat().st_size < limit else "duckdb"
    if engine == "memory":
        return InMemoryEngine.from_file(
            path, domain, fmt=fmt, missing=missing, other=other, max_rows=max_rows
        )
    if engine == "duckdb":
        return DuckDBEngine(
            path,
            domain,
            fmt=fmt,
            missing=missing,
            other=other,
            memory_limit=memory_limit,
            threads=threads,
            max_rows=max_rows,
        )
    return SparkEngine(
        path, domain, fmt=fmt, missing=missing, other=other, threads=threads, max_rows=max_rows
    )
