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

Codes are stable identifiers (documented in ``spec/language.md``); tests match on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

Severity = Literal["error", "warning"]


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

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "hint": self.hint,
        }
        out.update(asdict(self.pos) if self.pos else {"file": None, "line": 0, "col": 0})
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


def render(diagnostic: Diagnostic, source: str | None = None) -> str:
    """Render one diagnostic for a terminal (see the module docstring for the layout)."""
    pos = diagnostic.pos
    where = ""
    if pos is not None:
        where = pos.file
        if pos.line:
            where += f":{pos.line}:{max(pos.col, 1)}"
        where += ": "
    head = f"{where}{diagnostic.severity}[{diagnostic.code}]: {diagnostic.message}"
    out = [head]
    if pos is not None and pos.line:
        text = source.splitlines()[pos.line - 1] if source is not None else None
        if text is None:
            text = _source_line(pos.file, pos.line)
        if text is not None:
            gutter = " " * len(str(pos.line))
            width = max(1, (pos.end_col - pos.col) if pos.end_col > pos.col else 1)
            out.append(f"  {pos.line} | {text}")
            out.append(f"  {gutter} | {' ' * (max(pos.col, 1) - 1)}{'^' * width}")
    if diagnostic.hint:
        out.append(f"  = hint: {diagnostic.hint}")
    return "\n".join(out)


def render_all(diagnostics: Sequence[Diagnostic]) -> str:
    return "\n".join(render(d) for d in diagnostics)


def to_json(diagnostics: Sequence[Diagnostic]) -> str:
    return json.dumps({"diagnostics": [d.to_json() for d in diagnostics]}, indent=2)
