"""The layer contract: which package of dpql may import which (docs/architecture.md).

Checked twice: from the source (every ``import`` and ``from ... import`` statement, at any depth,
so a function-local import counts too), and by what importing a layer loads (each layer's
modules imported in a fresh interpreter, so an import pulled in through a third module counts).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from guards import HANG_GUARD_S, run_or_fail

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dpql"

# the commands and the pipeline sit above every layer; no layer imports them
TOP = ("pipeline", "cli", "init", "schemas", "evaluate")
# package -> packages it must never import (at any depth, function-local imports included)
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "spec": ("lang", "ir", "privacy", "plan", "data", "synth", "postprocess", "release", *TOP),
    "lang": ("spec", "ir", "privacy", "plan", "data", "synth", "postprocess", "release", *TOP),
    "ir": ("privacy", "plan", "data", "synth", "postprocess", "release", *TOP),
    "privacy": ("plan", "data", "synth", "postprocess", "release", *TOP),
    "plan": ("data", "synth", "postprocess", "release", *TOP),
    "synth": ("data", "postprocess", "release", *TOP),
    "postprocess": ("data", "synth", "release", *TOP),
    "data": ("plan", "synth", "postprocess", "release", *TOP),
    "release": ("postprocess", *TOP),
}
# The interface modules a layer may import from a package it otherwise must not: the plan stage
# uses the synthesizer protocol and registry (through which it calls each backend's JAX-free
# plan), never a backend's program.
INTERFACES: dict[str, tuple[str, ...]] = {"plan": ("dpql.synth.base",)}


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
            out.extend(f"{node.module}.{a.name}" for a in node.names)
    return [m for m in out if m.startswith("dpql")]


def forbidden(layer: str, module: str) -> bool:
    """Whether ``layer`` must not import (or load) ``module``: its package is forbidden and it is
    neither an interface the layer may use nor a package that holds one (importing
    ``dpql.synth.base`` loads ``dpql.synth``)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in FORBIDDEN[layer]:
        return False
    return not any(
        module == m or module.startswith(m + ".") or m.startswith(module + ".")
        for m in INTERFACES.get(layer, ())
    )


def violations(layer: str) -> list[str]:
    bad = []
    for path in sorted((PKG / layer).rglob("*.py")):
        bad.extend(
            f"{path.relative_to(ROOT)} imports {module}"
            for module in imports_of(path)
            if forbidden(layer, module)
        )
    return bad


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_what_it_may(layer: str) -> None:
    assert violations(layer) == []


def test_the_checker_catches_a_forbidden_import(tmp_path: Path, monkeypatch) -> None:
    """A synth module importing the data layer is reported (the contract can fail)."""
    fake = tmp_path / "dpql" / "synth"
    fake.mkdir(parents=True)
    (fake / "leak.py").write_text("def f():\n    from dpql.data.engines import open_engine\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path / "dpql")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert violations("synth") == ["dpql/synth/leak.py imports dpql.data.engines",
                                   "dpql/synth/leak.py imports dpql.data.engines.open_engine"]


def modules_of(layer: str) -> list[str]:
    """Every module of a layer, by its dotted name."""
    names = []
    for path in sorted((PKG / layer).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":  # a script: importing it runs it
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


LOAD = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m == "dpql" or m.startswith("dpql."))))
"""


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """Per layer, the dpql modules a fresh interpreter holds after importing all the layer's
    modules (one interpreter per layer, all started at once)."""
    procs = {
        layer: subprocess.Popen(
            [sys.executable, "-c", LOAD, *modules_of(layer)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for layer in sorted(FORBIDDEN)
    }
    out = {}
    for layer, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"importing the {layer} layer hangs (a hang guard, not a timing test)")
        assert proc.returncode == 0, stderr
        out[layer] = json.loads(stdout)
    return out


def loaded_violations(layer: str, modules: list[str]) -> list[str]:
    return [m for m in modules if forbidden(layer, m)]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_importing_a_layer_loads_only_what_it_may(layer: str, loaded) -> None:
    assert set(modules_of(layer)) <= set(loaded[layer])  # every module of the layer was imported
    assert loaded_violations(layer, loaded[layer]) == []


def test_importing_the_spec_loads_no_privacy_module(loaded) -> None:
    assert not [m for m in loaded["spec"] if m.startswith("dpql.privacy")]


def test_the_load_check_catches_a_forbidden_module() -> None:
    """A module loaded through a third one counts, an interface and its package do not."""
    modules = ["dpql.plan.planner", "dpql.synth", "dpql.synth.base", "dpql.synth.rap",
               "dpql.data.codec"]
    assert loaded_violations("plan", modules) == ["dpql.synth.rap", "dpql.data.codec"]


def node(module: str) -> str:
    """The package-level graph's node of a module: its package, or the interface module it is
    in (an interface is a node of its own: a layer that may use it does not depend on the rest
    of its package)."""
    for m in (i for interfaces in INTERFACES.values() for i in interfaces):
        if module == m or module.startswith(m + "."):
            return m.removeprefix("dpql.")
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycles_between_packages() -> None:
    """The package-level graph (spec, lang, ir, plan, ..., with each interface module a node of
    its own) is acyclic."""
    graph: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        src = node(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for module in imports_of(path):
            dst = node(module)
            if dst and dst != src:
                graph.setdefault(src, set()).add(dst)
    seen: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state = seen.get(node, 0)
        assert state != 1, f"import cycle: {' -> '.join([*stack, node])}"
        if state == 2:
            return
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*stack, node])
        seen[node] = 2

    for start in sorted(graph):
        visit(start, [])


BLOCK_JAX = """
import sys
class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name == "jax" or name.startswith(("jax.", "jaxlib", "optax")):
            raise ImportError(f"{name} is blocked: planning must not import it")
        return None
sys.meta_path.insert(0, _Blocker())
from dpql.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec",
    sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.release.yaml")),
)
def test_plan_and_check_run_on_every_example_without_jax(spec: str) -> None:
    for args in (["plan", spec], ["check", spec, "--policy", "examples/policy.yaml"]):
        done = run_or_fail(
            [sys.executable, "-c", BLOCK_JAX, *args],
            f"dpql {args[0]} {spec} without JAX",
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert "blocked" not in done.stderr, done.stderr
        assert done.returncode in (0, 1), done.stderr  # 1: a policy violation, never a crash
