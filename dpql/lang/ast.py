"""Syntax tree of the dpql query DSL and its canonical printer (reference: spec/language.md).

Every node is a frozen dataclass with a ``pos`` (:class:`Span`, relative to the DSL string it
was parsed from). ``pos`` is excluded from equality and hashing, so two trees are equal when
their *structure* is, wherever they came from: ``parse(to_dsl(tree)) == tree`` holds for every
tree (``tests/test_lang_roundtrip.py``).

Invariants the parser guarantees and hand-built trees must keep: :class:`Conjunction` and
:class:`Disjunction` have at least two items; :class:`Membership` has at least one value; column
lists are non-empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from dpql.diagnostics import SourcePos


@dataclass(frozen=True)
class Span:
    """Where a node is in its DSL string: 1-based ``line``/``col`` of its first character and
    0-based character offsets ``start``..``end`` (end exclusive)."""

    line: int = 0
    col: int = 0
    start: int = 0
    end: int = 0

    def in_file(self, origin: SourcePos | None) -> SourcePos:
        """The span's position in the spec file, given ``origin``, the position of the DSL
        string's first character there (DSL strings are single-line scalars)."""
        width = self.end - self.start
        if origin is None:
            return SourcePos("<dsl>", self.line, self.col, self.col + width)
        col = origin.col + self.start if self.line <= 1 else self.col
        return SourcePos(origin.file, origin.line + max(self.line, 1) - 1, col, col + width)


NOWHERE = Span()


@dataclass(frozen=True)
class _Node:
    """Base of all nodes: ``pos`` is keyword-only and ignored by ``==`` and ``hash``."""

    pos: Span = field(default=NOWHERE, compare=False, repr=False, kw_only=True)


# --------------------------------------------------------------------------------------------
# Leaves


@dataclass(frozen=True)
class Column(_Node):
    """A column reference (a bare identifier, or any text in backquotes)."""

    name: str


@dataclass(frozen=True)
class NumberLit(_Node):
    value: float


@dataclass(frozen=True)
class StringLit(_Node):
    value: str


Value = NumberLit | StringLit

# --------------------------------------------------------------------------------------------
# Predicates

CmpOpText = Literal["<", "<=", ">", ">=", "==", "!="]
BoundOp = Literal["<", "<=", ">", ">="]


@dataclass(frozen=True)
class Comparison(_Node):
    """``column OP value``."""

    column: Column
    op: CmpOpText
    value: Value


@dataclass(frozen=True)
class Membership(_Node):
    """``column in {v1, v2, ...}``."""

    column: Column
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Conjunction(_Node):
    items: tuple[PredNode, ...]


@dataclass(frozen=True)
class Disjunction(_Node):
    items: tuple[PredNode, ...]


@dataclass(frozen=True)
class Negation(_Node):
    item: PredNode


PredNode = Comparison | Membership | Conjunction | Disjunction | Negation

# --------------------------------------------------------------------------------------------
# Workload items


@dataclass(frozen=True)
class AllMarginals(_Node):
    """``marginals(k) [over [cols] | over all]``; ``over`` None means every column."""

    k: int
    over: tuple[Column, ...] | None = None


@dataclass(frozen=True)
class Marginal(_Node):
    """``marginal(a, b, ...)``."""

    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Range(_Node):
    """``range(a, ...) [by c] [thresholds m]``; ``thresholds`` None means the default."""

    columns: tuple[Column, ...]
    by: Column | None = None
    thresholds: int | None = None


@dataclass(frozen=True)
class Halfspaces(_Node):
    """``halfspaces(m) [over [cols] | over all] by label``; ``over`` None: numeric columns."""

    n: int
    by: Column
    over: tuple[Column, ...] | None = None


@dataclass(frozen=True)
class CountOf(_Node):
    """``count(pred)`` (a workload item, or the statistic of a requirement)."""

    predicate: PredNode


@dataclass(frozen=True)
class MeanOf(_Node):
    """``mean(col)`` or ``mean(col | pred)`` (a workload item, or a requirement's statistic)."""

    column: Column
    given: PredNode | None = None


WorkloadNode = AllMarginals | Marginal | Range | Halfspaces | CountOf | MeanOf

# --------------------------------------------------------------------------------------------
# Requirements


@dataclass(frozen=True)
class Model(_Node):
    """``logistic(y ~ x1 + x2 ...)`` or ``linear(y ~ ...)``."""

    kind: Literal["logistic", "linear"]
    label: Column
    features: tuple[Column, ...]


@dataclass(frozen=True)
class Corr(_Node):
    """``corr(a, b)``."""

    a: Column
    b: Column


@dataclass(frozen=True)
class Within(_Node):
    """``within t``: absolute tolerance."""

    value: float


@dataclass(frozen=True)
class MetricBound(_Node):
    """``metric OP value``, e.g. ``accuracy >= 0.8``."""

    metric: str
    op: BoundOp
    value: float


@dataclass(frozen=True)
class Weight(_Node):
    """``weight w``: the requirement's relative share of the post-processing measurements."""

    value: float


@dataclass(frozen=True)
class Requirement(_Node):
    """A statistic of the synthetic table, the tolerance it must meet and, optionally, its
    weight in the post-processing budget."""

    target: Model | Corr | MeanOf | CountOf
    tolerance: Within | MetricBound
    weight: Weight | None = None


RequirementNode = Requirement
Node = (
    WorkloadNode
    | RequirementNode
    | PredNode
    | Model
    | Corr
    | Within
    | MetricBound
    | Weight
    | Column
)

# --------------------------------------------------------------------------------------------
# Canonical printer

#: Words of the grammar; a column with one of these names is printed in backquotes.
KEYWORDS = frozenset(
    "marginals marginal range halfspaces count mean over all by thresholds "
    "logistic linear corr within in and or not".split()
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def column_text(name: str) -> str:
    """A column name as the DSL spells it: bare if it is a non-keyword identifier."""
    if _IDENT.fullmatch(name) and name not in KEYWORDS:
        return name
    return f"`{name}`"


def number_text(x: float) -> str:
    """Shortest text that reads back as exactly ``x`` (integral values without a dot)."""
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


def string_text(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _value(v: Value) -> str:
    return number_text(v.value) if isinstance(v, NumberLit) else string_text(v.value)


def _columns(cols: tuple[Column, ...]) -> str:
    return ", ".join(column_text(c.name) for c in cols)


_PRECEDENCE = {Disjunction: 1, Conjunction: 2, Negation: 3}


def _pred(p: PredNode, parent: int = 0) -> str:
    """Print ``p`` inside a context of precedence ``parent``; parenthesise when ``p`` binds no
    tighter, so nested and/or keep their shape (``(a and b) and c`` is not ``a and b and c``)."""
    mine = _PRECEDENCE.get(type(p), 4)
    if isinstance(p, Comparison):
        text = f"{column_text(p.column.name)} {p.op} {_value(p.value)}"
    elif isinstance(p, Membership):
        text = f"{column_text(p.column.name)} in {{{', '.join(_value(v) for v in p.values)}}}"
    elif isinstance(p, Negation):
        text = f"not {_pred(p.item, mine - 1)}"
    else:
        joiner = " or " if isinstance(p, Disjunction) else " and "
        text = joiner.join(_pred(i, mine) for i in p.items)
    return f"({text})" if mine <= parent else text


def _over(over: tuple[Column, ...] | None) -> str:
    return "" if over is None else f" over [{_columns(over)}]"


def to_dsl(node: Node) -> str:
    """Canonical DSL text of any node; ``parse(to_dsl(t)) == t`` for workload and requirement
    trees. Canonical form: single spaces, double-quoted strings, ``over all`` omitted."""
    match node:
        case AllMarginals(k, over):
            return f"marginals({k}){_over(over)}"
        case Marginal(columns):
            return f"marginal({_columns(columns)})"
        case Range(columns, by, thresholds):
            by_text = f" by {column_text(by.name)}" if by else ""
            thr = f" thresholds {thresholds}" if thresholds is not None else ""
            return f"range({_columns(columns)}){by_text}{thr}"
        case Halfspaces(n, by, over):
            return f"halfspaces({n}){_over(over)} by {column_text(by.name)}"
        case CountOf(predicate):
            return f"count({_pred(predicate)})"
        case MeanOf(column, given):
            cond = f" | {_pred(given)}" if given is not None else ""
            return f"mean({column_text(column.name)}{cond})"
        case Model(kind, label, features):
            rhs = " + ".join(column_text(f.name) for f in features)
            return f"{kind}({column_text(label.name)} ~ {rhs})"
        case Corr(a, b):
            return f"corr({column_text(a.name)}, {column_text(b.name)})"
        case Within(value):
            return f"within {number_text(value)}"
        case MetricBound(metric, op, value):
            return f"{metric} {op} {number_text(value)}"
        case Weight(value):
            return f"weight {number_text(value)}"
        case Requirement(target, tolerance, weight):
            tail = f" {to_dsl(weight)}" if weight is not None else ""
            return f"{to_dsl(target)} {to_dsl(tolerance)}{tail}"
        case Column(name):
            return column_text(name)
        case Comparison() | Membership() | Conjunction() | Disjunction() | Negation():
            return _pred(node)
    raise TypeError(f"not a DSL node: {node!r}")
