"""The DuckDB engine: CSV/Parquet scanned out of core, the encoding and queries in SQL (see
:mod:`dpql.data.engines`)."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
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


class DuckDBEngine(SQLEngine):
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
        max_rows: int | None = None,
    ):
        import duckdb

        path = Path(path)
        fmt = data_format(path, fmt)
        check_readable(path)
        self._path, self._csv = path, False
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
            # dpql reports its own progress; DuckDB's bar would write over it on stderr
            self._con.execute("SET enable_progress_bar = false")
            if fmt == "parquet":
                scan = f"read_parquet({sql.DUCKDB.string(str(path))})"
            else:  # the header is read here: DuckDB's sniffer may skip leading rows silently
                columns = ", ".join(f"{sql.DUCKDB.string(c)}: 'VARCHAR'" for c in csv_header(path))
                # malformed records (field count, encoding) are left out and recorded in
                # ``reject_errors``; :meth:`_rejected_rows` adds them back as empty rows
                scan = (
                    f"read_csv({sql.DUCKDB.string(str(path))}, header = true, auto_detect = false, "
                    f"columns = {{{columns}}}, delim = ',', quote = '\"', escape = '\"', "
                    f"ignore_errors = true, store_rejects = true, "
                    f"max_line_size = {MAX_LINE_BYTES})"
                )
            self._csv = fmt == "csv"
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
                lambda: self._encode(
                    path, domain, fmt, dict(missing or {}), dict(other or {}), max_rows
                ),
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
            raise error(
                "E409",
                f"cannot read '{path}' (DuckDB: {type(e).__name__})",
                path,
                "check that the file is valid CSV (UTF-8) or Parquet; " + SHOW_MESSAGE,
                engine_message("DuckDB", str(e)),
            ) from None
        except duckdb.Error as e:  # out of memory or disk, mostly
            raise error(
                "E410",
                f"DuckDB failed on '{path}' ({type(e).__name__})",
                path,
                "raise the engine's memory_limit or free space in the temporary directory; "
                + SHOW_MESSAGE,
                engine_message("DuckDB", str(e)),
            ) from None

    def _count_upto(self, limit: int) -> int:
        count = super()._count_upto(limit)
        self._clear_rejects()  # only the cube's scan counts
        return count

    def _clear_rejects(self) -> None:
        if self._csv:
            self._con.execute("DELETE FROM reject_errors")

    def _rejected_rows(self) -> int:
        """Records the CSV reader rejected in the cube's scan: one per line it names. A line
        over :data:`MAX_LINE_BYTES` refuses the file, as the in-memory reader does."""
        if not self._csv:
            return 0
        kinds = self._fetch("SELECT DISTINCT CAST(error_type AS VARCHAR) FROM reject_errors")
        if any("LINE SIZE" in str(k[0]).upper() for k in kinds):
            raise error(
                "E409",
                f"a line of '{self._path}' is longer than {MAX_LINE_BYTES >> 20} MiB",
                self._path,
                "a data file holds one record per line; check that it is CSV with line breaks",
            )
        return int(self._fetch("SELECT COUNT(DISTINCT line) FROM reject_errors")[0][0])

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
            yield arrow_table(batch, self._domain)

    def close(self) -> None:
        con = getattr(self, "_con", None)
        if con is not None:
            con.close()
            self._con = None
        self._cleanup()
