"""The public encoding of tables: raw data frame -> :class:`EncodedTable` -> data frame.

Pure functions, no file I/O; used by the data layer (private rows) and by the synthesizers
(synthetic rows). The encoding is the one of :mod:`dpql.domain`: a categorical value becomes its
index in the declared ``values``; a numeric value is clipped to ``[lo, hi]``, scaled to [0, 1]
(``scaled``) and given its public bin (``codes``, via ``NumericColumn.bin_of``).

Cell semantics (every measurement engine implements exactly these, see ``dpql.data.sql``):

* text is stripped of surrounding whitespace, column names too;
* a cell is *missing* when it is null/NaN or blank text (``"?"`` is an ordinary category);
* a numeric cell stored as text must read as a decimal number (``NUMBER_PATTERN``); anything else
  (``"abc"``, ``"NaN"``, ``"inf"``) is a wrong type (E406), as is an infinite stored number;
* a categorical cell not among the declared values is *undeclared*: mapped to the column's
  ``other`` catch-all when the spec names one, else an error (E405) with the number of rows and
  the first one;
* a missing cell follows the column's :data:`MissingPolicy`: ``"error"`` (E407), ``"drop"`` the
  row, :class:`Fill` with a public value, or ``"keep"``: the column is nullable
  (:mod:`dpql.domain`) and the cell gets its null code (numeric: scaled value ``NULL_SCALED``),
  decoded back to an empty cell;
* numeric values outside the public bounds are clipped; how many were clipped goes to the
  curator-only :class:`CuratorLog`, never into a release output.

Diagnostics about cells (E404-E407) are *private* (:class:`dpql.diagnostics.Diagnostic`): they
name the file, the row and the column, never a cell's value nor a column outside the schema, and
their data line is never quoted. The offending values go to the diagnostic's curator-only
``values``, shown only on request (``dpql compile --show-values``). Hints point to the
data-independent rules (``other``, ``drop``, ``fill``), never to declaring a value seen in the
data: the schema is published, so a value taken from the data would leak it. No "did you mean"
is computed from a data value or a data column name (the suggestion would reveal it).

Dropped rows are simply absent. Every DP calibration uses the *public* row count ``n`` of the
spec, and averages are sums divided by that public ``n`` (see ``dpql.data.measure``), so the true
number of rows after dropping is never needed by, nor revealed through, a mechanism.
"""

from __future__ import annotations

import difflib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd

from dpql.diagnostics import (
    Diagnostic,
    DiagnosticError,
    DiagnosticSink,
    SourcePos,
    did_you_mean,
)
from dpql.diagnostics_registry import titles
from dpql.domain import NULL_SCALED, CategoricalColumn, Domain, EncodedTable, NumericColumn

# A decimal number as text; no backslashes so the same pattern works in every SQL dialect.
NUMBER_PATTERN = r"[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?"
WHITESPACE = " \t\r\n"  # stripped around text cells and column names (same set in SQL)
MAX_EXAMPLES = 10  # undeclared values listed per column in an error

# Stable codes of the data layer (E4xx), ``{code: title}``: a view of the registry
# (:mod:`dpql.diagnostics_registry`, where each is documented).
CODES: dict[str, str] = titles(["data"])


@dataclass(frozen=True)
class Fill:
    """Replace a missing cell by this public value (a declared category, or a number in bounds)."""

    value: str | float


MissingPolicy = Literal["error", "drop", "keep"] | Fill


@dataclass(frozen=True)
class CuratorLog:
    """What encoding did to the private table. CURATOR-ONLY: it holds the true row count and
    per-column counts of private rows; it must never reach a release output or the oracle."""

    source: str
    rows_read: int
    rows_kept: int
    missing: Mapping[str, int] = field(default_factory=dict)
    undeclared: Mapping[str, int] = field(default_factory=dict)
    clipped_low: Mapping[str, int] = field(default_factory=dict)
    clipped_high: Mapping[str, int] = field(default_factory=dict)
    ignored_columns: tuple[str, ...] = ()
    sha256: str | None = None


@dataclass(frozen=True)
class EncodingResult:
    table: EncodedTable
    curator_log: CuratorLog


@dataclass(frozen=True)
class ColumnIssues:
    """Bad cells of one column, as found by an engine: ``invalid`` counts wrong-type (numeric)
    or undeclared (categorical) cells; ``examples`` are ``(value, rows, first_row)`` with the
    most frequent first (ties by first row), ``first_row`` 1-based over data rows."""

    column: str
    missing: int = 0
    missing_first_row: int = 0
    invalid: int = 0
    invalid_distinct: int = 0
    examples: tuple[tuple[str, int, int], ...] = ()
    stored_as: str | None = None  # a storage type that cannot hold the column at all


# ---------------------------------------------------------------------------------------------
# Checks and diagnostics shared by every engine


def check_policies(
    domain: Domain, missing: Mapping[str, MissingPolicy], other: Mapping[str, str]
) -> None:
    """E408 when a policy names an unknown column or a fill/other value outside the domain."""
    sink = DiagnosticSink()
    for name in [*missing, *other]:
        if name not in domain:
            sink.error(
                "E408",
                f"missing-value rule for unknown column '{name}'",
                hint=did_you_mean(name, domain.names),
            )
    for name, policy in missing.items():
        col = domain[name] if name in domain else None
        if isinstance(policy, Fill) and col is not None and not _is_member(col, policy.value):
            sink.error(
                "E408",
                f"fill value {policy.value!r} of column '{name}' is not in its public domain",
                hint="use a declared category or a number in [min, max]",
            )
    for name, value in other.items():
        col = domain[name] if name in domain else None
        if col is not None and not (isinstance(col, CategoricalColumn) and value in col.labels):
            sink.error(
                "E408",
                f"'other' category {value!r} of column '{name}' is not declared",
                hint="the catch-all must be one of the column's values",
            )
    sink.raise_if_errors()


def _is_member(col: NumericColumn | CategoricalColumn, value: str | float) -> bool:
    if isinstance(col, CategoricalColumn):
        return value in col.labels
    return not isinstance(value, str) and col.lo <= float(value) <= col.hi


def column_diagnostics(
    issues: ColumnIssues,
    domain: Domain,
    missing_policy: MissingPolicy,
    has_other: bool,
    source: str,
    line_offset: int | None,
) -> list[Diagnostic]:
    """The errors one column's issues amount to under its policies (engine-independent text).

    Private diagnostics (see the module docstring): the message names the column and a row, the
    values go to the curator-only ``values``; no hint is derived from a value."""

    def pos(row: int) -> SourcePos:
        return SourcePos(source, row + line_offset if line_offset is not None else 0)

    col = domain[issues.column]
    out: list[Diagnostic] = []
    if issues.stored_as is not None:
        want = "numbers" if isinstance(col, NumericColumn) else "text or integers"
        out.append(
            Diagnostic(
                "E406",
                f"column '{col.name}' is stored as {issues.stored_as}; "
                f"the schema declares it {col.kind}, which needs {want}",
                SourcePos(source),
                "store the column as text or numbers",
                private=True,
            )
        )
        return out
    if issues.invalid and isinstance(col, NumericColumn):
        row = issues.examples[0][2]
        out.append(
            Diagnostic(
                "E406",
                f"column '{col.name}' is numeric but {_rows(issues.invalid)} "
                f"{'has a cell that is' if issues.invalid == 1 else 'have cells that are'} "
                f"not a finite number, {_which(issues.invalid)} row {row}",
                pos(row),
                "fix the data: write numbers in decimal notation, and a missing value as an "
                f"empty cell (then schema.{col.name}.missing: drop or fill applies)",
                private=True,
                values=_listed(issues),
            )
        )
    elif issues.invalid and not has_other:
        out.append(
            Diagnostic(
                "E405",
                f"column '{col.name}' has {_rows(issues.invalid)} with a value not among "
                f"schema.{col.name}.values, {_which(issues.invalid)} row {issues.examples[0][2]}",
                pos(issues.examples[0][2]),
                f"map unlisted values to a catch-all category: set schema.{col.name}.other to "
                "one of its values (e.g. an 'Other' category chosen without looking at the "
                "data), or fix the data; the schema is published, so never add a value because "
                "it occurs in the data",
                private=True,
                values=_listed(issues),
            )
        )
    if issues.missing and missing_policy == "error":
        rules = (
            "keep (missingness becomes a public null value, synthesized and written back as "
            "an empty cell), drop (the row is left out; data.rows stays the public count), "
            f"fill (the public value schema.{col.name}.fill)"
        )
        if isinstance(col, CategoricalColumn):
            rules += " or other (the catch-all category)"
        out.append(
            Diagnostic(
                "E407",
                f"column '{col.name}' has {issues.missing} missing value(s), the first at row "
                f"{issues.missing_first_row}",
                pos(issues.missing_first_row),
                f"set schema.{col.name}.missing to {rules}, or fix the data",
                private=True,
            )
        )
    return out


def _listed(issues: ColumnIssues) -> str:
    """The offending values with their row counts (curator-only ``Diagnostic.values``)."""
    listed = ", ".join(f"{v!r} ({_rows(c)}, first at row {r})" for v, c, r in issues.examples)
    more = issues.invalid_distinct - len(issues.examples)
    return "values: " + listed + (f" and {more} more value(s)" if more > 0 else "")


def _which(count: int) -> str:
    return "at" if count == 1 else "e.g."


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def column_set_diagnostics(
    present: list[str], domain: Domain, source: str
) -> tuple[list[Diagnostic], tuple[str, ...]]:
    """E404 for declared columns the data lacks; returns the undeclared (ignored) ones too.

    The data's other column names stay out of the message and hint (they are outside the
    schema); the closest one goes to the curator-only ``values``."""
    extra = tuple(c for c in present if c not in domain)
    out = []
    for name in domain.names:
        if name in present:
            continue
        close = difflib.get_close_matches(name, extra, n=1, cutoff=0.6)
        out.append(
            Diagnostic(
                "E404",
                f"the data has no column '{name}' declared in the schema",
                SourcePos(source, 1 if extra or present else 0),
                "add the column to the data or remove it from the schema (header names must "
                "match exactly, up to surrounding spaces)",
                private=True,
                values=f"closest data column: {close[0]!r}" if close else None,
            )
        )
    return out, extra


def raise_if_any(diagnostics: list[Diagnostic]) -> None:
    if diagnostics:
        raise DiagnosticError(diagnostics)


# ---------------------------------------------------------------------------------------------
# Encoding a pandas frame


def _storage(s: pd.Series) -> Literal["text", "exact", "float", "other"]:
    if pd.api.types.is_bool_dtype(s):
        return "other"
    if pd.api.types.is_integer_dtype(s):
        return "exact"
    if pd.api.types.is_float_dtype(s):
        return "float"
    if pd.api.types.is_string_dtype(s) or s.dtype == object:
        return "text"
    return "other"


def _first_rows(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0]) + 1


def _examples(values: pd.Series, bad: np.ndarray) -> tuple[tuple[tuple[str, int, int], ...], int]:
    rows = pd.DataFrame({"v": values[bad].astype(str).to_numpy(), "r": np.flatnonzero(bad) + 1})
    stats = rows.groupby("v", sort=False)["r"].agg(["size", "min"])
    stats = stats.sort_values(["size", "min"], ascending=[False, True])
    top = tuple(
        (str(v), int(c), int(r))
        for v, c, r in zip(stats.index[:MAX_EXAMPLES], stats["size"], stats["min"], strict=False)
    )
    return top, len(stats)


@dataclass(frozen=True)
class _Parsed:
    """One column read from a frame: values (float64 for numeric, int64 codes for categorical;
    meaningless where ``missing`` or ``invalid``) and its issues."""

    values: np.ndarray
    missing: np.ndarray
    invalid: np.ndarray
    issues: ColumnIssues


def _blank(text: pd.Series) -> np.ndarray:
    return (text.isna() | (text == "")).to_numpy(dtype=bool)


def _parse_numeric(col: NumericColumn, s: pd.Series) -> _Parsed:
    kind = _storage(s)
    if kind == "other":
        return _unusable(col.name, s)
    if kind == "text":
        text = s.astype("string").str.strip(WHITESPACE)
        missing = _blank(text)
        ok = text.str.fullmatch(NUMBER_PATTERN).fillna(False).to_numpy(dtype=bool)
        invalid = ~missing & ~ok
        numbers = pd.to_numeric(text.where(ok), errors="coerce")
        values = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
        # a decimal that overflows a double (1e400) is not a finite number: E406, like "inf"
        overflow = ok & np.isinf(values)
        invalid |= overflow
        values[overflow] = np.nan
    else:
        text = s
        values = s.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
        missing = np.isnan(values)
        invalid = np.isinf(values)
    return _Parsed(values, missing, invalid, _issues(col.name, text, missing, invalid))


def _parse_categorical(col: CategoricalColumn, s: pd.Series) -> _Parsed:
    if _storage(s) in ("float", "other"):
        return _unusable(col.name, s)
    text = s.astype("string").str.strip(WHITESPACE)
    missing = _blank(text)
    codes = pd.Index(col.labels, dtype="string").get_indexer(text).astype(np.int64)
    invalid = ~missing & (codes < 0)
    if col.parent is not None:  # a grouped column: a fine value is coded by its group
        codes = np.where(codes >= 0, np.asarray(col.parent, dtype=np.int64)[codes], codes)
    return _Parsed(codes, missing, invalid, _issues(col.name, text, missing, invalid))


def _unusable(name: str, s: pd.Series) -> _Parsed:
    none = np.zeros(len(s), dtype=bool)
    return _Parsed(np.zeros(len(s)), none, none, ColumnIssues(name, stored_as=str(s.dtype)))


def _issues(name: str, s: pd.Series, missing: np.ndarray, invalid: np.ndarray) -> ColumnIssues:
    examples, distinct = _examples(s, invalid) if invalid.any() else ((), 0)
    return ColumnIssues(
        name,
        missing=int(missing.sum()),
        missing_first_row=_first_rows(missing) if missing.any() else 0,
        invalid=int(invalid.sum()),
        invalid_distinct=distinct,
        examples=examples,
    )


def encode_frame(
    df: pd.DataFrame,
    domain: Domain,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
    *,
    source: str = "<data>",
    line_offset: int | None = None,
) -> EncodingResult:
    """Encode a raw frame into the public encoding of ``domain`` (see the module docstring).

    ``missing`` maps a column to its policy (default ``"error"``); ``other`` maps a categorical
    column to its catch-all category. ``source`` names the data in diagnostics; with
    ``line_offset`` (1 for a CSV with a header line) data row ``r`` is reported at line
    ``r + line_offset``. Raises :class:`DiagnosticError` with every problem found (E404-E408).
    """
    missing, other = dict(missing or {}), dict(other or {})
    check_policies(domain, missing, other)
    df = df.rename(columns=lambda c: str(c).strip(WHITESPACE))
    diagnostics, extra = column_set_diagnostics(list(df.columns), domain, source)
    raise_if_any(diagnostics)

    parsed: dict[str, np.ndarray] = {}
    drop = np.zeros(len(df), dtype=bool)
    nulls: dict[str, np.ndarray] = {}  # missing cells of nullable (missing: keep) columns
    log_missing: dict[str, int] = {}
    log_undeclared: dict[str, int] = {}
    for col in domain:
        p = (
            _parse_numeric(col, df[col.name])
            if isinstance(col, NumericColumn)
            else _parse_categorical(col, df[col.name])
        )
        policy = missing.get(col.name, "error")
        diagnostics += column_diagnostics(
            p.issues, domain, policy, col.name in other, source, line_offset
        )
        values = p.values
        if col.name in other:  # undeclared categories go to the catch-all
            values = np.where(p.invalid, col.code_of_label(other[col.name]), values)  # type: ignore[union-attr]
        if policy == "drop":
            drop |= p.missing
        elif policy == "keep":
            nulls[col.name] = p.missing
        elif isinstance(policy, Fill):
            fill = (
                col.code_of_label(str(policy.value))
                if isinstance(col, CategoricalColumn)
                else float(policy.value)
            )
            values = np.where(p.missing, fill, values)
        parsed[col.name] = values
        if p.issues.missing:
            log_missing[col.name] = p.issues.missing
        if p.issues.invalid:
            log_undeclared[col.name] = p.issues.invalid
    raise_if_any(diagnostics)

    keep = ~drop
    codes: dict[str, np.ndarray] = {}
    scaled: dict[str, np.ndarray] = {}
    low: dict[str, int] = {}
    high: dict[str, int] = {}
    for col in domain:
        values = parsed[col.name][keep]
        null = nulls[col.name][keep] if col.name in nulls else None
        if isinstance(col, CategoricalColumn):
            codes[col.name] = values.astype(np.int32)
            if null is not None:
                codes[col.name] = np.where(null, col.null_code, codes[col.name]).astype(np.int32)
            continue
        below, above = int((values < col.lo).sum()), int((values > col.hi).sum())
        if below:
            low[col.name] = below
        if above:
            high[col.name] = above
        clipped = np.clip(values, col.lo, col.hi)
        scaled[col.name] = (clipped - col.lo) / col.span
        codes[col.name] = col.bin_of(clipped)
        if null is not None:
            scaled[col.name] = np.where(null, NULL_SCALED, scaled[col.name])
            codes[col.name] = np.where(null, col.null_code, codes[col.name]).astype(np.int32)
    log = CuratorLog(
        source, len(df), int(keep.sum()), log_missing, log_undeclared, low, high, extra
    )
    return EncodingResult(EncodedTable(domain, codes, scaled), log)


# ---------------------------------------------------------------------------------------------
# Decoding


def decode_values(
    domain: Domain, codes: Mapping[str, np.ndarray], scaled: Mapping[str, np.ndarray]
) -> pd.DataFrame:
    """Rows in original units from categorical ``codes`` and numeric ``scaled`` values.

    Scaled values are clipped to [0, 1] (post-processing keeps outputs in the public bounds);
    integer columns are rounded to the nearest integer. Column order is the domain's. A grouped
    column's group code becomes a fine value of that group drawn uniformly (:func:`fine_values`).
    """
    out: dict[str, object] = {}
    for col in domain:
        if col.nullable:
            out[col.name] = _decode_nullable(col, codes[col.name], scaled.get(col.name))
            continue
        if isinstance(col, CategoricalColumn):
            if col.fine is not None:
                out[col.name] = fine_values(col, np.asarray(codes[col.name]))
                continue
            out[col.name] = np.asarray(col.values, dtype=object)[np.asarray(codes[col.name])]
            continue
        x = col.lo + np.clip(np.asarray(scaled[col.name], dtype=np.float64), 0.0, 1.0) * col.span
        out[col.name] = np.clip(np.rint(x), col.lo, col.hi).astype(np.int64) if col.integer else x
    return pd.DataFrame(out)


def _decode_nullable(
    col: NumericColumn | CategoricalColumn, codes: np.ndarray, scaled: np.ndarray | None
) -> object:
    """A nullable column in original units: its null code becomes an empty cell (None/NaN/NA)."""
    codes = np.asarray(codes)
    null = codes == col.null_code
    if isinstance(col, CategoricalColumn):
        safe = np.where(null, 0, codes)
        sub = replace(col, nullable=False)
        values = decode_values(Domain((sub,)), {col.name: safe}, {})[col.name].to_numpy(object)
        values[null] = None
        return values
    assert scaled is not None
    sub = replace(col, nullable=False)
    x = decode_values(Domain((sub,)), {}, {col.name: scaled})[col.name].to_numpy()
    if col.integer:
        return pd.Series(np.where(null, 0, x), dtype="Int64").where(~null, pd.NA).array
    return np.where(null, np.nan, x)


def decode(table: EncodedTable) -> pd.DataFrame:
    """An encoded table back in original units (see :func:`decode_values`)."""
    return decode_values(table.domain, table.codes, table.scaled)


def fine_values(col: CategoricalColumn, codes: np.ndarray) -> np.ndarray:
    """Fine values of a grouped column for group ``codes``: each drawn uniformly among its
    group's fine values. This spends no budget: it is post-processing of the DP group codes with
    public randomness, independent of the private data (the group file is public). The draw is
    seeded from the column name and the codes, so the same codes decode to the same table."""
    assert col.fine is not None and col.parent is not None
    parent = np.asarray(col.parent, dtype=np.int64)
    order = np.argsort(parent, kind="stable")
    size = np.bincount(parent, minlength=len(col.values))
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    codes = np.asarray(codes, dtype=np.int64)
    seed = [zlib.crc32(col.name.encode("utf-8")), zlib.crc32(codes.tobytes())]
    u = np.random.default_rng(seed).random(codes.shape[0])
    pick = start[codes] + np.minimum((u * size[codes]).astype(np.int64), size[codes] - 1)
    return np.asarray(col.fine, dtype=object)[order[pick]]
