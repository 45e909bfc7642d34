"""The one handle on the private table that the rest of a release gets (the privacy boundary).

``open_private(source, ledger, noise)`` yields a :class:`PrivateTable`: its ``oracle`` answers
queries only through mechanisms (:class:`~dpql.data.measure.PrivateMeasurer`), its ``rows()``
gives DP-SGD its row access, and ``public_table`` reads a *public* table (an external synthetic
one) with the same schema checks. Synthesizers and post-processing receive this handle; they
never import :mod:`dpql.data`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpql.data.codec import MissingPolicy
from dpql.data.engines import InMemoryEngine, open_engine
from dpql.data.frame import encode_dataframe
from dpql.data.load import load_public_table, require_spec_data_file, rules_from_spec
from dpql.data.measure import CuratorSummary, PrivateMeasurer
from dpql.data.rows import open_private_rows
from dpql.domain import Domain, EncodedTable
from dpql.privacy.ledger import Ledger
from dpql.privacy.noise import NoiseSource
from dpql.spec.load import LoadedSpec


@dataclass(frozen=True)
class DataSource:
    """Where the private table is and how it is read: all public facts of the spec (the
    ``missing``/``other`` rules are per-column, data-independent)."""

    path: Path
    domain: Domain
    rows: int  # the public n
    engine: str
    fmt: str | None
    missing: Mapping[str, MissingPolicy]
    other: Mapping[str, str]
    #: a pandas DataFrame that is the private table, instead of the file at ``path``
    frame: Any = None

    @classmethod
    def from_spec(cls, spec: LoadedSpec, data: Any = None) -> DataSource:
        """The spec's data source; ``data`` (a path, or a pandas DataFrame held in memory by
        the in-memory engine) replaces the spec's ``data.path``, with the spec's schema, public
        row count and missing-value rules."""
        missing, other = rules_from_spec(spec.model)
        d = spec.model.data
        if data is None:
            require_spec_data_file(spec)
            return cls(spec.data_path, spec.domain, spec.rows, d.engine, d.format, missing, other)
        if isinstance(data, str | os.PathLike):
            return cls(Path(data), spec.domain, spec.rows, d.engine, None, missing, other)
        return cls(spec.data_path, spec.domain, spec.rows, "memory", None, missing, other, data)

    def _options(self) -> dict[str, Any]:
        return {
            "fmt": self.fmt,
            "missing": self.missing,
            "other": self.other,
            "max_rows": self.rows,
        }


class PrivateTable:
    """The private table behind a measurement oracle, and DP-SGD's row access."""

    def __init__(self, source: DataSource, ledger: Ledger, noise: NoiseSource):
        self.source = source
        self._frame_engine: InMemoryEngine | None = None
        if source.frame is not None:
            encoded = encode_dataframe(source.frame, source.domain, source.missing, source.other)
            engine: Any = InMemoryEngine(encoded.table, encoded.curator_log)
            self._frame_engine = engine
        else:
            engine = open_engine(
                source.path, source.domain, engine=source.engine, **source._options()
            )
        self.oracle = PrivateMeasurer(engine, source.rows, ledger, noise)

    def rows(self) -> AbstractContextManager[Any]:
        if self._frame_engine is not None:
            return nullcontext(self._frame_engine.table)
        s = self.source
        return open_private_rows(s.path, s.domain, engine=s.engine, **s._options())

    def public_table(self, path: Path) -> EncodedTable:
        """A public table (an external synthetic one), read strictly (E412)."""
        s = self.source
        return load_public_table(path, s.domain, missing=s.missing, other=s.other).table

    def curator_summary(self) -> CuratorSummary:
        """CURATOR-ONLY facts (true row count, clip counts): never part of a release."""
        return self.oracle.curator_summary()

    def close(self) -> None:
        self.oracle.close()


@contextmanager
def open_private(source: DataSource, ledger: Ledger, noise: NoiseSource) -> Iterator[PrivateTable]:
    table = PrivateTable(source, ledger, noise)
    try:
        yield table
    finally:
        table.close()
