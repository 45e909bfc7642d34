"""Command line: ``dpql init | plan | check | ledger | compile | verify | keygen | evaluate``.

Exit codes: 0 success; 1 a problem in the user's input (spec, policy, data) or a failed check,
reported as ``file:line:col: error[CODE]: message`` with a hint, never a traceback; 2 an internal
error in dpql itself (a bug: please report it), or bad command-line usage (argparse); 141 (128 +
SIGPIPE, as a shell reports it) when the reader of the output went away (``dpql plan S | head``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from dpql.cli.output import EXIT_INPUT, EXIT_INTERNAL, err, report_diagnostics
from dpql.cli.parser import build_parser
from dpql.diagnostics import DiagnosticError
from dpql.terminal import safe_streams

EXIT_BROKEN_PIPE = 128 + 13  # killed by SIGPIPE, in a shell's terms


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``dpql`` command (``argv`` without the program name; default ``sys.argv``);
    the exit code."""
    with safe_streams():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except DiagnosticError as exc:
        report_diagnostics(
            exc.diagnostics,
            getattr(args, "format", "text"),
            show_values=getattr(args, "show_values", False),
        )
        return EXIT_INPUT
    except BrokenPipeError:
        # the reader of stdout is gone: nothing to say, and nothing more to flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as exc:
        message = getattr(exc, "message", None) or "interrupted"
        print(message, file=sys.stderr, flush=True)
        return 130
    except Exception as exc:
        err.print(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in dpql, not in your spec. Please report it with the command you ran.",
            markup=False,
        )
        if os.environ.get("DPQL_DEBUG"):
            raise
        return EXIT_INTERNAL

