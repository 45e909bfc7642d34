"""The commands that open a data file: ``dpql init`` (its header only), and the curator-only
``dpql validate`` and ``dpql evaluate``."""

from __future__ import annotations

import argparse
import json

from dpql.cli.output import (
    EXIT_INPUT,
    EXIT_OK,
    emit_json,
)


def cmd_init(args: argparse.Namespace) -> int:
    from dpql.init import init_spec, todo_summary

    path, draft = init_spec(args.data, args.output, args.codebook)
    if args.format == "json":
        return emit_json(
            {"ok": True, "spec": str(path), "format": draft.fmt, "columns": list(draft.columns),
             "todos": draft.todos}
        )  # fmt: skip
    what = "Parquet schema" if draft.fmt == "parquet" else "CSV header (names only)"
    print(f"wrote {path}: {todo_summary(draft.columns, draft.todos)}, from the {what}; "
          "no cell of the data was read")  # fmt: skip
    if draft.todos:
        print(f"next: replace every TODO in {path} from public documentation (dpql plan "
              f"{path} points at each one), then dpql plan / check / compile")  # fmt: skip
    else:
        print(f"next: dpql plan {path}, then dpql check and dpql compile")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    """The curator's strict look at the data (exit 1 when anything needed a rule)."""
    from dpql.data.validate import render, validate
    from dpql.spec.load import load_spec

    spec = load_spec(args.spec)
    found = validate(spec)
    if args.format == "json":
        print(json.dumps(found.to_json(args.show_values), indent=2))
    else:
        print(render(found, spec.domain, args.show_values))
    return EXIT_OK if found.clean else EXIT_INPUT


def cmd_evaluate(args: argparse.Namespace) -> int:
    from dpql.evaluate.cli import run_evaluate

    return run_evaluate(args)
