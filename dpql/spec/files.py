"""Public files a spec names for its categorical columns: ``values_file`` (the list of values)
and ``group.file`` (a fine value -> group mapping). Both are public information, read when the
spec is loaded (never the data file). Reading them fills in the spec so that its normalised form
is self-contained and pins them: ``values`` with the file's values, ``values_sha256`` with its
sha256; ``group.levels`` with the group of every value (in ``values`` order), ``group.sha256``
with the mapping file's sha256. A spec that already carries ``values_sha256`` / ``levels`` (a
normalised spec, as a provenance record embeds it) is taken as it is and nothing is read.
"""

from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

from dpql.diagnostics import Diagnostic, SourcePos
from dpql.spec.models import MAX_CATEGORIES, CategoricalSpec, GroupSpec, ReleaseSpec
from dpql.spec.yamlpos import Path_, YamlDoc

MAX_FILE_BYTES = 64 * 1024 * 1024  # a values or group file
#: Characters the read-in values and groups may take in the normalised spec: it must load back
#: (``dpql verify``) under the 1,048,576-character spec limit, with room for the rest.
MAX_EXPANDED_CHARS = 900_000


def _pos(doc: YamlDoc, path: Path_) -> SourcePos | None:
    return doc.value_pos(path) if doc.has(path) else None


def _read(path: Path, shown: str) -> tuple[str, str] | str:
    """(text, sha256) of a public file, or why it cannot be read (naming it ``shown``)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        return f"cannot read '{shown}': {e.strerror or e}"
    if len(raw) > MAX_FILE_BYTES:
        return f"'{shown}' is larger than {MAX_FILE_BYTES:,} bytes"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return f"'{shown}' is not UTF-8 text"
    return text, hashlib.sha256(raw).hexdigest()


def _csv_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in row] for row in csv.reader(io.StringIO(text)) if row]


def expand_files(
    spec: ReleaseSpec, doc: YamlDoc, base: Path
) -> tuple[ReleaseSpec, list[Diagnostic]]:
    """The spec with every ``values_file`` and ``group.file`` read in (module docstring), and
    the problems found, each located in the spec or at ``file:line`` of the public file."""
    out: list[Diagnostic] = []
    columns = dict(spec.columns)
    changed = False
    for name, col in spec.columns.items():
        if not isinstance(col, CategoricalSpec):
            continue
        here: Path_ = ("schema", name)
        new, diags = _expand_column(name, col, doc, here, base)
        out += diags
        if new is not col:
            columns[name] = new
            changed = True
    if not changed or any(d.severity == "error" for d in out):
        return spec, out
    expanded = spec.model_copy(update={"columns": columns})
    # The provenance record embeds the normalised spec, values included, and dpql verify loads
    # it back under the spec size limit: refuse files that would make it too large to verify.
    size = sum(
        sum(len(v) + 12 for v in (c.values or ()))
        + sum(len(g) + 12 for g in ((c.group.levels or ()) if c.group else ()))
        for c in columns.values()
        if isinstance(c, CategoricalSpec)
    )
    if size > MAX_EXPANDED_CHARS:
        name = next(
            n
            for n, c in spec.columns.items()
            if isinstance(c, CategoricalSpec) and (c.values_file or c.group)
        )
        out.append(
            Diagnostic(
                "E120",
                f"the values and groups read from files take about {size:,} characters, over "
                f"the {MAX_EXPANDED_CHARS:,} a provenance record's spec may hold",
                doc.key_pos(("schema", name)),
                "use shorter value codes, or fewer values (group them in the data beforehand)",
            )
        )
        return spec, out
    return expanded, out


def _expand_column(
    name: str, col: CategoricalSpec, doc: YamlDoc, here: Path_, base: Path
) -> tuple[CategoricalSpec, list[Diagnostic]]:
    out: list[Diagnostic] = []
    update: dict[str, object] = {}
    values = col.values
    if col.values_file is None:
        if values is None:
            return col, [
                Diagnostic(
                    "E120",
                    f"categorical column '{name}' needs 'values' or 'values_file'",
                    doc.key_pos(here),
                    "list the categories under values, or name a public file of them with "
                    "values_file: (one value per line)",
                )
            ]
        if col.values_column is not None:
            out.append(
                Diagnostic(
                    "E120",
                    f"'values_column' of '{name}' needs a values_file",
                    _pos(doc, (*here, "values_column")),
                )
            )
    elif values is not None and col.values_sha256 is None:
        return col, [
            Diagnostic(
                "E120",
                f"column '{name}' gives both values and values_file",
                doc.key_pos((*here, "values_file")),
                "keep one of them",
            )
        ]
    elif values is None:
        values, diags, digest = _read_values(name, col, doc, here, base)
        if values is None:
            return col, out + diags
        out += diags
        update["values"] = values
        update["values_sha256"] = digest
    if col.group is not None and not out:
        group, diags = _expand_group(name, col.group, values, doc, (*here, "group"), base)
        out += diags
        if group is not col.group:
            update["group"] = group
    if not update or any(d.severity == "error" for d in out):
        return col, out
    return col.model_copy(update=update), out


def _read_values(
    name: str, col: CategoricalSpec, doc: YamlDoc, here: Path_, base: Path
) -> tuple[list[str] | None, list[Diagnostic], str]:
    assert col.values_file is not None
    at = _pos(doc, (*here, "values_file"))
    path = (base / col.values_file).resolve()
    read = _read(path, col.values_file)
    if isinstance(read, str):
        return None, [Diagnostic("E120", f"values_file of '{name}': {read}", at)], ""
    text, digest = read
    file = str(path)
    if col.values_column is None:
        lines = [(i + 1, line.strip()) for i, line in enumerate(text.splitlines())]
    else:
        rows = list(csv.reader(io.StringIO(text)))
        header = [c.strip() for c in rows[0]] if rows else []
        if col.values_column not in header:
            return (
                None,
                [
                    Diagnostic(
                        "E120",
                        f"values_file of '{name}' has no column '{col.values_column}'",
                        _pos(doc, (*here, "values_column")),
                        f"its header is: {', '.join(header)}" if header else "the file is empty",
                    )
                ],
                "",
            )
        j = header.index(col.values_column)
        lines = [(i + 1, r[j].strip() if j < len(r) else "") for i, r in enumerate(rows) if i]
    values = [v for _, v in lines if v]
    if not values:
        return None, [Diagnostic("E120", f"values_file of '{name}' lists no values", at)], ""
    if len(values) > MAX_CATEGORIES:
        return (
            None,
            [
                Diagnostic(
                    "E120",
                    f"values_file of '{name}' lists {len(values):,} values, more than "
                    f"{MAX_CATEGORIES:,}",
                    at,
                    "group the values into a public hierarchy and list the groups instead",
                )
            ],
            "",
        )
    out: list[Diagnostic] = []
    first: dict[str, int] = {}
    for line, v in lines:
        if not v:
            continue
        if v in first:
            out.append(
                Diagnostic(
                    "E106",
                    f"category '{v}' of '{name}' is listed twice in its values_file (first on "
                    f"line {first[v]})",
                    SourcePos(file, line, 1),
                    "categories must be unique: their position is their code",
                )
            )
            if len(out) >= 10:
                break
        else:
            first[v] = line
    return (None if out else values), out, digest


def _expand_group(
    name: str, group: GroupSpec, values: list[str] | None, doc: YamlDoc, here: Path_, base: Path
) -> tuple[GroupSpec, list[Diagnostic]]:
    assert values is not None
    at = _pos(doc, here)
    if group.levels is not None:
        if len(group.levels) != len(values):
            return group, [
                Diagnostic(
                    "E121",
                    f"group.levels of '{name}' has {len(group.levels):,} entries for "
                    f"{len(values):,} values",
                    at,
                    "give the group of every value, in the order of values",
                )
            ]
        return group, []
    if group.file is None:
        return group, [
            Diagnostic("E121", f"group of '{name}' needs a 'file'", at, "add 'file: groups.csv'")
        ]
    at = _pos(doc, (*here, "file"))
    path = (base / group.file).resolve()
    read = _read(path, group.file)
    if isinstance(read, str):
        return group, [Diagnostic("E121", f"group file of '{name}': {read}", at)]
    text, digest = read
    file = str(path)
    rows = _csv_rows(text)
    if not rows or len(rows[0]) < 2:
        return group, [
            Diagnostic(
                "E121",
                f"group file of '{name}' needs a header and two columns (value, group)",
                at,
            )
        ]
    header = rows[0]
    fine_col = group.fine or header[0]
    coarse_col = group.coarse or header[1]
    for key, col in (("fine", fine_col), ("coarse", coarse_col)):
        if col not in header:
            return group, [
                Diagnostic(
                    "E121",
                    f"group file of '{name}' has no column '{col}'",
                    _pos(doc, (*here, key)) or at,
                    f"its header is: {', '.join(header)}",
                )
            ]
    i, j = header.index(fine_col), header.index(coarse_col)
    code = {v: k for k, v in enumerate(values)}
    levels: list[str | None] = [None] * len(values)
    out: list[Diagnostic] = []
    for line, row in enumerate(rows[1:], start=2):
        fine = row[i] if i < len(row) else ""
        coarse = row[j] if j < len(row) else ""
        problem = None
        if not fine or not coarse:
            problem = "a value or its group is empty"
        elif fine not in code:
            problem = f"value '{fine}' is not one of the values of '{name}'"
        elif levels[code[fine]] is not None and levels[code[fine]] != coarse:
            problem = f"value '{fine}' is mapped to two groups"
        if problem is not None:
            where = SourcePos(file, line, 1)
            out.append(Diagnostic("E121", f"group file of '{name}': {problem}", where))
            if len(out) >= 10:
                break
            continue
        levels[code[fine]] = coarse
    unmapped = [v for v, g in zip(values, levels, strict=True) if g is None]
    if unmapped and len(out) < 10:
        out.append(
            Diagnostic(
                "E121",
                f"group file of '{name}' maps no group to {len(unmapped):,} value(s), e.g. "
                f"'{unmapped[0]}'",
                at,
                "every value needs exactly one group",
            )
        )
    if out:
        return group, out
    return group.model_copy(update={"levels": levels, "sha256": digest}), []
