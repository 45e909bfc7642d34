"""A data file's columns as its header states them: names, and storage types where the format
records them (Parquet's schema), without reading a single cell.

For ``dpql init``. A CSV (plain or gzip) gives names only: its first record is the header, and
nothing after it is read, so no type is guessed from values. A Parquet file's schema is in its
footer metadata (``pyarrow.parquet.read_schema``), which holds names and storage types but no
values. Column names are facts about the file the curator already knows; they are printed only
on the curator's terminal and in the draft spec the curator edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dpql.data.load import check_readable, csv_header, data_format, error


@dataclass(frozen=True)
class HeaderColumn:
    """A column of the file: its name and, for Parquet, its storage type (``kind`` is
    ``integer``, ``float``, ``boolean``, ``text`` or ``other``; None for CSV)."""

    name: str
    storage: str | None = None
    kind: str | None = None


def header_columns(path: Path) -> tuple[str, list[HeaderColumn]]:
    """``(format, columns)`` of the data file at ``path`` from its header or schema only.
    Raises the data layer's ``DiagnosticError`` (E401-E409) for a file it cannot read."""
    check_readable(path)
    fmt = data_format(path)
    if fmt == "csv":
        return fmt, [HeaderColumn(name.strip()) for name in csv_header(path)]
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception:  # the reader's message may quote the file's bytes
        raise error(
            "E409", f"cannot read the Parquet schema of '{path}'", path,
            "check that the file is Parquet (name it *.csv or *.csv.gz if it is CSV)",
        ) from None  # fmt: skip
    columns = []
    for field in schema:
        t = field.type
        if pa.types.is_dictionary(t):
            t = t.value_type
        kind = (
            "integer" if pa.types.is_integer(t)
            else "float" if pa.types.is_floating(t) or pa.types.is_decimal(t)
            else "boolean" if pa.types.is_boolean(t)
            else "text" if pa.types.is_string(t) or pa.types.is_large_string(t)
            else "other"
        )  # fmt: skip
        columns.append(HeaderColumn(field.name, str(field.type), kind))
    return fmt, columns
