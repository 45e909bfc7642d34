"""The encoding and query protocol shared by the SQL engines (DuckDB, Spark): the codec's cell
rules and every query as SQL (:mod:`dpql.data.sql`), validation from the counts of one scan, the
answers read back into numpy (see :mod:`dpql.data.engines`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

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
from dpql.data.engines.base import STREAM_ROWS
from dpql.data.load import DataFormat, error, file_sha256
from dpql.domain import Domain, EncodedTable
from dpql.plan.ir import Marginal, Query


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
