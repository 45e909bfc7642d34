"""Reading the private table from a file (CSV, gzip CSV or Parquet) into the public encoding.

Part of the privacy boundary (``dpql.data``): the only code besides DP-SGD that opens the data.
Every problem with the file is a :class:`DiagnosticError` naming the file (E401-E409, see
``dpql.codec.CODES``); problems with cells come from :mod:`dpql.codec` with the file and row.
All of them are private diagnostics: no line of the file is quoted, and a reader's own message
(which may quote bytes or cells of the file) goes to the curator-only ``Diagnostic.values``.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import re
import stat
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

import pandas as pd

from dpql.codec import EncodingResult, Fill, MissingPolicy, encode_frame
from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.domain import Domain

if TYPE_CHECKING:
    from dpql.spec.models import ReleaseSpec

DataFormat = Literal["csv", "parquet"]

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


def _near(e: BaseException) -> str:
    """Where the parser stopped, when its message says (in its own counting); the rest of the
    message is not shown by default: it may quote the file."""
    found = re.search(r"\b(line|row) (\d+)", str(e))
    return f" (the parser stopped at its {found.group(1)} {found.group(2)})" if found else ""


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


def _open_csv_text(path: Path) -> IO[str]:
    with path.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    return (gzip.open if gzipped else open)(path, "rt", encoding="utf-8-sig", newline="")


def csv_header(path: Path) -> list[str]:
    """The column names on the first line of a (possibly gzip-compressed) CSV file."""
    try:
        with _open_csv_text(path) as f:
            header = next(csv.reader(f), None)
    except (UnicodeDecodeError, gzip.BadGzipFile, zlib.error, EOFError, csv.Error) as e:
        raise error(
            "E409",
            f"cannot read the header line of '{path}': {_decode_problem(e)}",
            path,
            SHOW_MESSAGE,
            reader_message(e),
        ) from None
    if not header:
        raise error("E403", f"data file '{path}' has no header line", path)
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


def ragged_row_error(path: Path) -> DiagnosticError | None:
    """E409 at the first CSV record whose field count differs from the header's, or None.

    Streams the whole file, so readers call it only after they failed, to say where: DuckDB
    and Spark report a malformed CSV without a usable line number. Blank lines are skipped, as
    the readers skip them.
    """
    try:
        with _open_csv_text(path) as f:
            reader = csv.reader(f)
            header = next(reader, None) or []
            for record in reader:
                if record and len(record) != len(header):
                    pos = SourcePos(str(path), reader.line_num, 1)
                    message = (
                        f"line {reader.line_num} has {len(record)} fields, "
                        f"the header has {len(header)}"
                    )
                    hint = "every row needs one cell per header column; quote cells with commas"
                    return DiagnosticError([Diagnostic("E409", message, pos, hint, private=True)])
    except (UnicodeDecodeError, gzip.BadGzipFile, zlib.error, EOFError, csv.Error):
        return None  # the reader's own message says what is wrong
    return None


def read_frame(path: Path, fmt: DataFormat) -> pd.DataFrame:
    """The raw table: CSV cells as text (no type guessing, nothing read as missing except blank
    cells), Parquet with its stored types. Raises E401/E403/E409."""
    check_readable(path)
    try:
        if fmt == "parquet":
            df = pd.read_parquet(path, dtype_backend="numpy_nullable")
        else:
            df = pd.read_csv(
                path,
                dtype=str,
                keep_default_na=False,
                na_values=[""],
                compression="infer",
                encoding="utf-8",
            )
    except pd.errors.EmptyDataError:
        raise error("E403", f"data file '{path}' has no header line", path) from None
    except (UnicodeDecodeError, gzip.BadGzipFile, zlib.error, EOFError) as e:
        raise error(
            "E409",
            f"cannot decode '{path}' as {fmt}: {_decode_problem(e)}",
            path,
            "CSV files must be UTF-8 text, optionally gzip-compressed; " + SHOW_MESSAGE,
            reader_message(e),
        ) from None
    except (pd.errors.ParserError, csv.Error) as e:
        raise ragged_row_error(path) or error(
            "E409",
            f"malformed CSV in '{path}'{_near(e)}",
            path,
            "check the quoting: every row needs one cell per header column; " + SHOW_MESSAGE,
            reader_message(e),
        ) from None
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise error(
            "E409",
            f"cannot read '{path}' as {fmt} ({type(e).__name__})",
            path,
            "check that the file is valid CSV (UTF-8) or Parquet; " + SHOW_MESSAGE,
            reader_message(e),
        ) from None
    if len(df) == 0:
        raise error("E403", f"data file '{path}' has no rows", path)
    # pandas fills a short row's trailing cells as missing; the SQL engines call it malformed
    # (E409). A short row leaves the last column blank, so only then is the file streamed.
    if fmt == "csv" and len(df.columns) and bool(df.iloc[:, -1].isna().any()):
        ragged = ragged_row_error(path)
        if ragged is not None:
            raise ragged
    return df


def load_table(
    path: Path | str,
    domain: Domain,
    *,
    fmt: DataFormat | None = None,
    missing: Mapping[str, MissingPolicy] | None = None,
    other: Mapping[str, str] | None = None,
) -> EncodingResult:
    """Read and encode the private table; the curator log carries the file's SHA-256."""
    path = Path(path)
    fmt = data_format(path, fmt)
    frame = read_frame(path, fmt)
    result = encode_frame(
        frame, domain, missing, other, source=str(path), line_offset=1 if fmt == "csv" else None
    )
    if result.table.n == 0:
        raise error(
            "E403",
            f"no rows of '{path}' are left after dropping missing values",
            path,
            "check the columns whose missing-value rule is 'drop'",
        )
    return replace(result, curator_log=replace(result.curator_log, sha256=file_sha256(path)))


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
        elif rule in ("error", "drop", "keep"):
            missing[name] = rule
        if catch_all is not None:
            other[name] = catch_all
    return missing, other
