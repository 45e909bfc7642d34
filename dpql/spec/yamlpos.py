"""YAML loading that keeps a source position for every key, value and sequence item.

The release spec and the policy are read with PyYAML's *composer* (nodes with marks) instead of
its constructor, so every diagnostic can name ``file:line:col``. Plain scalars are typed by the
YAML 1.2 core schema, not YAML 1.1: ``1e-9`` is a float, while ``yes``/``no``/``on``/``off`` and
dates stay strings (a category named ``no`` must not become ``False``). Quoted and block scalars
are always strings; mapping keys are always strings (their text).

Errors (codes in :mod:`dpql.spec.codes`): E001 YAML syntax, E002 duplicate mapping key (both
positions), E003 empty document, E004 a key that is not a plain scalar, E006 a document over the
limits below (checked while composing, so a hostile file is refused before it is expanded),
E101 an integer literal of more than :data:`MAX_INT_DIGITS` digits.

Limits (spec/language.md §9): at most :data:`MAX_DOCUMENT_CHARS` characters, nesting at most
:data:`MAX_DEPTH` levels deep (aliases counted where they are used), at most :data:`MAX_NODES`
values once every alias is expanded, and no alias inside the node it names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from dpql.diagnostics import Diagnostic, DiagnosticError, SourcePos

Path_ = tuple[str | int, ...]  # a path into the document: mapping keys and sequence indices

_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT = re.compile(r"^[-+]?[0-9]+$")
_INT_BASE = re.compile(r"^0(?:o[0-7]+|x[0-9a-fA-F]+)$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_INF = re.compile(r"^([-+]?)\.(?:inf|Inf|INF)$")
_NAN = re.compile(r"^\.(?:nan|NaN|NAN)$")

#: Largest spec or policy document, in characters (a hand-written spec is a few kB).
MAX_DOCUMENT_CHARS = 2**20
#: Deepest nesting of lists and mappings (the release spec needs 4 levels).
MAX_DEPTH = 64
#: Most values (scalars, lists, mappings) in a document once every alias is expanded.
MAX_NODES = 1_000_000
#: Most digits of an integer literal (larger magnitudes: write a float such as 1e120).
MAX_INT_DIGITS = 100


# PyYAML's messages for the commonest mistakes, in plain words.
_PLAIN_WORDS = {
    "expected <block end>": "indentation does not match the lines above",
    "mapping values are not allowed here": "unexpected ':' (quote a value that contains ': ')",
    "that cannot start any token": "unexpected character (tabs cannot indent YAML; use spaces)",
}


def _int_digits(text: str) -> int:
    """Digits of a plain integer literal (decimal, 0o or 0x), 0 for anything else."""
    if _INT.match(text):
        return len(text.lstrip("+-"))
    return len(text) - 2 if _INT_BASE.match(text) else 0


def plain_scalar(text: str) -> Any:
    """Type a plain (unquoted) scalar by the YAML 1.2 core schema."""
    if _NULL.match(text):
        return None
    if text in _BOOL:
        return _BOOL[text]
    if _INT.match(text):
        # Python refuses to convert more than 4,300 digits; the loader reports E101 first.
        return int(text) if _int_digits(text) <= MAX_INT_DIGITS else float(text)
    if _INT_BASE.match(text):
        return int(text[2:], 8 if text[1] == "o" else 16)
    if _FLOAT.match(text):
        return float(text)
    if m := _INF.match(text):
        return -math.inf if m.group(1) == "-" else math.inf
    if _NAN.match(text):
        return math.nan
    return text


def node_pos(file: str, node: Node) -> SourcePos:
    """Where ``node`` starts (1-based); ``end_col`` only for nodes on one line."""
    start, end = node.start_mark, node.end_mark
    end_col = end.column + 1 if end.line == start.line and end.column > start.column else 0
    return SourcePos(file, start.line + 1, start.column + 1, end_col)


@dataclass(frozen=True)
class Located:
    """A string scalar of the spec (e.g. a DSL expression) with the position of its content.

    ``pos`` is the first character of the *content* (after the opening quote; for block scalars
    the first content line). ``segments`` are the source lines the content spans, as
    ``(line, col, length)``; consecutive lines are joined by one character in ``value`` (a space
    for plain, quoted and folded scalars, a newline for literal blocks), which lets
    :meth:`pos_at` map a character offset in ``value`` back to ``file:line:col``. Escapes in
    double-quoted scalars are not undone in the mapping (columns after one shift by its length).
    """

    value: str
    pos: SourcePos
    segments: tuple[tuple[int, int, int], ...]

    def pos_at(self, offset: int, length: int = 1) -> SourcePos:
        """Source position of ``value[offset:offset + length]``."""
        rest = max(offset, 0)
        for i, (line, col, size) in enumerate(self.segments):
            if rest <= size or i == len(self.segments) - 1:
                return SourcePos(self.pos.file, line, col + rest, col + rest + max(length, 1))
            rest -= size + 1
        return self.pos  # pragma: no cover - segments is never empty


def _segments(node: ScalarNode, lines: list[str]) -> tuple[tuple[int, int, int], ...]:
    start, end = node.start_mark, node.end_mark
    if node.style in ("|", ">"):
        # Block scalar: content starts on the line after the indicator, at the block indent.
        body = node.value.split("\n")
        first = start.line + 1
        while first < len(lines) and not lines[first].strip():
            first += 1
        indent = len(lines[first]) - len(lines[first].lstrip()) if first < len(lines) else 0
        return tuple((first + 1 + k, indent + 1, len(b)) for k, b in enumerate(body))
    quoted = 1 if node.style in ('"', "'") else 0
    out = []
    for k in range(start.line, end.line + 1):
        raw = lines[k] if k < len(lines) else ""
        begin = start.column + quoted if k == start.line else len(raw) - len(raw.lstrip())
        stop = end.column - quoted if k == end.line else len(raw.rstrip())
        out.append((k + 1, begin + 1, max(stop - begin, 0)))
    return tuple(out)


@dataclass(frozen=True)
class YamlDoc:
    """A loaded YAML document: plain Python ``data`` plus the node tree for positions."""

    file: str
    text: str
    data: Any
    root: Node

    @cached_property
    def lines(self) -> list[str]:
        """The document's lines (split once: a spec may have thousands of DSL strings)."""
        return self.text.splitlines()

    def _node(self, path: Path_) -> tuple[Node | None, Node]:
        """(key node, value node) at ``path``; raises KeyError when ``path`` is not there."""
        key: Node | None = None
        node = self.root
        for part in path:
            if isinstance(node, MappingNode):
                for k, v in node.value:
                    if k.value == part:
                        key, node = k, v
                        break
                else:
                    raise KeyError(path)
            elif isinstance(node, SequenceNode) and isinstance(part, int):
                if not 0 <= part < len(node.value):
                    raise KeyError(path)
                key, node = None, node.value[part]
            else:
                raise KeyError(path)
        return key, node

    def has(self, path: Path_) -> bool:
        try:
            self._node(path)
        except KeyError:
            return False
        return True

    def value_pos(self, path: Path_) -> SourcePos:
        """Position of the value at ``path`` (KeyError if absent)."""
        return node_pos(self.file, self._node(path)[1])

    def key_pos(self, path: Path_) -> SourcePos:
        """Position of the mapping key at ``path``; for sequence items and the root, the value."""
        key, node = self._node(path)
        return node_pos(self.file, key if key is not None else node)

    def located(self, path: Path_) -> Located:
        """The string scalar at ``path`` with the position of its content."""
        node = self._node(path)[1]
        if not isinstance(node, ScalarNode):
            raise KeyError(path)
        segs = _segments(node, self.lines)
        line, col, size = segs[0]
        return Located(node.value, SourcePos(self.file, line, col, col + size), segs)


def _build(file: str, node: Node, errors: list[Diagnostic]) -> Any:
    if isinstance(node, ScalarNode):
        if node.style is not None:
            return node.value
        digits = _int_digits(node.value)
        if digits > MAX_INT_DIGITS:
            errors.append(
                Diagnostic(
                    "E101",
                    f"an integer of {digits:,} digits is out of range (at most "
                    f"{MAX_INT_DIGITS} digits)",
                    node_pos(file, node),
                    "write a large magnitude as a float (1e9), or quote the value if it is text",
                )
            )
            return None
        return plain_scalar(node.value)
    if isinstance(node, SequenceNode):
        return [_build(file, item, errors) for item in node.value]
    if isinstance(node, MappingNode):
        out: dict[str, Any] = {}
        first_seen: dict[str, Node] = {}
        for key, value in node.value:
            if not isinstance(key, ScalarNode):
                errors.append(
                    Diagnostic(
                        "E004",
                        "mapping keys must be plain names, not lists or mappings",
                        node_pos(file, key),
                    )
                )
                continue
            if key.value in first_seen:
                first = node_pos(file, first_seen[key.value])
                errors.append(
                    Diagnostic(
                        "E002",
                        f"duplicate key '{key.value}' (first defined at line {first.line}, "
                        f"column {first.col})",
                        node_pos(file, key),
                        "remove one of the two entries or rename it",
                    )
                )
                continue
            first_seen[key.value] = key
            out[key.value] = _build(file, value, errors)
        return out
    raise DiagnosticError(  # pragma: no cover - the composer only makes the three kinds
        [Diagnostic("E004", f"unsupported YAML node {type(node).__name__}", node_pos(file, node))]
    )


class _TooComplex(Exception):
    """A document over the limits (E006), found while composing."""

    def __init__(self, message: str, mark: Any, hint: str) -> None:
        super().__init__(message)
        self.message, self.mark, self.hint = message, mark, hint


class _LimitedLoader(yaml.SafeLoader):
    """PyYAML's composer with the limits of the module docstring, checked as nodes are built.

    The composer recurses once per nesting level and PyYAML's scanner slows down quadratically
    with flow nesting, so the depth is checked on the way down, before the next level is
    scanned. Aliases return the anchored node itself: sizes and heights are kept per node (by
    identity) so an alias costs its expanded size without being expanded, and an alias to an
    anchor still being composed (a cycle) is refused where it is written.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._open: list[str] = []  # anchors of the nodes being composed
        self._measure: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent) and event.anchor in self._open:
            raise _TooComplex(
                f"the alias *{event.anchor} is inside the node it names (a recursive alias)",
                event.start_mark,
                "YAML aliases must not refer to an enclosing node",
            )
        if self._depth >= MAX_DEPTH:
            raise _TooComplex(
                f"the document is nested more than {MAX_DEPTH} levels deep",
                event.start_mark,
                "a release spec needs a few levels; flatten the structure",
            )
        anchor = None if isinstance(event, AliasEvent) else event.anchor
        self._depth += 1
        if anchor is not None:
            self._open.append(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.pop()
        if id(node) not in self._measure:
            self._measure[id(node)] = self._size_height(node)
        return node

    def _size_height(self, node: Node) -> tuple[int, int]:
        if isinstance(node, ScalarNode):
            return 1, 1
        children = (
            [c for pair in node.value for c in pair]
            if isinstance(node, MappingNode)
            else list(node.value)
        )
        known = [self._measure.get(id(c), (1, 1)) for c in children]
        size = 1 + sum(s for s, _ in known)
        height = 1 + max((h for _, h in known), default=0)
        if size > MAX_NODES:
            raise _TooComplex(
                f"this value expands to more than {MAX_NODES:,} values (YAML aliases repeat "
                "the node they name; an alias bomb?)",
                node.start_mark,
                "write the values out, or use fewer aliases",
            )
        if height > MAX_DEPTH:
            raise _TooComplex(
                f"this value is nested more than {MAX_DEPTH} levels deep once its aliases "
                "are expanded",
                node.start_mark,
                "use fewer nested aliases",
            )
        return size, height


def load_yaml(text: str, file: str) -> YamlDoc:
    """Parse one YAML document keeping positions; raise DiagnosticError on E001-E004, E006
    (over the module's limits) and E101 (an integer of too many digits)."""
    if len(text) > MAX_DOCUMENT_CHARS:
        raise DiagnosticError(
            [
                Diagnostic(
                    "E006",
                    f"the document has {len(text):,} characters; the limit is "
                    f"{MAX_DOCUMENT_CHARS:,}",
                    SourcePos(file, 1, 1),
                    "a release spec is a few kilobytes: list values once and use "
                    "workload constructs (marginals(k), range, halfspaces) instead of many items",
                )
            ]
        )
    try:
        root = yaml.compose(text, Loader=_LimitedLoader)
    except _TooComplex as e:
        pos = SourcePos(file, e.mark.line + 1, e.mark.column + 1)
        raise DiagnosticError([Diagnostic("E006", e.message, pos, e.hint)]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        pos = SourcePos(file, mark.line + 1, mark.column + 1) if mark else SourcePos(file)
        problem = e.problem or e.context or "invalid YAML"
        context = f" ({e.context})" if e.context and e.problem else ""
        plain = next((m for jargon, m in _PLAIN_WORDS.items() if jargon in problem), None)
        if plain:
            problem, context = plain, f" (YAML: {problem})"
        raise DiagnosticError(
            [
                Diagnostic(
                    "E001",
                    f"YAML syntax error: {problem}{context}",
                    pos,
                    "check indentation, colons and quoting; quote strings that contain ': ' or '#'",
                )
            ]
        ) from None
    except yaml.YAMLError as e:
        raise DiagnosticError(
            [Diagnostic("E001", f"YAML syntax error: {e}", SourcePos(file, 1, 1))]
        ) from None
    if root is None:
        raise DiagnosticError([Diagnostic("E003", "the file is empty", SourcePos(file, 1, 1))])
    errors: list[Diagnostic] = []
    data = _build(file, root, errors)
    if errors:
        raise DiagnosticError(errors)
    return YamlDoc(file, text, data, root)
