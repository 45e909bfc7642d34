"""Diagnostics: user-facing errors with source positions, collected per stage.

Every stage of the pipeline (load, parse, resolve, plan, check, encode) reports problems in the
user's input as :class:`Diagnostic` values and raises :class:`DiagnosticError` carrying all of the
stage's diagnostics at once. The CLI renders them as

    release.yaml:LINE:COL: error[CODE]: message
      LINE | offending source line
           |     ^
      = hint: how to fix it

and exits with status 1. Bugs in dpql itself are *not* diagnostics: they surface as
:class:`InternalError` and the CLI says so plainly.

Codes are stable identifiers, each registered in :mod:`dpql.diagnostics_registry` (which
generates the tables of ``docs/diagnostics.md``); tests match on them.

Diagnostics about the private data (``private=True``: the data layer, E4xx) name the file, the row
and the column but never a cell's value, and their source line is never quoted (a data line holds
private cells, and cells of columns outside the schema). Values and other data-derived text a
curator may want to see (an engine's own message, which can quote cells) go to ``values``, which
is rendered only when asked (``dpql compile --show-values``, the curator's own terminal).
Rendered text has its control characters escaped (:func:`dpql.terminal.printable`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from dpql.terminal import printable

Severity = Literal["error", "warning"]

#: Most characters of a message or hint shown; longer ones (an echoed cell or name) are cut.
MAX_MESSAGE_CHARS = 500
#: Most characters of the offending source line shown, in a window around the caret.
MAX_SOURCE_CHARS = 160


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters (the cut marked with '...'), so that a diagnostic
    echoing user input (a 1 MB cell, a 5,000-digit number) stays one screen long."""
    if len(text) <= limit:
        return text
    return f"{text[: max(limit - 30, 1)]}... ({len(text):,} characters)"


@dataclass(frozen=True)
class SourcePos:
    """A 1-based position in a source file; ``line``/``col`` of 0 mean "unknown"."""

    file: str
    line: int = 0
    col: int = 0
    end_col: int = 0


@dataclass(frozen=True)
class Diagnostic:
    """One problem in user input: a stable ``code``, a message, where it is and how to fix it."""

    code: str
    message: str
    pos: SourcePos | None = None
    hint: str | None = None
    severity: Severity = "error"
    # About private data: the source line at ``pos`` is never quoted (see the module docstring).
    private: bool = False
    # Offending private values (or an engine's message that may quote them): CURATOR-ONLY,
    # rendered only with ``show_values``; kept out of ``repr`` so logged exceptions omit it.
    values: str | None = field(default=None, repr=False)

    def to_json(self, show_values: bool = False) -> dict[str, object]:
        out: dict[str, object] = {
            "code": self.code,
            "severity": self.severity,
            "message": clip(self.message),
            "hint": None if self.hint is None else clip(self.hint),
        }
        out.update(asdict(self.pos) if self.pos else {"file": None, "line": 0, "col": 0})
        if show_values and self.values:
            out["values"] = self.values
        return out


@dataclass
class DiagnosticError(Exception):
    """Raised by a stage that found problems in user input; carries all of them."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(self.diagnostics[0].message if self.diagnostics else "invalid input")

    @property
    def codes(self) -> list[str]:
        return [d.code for d in self.diagnostics]


class InternalError(Exception):
    """A bug in dpql, not in the user's input. The CLI reports it as such."""


class DiagnosticSink:
    """Collects the diagnostics of one stage; ``raise_if_errors`` ends the stage."""

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []

    def error(
        self, code: str, message: str, pos: SourcePos | None = None, hint: str | None = None
    ) -> None:
        self.items.append(Diagnostic(code, message, pos, hint))

    def warning(
        self, code: str, message: str, pos: SourcePos | None = None, hint: str | None = None
    ) -> None:
        self.items.append(Diagnostic(code, message, pos, hint, "warning"))

    def extend(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.items.extend(diagnostics)

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)

    def raise_if_errors(self) -> None:
        if self.has_errors:
            raise DiagnosticError(list(self.items))


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """A "did you mean ...?" hint for a misspelt name, or None if nothing is close."""
    import difflib

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def _source_line(path: str, line: int) -> str | None:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return lines[line - 1] if 0 < line <= len(lines) else None


def render(diagnostic: Diagnostic, source: str | None = None, show_values: bool = False) -> str:
    """Render one diagnostic for a terminal (see the module docstring for the layout).

    A private diagnostic's source line is never quoted; its ``values`` are appended to the
    message only with ``show_values``."""
    pos = diagnostic.pos
    where = ""
    if pos is not None:
        where = pos.file
        if pos.line:
            where += f":{pos.line}:{max(pos.col, 1)}"
        where += ": "
    head = f"{clip(where, 300)}{diagnostic.severity}[{diagnostic.code}]: {clip(diagnostic.message)}"
    if show_values and diagnostic.values:
        head += f" [{diagnostic.values}]"
    out = [head]
    if pos is not None and pos.line and not diagnostic.private:
        lines = source.splitlines() if source is not None else None
        text = lines[pos.line - 1] if lines is not None and pos.line <= len(lines) else None
        if text is None:
            text = _source_line(pos.file, pos.line)
        if text is not None:
            out.extend(_quote(text, pos))
    if diagnostic.hint:
        out.append(f"  = hint: {clip(diagnostic.hint)}")
    return printable("\n".join(out))


def _quote(text: str, pos: SourcePos) -> list[str]:
    """The source line and its caret; a long line is shown in a window around the caret."""
    gutter = " " * len(str(pos.line))
    col = max(pos.col, 1)
    width = max(1, (pos.end_col - pos.col) if pos.end_col > pos.col else 1)
    if len(text) > MAX_SOURCE_CHARS:
        start = max(0, min(col - 1 - MAX_SOURCE_CHARS // 4, len(text) - MAX_SOURCE_CHARS))
        lead = "..." if start else ""
        tail = "..." if start + MAX_SOURCE_CHARS < len(text) else ""
        text = lead + text[start : start + MAX_SOURCE_CHARS] + tail
        col = col - start + len(lead)
        width = max(1, min(width, len(lead) + MAX_SOURCE_CHARS - (col - 1)))
    return [f"  {pos.line} | {text}", f"  {gutter} | {' ' * (col - 1)}{'^' * width}"]


def render_all(diagnostics: Sequence[Diagnostic], show_values: bool = False) -> str:
    return "\n".join(render(d, show_values=show_values) for d in diagnostics)


def to_json(diagnostics: Sequence[Diagnostic], show_values: bool = False) -> str:
    items = [d.to_json(show_values) for d in diagnostics]
    return json.dumps({"diagnostics": items}, indent=2)
