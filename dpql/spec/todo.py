"""The blanks of a draft spec: ``dpql init`` writes ``TODO`` wherever a fact must come from
public knowledge, and loading a spec with one left reports ``E030`` at each (so the curator sees
what is left to fill, not a type error about the first)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpql.diagnostics import Diagnostic

TODO = "TODO"

#: what to put in place of a TODO, by the key it is the value of
TODO_HINTS: Mapping[str, str] = {
    "rows": "the public row count: a published figure, never counted from the file (the same "
    "number, or another, for synthesizer.rows)",
    "type": "numeric or categorical; then keep min/max (numeric) or values (categorical) and "
    "delete the other keys",
    "min": "a public lower bound (documentation, codebook, law), never the data's minimum",
    "max": "a public upper bound (documentation, codebook, law), never the data's maximum",
    "values": "the public list of categories (a codebook), never the values seen in the data",
}


def _plain(doc: Any, path: tuple[str | int, ...]) -> bool:
    """Whether the scalar at ``path`` is written unquoted (a quoted "TODO" is a value)."""
    try:
        return doc._node(path)[1].style is None
    except (KeyError, AttributeError):
        return True


def todo_diagnostics(data: Any, doc: Any) -> list[Diagnostic]:
    """``E030`` for the values written as a plain, unquoted ``TODO`` (a draft's blanks; a
    quoted ``"TODO"`` is an ordinary value), one per mapping that holds any (a schema column's
    TODOs together), at its first TODO, with what to put there; ``doc`` (a
    :class:`dpql.spec.yamlpos.YamlDoc`) gives the positions."""
    groups: dict[tuple[str | int, ...], list[tuple[str, tuple[str | int, ...]]]] = {}

    def walk(value: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, (*path, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, (*path, i))
        elif value == TODO and _plain(doc, path):
            cut = max(i for i, p in enumerate(path) if isinstance(p, str))
            groups.setdefault(path[:cut], []).append((str(path[cut]), path))

    walk(data, ())
    found = []
    for parent, items in groups.items():
        keys = [k for k, _ in items]
        where = ".".join(str(p) for p in parent)
        what = f"{where}: {', '.join(keys)}" if len(keys) > 1 else f"{where}.{keys[0]}".strip(".")
        hint = TODO_HINTS.get(keys[0], "fill it in from public knowledge")
        if len(keys) > 1:
            hint = "type: " + hint if keys[0] == "type" else hint
            hint += "; bounds and categories come from public documentation, never the data"
        found.append(
            Diagnostic(
                "E030",
                f"{what} {'is' if len(keys) == 1 else 'are'} still TODO (blanks left by dpql init)",
                doc.value_pos(items[0][1]),
                hint,
            )
        )
    return found
