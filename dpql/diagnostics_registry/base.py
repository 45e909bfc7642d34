"""The registry's types: :class:`DiagnosticCode` (one per code), the code ranges
(:data:`SECTIONS`, :func:`section_of`), the ``dpql`` commands that report codes, and
:class:`EntryList`, the list the entry modules (:mod:`.loading`, :mod:`.running`) fill."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]

CODE_PATTERN = re.compile(r"[EWPV]\d{3}")

# ``dpql`` commands that report a code (see README "The command line")
PLANS = ("plan", "check", "compile", "evaluate")  # every command that loads a spec and plans it
READS_DATA = ("compile", "evaluate")
DATA_FILE = (*READS_DATA, "validate")  # the data file's codes: validate reads it too
CHECK = ("check",)
COMPILE = ("compile",)
EVALUATE = ("evaluate",)
VERIFY = ("verify",)
KEYGEN = ("keygen",)


@dataclass(frozen=True)
class DiagnosticCode:
    """One stable diagnostic code.

    ``title`` is one line; ``details`` (when the docs need more) replaces it in the docs table.
    ``points`` is where the diagnostic's position points (``None``: no position, or the section
    does not say). ``commands`` are the ``dpql`` subcommands that can report it, ``modules``
    the modules (dotted names) that raise it. A ``reserved`` code is no longer reported (its
    ``modules`` are empty) and must never be reused for another meaning."""

    code: str
    severity: Severity
    title: str
    commands: tuple[str, ...]
    modules: tuple[str, ...]
    points: str | None = None
    details: str | None = None
    reserved: bool = False

    def __post_init__(self) -> None:
        if not CODE_PATTERN.fullmatch(self.code):
            raise ValueError(f"malformed diagnostic code {self.code!r}")
        expected = "warning" if self.code[0] == "W" else "error"
        if self.severity != expected:
            raise ValueError(f"{self.code}: {self.code[0]} codes are {expected}s")
        if self.reserved == bool(self.modules):
            raise ValueError(f"{self.code}: a code is either reported by modules or reserved")

    @property
    def section(self) -> str:
        return section_of(self.code)

    @property
    def meaning(self) -> str:
        """The docs table's text: ``details`` when given, else ``title``."""
        return self.details or self.title


@dataclass(frozen=True)
class Section:
    """A range of codes and the stage that reports them (one table of the docs)."""

    key: str
    ranges: str
    layer: str


SECTIONS: tuple[Section, ...] = (
    Section(
        "spec",
        "`E0xx`, `E1xx`, `W1xx`",
        "YAML and document structure; release-spec and policy fields (ranges, choices, bounds, "
        "bins, budget form); warnings about spec fields (loading succeeds)",
    ),
    Section(
        "planning",
        "`E15x`-`E19x`, `W15x`-`W19x`",
        "planning: budget conversion, backend options, estimated resources",
    ),
    Section("dsl", "`E2xx`, `E3xx`, `W3xx`", "DSL syntax; DSL semantics (unknown column, ...)"),
    Section("data", "`E4xx`", "data (values outside the declared domain, missing values, ...)"),
    Section("postprocess", "`E5xx`, `W5xx`", "requirements, post-processing, acceptance tests"),
    Section(
        "release",
        "`E6xx`",
        "evaluation input and release-time refusals (the privacy odometer, the curator file)",
    ),
    Section("policy", "`P0xx`", "policy violations reported by `dpql check --policy`"),
    Section(
        "verify",
        "`V0xx`",
        "provenance-record problems reported by `dpql verify` (and `dpql keygen`'s key files)",
    ),
)


def section_of(code: str) -> str:
    """The :data:`SECTIONS` key of ``code``, from its range."""
    kind, number = code[0], int(code[1:])
    if kind == "P":
        return "policy"
    if kind == "V":
        return "verify"
    hundreds = number // 100
    if hundreds == 1 and number >= 150:
        return "planning"
    return {0: "spec", 1: "spec", 2: "dsl", 3: "dsl", 4: "data", 5: "postprocess", 6: "release"}[
        hundreds
    ]


class EntryList(list[DiagnosticCode]):
    """The entries of one module of the registry, appended by :meth:`error`/:meth:`warning`."""

    def error(
        self, code: str, title: str, commands: tuple[str, ...], *modules: str, **kw: str
    ) -> None:
        self.append(DiagnosticCode(code, "error", title, commands, tuple(modules), **kw))

    def warning(
        self, code: str, title: str, commands: tuple[str, ...], *modules: str, **kw: str
    ) -> None:
        self.append(DiagnosticCode(code, "warning", title, commands, tuple(modules), **kw))
