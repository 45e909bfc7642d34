"""DP-SGD's input: the private rows in the public encoding, addressed by row number.

Part of the privacy boundary (``dpql.data``). The GAN backend's DP-SGD is the one consumer of
private rows outside the measurement engines; it reads them through :func:`open_private_rows`:

* when the measurement engine holds the table in memory (small files), the encoded table itself;
* otherwise (DuckDB, Spark) a :class:`RowStore`: the engine streams the kept rows once, in
  batches, into a fixed-width binary file in a private (0700) temporary directory, memory-mapped
  read-only. DP-SGD then fetches each step's Poisson sample by row number
  (:meth:`RowStore.take`), so memory does not grow with the row count (the OS pages the file
  in and out); :meth:`RowStore.close` deletes the directory.

Codes and scaled values are stored exactly (codes as the narrowest unsigned integer that holds the
column's cardinality, scaled values as float64), so ``take`` returns what the codec would.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from dpql.data.codec import MissingPolicy
from dpql.data.engines import STREAM_ROWS, EngineName, InMemoryEngine, open_engine
from dpql.data.load import DataFormat
from dpql.domain import Domain, EncodedTable, NumericColumn


def _record_dtype(domain: Domain) -> np.dtype:
    """One fixed-width record per row: ``c{i}`` codes, ``u{i}`` scaled values."""
    fields: list[tuple[str, type]] = []
    for i, col in enumerate(domain):
        fields.append((f"c{i}", np.min_scalar_type(max(col.card - 1, 0)).type))
        if isinstance(col, NumericColumn):
            fields.append((f"u{i}", np.float64))
    return np.dtype(fields)


class RowStore:
    """Encoded private rows on disk, addressed by row number (see the module docstring).

    Built from an iterable of :class:`EncodedTable` batches (an engine's ``encoded_batches``);
    rows are numbered in the order the batches give them. Use as a context manager or call
    :meth:`close`; the files are removed at close or garbage collection, whichever is first.
    """

    def __init__(self, domain: Domain, batches: Iterable[EncodedTable]):
        self._domain = domain
        self._dtype = _record_dtype(domain)
        self._dir = tempfile.mkdtemp(prefix="dpql-rows-")  # 0700: it holds private rows
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        path = os.path.join(self._dir, "rows.bin")
        n = 0
        try:
            with open(path, "wb") as f:
                for batch in batches:
                    records = np.empty(batch.n, dtype=self._dtype)
                    for i, col in enumerate(domain):
                        records[f"c{i}"] = batch.codes[col.name]
                        if isinstance(col, NumericColumn):
                            records[f"u{i}"] = batch.scaled[col.name]
                    records.tofile(f)
                    n += batch.n
            self._rows = np.memmap(path, dtype=self._dtype, mode="r", shape=(n,)) if n else None
        except BaseException:
            self.close()
            raise
        self._n = n

    @property
    def domain(self) -> Domain:
        return self._domain

    @property
    def n(self) -> int:
        """Number of rows stored (private: for DP-SGD's sampling only, never an output)."""
        return self._n

    def take(self, rows: np.ndarray) -> EncodedTable:
        """The rows with these numbers, in the order given (int32 codes, float64 scaled)."""
        if self._rows is None:
            raise IndexError("the row store is empty")
        records = self._rows[np.asarray(rows, dtype=np.int64)]
        codes, scaled = {}, {}
        for i, col in enumerate(self._domain):
            codes[col.name] = records[f"c{i}"].astype(np.int32)
            if isinstance(col, NumericColumn):
                scaled[col.name] = records[f"u{i}"].astype(np.float64)
        return EncodedTable(self._domain, codes, scaled)

    def close(self) -> None:
        """Unmap and delete the file (idempotent)."""
        self._rows = None
        self._cleanup()

    def __enter__(self) -> RowStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def open_private_rows(
    path: Path | str,
    domain: Domain,
    *,
    engine: EngineName = "auto",
    fmt: DataFormat | None = None,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
    memory_limit: str = "1GB",
    threads: int | None = None,
    batch_rows: int = STREAM_ROWS,
    max_rows: int | None = None,
) -> Iterator[EncodedTable | RowStore]:
    """The kept rows of the private table for DP-SGD, opened with the measurement engine the
    spec names (same validation, diagnostics and encoding as the measurements).

    Yields the in-memory table when the engine holds one, else a :class:`RowStore` filled from
    the engine in batches of ``batch_rows`` (the engine is closed once the store is full);
    everything is released on exit. Raises :class:`~dpql.diagnostics.DiagnosticError` as
    :func:`~dpql.data.engines.open_engine` does.
    """
    eng = open_engine(
        path,
        domain,
        engine=engine,
        fmt=fmt,
        missing=missing,
        other=other,
        memory_limit=memory_limit,
        threads=threads,
        max_rows=max_rows,
    )
    try:
        if isinstance(eng, InMemoryEngine):
            rows: EncodedTable | RowStore = eng.table
        else:
            rows = RowStore(domain, eng.encoded_batches(batch_rows))
    finally:
        if not isinstance(eng, InMemoryEngine):
            eng.close()
    try:
        yield rows
    finally:
        if isinstance(rows, RowStore):
            rows.close()
