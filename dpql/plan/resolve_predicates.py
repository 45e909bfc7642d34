"""Columns and predicates of DSL trees resolved against the public :class:`Domain`: what both
workload items and requirements (:mod:`dpql.plan.resolve`) name.

Reads the spec only, never data. Every problem is reported to the scope's sink with its position
in the spec file (spec/language.md §7): E301 unknown column (with "did you mean"), E302 column of
the wrong kind, E303 comparison invalid for the column's kind, E304 value not among the column's
categories, E306 column repeated in one construct, W301 numeric threshold outside the column's
declared range (values are clipped to the bounds, so the comparison is constant).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dpql.diagnostics import DiagnosticSink, SourcePos, did_you_mean
from dpql.domain import CategoricalColumn, Column, Domain, NumericColumn
from dpql.ir.queries import And, CatIn, Not, NumCmp, Or, Pred, TruePred
from dpql.lang import ast as A

Kind = Literal["numeric", "categorical"]


@dataclass(frozen=True)
class Scope:
    """What resolving one DSL string needs: the schema, where the string is, the sink."""

    domain: Domain
    origin: SourcePos | None
    sink: DiagnosticSink

    def error(self, code: str, message: str, node: A.Node, hint: str | None = None) -> None:
        self.sink.error(code, message, node.pos.in_file(self.origin), hint)

    def warning(self, code: str, message: str, node: A.Node, hint: str | None = None) -> None:
        self.sink.warning(code, message, node.pos.in_file(self.origin), hint)


# --------------------------------------------------------------------------------------------
# Columns


def lookup_column(
    s: Scope, col: A.Column, construct: str, kind: Kind | None = None
) -> Column | None:
    """The schema column ``col`` names, if it exists (else E301, with "did you mean") and, when
    ``kind`` is given, has that kind (else E302); None after reporting."""
    if col.name not in s.domain:
        hint = did_you_mean(col.name, s.domain.names) or "columns are declared under `schema:`"
        s.error("E301", f"unknown column '{col.name}'", col, hint)
        return None
    c = s.domain[col.name]
    if kind is not None and c.kind != kind:
        s.error(
            "E302", f"{construct} needs a {kind} column; '{c.name}' is {c.kind}", col,
            _kind_hint(s, c, kind),
        )  # fmt: skip
        return None
    return c


def _kind_hint(s: Scope, c: Column, kind: Kind) -> str:
    """What to write instead of a column of the wrong kind (from the public schema)."""
    if isinstance(c, CategoricalColumn) and c.values:
        return (
            f"the share of one of its categories is "
            f"count({A.column_text(c.name)} == {A.string_text(c.values[0])}); "
            f"{kind} columns: {_names(s, kind)}"
        )
    return f"{kind} columns: {_names(s, kind)}"


def _names(s: Scope, kind: Kind) -> str:
    names = [c.name for c in s.domain if c.kind == kind]
    return ", ".join(names[:8]) + (", ..." if len(names) > 8 else "") or "none in the schema"


def _distinct(s: Scope, cols: Sequence[A.Column], construct: str) -> bool:
    seen: set[str] = set()
    for c in cols:
        if c.name in seen:
            s.error("E306", f"column '{c.name}' appears more than once in {construct}", c)
            return False
        seen.add(c.name)
    return True


def column_names(
    s: Scope, cols: Sequence[A.Column], construct: str, kind: Kind | None = None
) -> tuple[str, ...] | None:
    """Names of ``cols`` if all exist, have ``kind`` and are distinct (all problems reported:
    E301, E302, E306); None otherwise."""
    found = [lookup_column(s, c, construct, kind) for c in cols]
    if not _distinct(s, cols, construct) or any(c is None for c in found):
        return None
    return tuple(c.name for c in cols)


def schema_order(domain: Domain, names: Sequence[str]) -> tuple[str, ...]:
    """``names`` in the order the schema declares them (a marginal's canonical column order)."""
    return tuple(sorted(names, key=domain.names.index))


# --------------------------------------------------------------------------------------------
# Predicates


def _category(s: Scope, col: CategoricalColumn, v: A.Value) -> int | None:
    """Code of a literal among ``col``'s values; a number matches the category spelt like it."""
    text = v.value if isinstance(v, A.StringLit) else A.number_text(v.value)
    if text in col.values:
        return col.code_of(text)
    shown = A.string_text(text) if isinstance(v, A.StringLit) else text
    listed = ", ".join(col.values[:20]) + (f" and {col.card - 20:,} more" if col.card > 20 else "")
    hint = did_you_mean(text, col.values) or f"its categories are: {listed}"
    if col.fine is not None and text in col.fine:  # a grouped column: the workload sees groups
        hint = (
            f"'{col.name}' is grouped (schema.{col.name}.group): the workload and requirements "
            f"name its groups, e.g. {col.values[0]!r}; {shown} is in group "
            f"{col.values[col.code_of_label(text)]!r}"
        )
    s.error("E304", f"{shown} is not a category of '{col.name}'", v, hint)
    return None


def _threshold(s: Scope, col: NumericColumn, v: A.Value, op: str) -> float | None:
    if isinstance(v, A.StringLit):
        s.error(
            "E303",
            f"numeric column '{col.name}' compared with the string {A.string_text(v.value)}",
            v,
            f"compare with a number, e.g. {A.column_text(col.name)} {op} {A.number_text(col.lo)}",
        )
        return None
    if not col.lo <= v.value <= col.hi:
        s.warning(
            "W301",
            f"threshold {A.number_text(v.value)} is outside the declared range of "
            f"'{col.name}' [{A.number_text(col.lo)}, {A.number_text(col.hi)}]",
            v,
            "values are clipped to the declared range, so this comparison is constant",
        )
    return col.scale(v.value)


def _comparison(s: Scope, p: A.Comparison) -> Pred | None:
    col = lookup_column(s, p.column, "a comparison")
    if col is None:
        return None
    if isinstance(col, NumericColumn):
        t = _threshold(s, col, p.value, p.op)
        if t is None:
            return None
        if p.op == "==":  # the closed interval [t, t]; meaningful for integer columns
            return And((NumCmp(col.name, ">=", t), NumCmp(col.name, "<=", t)))
        if p.op == "!=":
            return Or((NumCmp(col.name, "<", t), NumCmp(col.name, ">", t)))
        return NumCmp(col.name, p.op, t)
    if p.op not in ("==", "!="):
        hint = f"use ==, != or `{A.column_text(col.name)} in {{...}}`"
        s.error("E303", f"'{p.op}' needs a numeric column; '{col.name}' is categorical", p, hint)
        return None
    code = _category(s, col, p.value)
    if code is None:
        return None
    codes = {code} if p.op == "==" else set(range(col.card)) - {code}
    return CatIn(col.name, frozenset(codes))


def _membership(s: Scope, p: A.Membership) -> Pred | None:
    col = lookup_column(s, p.column, "a comparison")
    if col is None:
        return None
    if isinstance(col, NumericColumn):
        hint = "use comparisons, e.g. `age >= 20 and age < 30`"
        s.error("E303", f"'in' needs a categorical column; '{col.name}' is numeric", p, hint)
        return None
    codes = [_category(s, col, v) for v in p.values]
    if any(c is None for c in codes):
        return None
    return CatIn(col.name, frozenset(c for c in codes if c is not None))


def resolve_predicate(s: Scope, p: A.PredNode) -> Pred | None:
    """IR predicate of ``p`` (None after reporting errors). Numeric thresholds go to the [0, 1]
    scale with ``NumericColumn.scale``; ``==``/``!=``/``in`` on categories become ``CatIn``."""
    if isinstance(p, A.Comparison):
        return _comparison(s, p)
    if isinstance(p, A.Membership):
        return _membership(s, p)
    if isinstance(p, A.Negation):
        inner = resolve_predicate(s, p.item)
        return None if inner is None else Not(inner)
    items = [resolve_predicate(s, i) for i in p.items]  # resolve all: report every error
    if any(i is None for i in items):
        return None
    kept = tuple(i for i in items if i is not None)
    return And(kept) if isinstance(p, A.Conjunction) else Or(kept)


def resolve_given(s: Scope, p: A.PredNode | None) -> Pred | None:
    """The condition of ``mean(... | P)``: :func:`resolve_predicate` of ``P``; true without one."""
    return TruePred() if p is None else resolve_predicate(s, p)
