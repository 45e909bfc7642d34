"""Module boundaries of dpql: no module imports another module's private name (what a module
shares is public and documented, so a name with a leading underscore can change without reading
the rest of dpql; function-local imports, multi-line import lists and names reached through an
imported module, ``module._name``, count), and no module is longer than a reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _crossings(source: str, where: str) -> list[str]:
    """``where:line name`` of each private name ``source`` takes from a dpql module."""
    tree = ast.parse(source)
    modules: set[str] = set()  # local names bound to dpql modules or their members
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "dpql":
                continue
            if any(_private(part) for part in node.module.split(".")):
                out.append(f"{where}:{node.lineno} {node.module}")
            for alias in node.names:
                modules.add(alias.asname or alias.name)
                if _private(alias.name):
                    out.append(f"{where}:{node.lineno} {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dpql":
                    modules.add(alias.asname or "dpql")
                    if any(_private(part) for part in alias.name.split(".")):
                        out.append(f"{where}:{node.lineno} {alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ):
            out.append(f"{where}:{node.lineno} {node.value.id}.{node.attr}")
    return out


def test_the_scan_finds_private_imports_in_lists_functions_and_attributes() -> None:
    source = (
        "from dpql.x import (\n    y,\n    _z,\n)\nimport dpql.q as q\nfrom dpql._p import w\n\n\n"
        "def f():\n    from dpql.a import _b\n    return q._c, y._d, z._e\n"
    )
    assert _crossings(source, "m.py") == [
        "m.py:1 dpql.x._z",
        "m.py:6 dpql._p",
        "m.py:10 dpql.a._b",
        "m.py:11 q._c",
        "m.py:11 y._d",
    ]


def test_no_module_imports_another_modules_private_name() -> None:
    found = [
        hit
        for path in sorted((ROOT / "dpql").rglob("*.py"))
        for hit in _crossings(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not found, "make these public (with a docstring) or move the code: " + ", ".join(found)


def test_no_module_is_over_the_line_limit() -> None:
    lines = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((ROOT / "dpql").rglob("*.py"))
    }
    long = {name: n for name, n in lines.items() if n > MAX_MODULE_LINES}
    assert not long, f"split these by concept into sibling modules: {long}"
