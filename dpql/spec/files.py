"""Public files a spec names for its categorical columns: ``values_file`` (the list of values)
and ``group.file`` (a fine value -> group mapping). Both are public information, read when the
spec is loaded (never the data file). Reading them fills in the spec so that its normalised form
is self-contained and pins them: ``values`` with the file's values, ``values_sha256`` with its
sha256; ``group.levels`` with the group of every value (in ``values`` order), ``group.sha256``
with the mapping file's sha256. A spec that already carries ``values_sha256`` / ``levels`` (a
normalised spec, as a provenance record embeds it) is taken as it is and nothing is read.

A spec may pin a file by giving its hash: ``values_sha256`` (with ``values_file``) or
``group.sha256`` (with ``group.file``) is checked against the file read (``E123``). A public
file that is the data file (the same path, or the same file by identity: a hard or symbolic
link) is refused before it is opened (``E122``): it would publish private cells. A copy of the
data file is caught at compile time, where the data file's hash is computed anyway
(:func:`public_copies_of_data`). Only regular files are opened (a FIFO or device would block),
each read is bounded, and no message quotes the contents of a file (its line numbers only: a
file named by mistake may hold private data).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from pathlib import Path

from dpql.diagnostics import Diagnostic, SourcePos
from dpql.io import UnreadableFile, open_regular, read_capped
from dpql.spec.columns import MAX_CATEGORIES, CategoricalSpec, GroupSpec
from dpql.spec.models import ReleaseSpec
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
        raw = read_capped(path, MAX_FILE_BYTES)
    except UnreadableFile as e:
        return f"cannot read '{shown}': {e}"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return f"'{shown}' is not UTF-8 text"
    return text, hashlib.sha256(raw).hexdigest()


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path lexically or after resolving
    symbolic links, or the same device and inode (a hard link). Only ``stat`` is called: no
    file is opened. Paths that cannot be resolved or do not exist compare by name alone."""
    if "\x00" in str(a) or "\x00" in str(b):
        return False
    if os.path.normpath(a) == os.path.normpath(b):
        return True
    try:
        if a.resolve() == b.resolve():
            return True
    except (OSError, RuntimeError):  # a symlink loop
        return False
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _public_path(base: Path, written: str) -> Path:
    """A public file's path written in the spec, relative to the spec's folder, lexically
    normalised (never resolved here: a loop or a NUL byte is reported when it is opened)."""
    return Path(os.path.normpath(base / written))


def data_file_error(
    what: str, written: str, base: Path, data: Path, at: SourcePos | None, code: str = "E122"
) -> Diagnostic | None:
    """``E122`` when the public input ``what`` (``written`` in the spec) is the data file."""
    if not same_file(_public_path(base, written), data):
        return None
    return Diagnostic(
        code,
        f"{what} '{written}' is the data file (data.path): a public input must not be the "
        "private data",
        at,
        "point it at a public file (the list of categories, the grouping, the external table), "
        "never at the data",
    )


MAX_FIELD_CHARS = 131_072  # one field of a public CSV file (csv's own default limit)


def _csv_parse(text: str) -> list[list[str]] | str:
    """The rows of a CSV text, or why it is not CSV (the reason quotes none of its cells).
    The field limit is set here, not taken from the process-wide csv setting, which the data
    reader raises while it reads."""
    previous = csv.field_size_limit(MAX_FIELD_CHARS)
    try:
        return list(csv.reader(io.StringIO(text)))
    except csv.Error as e:
        if "field limit" in str(e):
            return f"a field is longer than {MAX_FIELD_CHARS:,} characters"
        return "it is not valid CSV (a NUL byte or a broken quote)"
    finally:
        csv.field_size_limit(previous)


def _csv_rows(text: str) -> list[list[str]] | str:
    rows = _csv_parse(text)
    if isinstance(rows, str):
        return rows
    return [[c.strip() for c in row] for row in rows if row]


def expand_files(
    spec: ReleaseSpec, doc: YamlDoc, base: Path
) -> tuple[ReleaseSpec, list[Diagnostic]]:
    """The spec with every ``values_file`` and ``group.file`` read in (module docstring), and
    the problems found, each located in the spec or at ``file:line`` of the public file."""
    out: list[Diagnostic] = []
    data = _public_path(base, spec.data.path)
    synth = spec.synthesizer
    if getattr(synth, "method", None) == "external":
        found = data_file_error(
            "the external table", synth.path, base, data, _pos(doc, ("synthesizer", "path"))
        )
        out += [found] if found else []
    columns = dict(spec.columns)
    changed = False
    for name, col in spec.columns.items():
        if not isinstance(col, CategoricalSpec):
            continue
        here: Path_ = ("schema", name)
        new, diags = _expand_column(name, col, doc, here, base, data)
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
    name: str, col: CategoricalSpec, doc: YamlDoc, here: Path_, base: Path, data: Path
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
        values, diags, digest = _read_values(name, col, doc, here, base, data)
        if values is None:
            return col, out + diags
        out += diags
        update["values"] = values
        update["values_sha256"] = digest
    if col.group is not None and not out:
        group, diags = _expand_group(name, col.group, values, doc, (*here, "group"), base, data)
        out += diags
        if group is not col.group:
            update["group"] = group
    if not update or any(d.severity == "error" for d in out):
        return col, out
    return col.model_copy(update=update), out


def _read_values(
    name: str, col: CategoricalSpec, doc: YamlDoc, here: Path_, base: Path, data: Path
) -> tuple[list[str] | None, list[Diagnostic], str]:
    assert col.values_file is not None
    at = _pos(doc, (*here, "values_file"))
    is_data = data_file_error(f"values_file of '{name}'", col.values_file, base, data, at)
    if is_data is not None:
        return None, [is_data], ""
    path = _public_path(base, col.values_file)
    read = _read(path, col.values_file)
    if isinstance(read, str):
        return None, [Diagnostic("E120", f"values_file of '{name}': {read}", at)], ""
    text, digest = read
    pinned = _pin_error(
        f"values_file of '{name}'", col.values_sha256, digest, _pos(doc, (*here, "values_sha256"))
    )
    if pinned is not None:
        return None, [pinned], ""
    file = str(path)
    if col.values_column is None:
        lines = [(i + 1, line.strip()) for i, line in enumerate(text.splitlines())]
    else:
        rows = _csv_parse(text)
        if isinstance(rows, str):
            return None, [Diagnostic("E120", f"values_file of '{name}': {rows}", at)], ""
        header = [c.strip() for c in rows[0]] if rows else []
        if col.values_column not in header:
            return (
                None,
                [
                    Diagnostic(
                        "E120",
                        f"values_file of '{name}' has no column '{col.values_column}'",
                        _pos(doc, (*here, "values_column")),
                        _header_hint(header),
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
                    f"a category of '{name}' is listed twice in its values_file (this line "
                    f"repeats line {first[v]})",
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
    name: str,
    group: GroupSpec,
    values: list[str] | None,
    doc: YamlDoc,
    here: Path_,
    base: Path,
    data: Path,
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
    is_data = data_file_error(f"group file of '{name}'", group.file, base, data, at)
    if is_data is not None:
        return group, [is_data]
    path = _public_path(base, group.file)
    read = _read(path, group.file)
    if isinstance(read, str):
        return group, [Diagnostic("E121", f"group file of '{name}': {read}", at)]
    text, digest = read
    pinned = _pin_error(
        f"group file of '{name}'", group.sha256, digest, _pos(doc, (*here, "sha256"))
    )
    if pinned is not None:
        return group, [pinned]
    file = str(path)
    rows = _csv_rows(text)
    if isinstance(rows, str):
        return group, [Diagnostic("E121", f"group file of '{name}': {rows}", at)]
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
                    _header_hint(header),
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
            problem = f"the value on this line is not one of the values of '{name}'"
        elif levels[code[fine]] is not None and levels[code[fine]] != coarse:
            problem = "the value on this line is mapped to two groups"
        if problem is not None:
            where = SourcePos(file, line, 1)
            out.append(Diagnostic("E121", f"group file of '{name}': {problem}", where))
            if len(out) >= 10:
                break
            continue
        levels[code[fine]] = coarse
    unmapped = [k for k, g in enumerate(levels) if g is None]
    if unmapped and len(out) < 10:
        out.append(
            Diagnostic(
                "E121",
                f"group file of '{name}' maps no group to {len(unmapped):,} value(s), e.g. "
                f"value number {unmapped[0] + 1} of its values",
                at,
                "every value needs exactly one group",
            )
        )
    if out:
        return group, out
    return group.model_copy(update={"levels": levels, "sha256": digest}), []


def _pin_error(
    what: str, pinned: str | None, digest: str, at: SourcePos | None
) -> Diagnostic | None:
    """``E123`` when the spec pins a hash that the file read does not have."""
    if pinned is None or pinned.lower() == digest:
        return None
    return Diagnostic(
        "E123",
        f"{what} has sha256 {digest}, not the {pinned} the spec pins",
        at,
        "the file changed since the spec was written: check it, then update the pinned sha256 "
        "(or remove it to take the file as it is)",
    )


def file_digest(path: Path) -> str | None:
    """The sha256 of the regular file ``path`` read in blocks, or None if it cannot be read."""
    try:
        fd = open_regular(path)
    except UnreadableFile:
        return None
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def public_copies_of_data(
    spec: ReleaseSpec, doc: YamlDoc, base: Path, data_sha256: str
) -> list[Diagnostic]:
    """``E122`` for every public input whose bytes are the data file's (``data_sha256``, which
    the data layer computes when it opens the file): the values and group files by the hashes
    the spec pinned at load, the external table by hashing it (it is public). Called after the
    data file is opened and before anything is measured; the messages name the spec's keys
    only."""
    out: list[Diagnostic] = []
    hint = "point it at a public file, never at a copy of the data"

    def refuse(what: str, path: Path_) -> None:
        message = f"{what} has the same bytes as the data file: a public input must not be the "
        out.append(Diagnostic("E122", message + "private data", _pos(doc, path), hint))

    for name, col in spec.columns.items():
        if not isinstance(col, CategoricalSpec):
            continue
        if col.values_file and col.values_sha256 == data_sha256:
            refuse(f"values_file of '{name}'", ("schema", name, "values_file"))
        if col.group is not None and col.group.file and col.group.sha256 == data_sha256:
            refuse(f"group file of '{name}'", ("schema", name, "group", "file"))
    synth = spec.synthesizer
    if getattr(synth, "method", None) == "external":
        if file_digest(_public_path(base, synth.path)) == data_sha256:
            refuse("the external table", ("synthesizer", "path"))
    return out


def _header_hint(header: list[str]) -> str:
    """How to fix a column name missing from a public file's header, without quoting the header
    (a file named by mistake may be a copy of the data, whose column names can be private)."""
    if not header:
        return "the file is empty"
    return f"its first line has {len(header)} column name(s): name one of them"
