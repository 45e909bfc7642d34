"""What every measurement engine shares: the :class:`MeasurementEngine` protocol, the Arrow
batch -> :class:`~dpql.domain.EncodedTable` conversion and the curator-only wording of an
engine's own failure message (see :mod:`dpql.data.engines`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from dpql.data.codec import CuratorLog
from dpql.domain import Domain, EncodedTable
from dpql.ir.queries import Query

STREAM_ROWS = 1 << 20  # rows per Arrow batch when DuckDB streams codes to numpy


class MeasurementEngine(Protocol):
    """Exact sums of queries over the private rows. ``curator_log`` is curator-only."""

    @property
    def curator_log(self) -> CuratorLog: ...

    def sums(self, queries: Sequence[Query]) -> list[np.ndarray]:
        """Per query, the sum over rows of its per-record vector (length ``q.cells``) in whole
        steps of the query's public grid (:func:`dpql.ir.queries.query_grid`): counts for
        integer-valued queries, ``sum round(v(x) / 2^-k)`` for real-valued ones (rounded per
        record, :func:`dpql.ir.exact.grid_sums_all`). Whole numbers, as float64."""
        ...

    def encoded_batches(self, rows: int = STREAM_ROWS) -> Iterator[EncodedTable]:
        """The kept rows in the public encoding (codes and scaled values bit-identical to
        :mod:`dpql.data.codec`), at most ``rows`` per batch, in an engine-defined order."""
        ...

    def close(self) -> None: ...


def arrow_table(batch: Any, domain: Domain) -> EncodedTable:
    """An Arrow batch with columns ``c{i}`` (and ``u{i}`` for numeric columns) as a table."""
    names = batch.schema.names
    codes, scaled = {}, {}
    for i, col in enumerate(domain):
        codes[col.name] = np.asarray(batch.column(names.index(f"c{i}")), dtype=np.int32)
        if col.kind == "numeric":
            u = batch.column(names.index(f"u{i}"))
            scaled[col.name] = np.asarray(u, dtype=np.float64)
    return EncodedTable(domain, codes, scaled)


def engine_message(engine: str, text: str) -> str:
    """An engine's own message, for the curator-only ``Diagnostic.values`` (it may quote data)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{engine}'s message: {first}"
