"""Reading the private table from a file (CSV, gzip CSV or Parquet) into the public encoding.

Part of the privacy boundary (``dpql.data``): the only code besides DP-SGD that opens the data.

Reading is total over records (design invariant 6): no record makes it fail. A CSV record whose
field count differs from the header's, or that holds bytes that are not UTF-8 (or the character
U+FFFD, which is what other readers make of such bytes), is *malformed*: it stays one record,
with every cell empty, and the columns' missing-value rules apply (:mod:`dpql.data.codec`). Blank
lines are no records. Every engine reads CSV this way (:func:`read_csv_text` here, the SQL
engines in :mod:`dpql.data.engines`).

What may still refuse a file is a fact about the file, not about one record, each a
:class:`DiagnosticError` naming the file (see ``dpql.data.codec.CODES``):

* E401/E402: the path is missing, not a regular file, or of no known format;
* E403: the file has no header or no rows (neighbours under replace-one have as many rows);
* E404/E406: a declared column is absent from the header, or stored as a type that cannot
  hold it (the file's schema);
* E409: the file is not gzip/Parquet/CSV as a whole (a corrupt gzip stream or Parquet footer,
  a header that names a column twice), or a line longer than :data:`MAX_LINE_BYTES`: no
  record of a table the schema describes needs one, and reading it whole could exhaust memory;
* E411: the file has more rows than the public ``data.rows``: every neighbour of a table of n
  rows has n rows, so this is a fact of the file's size; reading stops there, which bounds
  the work of a file that expands without end (a gzip bomb).

All of them are private diagnostics: no line of the file is quoted, and a reader's own message
(which may quote bytes or cells of the file) goes to the curator-only ``Diagnostic.values``.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import stat
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from dpql.data.codec import EncodingResult, Fill, MissingPolicy, encode_frame, inspect_frame
from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.domain import Domain

if TYPE_CHECKING:
    from dpql.spec.load import LoadedSpec
    from dpql.spec.models import ReleaseSpec

DataFormat = Literal["csv", "parquet"]

MAX_LINE_BYTES = 8 << 20  # a longer line refuses the file (E409); DuckDB's max_line_size too
CHUNK_ROWS = 1 << 16  # CSV records turned into a frame at a time (bounds Python objects)
REPLACEMENT = "\ufffd"  # what a reader makes of bytes that are not UTF-8

_SUFFIXES: dict[str, DataFormat] = {
    ".csv": "csv",
    ".csv.gz": "csv",
    ".txt": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def error(
    code: str,
    message: str,
    path: Path | str,
    hint: str | None = None,
    values: str | None = None,
) -> DiagnosticError:
    """A private diagnostic about the data file (``values``: text shown only on request)."""
    return DiagnosticError(
        [Diagnostic(code, message, SourcePos(str(path)), hint, private=True, values=values)]
    )


# Appended to hints whose diagnostic keeps a reader's or engine's message in ``values``.
SHOW_MESSAGE = "dpql compile --show-values shows the reader's own message (it may quote data)"


def reader_message(e: BaseException) -> str:
    """A reader's own message, for ``Diagnostic.values`` only: it may quote the file's bytes."""
    text = str(e).strip()
    return f"reader's message: {text.splitlines()[0] if text else type(e).__name__}"


def _decode_problem(e: BaseException) -> str:
    """What kind of decoding failed, without the reader's text (which may quote bytes)."""
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text ({e.reason})"
    if isinstance(e, gzip.BadGzipFile):
        return "not a gzip file"
    if isinstance(e, zlib.error | EOFError):
        return "corrupt or truncated gzip data"
    return type(e).__name__


def data_format(path: Path, declared: DataFormat | None = None) -> DataFormat:
    """The declared format, else the one the file name implies (E402 when none does)."""
    if declared is not None:
        return declared
    name = path.name.lower()
    for suffix, fmt in sorted(_SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if name.endswith(suffix):
            return fmt
    raise error(
        "E402",
        f"cannot tell the format of '{path.name}' from its name",
        path,
        "name it *.csv, *.csv.gz or *.parquet, or set data.format: csv | parquet",
    )


def require_given_file(path: Path, given_as: str) -> None:
    """E401 when ``path``, given on the command line as ``given_as`` (``--synthetic``, the
    DATA argument), does not exist: said before any file is read, with the folder a relative
    path is resolved against (the current one, not the spec's as for ``data.path``)."""
    if not (path.exists() or path.is_symlink()):
        raise error(
            "E401",
            f"{given_as} '{path}' does not exist",
            path,
            f"the path is relative to the current folder {Path.cwd()}"
            + (", not to the spec's" if given_as.startswith("--") else ""),
        )


def require_spec_data_file(spec: LoadedSpec) -> None:
    """E401 at the spec's ``data.path`` when no file is there (before anything is read), with
    the folder the path is relative to; other unreadable files are :func:`check_readable`'s."""
    path = spec.data_path
    if path.exists() or path.is_symlink():
        return
    where = spec.doc.value_pos(("data", "path")) if spec.doc.has(("data", "path")) else None
    raise DiagnosticError(
        [
            Diagnostic(
                "E401",
                f"data file '{path}' does not exist",
                where or SourcePos(str(spec.path)),
                f"data.path is relative to the spec's folder {spec.path.parent}",
            )
        ]
    )


def check_readable(path: Path) -> None:
    """E401 unless ``path`` is a readable regular file (a FIFO or device would block or never
    end; a symlink loop cannot be opened); E403 when it has no bytes."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None  # reported below, with the hint
    except OSError as e:  # e.g. a symlink loop
        raise error("E401", f"cannot read data file '{path}': {e.strerror or e}", path) from None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise error(
            "E401",
            f"data path '{path}' is not a regular file (a pipe, socket or device)",
            path,
            "point data.path at a CSV or Parquet file",
        )
    try:
        with path.open("rb") as f:
            first = f.read(1)
    except FileNotFoundError:
        raise error(
            "E401",
            f"data file '{path}' does not exist",
            path,
            "data.path is relative to the spec file",
        ) from None
    except IsADirectoryError:
        raise error("E401", f"data path '{path}' is a directory, not a file", path) from None
    except OSError as e:
        raise error("E401", f"cannot read data file '{path}': {e.strerror or e}", path) from None
    if not first:
        raise error("E403", f"data file '{path}' is empty", path, "a header line and rows needed")


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of the file's bytes (curator log only: it fingerprints private data)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when it starts with the gzip magic number (E409 when it is
    named ``*.gz`` and does not: the other engines go by the name)."""
    with path.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if not gzipped and path.name.lower().endswith(".gz"):
        raise error("E409", f"cannot decode '{path}' as csv: not a gzip file", path)
    return gzip.open(path, "rb") if gzipped else path.open("rb")


def _lines(f: IO[bytes], path: Path, bad_text: list[bool]) -> Iterator[str]:
    """The file's lines as text, each read with a bound (E409 past :data:`MAX_LINE_BYTES`, so a
    file with no line break is refused after reading that much); bytes that are not UTF-8 become
    lone surrogates (``surrogateescape``), which :func:`_bad_text_rows` recognises; ``bad_text``
    gets ``True`` appended at the first line that holds such text or U+FFFD. A leading byte
    order mark is dropped."""
    number = 0
    while True:
        line = f.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            raise _line_too_long(path, number)
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        text = line.decode("utf-8", "surrogateescape")
        if not bad_text and not line.isascii() and _bad_text(text):
            bad_text.append(True)
        yield text


def _undecodable(path: Path, e: BaseException) -> DiagnosticError:
    return error(
        "E409",
        f"cannot decode '{path}' as csv: {_decode_problem(e)}",
        path,
        "CSV files must be UTF-8 text, optionally gzip-compressed; " + SHOW_MESSAGE,
        reader_message(e),
    )


def _line_too_long(path: Path, number: int) -> DiagnosticError:
    return error(
        "E409",
        f"line {number} of '{path}' is longer than {MAX_LINE_BYTES >> 20} MiB",
        path,
        "a data file holds one record per line; check that it is CSV with line breaks",
    )


def check_line_lengths(path: Path) -> None:
    """E409 at the first line longer than :data:`MAX_LINE_BYTES`, found in one pass over the
    (decompressed) bytes in blocks; for the SQL engines, whose readers skip or truncate such a
    line instead of refusing the file as :func:`read_csv_text` does."""
    block_size = 4 * MAX_LINE_BYTES
    run, lines = 0, 1  # bytes since the last line break; the current line's number
    try:
        with _open_binary(path) as f:
            while block := f.read(block_size):
                breaks = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
                if not len(breaks):
                    run += len(block)
                else:
                    gaps = np.diff(breaks, prepend=-1 - run)
                    if gaps.max() > MAX_LINE_BYTES:
                        raise _line_too_long(path, lines + int(np.argmax(gaps > MAX_LINE_BYTES)))
                    lines += len(breaks)
                    run = len(block) - 1 - int(breaks[-1])
                if run > MAX_LINE_BYTES:
                    raise _line_too_long(path, lines)
    except (gzip.BadGzipFile, zlib.error, EOFError, OSError) as e:
        raise _undecodable(path, e) from None


def _bad_text(field: str) -> bool:
    return REPLACEMENT in field or any("\udc80" <= ch <= "\udcff" for ch in field)


BAD_TEXT = "[\ufffd\udc80-\udcff]"  # U+FFFD, or a byte that was not UTF-8 (surrogateescape)


def _bad_text_rows(frame: pd.DataFrame) -> np.ndarray:
    """Rows with a cell that was not UTF-8 text (:func:`_lines`) or holds U+FFFD."""
    bad = np.zeros(len(frame), dtype=bool)
    for i in range(frame.shape[1]):
        column = frame.iloc[:, i]
        bad |= column.str.contains(BAD_TEXT, regex=True, na=False).to_numpy(dtype=bool)
    return bad


def _csv_records(path: Path, bad_text: list[bool] | None = None) -> Iterator[list[str]]:
    """CSV records (RFC 4180 quoting, quoted line breaks allowed) of bounded lines; blank lines
    are skipped. Reader failures of the stream (gzip) become E409. csv's field limit is
    process-wide, so it is raised to the line bound only while a record is read, never across
    a ``yield`` (a caller that stops early would leave it raised for everyone else)."""
    try:
        with _open_binary(path) as f:
            reader = csv.reader(_lines(f, path, [] if bad_text is None else bad_text))
            while True:
                previous = csv.field_size_limit(MAX_LINE_BYTES)
                try:
                    record = next(reader, None)
                finally:
                    csv.field_size_limit(previous)
                if record is None:
                    return
                if record:
                    yield record
    except (gzip.BadGzipFile, zlib.error, EOFError, OSError) as e:
        raise _undecodable(path, e) from None
    except csv.Error as e:  # a quoted field longer than the line bound
        raise error(
            "E409",
            f"'{path}' has a field longer than {MAX_LINE_BYTES >> 20} MiB",
            path,
            "check the quoting: a quote left open runs to the end of the file",
            reader_message(e),
        ) from None


def csv_header(path: Path) -> list[str]:
    """The column names on the first line of a (possibly gzip-compressed) CSV file (E409 when it
    is not UTF-8 text, E403 when there is none)."""
    header = next(_csv_records(path), None)
    if not header:
        raise error("E403", f"data file '{path}' has no header line", path)
    if any(_bad_text(name) for name in header):
        raise error("E409", f"the header line of '{path}' is not UTF-8 text", path)
    return header


def check_header(path: Path, fmt: DataFormat, schema: Sequence[str]) -> None:
    """E409 when the file's header names a column twice (after trimming spaces): the engines
    would otherwise disagree (one keeps the first, one fails). The name is printed only when it
    is a schema column (public); a duplicate of another column is reported without it."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            names = list(pq.read_schema(path).names)
        except Exception:  # an unreadable file is reported by the reader, with its own code
            return
    else:
        names = csv_header(path)
    seen: dict[str, int] = {}
    for i, raw in enumerate(names, 1):
        name = str(raw).strip(" \t\r\n")
        if name in seen:
            said = f"'{name}' " if name in schema else ""
            raise error(
                "E409",
                f"the header of '{path}' names a column {said}twice (columns {seen[name]} and {i})",
                path,
                "give every column of the data file a distinct name",
            )
        seen[name] = i


def too_many_rows(path: Path, rows: int) -> DiagnosticError:
    """E411: the file has more rows than the public ``data.rows`` (a fact of its size)."""
    return error(
        "E411",
        f"'{path}' has more than data.rows = {rows} rows",
        path,
        "data.rows is the public number of rows of the file; neighbouring tables have as many",
    )


@dataclass(frozen=True)
class CsvText:
    """A CSV file's records as text cells (``None`` for an empty or malformed record's cells),
    and the 1-based numbers of the malformed records (CURATOR-ONLY)."""

    frame: pd.DataFrame
    malformed: np.ndarray


def read_csv_text(path: Path, max_rows: int | None = None) -> CsvText:
    """Every record of a CSV file as text (see the module docstring): malformed records become
    rows of empty cells. E411 once more than ``max_rows`` records are seen, E409/E403 for the
    file. Records are turned into frames :data:`CHUNK_ROWS` at a time."""
    bad_text: list[bool] = []
    records = _csv_records(path, bad_text)
    header = next(records, None)
    if not header:
        raise error("E403", f"data file '{path}' has no header line", path)
    if any(_bad_text(name) for name in header):
        raise error("E409", f"the header line of '{path}' is not UTF-8 text", path)
    width = len(header)
    empty: list[str | None] = [None] * width
    chunks: list[pd.DataFrame] = []
    malformed: list[int] = []
    rows: list[list[str] | list[str | None]] = []
    count = 0
    for record in records:
        count += 1
        if max_rows is not None and count > max_rows:
            raise too_many_rows(path, max_rows)
        if len(record) != width:
            malformed.append(count)
            record = empty  # type: ignore[assignment]
        rows.append(record)
        if len(rows) == CHUNK_ROWS:
            chunks.append(_frame(rows, width))
            rows = []
    if rows or not chunks:
        chunks.append(_frame(rows, width))
    frame = pd.concat(chunks, ignore_index=True) if len(chunks) > 1 else chunks[0]
    bad = _bad_text_rows(frame) if bad_text else np.zeros(len(frame), dtype=bool)
    if bad.any():  # a record that is not UTF-8 text is malformed: every cell empty
        frame.loc[bad, :] = None
        malformed = sorted({*malformed, *(np.flatnonzero(bad) + 1).tolist()})
    frame.columns = header  # positional: a header may repeat a name (refused by check_header)
    return CsvText(frame, np.asarray(malformed, dtype=np.int64))


def _frame(rows: list, width: int) -> pd.DataFrame:
    """Records (each ``width`` cells) as a frame of text columns of Python objects (``None``
    for an empty cell); one 2-D object array, much faster than pandas' row or Arrow paths."""
    cells = np.empty((len(rows), width), dtype=object)
    if rows:
        cells[:] = rows
    return pd.DataFrame(cells, dtype=object)


def read_parquet(path: Path, max_rows: int | None = None) -> pd.DataFrame:
    """A Parquet file with its stored types (E411 from its footer's row count, before reading)."""
    import pyarrow.parquet as pq

    try:
        if max_rows is not None and pq.ParquetFile(path).metadata.num_rows > max_rows:
            raise too_many_rows(path, max_rows)
        return pd.read_parquet(path, dtype_backend="numpy_nullable")
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise error(
            "E409",
            f"cannot read '{path}' as parquet ({type(e).__name__})",
            path,
            "check that the file is valid Parquet; " + SHOW_MESSAGE,
            reader_message(e),
        ) from None


def read_frame(path: Path, fmt: DataFormat, max_rows: int | None = None) -> pd.DataFrame:
    """The raw table (see :func:`read_records`)."""
    return read_records(path, fmt, max_rows)[0]


def read_records(
    path: Path, fmt: DataFormat, max_rows: int | None = None
) -> tuple[pd.DataFrame, np.ndarray]:
    """The raw table and its malformed record numbers: CSV cells as text (no type guessing,
    nothing read as missing except blank cells, a malformed record as a row of empty cells),
    Parquet with its stored types. Raises E401/E403/E409/E411, never for one record."""
    check_readable(path)
    if fmt == "parquet":
        frame, malformed = read_parquet(path, max_rows), np.zeros(0, dtype=np.int64)
    else:
        text = read_csv_text(path, max_rows)
        frame, malformed = text.frame, text.malformed
    if len(frame) == 0:
        raise error("E403", f"data file '{path}' has no rows", path)
    return frame, malformed


def load_table(
    path: Path | str,
    domain: Domain,
    *,
    fmt: DataFormat | None = None,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
    max_rows: int | None = None,
) -> EncodingResult:
    """Read and encode the private table (total over records, see the module docstring; no
    rows left after ``missing: drop`` is a table of no rows, not an error); the curator log
    carries the file's SHA-256. ``max_rows``: the public ``data.rows`` (E411 beyond it)."""
    path = Path(path)
    fmt = data_format(path, fmt)
    frame, malformed = read_records(path, fmt, max_rows)
    result = encode_frame(
        frame, domain, missing, other, source=str(path), malformed_rows=len(malformed)
    )
    return replace(result, curator_log=replace(result.curator_log, sha256=file_sha256(path)))


def load_public_table(
    path: Path | str,
    domain: Domain,
    *,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
) -> EncodingResult:
    """Read and encode a *public* table (an external synthetic one) strictly: its cells are
    public, so an empty cell or a declared missing value outside a nullable column, a number
    that is not finite or out of bounds, a category not declared (with no ``other``) or a
    malformed record is an error (E412) that names the row, the column and the value."""
    path = Path(path)
    frame, malformed = read_records(path, data_format(path))
    problems = [f"row {int(r)} is malformed (wrong number of fields)" for r in malformed[:5]]
    nullable = {c.name for c in domain if c.nullable}
    for c in inspect_frame(frame, domain, missing, other, source=str(path)):
        examples = {r: v for v, _, r in c.examples}
        if c.unreadable and (
            c.column not in (other or {}) or domain[c.column].kind != "categorical"
        ):
            row = c.rows["unreadable"][0]
            value = examples.get(row)
            problems.append(f"column '{c.column}' row {row} holds {value!r}, not a declared value")
        if c.empty and c.column not in nullable:
            problems.append(f"column '{c.column}' row {c.rows['empty'][0]} is empty")
        if c.declared and c.column not in nullable:
            row = c.rows["declared"][0]
            problems.append(f"column '{c.column}' row {row} holds a declared missing value")
        for kind in ("below", "above"):
            if getattr(c, kind):
                problems.append(f"column '{c.column}' row {c.rows[kind][0]} is {kind} its bounds")
    if problems:
        raise DiagnosticError(
            [
                Diagnostic(
                    "E412",
                    f"the public table '{path}' does not fit the schema: {problem}",
                    SourcePos(str(path)),
                    "the external table must hold only the schema's values (empty cells only "
                    "in missing: keep columns)",
                )
                for problem in problems
            ]
        )
    return encode_frame(frame, domain, missing, other, source=str(path))


def rules_from_spec(spec: ReleaseSpec) -> tuple[dict[str, MissingPolicy], dict[str, str]]:
    """The codec's per-column ``missing`` and ``other`` maps from a ``dpql.spec`` ReleaseSpec
    (top-level ``missing`` is the default; ``fill`` and ``other`` rules become :class:`Fill`)."""
    missing: dict[str, MissingPolicy] = {}
    other: dict[str, str] = {}
    for name, col in spec.columns.items():
        rule = col.missing or spec.missing
        catch_all = getattr(col, "other", None)  # categorical columns only
        if rule == "fill" and col.fill is not None:
            missing[name] = Fill(col.fill)
        elif rule == "other" and catch_all is not None:
            missing[name] = Fill(catch_all)
        elif rule in ("drop", "keep"):
            missing[name] = rule
        if catch_all is not None:
            other[name] = catch_all
    return missing, other
