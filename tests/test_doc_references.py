"""Every ``dpql.x.y`` the documentation names resolves to the object in its defining module.

A doc that points at a moved, renamed or deleted function fails here, so the architecture and
privacy notes stay a map of the code as it is. Only the package root ``dpql`` may name an
object defined elsewhere: it is the public API, which re-exports on purpose.
"""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
DOTTED = re.compile(r"\bdpql(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FILE_SUFFIXES = {"yaml", "yml", "json", "jsonl", "toml", "md", "csv", "txt"}  # dpql.yaml: a file


def _named() -> list[tuple[str, str]]:
    """(dotted name, 'file:line') for each distinct name, at its first mention."""
    seen: dict[str, str] = {}
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for name in DOTTED.findall(line):
                if name.rsplit(".", 1)[-1] in FILE_SUFFIXES:
                    continue
                seen.setdefault(name.rstrip("."), f"{doc.relative_to(ROOT)}:{number}")
    return sorted(seen.items())


def _resolve(name: str) -> tuple[str, object]:
    """The longest importable module prefix of ``name`` and the object the rest names in it
    (AttributeError when an attribute is missing)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return ".".join(parts[:cut]), obj
    raise ModuleNotFoundError(name)


def test_the_docs_name_some_objects() -> None:
    assert len(_named()) > 20  # the pattern still finds the names the docs use


@pytest.mark.parametrize(("name", "where"), _named(), ids=[n for n, _ in _named()])
def test_a_documented_name_is_defined_where_the_doc_says(name: str, where: str) -> None:
    try:
        module, obj = _resolve(name)
    except (ModuleNotFoundError, AttributeError) as e:
        pytest.fail(f"{where}: `{name}` does not resolve ({e}); point the doc at its module")
    defined_in = getattr(obj, "__module__", None)
    if module == "dpql" or isinstance(obj, types.ModuleType) or not isinstance(defined_in, str):
        return
    assert defined_in == module, (
        f"{where}: `{name}` is defined in {defined_in}, not {module}; name its defining module"
    )
