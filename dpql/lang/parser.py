"""Parse DSL strings of a release spec into :mod:`dpql.lang.ast` trees.

Syntax errors become :class:`DiagnosticError` with a stable code (table in spec/language.md):

* E201 unexpected token        * E205 unterminated string or quoted name
* E202 unexpected end of input * E206 empty expression
* E203 unknown construct       * E207 a whole number was expected
* E204 unexpected character    * E208 number out of range
* E209 expression nested more than :data:`MAX_NESTING` levels deep

The position is in the *spec file*: ``origin`` is where the DSL string's first character sits
there (computed by the spec loader); a DSL string is one line, so the error's column is
``origin.col`` plus the offset in the string.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError
from lark.lexer import PatternStr
from lark.tree import Meta

from dpql.diagnostics import Diagnostic, DiagnosticError, DiagnosticSink, SourcePos, did_you_mean
from dpql.lang import ast as A

WORKLOAD_CONSTRUCTS = ("marginals", "marginal", "range", "halfspaces", "count", "mean")
#: Deepest parse tree of one item (``not not ...`` or nested parentheses): later passes walk
#: predicates recursively, so depth is bounded before the tree is built (spec/language.md §9).
MAX_NESTING = 50
#: Most digits of a whole number (``marginals(k)``, ``halfspaces(m)``, ``thresholds m``).
MAX_INT_DIGITS = 18
REQUIREMENT_CONSTRUCTS = ("logistic", "linear", "corr", "mean", "count")


@functools.cache
def _lark() -> Lark:
    grammar = (Path(__file__).parent / "grammar.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", start=["workload", "requirement"], propagate_positions=True)


# --------------------------------------------------------------------------------------------
# Tree -> AST


def _span(m: Meta | Token) -> A.Span:
    if isinstance(m, Token):
        return A.Span(m.line or 0, m.column or 0, m.start_pos or 0, m.end_pos or 0)
    return A.Span(m.line, m.column, m.start_pos, m.end_pos)


class _SyntaxProblem(Exception):
    """A problem found while building the tree (after the grammar accepted the text)."""

    def __init__(self, code: str, message: str, token: Token, hint: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.token, self.hint = code, message, token, hint


def _number(tok: Token) -> float:
    x = float(tok)
    if not math.isfinite(x):
        raise _SyntaxProblem("E208", f"number {_short(tok)} is out of range", tok)
    return x


def _int(tok: Token) -> int:
    if len(tok.lstrip("+-")) > MAX_INT_DIGITS:
        raise _SyntaxProblem(
            "E208",
            f"whole number {_short(tok)} is out of range (at most {MAX_INT_DIGITS} digits)",
            tok,
        )
    return int(tok)


def _short(text: str) -> str:
    """A token as echoed in a message: long ones cut in the middle."""
    return text if len(text) <= 24 else f"{text[:10]}...{text[-6:]} ({len(text):,} characters)"


def _unquote(tok: Token) -> str:
    return re.sub(r"\\(.)", r"\1", tok[1:-1])


@v_args(meta=True)
class _ToAst(Transformer):  # type: ignore[type-arg]
    """lark parse tree -> AST; one method per grammar rule."""

    def workload(self, meta: Meta, c: list[Any]) -> Any:
        return c[0]

    def requirement(self, meta: Meta, c: list[Any]) -> A.Requirement:
        return A.Requirement(c[0], c[1], c[2] if len(c) > 2 else None, pos=_span(meta))

    def marginals(self, meta: Meta, c: list[Any]) -> A.AllMarginals:
        return A.AllMarginals(_int(c[0]), c[1] if len(c) > 1 else None, pos=_span(meta))

    def marginal(self, meta: Meta, c: list[Any]) -> A.Marginal:
        return A.Marginal(c[0], pos=_span(meta))

    def range(self, meta: Meta, c: list[Any]) -> A.Range:
        by = next((x for x in c[1:] if isinstance(x, A.Column)), None)
        thresholds = next((x for x in c[1:] if isinstance(x, int)), None)
        return A.Range(c[0], by, thresholds, pos=_span(meta))

    def halfspaces(self, meta: Meta, c: list[Any]) -> A.Halfspaces:
        over = c[1] if len(c) == 3 else None
        return A.Halfspaces(_int(c[0]), c[-1], over, pos=_span(meta))

    def count(self, meta: Meta, c: list[Any]) -> A.CountOf:
        return A.CountOf(c[0], pos=_span(meta))

    def mean(self, meta: Meta, c: list[Any]) -> A.MeanOf:
        return A.MeanOf(c[0], c[1] if len(c) > 1 else None, pos=_span(meta))

    def over(self, meta: Meta, c: list[Any]) -> tuple[A.Column, ...] | None:
        return c[0] if c else None  # `over all` is the same as no `over`

    def by(self, meta: Meta, c: list[Any]) -> A.Column:
        return c[0]

    def thresholds(self, meta: Meta, c: list[Any]) -> int:
        return _int(c[0])

    def model(self, meta: Meta, c: list[Any]) -> A.Model:
        return A.Model(str(c[0]), c[1], tuple(c[2:]), pos=_span(meta))  # type: ignore[arg-type]

    def corr(self, meta: Meta, c: list[Any]) -> A.Corr:
        return A.Corr(c[0], c[1], pos=_span(meta))

    def within(self, meta: Meta, c: list[Any]) -> A.Within:
        return A.Within(_number(c[0]), pos=_span(meta))

    def bound(self, meta: Meta, c: list[Any]) -> A.MetricBound:
        return A.MetricBound(str(c[0]), c[1], _number(c[2]), pos=_span(meta))

    def weight(self, meta: Meta, c: list[Any]) -> A.Weight:
        return A.Weight(_number(c[0]), pos=_span(meta))

    def bound_op(self, meta: Meta, c: list[Any]) -> str:
        return str(c[0])

    cmp_op = bound_op

    def disj(self, meta: Meta, c: list[Any]) -> A.Disjunction:
        return A.Disjunction(tuple(c), pos=_span(meta))

    def conj(self, meta: Meta, c: list[Any]) -> A.Conjunction:
        return A.Conjunction(tuple(c), pos=_span(meta))

    def negation(self, meta: Meta, c: list[Any]) -> A.Negation:
        return A.Negation(c[0], pos=_span(meta))

    def comparison(self, meta: Meta, c: list[Any]) -> A.Comparison:
        return A.Comparison(c[0], c[1], c[2], pos=_span(meta))

    def membership(self, meta: Meta, c: list[Any]) -> A.Membership:
        return A.Membership(c[0], tuple(c[1:]), pos=_span(meta))

    def number(self, meta: Meta, c: list[Any]) -> A.NumberLit:
        return A.NumberLit(_number(c[0]), pos=_span(meta))

    def string(self, meta: Meta, c: list[Any]) -> A.StringLit:
        return A.StringLit(_unquote(c[0]), pos=_span(meta))

    def columns(self, meta: Meta, c: list[Any]) -> tuple[A.Column, ...]:
        return tuple(c)

    def column(self, meta: Meta, c: list[Any]) -> A.Column:
        tok: Token = c[0]
        name = tok[1:-1] if tok.type == "QUOTED_NAME" else str(tok)
        return A.Column(name, pos=_span(tok))


# --------------------------------------------------------------------------------------------
# Errors


def _where(origin: SourcePos | None, offset: int, width: int = 1) -> SourcePos:
    return A.Span(1, offset + 1, offset, offset + max(width, 1)).in_file(origin)


_WORDS = {
    "NAME": "a column name",
    "QUOTED_NAME": "a column name",
    "INTEGER": "a whole number",
    "NUMBER": "a number",
    "STRING": "a quoted string",
    "MODEL": "'logistic' or 'linear'",
    "$END": "the end",
}


def _expected_words(names: set[str]) -> list[str]:
    terminals = _lark().get_terminal
    words: set[str] = set()
    for name in names:
        if name in _WORDS:
            words.add(_WORDS[name])
        else:
            pattern = terminals(name).pattern
            words.add(f"'{pattern.value}'" if isinstance(pattern, PatternStr) else name.lower())
    if "'within'" in words and "a column name" in words:  # the tolerance of a requirement
        words -= {"'within'", "a column name"}
        words.add("'within' or a bound such as 'accuracy >= 0.8'")
    return sorted(words)


def _keywords(names: set[str]) -> list[str]:
    terminals = _lark().get_terminal
    out = []
    for name in names:
        if name in _WORDS:
            continue
        pattern = terminals(name).pattern
        if isinstance(pattern, PatternStr) and pattern.value.isidentifier():
            out.append(pattern.value)
    return out


def _unknown_construct(word: str, start: str) -> tuple[str, str]:
    kind = "workload item" if start == "workload" else "requirement"
    known = WORKLOAD_CONSTRUCTS if start == "workload" else REQUIREMENT_CONSTRUCTS
    if word in WORKLOAD_CONSTRUCTS + REQUIREMENT_CONSTRUCTS:
        other = "requirement" if start == "workload" else "workload item"
        message = f"'{word}' is a {other}, not a {kind}"
    else:
        message = f"unknown {kind} '{word}'"
    hint = did_you_mean(word, known) or f"a {kind} is one of: {', '.join(known)}"
    return message, hint


def _syntax_diagnostic(
    e: UnexpectedInput, text: str, start: str, origin: SourcePos | None
) -> Diagnostic:
    if isinstance(e, UnexpectedCharacters):
        char = text[e.pos_in_stream]
        where = _where(origin, e.pos_in_stream)
        if char in "\"'`":
            what = "quoted name" if char == "`" else "string"
            return Diagnostic(
                "E205", f"unterminated {what}", where, f"close it with a matching {char}"
            )
        return Diagnostic("E204", f"unexpected character {char!r}", where,
                          _backquote_hint(text, e.pos_in_stream))  # fmt: skip
    if not isinstance(e, UnexpectedToken):
        raise e
    tok: Token = e.token
    expected = set(e.accepts or e.expected)
    words = _expected_words(expected)
    if tok.type == "$END":
        where = _where(origin, len(text.rstrip()))
        return Diagnostic("E202", f"unexpected end of input, expected {_or(words)}", where)
    where = _where(origin, tok.start_pos or 0, len(tok))
    first_token = (tok.start_pos or 0) == len(text) - len(text.lstrip())
    if first_token and re.fullmatch(r"[A-Za-z_]\w*", str(tok)):
        message, hint = _unknown_construct(str(tok), start)
        return Diagnostic("E203", message, where, hint)
    if expected == {"INTEGER"} and tok.type == "NUMBER":
        return Diagnostic("E207", f"expected a whole number, found {tok}", where)
    hint = did_you_mean(str(tok), _keywords(expected)) if tok.type == "NAME" else None
    if set(words) == _BOUND_WORDS:  # `withn 0.1` reads as the bound `withn OP 0.1`
        words_before = re.findall(r"\w+", text[: tok.start_pos])
        hint = did_you_mean(words_before[-1], ["within"]) if words_before else None
    return Diagnostic("E201", f"unexpected '{tok}', expected {_or(words)}", where, hint)


_BOUND_WORDS = {"'<'", "'<='", "'>'", "'>='"}


def _backquote_hint(text: str, pos: int) -> str | None:
    """Where the unexpected character at ``pos`` sits inside a word that starts like a name
    (``flc.grp``, R's and SAS's column names), that word written in backquotes."""
    for m in re.finditer(r"[A-Za-z_][^\s(),|~+*/<>=!\"'`\[\]{}]*", text):
        if m.start() < pos < m.end():
            return f"a column name that is not an identifier goes in backquotes: `{m.group()}`"
    return None


def _or(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


# --------------------------------------------------------------------------------------------
# Entry points

N = TypeVar("N")


def _parse(text: str, start: str, origin: SourcePos | None) -> Any:
    if not text.strip():
        what = "workload item" if start == "workload" else "requirement"
        raise DiagnosticError([Diagnostic("E206", f"empty {what}", _where(origin, 0))])
    try:
        tree = _lark().parse(text, start=start)
        _check_nesting(tree, origin)
        return _ToAst().transform(tree)
    except UnexpectedInput as e:
        raise DiagnosticError([_syntax_diagnostic(e, text, start, origin)]) from None
    except VisitError as e:
        p = e.orig_exc
        if not isinstance(p, _SyntaxProblem):
            raise
        where = _where(origin, p.token.start_pos or 0, len(p.token))
        raise DiagnosticError([Diagnostic(p.code, p.message, where, p.hint)]) from None


def _check_nesting(tree: Tree[Token], origin: SourcePos | None) -> None:
    """E209 when the tree is deeper than MAX_NESTING (walked without recursion)."""
    stack: list[tuple[Tree[Token], int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            start = node.meta.start_pos if not node.meta.empty else 0
            raise DiagnosticError(
                [
                    Diagnostic(
                        "E209",
                        f"the expression is nested more than {MAX_NESTING} levels deep",
                        _where(origin, start),
                        "simplify it: 'not not p' is p, and 'and'/'or' chain without parentheses",
                    )
                ]
            )
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, Tree))


def parse_workload_item(text: str, origin: SourcePos | None = None) -> A.WorkloadNode:
    """Parse one workload item; raises DiagnosticError (E2xx) on a syntax error."""
    return _parse(text, "workload", origin)


def parse_requirement(text: str, origin: SourcePos | None = None) -> A.RequirementNode:
    """Parse one requirement; raises DiagnosticError (E2xx) on a syntax error."""
    return _parse(text, "requirement", origin)


def _parse_all(
    parse_one: Callable[[str, SourcePos | None], N],
    texts: Sequence[str],
    origins: Sequence[SourcePos | None] | None,
) -> tuple[N, ...]:
    sink = DiagnosticSink()
    out: list[N] = []
    for i, text in enumerate(texts):
        try:
            out.append(parse_one(text, origins[i] if origins else None))
        except DiagnosticError as e:
            sink.extend(e.diagnostics)
    sink.raise_if_errors()
    return tuple(out)


def parse_workload(
    texts: Sequence[str], origins: Sequence[SourcePos | None] | None = None
) -> tuple[A.WorkloadNode, ...]:
    """Parse every workload item, reporting the syntax errors of all of them at once."""
    return _parse_all(parse_workload_item, texts, origins)


def parse_requirements(
    texts: Sequence[str], origins: Sequence[SourcePos | None] | None = None
) -> tuple[A.RequirementNode, ...]:
    """Parse every requirement, reporting the syntax errors of all of them at once."""
    return _parse_all(parse_requirement, texts, origins)
