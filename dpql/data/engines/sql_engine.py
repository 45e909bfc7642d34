"""The encoding and query protocol shared by the SQL engines (DuckDB, Spark): the codec's cell
rules (:mod:`dpql.data.sql`) and every query (:mod:`dpql.data.query_sql`) as SQL, validation
from the counts of one scan, the answers read back into numpy (see :mod:`dpql.data.engines`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpql.data import sql
from dpql.data.codec import (
    WHITESPACE,
    CuratorLog,
    MissingPolicy,
    check_policies,
    column_set_diagnostics,
    raise_if_any,
    storage_diagnostic,
)
from dpql.data.engines.base import STREAM_ROWS
from dpql.data.load import DataFormat, check_line_lengths, error, file_sha256, too_many_rows
from dpql.data.query_sql import MarginalSQL, query_sql
from dpql.domain import Domain, EncodedTable
from dpql.ir.queries import Marginal, Query


class SQLEngine:
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

    def encoded_batches(self, rows: int = STREAM_ROWS) -> Iterator[EncodedTable]:
        raise NotImplementedError

    def _malformed(self) -> str | None:
        """An SQL condition over ``source`` for rows the reader flags as malformed."""
        return None

    def _rejected_rows(self) -> int:
        """How many records the reader left out as malformed in the scan just run (each is
        added back as a row of empty cells)."""
        return 0

    def _encode(
        self,
        path: Path,
        domain: Domain,
        fmt: DataFormat,
        missing: Mapping[str, MissingPolicy],
        other: Mapping[str, str],
        max_rows: int | None,
    ) -> None:
        """Build the cube in one scan of ``source`` and set the curator log from its counts.
        Total over cells and records, as the codec: only the spec's rules and the file's schema
        (E404, E406, E408) or its size (E403, E411) can refuse (:mod:`dpql.data.load`)."""
        self._domain = domain
        check_policies(domain, missing, other)
        raw = {name.strip(WHITESPACE): (name, sql.storage_of(t)) for name, t in self._columns()}
        diagnostics, extra = column_set_diagnostics(list(raw), domain, str(path))
        raise_if_any(diagnostics)
        raise_if_any(
            [
                storage_diagnostic(col, self._type_of(raw[col.name][0]), str(path))
                for col in domain
                if raw[col.name][1] == "other"
                or (raw[col.name][1] == "float" and col.kind == "categorical")
            ]
        )
        if max_rows is not None and self._count_upto(max_rows + 1) > max_rows:
            raise too_many_rows(path, max_rows)  # checked before the scan: a bomb stops here
        if fmt == "csv":
            check_line_lengths(path)

        malformed = self._malformed()
        if malformed is None and fmt == "csv":
            malformed = sql.malformed_sql([name for name, _ in raw.values()], self.dialect)
        self._views("", raw, "source", missing, other, malformed)
        self._run(self.dialect.materialise("cube", sql.cube_sql(domain, "coded_file")))
        rejected = self._rejected_rows()
        coded = "SELECT * FROM coded_file"
        if rejected:  # the reader's malformed records, back as rows of empty cells
            nulls = ", ".join(
                f"CAST(NULL AS {self.dialect.text_type}) AS {self.dialect.ident(name)}"
                for name, _ in raw.values()
            )
            self._run(
                f"CREATE OR REPLACE TEMPORARY VIEW source_bad AS "
                f"SELECT {nulls} FROM range({int(rejected)})"
            )
            self._views("_bad", raw, "source_bad", missing, other, None)
            self._run(f"INSERT INTO cube {sql.cube_sql(domain, 'coded_file_bad')}")
            coded += " UNION ALL SELECT * FROM coded_file_bad"
        self._run(f"CREATE OR REPLACE TEMPORARY VIEW coded AS {coded}")
        stats = [int(x) for x in self._fetch(sql.stats_sql(domain, self.dialect))[0]]
        rows_read, rows_kept = stats[0], stats[1]
        if rows_read == 0:
            raise error("E403", f"data file '{path}' has no rows", path)
        if max_rows is not None and rows_read > max_rows:
            raise too_many_rows(path, max_rows)
        per: dict[str, tuple[int, ...]] = {}
        for i, col in enumerate(domain):
            k = 2 + sql.STATS_PER_COLUMN * i
            per[col.name] = tuple(stats[k : k + sql.STATS_PER_COLUMN])
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
            malformed_rows=rejected,  # those flagged in SQL count as empty cells here
        )

    def _views(
        self,
        suffix: str,
        raw: Mapping[str, tuple[str, sql.Storage]],
        source: str,
        missing: Mapping[str, MissingPolicy],
        other: Mapping[str, str],
        malformed: str | None,
    ) -> None:
        """``parsed``, ``staged`` and ``coded_file`` (names + ``suffix``) over ``source``."""
        d, domain = self.dialect, self._domain
        views = {
            "parsed": sql.parsed_sql(domain, raw, d, source, malformed),
            "staged": sql.staged_sql(domain, other, "parsed" + suffix),
            "coded_file": sql.coded_sql(domain, missing, other, "staged" + suffix),
        }
        for name, select in views.items():
            self._run(f"CREATE OR REPLACE TEMPORARY VIEW {name}{suffix} AS {select}")

    def _count_upto(self, limit: int) -> int:
        """Rows of ``source``, counted up to ``limit`` (the scan stops there)."""
        statement = f"SELECT COUNT(*) FROM (SELECT 1 FROM source LIMIT {int(limit)}) AS head"
        return int(self._fetch(statement)[0][0])

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
        for stmt in query_sql(queries, self._domain):
            if isinstance(stmt, MarginalSQL) and streamed:
                continue
            rows = self._fetch(stmt.sql)
            if isinstance(stmt, MarginalSQL):
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
