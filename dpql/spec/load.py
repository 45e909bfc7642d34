"""Load a release spec or a policy: YAML with positions -> pydantic model -> cross-field checks.

Every problem becomes a :class:`~dpql.diagnostics.Diagnostic` at the offending key or value
(codes in :mod:`dpql.spec.codes`); a stage reports all of its problems at once. Loading never
opens the data file (DESIGN invariant 1): paths are only resolved, relative to the spec file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from dpql.diagnostics import (
    Diagnostic,
    DiagnosticError,
    DiagnosticSink,
    SourcePos,
    did_you_mean,
)
from dpql.domain import CategoricalColumn, Column, Domain, NumericColumn, numeric_edges
from dpql.spec.checks import dotted as _dotted
from dpql.spec.checks import implied_format, spec_checks
from dpql.spec.columns import NumericSpec
from dpql.spec.files import expand_files
from dpql.spec.models import Policy, ProjectFile, ReleaseSpec
from dpql.spec.todo import todo_diagnostics
from dpql.spec.yamlpos import (
    MAX_DOCUMENT_CHARS,
    Located,
    Path_,
    YamlDoc,
    load_yaml,
    plain_scalar,
)

M = TypeVar("M", bound=BaseModel)

_RANGE_ERRORS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "finite_number",
}


@dataclass(frozen=True)
class LoadedSpec:
    """A validated release spec with everything later stages need and nothing read from data.

    ``workload``/``requirements`` carry each DSL string with the position of its content, so the
    DSL parser can report ``file:line:col`` (``Located.pos_at(offset)``). ``spec_hash`` is the
    sha256 of :func:`normalised_spec_json`. ``warnings`` holds W-coded diagnostics.
    """

    model: ReleaseSpec
    path: Path
    source: str
    doc: YamlDoc
    workload: tuple[Located, ...]
    requirements: tuple[Located, ...]
    domain: Domain
    spec_hash: str
    warnings: tuple[Diagnostic, ...]

    def resolve(self, relative: str) -> Path:
        """A path written in the spec, resolved against the spec file's folder. Lexically
        (symlinks are not followed here): a broken link or a symlink loop is reported when the
        file is opened, as a located error."""
        return Path(os.path.normpath(self.path.parent / relative))

    @property
    def data_path(self) -> Path:
        return self.resolve(self.model.data.path)

    @property
    def data_format(self) -> Literal["csv", "parquet"]:
        """``data.format``, or the one the path's extension implies (checked at load, E110)."""
        return self.model.data.format or implied_format(self.model.data.path) or "csv"

    @property
    def rows(self) -> int:
        """Public row count n: neighbouring tables differ by replacing one of n rows."""
        return self.model.data.rows

    @property
    def target_delta(self) -> float:
        """The delta the release is reported at: the spec's, else 1/n^2 (the convention of
        Vietri et al. 2022, §5)."""
        delta = self.model.privacy.delta
        return delta if delta is not None else 1.0 / self.rows**2


@dataclass(frozen=True)
class LoadedPolicy:
    model: Policy
    path: Path
    source: str
    doc: YamlDoc

    @property
    def ledger_path(self) -> Path | None:
        """The lifetime release ledger, resolved against the policy file's folder."""
        lifetime = self.model.lifetime
        if lifetime is None:
            return None
        path = self.path.parent / lifetime.ledger
        try:
            return path.resolve()
        except (OSError, RuntimeError):  # a symlink loop: reported where the ledger is opened
            return Path(os.path.normpath(path))


#: column fields added after the normalised form was fixed: left out while unset, so a spec
#: that does not use them keeps its hash (and its public seed, ``dpql.plan.planner``)
_LATER = frozenset({"missing_values"})


def normalised_spec_json(spec: ReleaseSpec) -> str:
    """The spec as canonical JSON: defaults filled in, keys sorted, compact, columns as an
    ordered list (column order is meaningful: it is the domain's order). Paths stay as written,
    so the hash does not depend on where the repository is checked out. ``output.curator`` (where
    the curator keeps its own file) is left out: it is not part of what is released, and the
    normalised spec is published in the provenance record. An unset column field of
    ``_LATER`` is left out too."""
    data = spec.model_dump(mode="json", by_alias=True)
    data["output"].pop("curator", None)
    data["schema"] = [
        {"name": name, **{k: v for k, v in col.items() if v is not None or k not in _LATER}}
        for name, col in data["schema"].items()
    ]
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def spec_sha256(spec: ReleaseSpec) -> str:
    return hashlib.sha256(normalised_spec_json(spec).encode("utf-8")).hexdigest()


def build_domain(spec: ReleaseSpec) -> Domain:
    """The public domain of the schema (numeric ``bins`` -> :func:`numeric_edges`)."""
    columns: list[Column] = []
    for name, col in spec.columns.items():
        if isinstance(col, NumericSpec):
            edges = (
                tuple(float(e) for e in col.edges)
                if col.edges is not None
                else numeric_edges(col.min, col.max, col.integer, col.bins or 1)
            )
            columns.append(NumericColumn(name, col.min, col.max, col.integer, edges))
        elif col.group is not None and col.group.levels is not None:
            # a grouped column: the domain sees its groups (in order of first appearance); the
            # fine values are kept for encoding the data and decoding the output
            groups = tuple(dict.fromkeys(col.group.levels))
            index = {g: i for i, g in enumerate(groups)}
            parent = tuple(index[g] for g in col.group.levels)
            columns.append(CategoricalColumn(name, groups, tuple(col.values or ()), parent))
        else:
            columns.append(CategoricalColumn(name, tuple(col.values or ())))
    # the declared sentinels: cells the codec reads as missing, like empty ones
    columns = [
        dataclasses.replace(c, missing_values=tuple(spec.columns[c.name].missing_values))
        if spec.columns[c.name].missing_values
        else c
        for c in columns
    ]
    # missing: keep makes a column nullable: its null state is public, whatever the data holds
    columns = [
        dataclasses.replace(c, nullable=True)
        if (spec.columns[c.name].missing or spec.missing) == "keep"
        else c
        for c in columns
    ]
    # missing: drop: the release describes the rows where these columns are present
    dropped = tuple(
        c.name for c in columns if (spec.columns[c.name].missing or spec.missing) == "drop"
    )
    return Domain(tuple(columns), dropped)


def load_spec(path: str | os.PathLike[str]) -> LoadedSpec:
    """Load and check a release spec; raise DiagnosticError with every problem found."""
    return _load_spec_doc(_read_yaml(path), path)


def load_spec_with_overrides(
    path: str | os.PathLike[str], overrides: Mapping[str, Any]
) -> LoadedSpec:
    """:func:`load_spec` with some values replaced: ``overrides`` maps a dotted key of the spec
    (``"privacy.epsilon"``, ``"schema.age.max"``, ``"synthesizer.rows"``) or a top-level key
    to its new value (a mapping value replaces the whole mapping). The spec is checked with the
    overrides in place; its errors name the file and the overridden keys, without a line (the
    checked text is not the file's). Relative paths still resolve against the file."""
    file = os.fspath(path)
    doc = _read_yaml(path)
    data = json.loads(json.dumps(doc.data))  # a deep copy of plain values
    for key, value in overrides.items():
        parts = str(key).split(".")
        node = data
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    label = f"{file} (with overrides: {', '.join(map(str, overrides))})"
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, indent=1)
    except (TypeError, ValueError):
        raise DiagnosticError(
            [Diagnostic("E012", "an override is not a plain YAML value", SourcePos(label))]
        ) from None
    try:
        return _load_spec_doc(load_yaml(text, label), path)
    except DiagnosticError as e:  # lines of the generated text would mislead: name the key only
        raise DiagnosticError(
            [
                replace(d, pos=SourcePos(label)) if d.pos is not None and d.pos.file == label
                else d
                for d in e.diagnostics
            ]
        ) from None


#: Characters a YAML reader refuses or reads as a line break even inside a quoted string; the
#: JSON text of :func:`load_normalised_spec` writes them as ``\uXXXX`` escapes instead.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def load_normalised_spec(data: Any, path: str | os.PathLike[str]) -> LoadedSpec:
    """Load and check a spec given as its normalised JSON value (:func:`normalised_spec_json`,
    as a provenance record embeds it) instead of a file: the same checks as :func:`load_spec`,
    without reading anything. ``path`` names the spec in diagnostics and is what relative paths
    resolve against; it is never opened. Nulls are left out (every nullable field defaults to
    null) and ``schema`` becomes a mapping again, so a normalised spec loads back to itself.
    Raises DiagnosticError (``E003`` when ``data`` is not a mapping with a ``schema`` list)."""
    file = os.fspath(path)
    if not isinstance(data, dict) or not isinstance(data.get("schema"), list):
        raise DiagnosticError(
            [Diagnostic("E003", "not a normalised release spec", SourcePos(file, 1, 1))]
        )
    value = _without_nulls(data)
    columns: dict[str, Any] = {}
    for col in value["schema"]:
        if not isinstance(col, dict) or not isinstance(col.get("name"), str):
            raise DiagnosticError(
                [Diagnostic("E003", "a schema entry without a name", SourcePos(file, 1, 1))]
            )
        columns[col["name"]] = {k: v for k, v in col.items() if k != "name"}
    value["schema"] = columns
    try:  # JSON is YAML: the loader's own limits (size, depth, digits) apply to it
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, indent=1)
    except (ValueError, RecursionError):
        raise DiagnosticError(
            [Diagnostic("E101", "a number is not finite, or a value nests too deep", None)]
        ) from None
    text = _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return _load_spec_doc(load_yaml(text, file), path)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _load_spec_doc(doc: YamlDoc, path: str | os.PathLike[str]) -> LoadedSpec:
    todos = todo_diagnostics(doc.data, doc)  # a draft of dpql init: say what is left to fill
    if todos:
        raise DiagnosticError(todos)
    spec = _validate(ReleaseSpec, doc)
    sink = DiagnosticSink()
    spec, found = expand_files(spec, doc, Path(path).resolve().parent)
    sink.extend(found)
    sink.raise_if_errors()
    sink.extend(spec_checks(spec, doc))
    sink.raise_if_errors()
    return LoadedSpec(
        model=spec,
        path=Path(path).resolve(),
        source=doc.text,
        doc=doc,
        workload=tuple(doc.located(("workload", i)) for i in range(len(spec.workload))),
        requirements=tuple(doc.located(("requirements", i)) for i in range(len(spec.requirements))),
        domain=build_domain(spec),
        spec_hash=spec_sha256(spec),
        warnings=tuple(sink.items),
    )


def load_policy(path: str | os.PathLike[str]) -> LoadedPolicy:
    """Load and check a privacy policy; raise DiagnosticError with every problem found."""
    doc = _read_yaml(path)
    return LoadedPolicy(_validate(Policy, doc), Path(path).resolve(), doc.text, doc)


@dataclass(frozen=True)
class LoadedProject:
    """A project file (``dpql.yaml``) with its paths resolved against its folder."""

    path: Path
    policy: Path | None
    ledger: Path | None


def load_project(path: str | os.PathLike[str]) -> LoadedProject:
    """Load a project file; raise DiagnosticError with every problem found."""
    doc = _read_yaml(path)
    model = _validate(ProjectFile, doc)
    file = Path(os.path.realpath(path))
    return LoadedProject(
        file,
        Path(os.path.realpath(file.parent / model.policy)) if model.policy else None,
        Path(os.path.realpath(file.parent / model.ledger)) if model.ledger else None,
    )


# ----------------------------------------------------------------------------------------------
# Reading


def _read_yaml(path: str | os.PathLike[str]) -> YamlDoc:
    file = os.fspath(path)
    limit = 4 * MAX_DOCUMENT_CHARS  # bytes: UTF-8 takes at most 4 per character
    try:
        with open(file, "rb") as f:  # bounded: a huge file (or an endless pipe) is not read in
            raw = f.read(limit + 1)
        if len(raw) > limit:
            raise DiagnosticError(
                [
                    Diagnostic(
                        "E006",
                        f"{file} is larger than {limit:,} bytes; a spec or policy has at most "
                        f"{MAX_DOCUMENT_CHARS:,} characters",
                        SourcePos(file, 1, 1),
                    )
                ]
            )
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise DiagnosticError(
            [Diagnostic("E005", f"cannot read {file}: {reason}", SourcePos(file))]
        ) from None
    doc = load_yaml(text, file)
    if not isinstance(doc.data, dict):
        raise DiagnosticError(
            [
                Diagnostic(
                    "E003",
                    "the document must be a mapping of keys (dpql: 1, name: ..., data: ...)",
                    doc.value_pos(()),
                )
            ]
        )
    return doc


def _validate(model: type[M], doc: YamlDoc) -> M:
    try:
        return model.model_validate(doc.data)
    except ValidationError as e:
        diagnostics = [_from_pydantic(err, model, doc) for err in e.errors(include_url=False)]
        unique = set(diagnostics)  # a union can report one problem twice
        raise DiagnosticError(sorted(unique, key=_by_position)) from None


def _by_position(d: Diagnostic) -> tuple[int, int, str]:
    return (d.pos.line, d.pos.col, d.code) if d.pos else (0, 0, d.code)


# ----------------------------------------------------------------------------------------------
# Pydantic errors -> positioned diagnostics


def _doc_path(doc: YamlDoc, loc: tuple[str | int, ...]) -> Path_:
    """The longest path of ``loc`` present in the document (skipping pydantic's union tags)."""
    path: Path_ = ()
    for part in loc:
        if doc.has((*path, part)):
            path = (*path, part)
    return path


def _unwrap(t: Any) -> Any:
    while True:
        if typing.get_origin(t) is typing.Annotated:
            t = typing.get_args(t)[0]
        elif typing.get_origin(t) in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(t) if a is not type(None)]
            if len(members) != 1:
                return tuple(members)
            t = members[0]
        else:
            return t


def _allowed_keys(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """Keys the model accepts at ``loc`` (for did-you-mean on an unknown key)."""
    t: Any = model
    for part in loc:
        t = _unwrap(t)
        if isinstance(t, tuple):  # a discriminated union: ``part`` is the tag
            t = next((m for m in t if part in _tags(m)), None)
        elif isinstance(t, type) and issubclass(t, BaseModel):
            t = next(
                (f.annotation for n, f in t.model_fields.items() if (f.alias or n) == part), None
            )
        elif typing.get_origin(t) in (dict, list):
            t = typing.get_args(t)[-1]
        else:
            return []
    t = _unwrap(t)
    if isinstance(t, type) and issubclass(t, BaseModel):
        return [f.alias or n for n, f in t.model_fields.items()]
    return []


def _tags(m: Any) -> tuple[Any, ...]:
    if not (isinstance(m, type) and issubclass(m, BaseModel)):
        return ()
    return tuple(
        a
        for f in m.model_fields.values()
        if typing.get_origin(f.annotation) is typing.Literal
        for a in typing.get_args(f.annotation)
    )


# Hints for required fields whose right value needs explaining, keyed by the last two parts of
# the field's location.
_MISSING_HINTS: dict[tuple[str | int, ...], str] = {
    ("budget", "neighbouring"): "add 'neighbouring: replace_one' or 'neighbouring: add_remove': "
    "the relation the external tool's guarantee holds under (replace_one: one row replaced at "
    "the same n; add_remove: one row added or removed, charged as (2 epsilon, (1 + e^epsilon) "
    "delta)); its documentation or paper states it",
}


_BOUND_WORDS = {
    "greater_than": ("gt", "should be greater than"),
    "greater_than_equal": ("ge", "should be at least"),
    "less_than": ("lt", "should be less than"),
    "less_than_equal": ("le", "should be at most"),
}


def _range_text(kind: str, ctx: dict[str, Any], should: str) -> str:
    """pydantic's range message with the bound written short (1e-100, not 0.000...1)."""
    key, words = _BOUND_WORDS.get(kind, ("", ""))
    bound = ctx.get(key)
    if isinstance(bound, bool) or not isinstance(bound, int | float):
        return should
    return f"{words} {bound:,}" if isinstance(bound, int) else f"{words} {bound:g}"


def _got(value: Any) -> str:
    if isinstance(value, dict):
        return " (got a mapping)"
    if isinstance(value, list):
        return " (got a list)"
    return f" (got {value!r})" if len(repr(value)) <= 40 else ""


def _from_pydantic(err: Any, model: type[BaseModel], doc: YamlDoc) -> Diagnostic:
    loc: tuple[str | int, ...] = tuple(err["loc"])
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    path = _doc_path(doc, loc)
    name = _dotted(path)
    should = re.sub(r"^(?:Input|String|List|Dictionary|Value) should", "should", err["msg"])

    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc[:-1])
        hint = " ".join(filter(None, [did_you_mean(str(loc[-1]), allowed), "allowed keys:"]))
        hint += " " + ", ".join(allowed)
        return Diagnostic("E010", f"unknown key '{name}'", doc.key_pos(path), hint)
    if kind in ("missing", "union_tag_not_found"):
        field = ctx.get("discriminator", "").strip("'") or str(loc[-1])
        where = f" in '{name}'" if path else ""
        pos = doc.key_pos(path)  # the parent key; at top level, where the document starts
        hint = _MISSING_HINTS.get(loc[-2:], f"add '{field}: ...'")
        return Diagnostic("E011", f"missing required field '{field}'{where}", pos, hint)
    if kind == "union_tag_invalid":
        field = ctx["discriminator"].strip("'")
        expected = [t.strip(" '") for t in ctx["expected_tags"].split(",")]
        pos = doc.value_pos((*path, field)) if doc.has((*path, field)) else doc.value_pos(path)
        hint = did_you_mean(str(ctx["tag"]), expected) or f"use one of: {', '.join(expected)}"
        return Diagnostic("E102", f"unknown {field} '{ctx['tag']}' in '{name}'", pos, hint)

    pos = doc.key_pos(path) if "[key]" in loc else doc.value_pos(path)
    if kind == "literal_error":
        got = err["input"]
        expected = [t.strip(" '") for t in ctx["expected"].replace(" or ", ",").split(",")]
        hint = did_you_mean(str(got), expected) or f"use one of: {', '.join(expected)}"
        return Diagnostic("E102", f"'{name}' {should}{_got(got)}", pos, hint)
    if kind == "value_error" and should.startswith("Value error, should "):
        return Diagnostic(
            "E101", f"'{name}' {should[len('Value error, ') :]}{_got(err['input'])}", pos
        )
    if kind in _RANGE_ERRORS:
        text = _range_text(kind, ctx, should)
        return Diagnostic("E101", f"'{name}' {text}{_got(err['input'])}", pos)
    if kind in ("too_long", "string_too_long"):
        return Diagnostic(
            "E111",
            f"'{name}' {should.replace(' after validation', '')}",
            pos,
            "dpql bounds the size of a spec so that planning is quick (limits in "
            "spec/language.md §9)",
        )
    if kind in ("too_short", "string_too_short"):
        return Diagnostic(
            "E103",
            f"'{name}' must not be empty" if ctx.get("min_length") == 1 else f"'{name}' {should}",
            pos,
        )
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        should = "should be a mapping of keys"
    elif kind in ("list_type", "tuple_type"):
        should = "should be a list"
    got = err["input"]
    hint = None
    if isinstance(got, str) and not isinstance(plain_scalar(got), str):
        hint = "remove the quotes: a quoted value is text"
    elif kind == "bool_type":
        hint = "use true or false"
    elif kind == "float_type" and "missing_values" in loc and isinstance(got, str):
        hint = (
            "a numeric column's missing values are numbers (0, -9, 99); a cell that is not a "
            "number (NA, .) is missing already"
        )
    elif kind == "int_type" and isinstance(got, float) and got.is_integer() and abs(got) < 1e18:
        hint = f"write a whole number without a point or exponent: {int(got)}"
    return Diagnostic("E012", f"'{name}' {should}{_got(got)}", pos, hint)


# ----------------------------------------------------------------------------------------------
# Checks across fields (the model is valid field by field)
