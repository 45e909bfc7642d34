"""What every command prints through: the consoles (every byte through :mod:`dpql.terminal`,
so control characters of user text are escaped), the exit codes, numbers, diagnostics and
``--format json`` documents."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from dpql.diagnostics import Diagnostic, render_all, to_json
from dpql.terminal import SafeConsole

EXIT_OK, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2

# every byte printed goes through dpql.terminal: control characters of user text are escaped
out = SafeConsole(width=None if sys.stdout.isatty() else 120)
err = SafeConsole(stderr=True, soft_wrap=True)  # log lines are never wrapped mid-sentence


def fmt_number(x: float | None, digits: int = 4) -> str:
    """``digits`` significant digits, and a number that would need an exponent in full with
    thousands separators (15,980, not 1.598e+04)."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    text = f"{x:.{digits}g}"
    return f"{x:,.0f}" if "e+" in text else text


def report_diagnostics(
    diagnostics: Sequence[Diagnostic], fmt: str, show_values: bool = False
) -> None:
    """Print diagnostics; private data values only with ``show_values`` (``--show-values``)."""
    if fmt == "json":
        print(to_json(diagnostics, show_values))
    elif diagnostics:
        print(render_all(diagnostics, show_values), file=sys.stderr)



def emit_json(doc: dict[str, Any], code: int = EXIT_OK) -> int:
    """Print ``doc`` as the command's one JSON document on stdout; return ``code``."""
    print(json.dumps(doc, indent=2, allow_nan=False, default=str))
    return code
