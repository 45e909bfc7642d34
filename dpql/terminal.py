"""What dpql prints is inert text: control characters from user input are shown escaped.

A spec's name, description, categories, paths and DSL strings, a record's labels, a file's
header: any of them may hold terminal control sequences (an OSC that sets the window title or
writes a hyperlink, a CSI that clears the screen, a carriage return that overwrites a line, a
bidirectional override that reorders what is shown). :func:`printable` writes every such
character as a visible escape (``\\x1b``, ``\\u202e``); line feeds and tabs stay.

Two central points apply it, so no call site has to: :func:`safe_streams` wraps ``sys.stdout``
and ``sys.stderr`` for the duration of a command (every ``print``), and :class:`SafeConsole`
(the rich consoles) escapes the text of what it renders while keeping its own styles. JSON
output is escaped by the JSON encoder itself.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from rich.console import Console
from rich.segment import Segment

#: C0 controls but tab and line feed, DEL, C1 controls, and the Unicode bidirectional and
#: line/paragraph separators that change how the rest of a line is shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character (module docstring) written as an escape."""
    return _CONTROL.sub(_escape, text)


class SafeStream:
    """A text stream that writes :func:`printable` text to ``raw``. Rich consoles write to
    ``raw`` directly (``rich_proxied_file``) and escape their own text (:class:`SafeConsole`)."""

    def __init__(self, raw: TextIO):
        self.raw = raw
        self.rich_proxied_file = raw

    def write(self, text: str) -> int:
        self.raw.write(printable(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


@contextmanager
def safe_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` wrapped in :class:`SafeStream` inside the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(saved[0]), SafeStream(saved[1])  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


class SafeConsole(Console):
    """A rich console that escapes control characters in the text it renders (its own styles
    and cursor controls are kept)."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            Segment(printable(s.text), s.style, s.control) if not s.control else s
            for s in buffer
        )

    def on_broken_pipe(self) -> None:
        """The reader went away: raised as for a plain ``print`` (``dpql.cli`` ends quietly
        with 141), not rich's exit 1, which reads as a problem in the user's input."""
        raise BrokenPipeError
