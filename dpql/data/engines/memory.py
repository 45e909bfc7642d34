"""The in-memory engine: the table encoded by :mod:`dpql.data.codec` in numpy, answered by
:mod:`dpql.ir.exact` in row chunks (see :mod:`dpql.data.engines`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from dpql.data.codec import CuratorLog, MissingPolicy
from dpql.data.engines.base import STREAM_ROWS
from dpql.data.load import DataFormat, load_table
from dpql.domain import Domain, EncodedTable
from dpql.ir.exact import grid_sums_all
from dpql.ir.queries import Query


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
        max_rows: int | None = None,
    ) -> InMemoryEngine:
        result = load_table(path, domain, fmt=fmt, missing=missing, other=other, max_rows=max_rows)
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
