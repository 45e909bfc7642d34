"""The public encoding of tables: raw data frame -> :class:`EncodedTable` -> data frame.

Pure functions, no file I/O; used by the data layer (private rows), by the release's commit
(decoding the synthetic table) and by ``dpql evaluate``. The encoding is the one of
:mod:`dpql.domain`: a categorical value becomes its index in the declared ``values``; a numeric
value is clipped to ``[lo, hi]``, scaled to [0, 1] (``scaled``) and given its public bin (``codes``,
via ``NumericColumn.bin_of``).

Cell semantics (every measurement engine implements exactly these, see ``dpql.data.sql``; the
test ``tests/test_data_contract.py`` runs one corpus of odd cells through every engine). They are
total: no cell, and no record, makes encoding fail (design invariant 6: a release must not depend
on one record), so the rules only say which value a cell becomes:

* text is stripped of surrounding whitespace (``WHITESPACE``), column names too; ``" 39 "`` is 39;
* a cell is *empty* when it is null/NaN or blank text (``"?"`` is an ordinary category);
* a cell is *declared missing* when it holds one of the column's public ``missing_values``
  (sentinels such as 0, -9 or "NA"): a numeric cell whose number (read as below) equals one as
  a double, a categorical cell whose stripped text equals one. It is a missing cell exactly like
  an empty one (the curator log counts both as missing; ``dpql validate`` tells them apart);
* a numeric cell stored as text is read as a decimal number (``NUMBER_PATTERN``); anything else
  (``"abc"``, ``"NaN"``, ``"inf"``, a decimal that overflows a double, such as one of 4,300
  digits) is *unreadable*, as is a stored infinity (a stored NaN is empty). A finite number
  is taken as written, also in an integer column (``39.5`` stays 39.5: ``integer`` only rounds
  decoded values);
* a categorical cell not among the declared values is *undeclared*: it becomes the column's
  ``other`` catch-all when the spec names one, else it is unreadable;
* an unreadable cell is treated as missing, like an empty one, under the column's
  :data:`MissingPolicy`: ``"drop"`` the row, :class:`Fill` with a public value, or ``"keep"``:
  the column is nullable (:mod:`dpql.domain`) and the cell gets its null code (numeric: scaled
  value ``NULL_SCALED``), decoded back to an empty cell. Without a rule a nullable column keeps
  and any other drops;
* numeric values outside the public bounds are clipped;
* a malformed record (CSV: :func:`dpql.data.load.read_csv_text`) reaches the codec as a row of
  empty cells.

How many cells each rule touched goes to the curator-only :class:`CuratorLog`, never into a
release output, a message or the exit status. ``dpql validate`` (:func:`inspect_frame`) is the
curator's strict look at the same cells, with row numbers (and values on request).

The only diagnostics of encoding are about the file and the spec, never a cell: E404 (a declared
column absent from the header), E406 (a column stored as a type that cannot hold it, e.g. a
Parquet boolean for a numeric column) and E408 (a rule naming an unknown column or value). Each
is a fact of the file's schema or of the spec, the same for every table with that header, so it
does not depend on any one record. No "did you mean" is computed from a data column name (the
suggestion would reveal it).

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
MAX_EXAMPLES = 10  # row numbers and values listed per column by dpql validate

# Stable codes of the data layer (E4xx), ``{code: title}``: a view of the registry
# (:mod:`dpql.diagnostics_registry`, where each is documented).
CODES: dict[str, str] = titles(["data"])


@dataclass(frozen=True)
class Fill:
    """Replace a missing cell by this public value (a declared category, or a number in bounds)."""

    value: str | float


MissingPolicy = Literal["drop", "keep"] | Fill


@dataclass(frozen=True)
class CuratorLog:
    """What encoding did to the private table. CURATOR-ONLY: it holds the true row count and
    per-column counts of private rows; it must never reach a release output or the oracle."""

    source: str
    rows_read: int
    rows_kept: int
    missing: Mapping[str, int] = field(default_factory=dict)  # empty or declared missing
    undeclared: Mapping[str, int] = field(default_factory=dict)  # unreadable or undeclared
    clipped_low: Mapping[str, int] = field(default_factory=dict)
    clipped_high: Mapping[str, int] = field(default_factory=dict)
    ignored_columns: tuple[str, ...] = ()
    sha256: str | None = None
    malformed_rows: int = 0


@dataclass(frozen=True)
class EncodingResult:
    table: EncodedTable
    curator_log: CuratorLog


@dataclass(frozen=True)
class ColumnIssues:
    """The cells of one column that a rule had to handle, for ``dpql validate`` (CURATOR-ONLY:
    row numbers and values of private rows). ``unreadable`` counts numeric cells that are not a
    finite number and categorical cells not among the declared values (sent to ``other`` when
    the column has one); ``below``/``above`` count finite numbers clipped to the bounds;
    ``declared`` counts cells holding one of the column's ``missing_values``.
    ``rows`` maps each of ``"empty"``, ``"unreadable"``, ``"below"``, ``"above"``,
    ``"declared"`` to its first :data:`MAX_EXAMPLES` row numbers (1-based over data rows);
    ``examples`` are the unreadable values ``(value, rows, first_row)``, the most frequent
    first (ties by first row), of ``distinct`` distinct ones."""

    column: str
    empty: int = 0
    unreadable: int = 0
    below: int = 0
    above: int = 0
    rows: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    examples: tuple[tuple[str, int, int], ...] = ()
    distinct: int = 0
    declared: int = 0


# ---------------------------------------------------------------------------------------------
# Checks and diagnostics shared by every engine (about the spec and the file's schema only)


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
        if policy == "keep" and col is not None and not col.nullable:
            sink.error(
                "E408",
                f"missing: keep for column '{name}', whose domain has no null value",
                hint="build the domain from the spec (missing: keep makes a column nullable)",
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


def default_policy(col: NumericColumn | CategoricalColumn) -> MissingPolicy:
    """The rule of a column the caller gave none: keep when nullable, else drop."""
    return "keep" if col.nullable else "drop"


def storage_diagnostic(
    col: NumericColumn | CategoricalColumn, stored_as: str, source: str
) -> Diagnostic:
    """E406: the file stores a column as a type that cannot hold it (a fact of the file's
    schema, the same for every table with that schema: it does not depend on a record)."""
    want = "numbers" if isinstance(col, NumericColumn) else "text or integers"
    return Diagnostic(
        "E406",
        f"column '{col.name}' is stored as {stored_as}; "
        f"the schema declares it {col.kind}, which needs {want}",
        SourcePos(source),
        "store the column as text or numbers",
        private=True,
    )


def column_set_diagnostics(
    present: list[str], domain: Domain, source: str
) -> tuple[list[Diagnostic], tuple[str, ...]]:
    """E404 for declared columns the data lacks; returns the undeclared (ignored) ones too.

    Record-independent: the header is the same for every table of the file's schema. The
    data's other column names stay out of the message and hint (they are outside the schema);
    the closest one goes to the curator-only ``values``."""
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


def _usable(col: NumericColumn | CategoricalColumn, s: pd.Series) -> bool:
    kind = _storage(s)
    return kind != "other" and not (kind == "float" and isinstance(col, CategoricalColumn))


@dataclass(frozen=True)
class _Parsed:
    """One column read from a frame: values (float64 for numeric, int64 codes for categorical;
    meaningless where ``empty`` or ``unreadable``), the cleaned text, and the two masks."""

    values: np.ndarray
    text: pd.Series
    empty: np.ndarray
    unreadable: np.ndarray
    declared: np.ndarray  # a declared missing value (never empty or unreadable)


def _blank(text: pd.Series) -> np.ndarray:
    return (text.isna() | (text == "")).to_numpy(dtype=bool)


def _decimals(text: pd.Series) -> np.ndarray:
    """Decimal text as doubles, each correctly rounded (Arrow's cast; NaN for a missing cell).
    pandas' own parser rounds some 17-digit decimals one unit in the last place differently
    from version to version; DuckDB's reader rounds correctly, so the engines agree bit for
    bit whatever pandas is installed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cells = pa.array(text.to_numpy(dtype=object, na_value=None), type=pa.string())
    try:
        return pc.cast(cells, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:  # text NUMBER_PATTERN admits but Arrow does not: pandas' reading
        return pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _parse_numeric(col: NumericColumn, s: pd.Series) -> _Parsed:
    if _storage(s) == "text":
        text = s.astype("string").str.strip(WHITESPACE)
        empty = _blank(text)
        ok = text.str.fullmatch(NUMBER_PATTERN).fillna(False).to_numpy(dtype=bool)
        values = _decimals(text.where(ok))
    else:
        text = s
        values = s.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
        empty = np.isnan(values)  # a stored null or NaN is an empty cell
    # not a finite number: unparsable text, an infinity, or a decimal that overflows a double
    # (1e400, or 4,300 digits)
    unreadable = ~empty & ~np.isfinite(values)
    declared = np.isin(values, np.asarray(col.missing_values, dtype=np.float64))
    return _Parsed(values, text, empty, unreadable, declared)


def _parse_categorical(col: CategoricalColumn, s: pd.Series) -> _Parsed:
    text = s.astype("string").str.strip(WHITESPACE)
    empty = _blank(text)
    codes = pd.Index(col.labels, dtype="string").get_indexer(text).astype(np.int64)
    declared = text.isin(col.missing_values).to_numpy(dtype=bool, na_value=False)
    unreadable = ~empty & ~declared & (codes < 0)
    if col.parent is not None:  # a grouped column: a fine value is coded by its group
        codes = np.where(codes >= 0, np.asarray(col.parent, dtype=np.int64)[codes], codes)
    return _Parsed(codes, text, empty, unreadable, declared)


def _parse(col: NumericColumn | CategoricalColumn, s: pd.Series) -> _Parsed:
    return _parse_numeric(col, s) if isinstance(col, NumericColumn) else _parse_categorical(col, s)


def _prepare(
    df: pd.DataFrame,
    domain: Domain,
    missing: Mapping[str, MissingPolicy],
    other: Mapping[str, str],
    source: str,
) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """Check the rules and the frame's schema (E404, E406, E408); the frame with trimmed
    column names and the undeclared columns."""
    check_policies(domain, missing, other)
    df = df.rename(columns=lambda c: str(c).strip(WHITESPACE))
    diagnostics, extra = column_set_diagnostics(list(df.columns), domain, source)
    raise_if_any(diagnostics)
    raise_if_any(
        [
            storage_diagnostic(col, str(df[col.name].dtype), source)
            for col in domain
            if not _usable(col, df[col.name])
        ]
    )
    return df, extra


def encode_frame(
    df: pd.DataFrame,
    domain: Domain,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
    *,
    source: str = "<data>",
    malformed_rows: int = 0,
) -> EncodingResult:
    """Encode a raw frame into the public encoding of ``domain`` (see the module docstring).

    ``missing`` maps a column to its rule (default :func:`default_policy`); ``other`` maps a
    categorical column to its catch-all category. ``source`` names the data in diagnostics;
    ``malformed_rows`` (how many of the frame's rows stand for malformed records) only goes to
    the curator log. Total over cells: raises :class:`DiagnosticError` only for the spec's rules
    and the frame's schema (E404, E406, E408), never for a cell.
    """
    missing, other = dict(missing or {}), dict(other or {})
    df, extra = _prepare(df, domain, missing, other, source)
    parsed: dict[str, np.ndarray] = {}
    drop = np.zeros(len(df), dtype=bool)
    nulls: dict[str, np.ndarray] = {}  # missing cells of nullable (missing: keep) columns
    log_missing: dict[str, int] = {}
    log_undeclared: dict[str, int] = {}
    for col in domain:
        p = _parse(col, df[col.name])
        missing_cell = p.empty | p.declared
        values, absent = p.values, missing_cell | p.unreadable
        if col.name in other:  # undeclared categories go to the catch-all
            catch_all = col.code_of_label(other[col.name])  # type: ignore[union-attr]
            values = np.where(p.unreadable, catch_all, values)
            absent = missing_cell
        policy = missing.get(col.name, default_policy(col))
        if policy == "drop":
            drop |= absent
        elif policy == "keep":
            nulls[col.name] = absent
        else:
            fill = (
                col.code_of_label(str(policy.value))
                if isinstance(col, CategoricalColumn)
                else float(policy.value)
            )
            values = np.where(absent, fill, values)
        if isinstance(col, NumericColumn):  # finite placeholders where the value is unused
            values = np.where(np.isfinite(values), values, col.lo)
        parsed[col.name] = values
        if missing_cell.any():
            log_missing[col.name] = int(missing_cell.sum())
        if p.unreadable.any():
            log_undeclared[col.name] = int(p.unreadable.sum())

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
        live = values if null is None else values[~null]
        below, above = int((live < col.lo).sum()), int((live > col.hi).sum())
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
        source,
        len(df),
        int(keep.sum()),
        log_missing,
        log_undeclared,
        low,
        high,
        extra,
        malformed_rows=malformed_rows,
    )
    return EncodingResult(EncodedTable(domain, codes, scaled), log)


def inspect_frame(
    df: pd.DataFrame,
    domain: Domain,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
    *,
    source: str = "<data>",
) -> list[ColumnIssues]:
    """The strict look at a raw frame for ``dpql validate`` (CURATOR-ONLY): per declared column
    the empty, unreadable (or undeclared) and out-of-bounds cells, with row numbers and the
    unreadable values. Same parsing as :func:`encode_frame`; raises what it raises."""
    missing, other = dict(missing or {}), dict(other or {})
    df, _ = _prepare(df, domain, missing, other, source)
    out = []
    for col in domain:
        p = _parse(col, df[col.name])
        masks = {"empty": p.empty, "unreadable": p.unreadable, "declared": p.declared}
        if isinstance(col, NumericColumn):
            finite = np.where(np.isfinite(p.values), p.values, col.lo)
            value = ~p.empty & ~p.unreadable & ~p.declared
            masks["below"] = value & (finite < col.lo)
            masks["above"] = value & (finite > col.hi)
        counts = {k: int(m.sum()) for k, m in masks.items()}
        rows = {
            k: tuple(int(r) + 1 for r in np.flatnonzero(m)[:MAX_EXAMPLES])
            for k, m in masks.items()
            if counts[k]
        }
        examples, distinct = _examples(p.text, p.unreadable) if counts["unreadable"] else ((), 0)
        out.append(
            ColumnIssues(
                col.name,
                counts["empty"],
                counts["unreadable"],
                counts.get("below", 0),
                counts.get("above", 0),
                rows,
                examples,
                distinct,
                counts["declared"],
            )
        )
    return out


def _examples(values: pd.Series, bad: np.ndarray) -> tuple[tuple[tuple[str, int, int], ...], int]:
    rows = pd.DataFrame({"v": values[bad].astype(str).to_numpy(), "r": np.flatnonzero(bad) + 1})
    stats = rows.groupby("v", sort=False)["r"].agg(["size", "min"])
    stats = stats.sort_values(["size", "min"], ascending=[False, True])
    top = tuple(
        (str(v), int(c), int(r))
        for v, c, r in zip(stats.index[:MAX_EXAMPLES], stats["size"], stats["min"], strict=False)
    )
    return top, len(stats)


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
