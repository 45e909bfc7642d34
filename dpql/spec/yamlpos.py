"""YAML loading that keeps a source position for every key, value and sequence item.

The release spec and the policy are read with PyYAML's *composer* (nodes with marks) instead of
its constructor, so every diagnostic can name ``file:line:col``. Plain scalars are typed by the
YAML 1.2 core schema, not YAML 1.1: ``1e-9`` is a float, while ``yes``/``no``/``on``/``off`` and
dates stay strings (a category named ``no`` must not become ``False``). Quoted and block scalars
are always strings; mapping keys are always strings (their text).

Errors (codes in :mod:`dpql.spec.codes`): E001 YAML syntax, E002 duplicate mapping key (both
positions), E003 empty document, E004 a key that is not a plain scalar.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import yaml
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


# PyYAML's messages for the commonest mistakes, in plain words.
_PLAIN_WORDS = {
    "expected <block end>": "indentation does not match the lines above",
    "mapping values are not allowed here": "unexpected ':' (quote a value that contains ': ')",
    "that cannot start any token": "unexpected character (tabs cannot indent YAML; use spaces)",
}


def plain_scalar(text: str) -> Any:
    """Type a plain (unquoted) scalar by the YAML 1.2 core schema."""
    if _NULL.match(text):
        return None
    if text in _BOOL:
        return _BOOL[text]
    if _INT.match(text):
        return int(text)
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
        segs = _segments(node, self.text.splitlines())
        line, col, size = segs[0]
        return Located(node.value, SourcePos(self.file, line, col, col + size), segs)


def _build(file: str, node: Node, errors: list[Diagnostic]) -> Any:
    if isinstance(node, ScalarNode):
        return plain_scalar(node.value) if node.style is None else node.value
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


def load_yaml(text: str, file: str) -> YamlDoc:
    """Parse one YAML document keeping positions; raise DiagnosticError on E001-E004."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
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
