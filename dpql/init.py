"""``dpql init DATA [--output SPEC] [--codebook FILE]``: a draft release spec from a data file's
header.

The draft names every column of the file with its storage type where the format records one
(Parquet's schema; a CSV header gives names only, and no type is guessed from values), and a
``TODO`` for every fact that must come from public knowledge: the public row count, each
column's type (CSV), bounds and category list. Reading bounds or categories off the private
table would leak it (a minimum is a record), so the draft never reads a cell
(:mod:`dpql.data.header`). A spec with a ``TODO`` left fails to load with ``E030`` at each one
(:func:`dpql.spec.todo.todo_diagnostics`), so the curator sees what is left to fill.

A public codebook (``--codebook``) fills columns' types, bounds and categories, and optionally
the row count. Two formats (docs/init.md):

* YAML: ``columns: {NAME: {type: numeric, min: 0, max: 99, integer: true}, NAME2: {type:
  categorical, values: [a, b]}}`` and an optional ``rows: N``; each entry is a ``schema`` entry
  of the spec, copied as written;
* CSV with the header ``column,type,min,max,integer,values``: ``values`` separated by ``|``,
  ``integer`` ``true``/``false``, empty cells left out.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos
from dpql.spec.todo import TODO as TODO


@dataclass(frozen=True)
class Draft:
    """A drafted spec: its text, the columns it names and how many TODOs are left."""

    text: str
    columns: tuple[str, ...]
    todos: int
    fmt: str


def _error(
    code: str, message: str, where: Path | str | SourcePos, hint: str | None = None
) -> DiagnosticError:
    pos = where if isinstance(where, SourcePos) else SourcePos(str(where))
    return DiagnosticError([Diagnostic(code, message, pos, hint)])


# ---------------------------------------------------------------------------------------------
# codebooks


def load_codebook(path: Path) -> tuple[dict[str, dict[str, Any]], int | None]:
    """``({column: schema entry}, rows or None)`` from a YAML or CSV codebook (module doc);
    ``E032`` for a codebook that cannot be read or has a malformed entry."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise _error("E032", f"cannot read the codebook {path}: {reason}", path) from None
    if path.suffix.lower() == ".csv":
        return _csv_codebook(text, path), None
    from dpql.spec.yamlpos import load_yaml

    doc = load_yaml(text, str(path))
    data = doc.data
    if not isinstance(data, dict) or not isinstance(data.get("columns"), dict):
        raise _error(
            "E032",
            "a codebook is a mapping with `columns: {NAME: {type: ..., ...}}`",
            path,
            "see docs/init.md for the format",
        )
    rows = data.get("rows")
    if rows is not None and (not isinstance(rows, int) or isinstance(rows, bool) or rows < 1):
        where = doc.value_pos(("rows",))
        raise _error("E032", "codebook rows must be a positive integer", where)
    entries = {}
    for name, entry in data["columns"].items():
        if not isinstance(entry, dict):
            raise _error(
                "E032",
                f"codebook entry '{name}' must be a mapping such as {{type: categorical, "
                "values: [a, b]}",
                doc.value_pos(("columns", name)),
            )
        entries[str(name)] = dict(entry)
    return entries, rows


def _csv_codebook(text: str, path: Path) -> dict[str, dict[str, Any]]:
    reader = csv.DictReader(text.splitlines())
    need = {"column", "type"}
    if not need <= set(reader.fieldnames or ()):
        raise _error(
            "E032",
            "a CSV codebook's header must include column and type (and min, max, integer, "
            "values as needed)",
            SourcePos(str(path), 1, 1),
        )
    out: dict[str, dict[str, Any]] = {}
    for line, row in enumerate(reader, 2):
        entry: dict[str, Any] = {"type": (row.get("type") or "").strip()}
        for key in ("min", "max"):
            cell = (row.get(key) or "").strip()
            if cell:
                try:
                    entry[key] = int(cell) if re.fullmatch(r"[+-]?\d+", cell) else float(cell)
                except ValueError:
                    where = SourcePos(str(path), line, 1)
                    raise _error("E032", f"{key} '{cell}' is not a number", where) from None
        if (row.get("integer") or "").strip().lower() in ("true", "yes", "1"):
            entry["integer"] = True
        values = (row.get("values") or "").strip()
        if values:
            entry["values"] = [v.strip() for v in values.split("|")]
        out[(row.get("column") or "").strip()] = entry
    return out


# ---------------------------------------------------------------------------------------------
# the draft


def _flow(value: Any) -> str:
    """A YAML flow value (JSON is YAML)."""
    return json.dumps(value, ensure_ascii=False)


def _column_line(col: Any, entry: Mapping[str, Any] | None) -> tuple[str, int]:
    """One ``schema`` line for a header column and the TODOs it has."""
    key = _flow(col.name)
    if entry is not None:
        return f"  {key}: {_flow(dict(entry))}  # from the codebook", 0
    if col.kind in ("integer", "float"):
        integer = ", integer: true" if col.kind == "integer" else ""
        return (
            f"  {key}: {{type: numeric, min: TODO, max: TODO{integer}}}  # {col.storage}",
            2,
        )
    if col.kind is not None:
        return f"  {key}: {{type: categorical, values: [TODO]}}  # {col.storage}", 1
    return f"  {key}: {{type: TODO, min: TODO, max: TODO, values: [TODO]}}", 4


def draft_spec(
    data: Path,
    spec_path: Path,
    codebook: Path | None = None,
) -> Draft:
    """The draft spec text for the data file ``data``, to be written at ``spec_path`` (its
    ``data.path`` is relative to that folder). Reads the file's header or schema only."""
    from dpql.data.header import header_columns

    fmt, columns = header_columns(data)
    entries, rows = load_codebook(codebook) if codebook is not None else ({}, None)
    names = [c.name for c in columns]
    unknown = [n for n in entries if n not in names]
    if unknown:
        raise _error(
            "E032",
            f"the codebook describes {len(unknown)} column(s) the data file's header does "
            f"not name: {', '.join(repr(n) for n in unknown[:10])}",
            codebook or data,
            "match the codebook's names to the header's",
        )
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", data.name.split(".")[0]) or "release"
    relative = os.path.relpath(data.resolve(), spec_path.resolve().parent)
    untyped = any(n not in entries for n in names)
    source = (
        "the Parquet schema (names and storage types)"
        if fmt == "parquet"
        else "the CSV header (names only: choose each column's type)"
        if untyped
        else "the CSV header (names only)"
    ) + (f" and the codebook {codebook.name}" if codebook is not None else "")
    lines = [
        "# Draft release spec written by `dpql init` from",
        f"# {source}; no cell of the data file was read.",
        "# Every TODO must come from PUBLIC knowledge (a codebook, the",
        "# survey's documentation, the law), never from looking at the data: a bound or a",
        "# category list read off the private table leaks it. Delete the line of any column",
        "# you do not release (identifiers, free text, names); it is then never read.",
        "# Next: dpql plan <this file> (reads no data), dpql check, dpql compile.",
        "# Reference of every key: docs/reference.md.",
        "dpql: 1",
        f"name: {_flow(stem)}",
        'description: ""',
        "",
        "data:",
        f"  path: {_flow(relative)}",
        f"  rows: {rows if rows is not None else 'TODO'}"
        "   # public row count (published figure), never counted from the file",
        "",
        "schema:",
    ]
    todos = 0 if rows is not None else 2
    for col in columns:
        line, k = _column_line(col, entries.get(col.name))
        lines.append(line)
        todos += k
    lines += [
        "",
        "privacy:",
        "  epsilon: 1.0",
        "  delta: 1.0e-9     # below 1/rows",
        "",
        "# The statistics to preserve (spec/language.md): every 2-way marginal.",
        "workload:",
        "  - marginals(2)",
        "",
        "# Analyses users will run, each with a tolerance, e.g. corr(a, b) within 0.05.",
        "requirements: []",
        "",
        "synthesizer:",
        "  method: auto      # the planner picks aim or rap; dpql plan says which and why",
        f"  rows: {rows if rows is not None else 'TODO'}"
        "          # rows of the synthetic table (usually data.rows)",
        "",
        "output:",
        f"  path: out/{stem}_synthetic.csv",
        f"  provenance: out/{stem}_synthetic.provenance.json",
        "",
    ]
    return Draft("\n".join(lines), tuple(names), todos, fmt)


def _exists(path: Path) -> DiagnosticError:
    return _error(
        "E031",
        f"{path} exists; dpql init never overwrites a file",
        path,
        "give --output another path, or move the existing file away",
    )


def write_draft(draft: Draft, path: Path) -> None:
    """Write ``draft`` at ``path``; ``E031`` (nothing written) when something is there."""
    try:
        with open(path, "x", encoding="utf-8") as f:
            f.write(draft.text)
    except FileExistsError:
        raise _exists(path) from None
    except OSError as e:
        raise _error("E031", f"cannot write {path}: {e.strerror or e}", path) from None


def default_output(data: Path) -> Path:
    """``<data stem>.release.yaml`` beside the data file."""
    stem = data.name.split(".")[0] or "data"
    return data.parent / f"{stem}.release.yaml"


def init_spec(
    data: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    codebook: str | os.PathLike[str] | None = None,
) -> tuple[Path, Draft]:
    """Draft and write a spec for ``data``; returns where and the draft. Raises
    :class:`DiagnosticError` (E031 existing output, E032 codebook, E40x data file)."""
    from dpql.data.load import require_given_file

    data_path = Path(data)
    require_given_file(data_path, "the data file")
    out = Path(output) if output is not None else default_output(data_path)
    if out.exists() or out.is_symlink():  # refused before the data file is opened
        raise _exists(out)
    draft = draft_spec(data_path, out, Path(codebook) if codebook is not None else None)
    write_draft(draft, out)
    return out, draft


def todo_summary(names: Sequence[str], todos: int) -> str:
    return f"{len(names)} column(s), {todos} TODO(s) to fill from public knowledge"
