"""The layer contract: which package of dpql may import which (docs/architecture.md).

Read from the source (every ``import`` and ``from ... import`` statement, at any depth, so a
function-local import counts too), so adding a forbidden import fails this test.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from guards import run_or_fail

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dpql"

# package -> packages it must never import (at any depth, function-local imports included)
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "spec": ("data", "synth", "postprocess", "plan", "privacy", "pipeline", "evaluate"),
    "lang": ("data", "synth", "postprocess", "plan", "privacy", "pipeline", "evaluate"),
    "privacy": ("data", "synth", "postprocess", "plan", "pipeline", "evaluate"),
    "plan": ("data", "postprocess", "pipeline", "evaluate"),
    "synth": ("data", "postprocess", "pipeline", "evaluate"),
    "postprocess": ("data", "synth", "pipeline", "evaluate"),
    "data": ("synth", "postprocess", "pipeline", "evaluate"),
}
# the plan stage may use the synthesizer *interface* (and through its registry each backend's
# JAX-free plan); never a backend's program
PLAN_MAY_IMPORT_FROM_SYNTH = ("dpql.synth.base",)


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


def violations(layer: str) -> list[str]:
    bad = []
    for path in sorted((PKG / layer).rglob("*.py")):
        for module in imports_of(path):
            parts = module.split(".")
            top = parts[1] if len(parts) > 1 else ""
            if top not in FORBIDDEN[layer]:
                if layer == "plan" and top == "synth" and not any(
                    module == m or module.startswith(m + ".") for m in PLAN_MAY_IMPORT_FROM_SYNTH
                ):
                    bad.append(f"{path.relative_to(ROOT)} imports {module}")
                continue
            bad.append(f"{path.relative_to(ROOT)} imports {module}")
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


def test_no_import_cycles_between_packages() -> None:
    """Package-level graph (spec, lang, plan, ...): acyclic apart from the documented plan ->
    synth.base edge (synth.base imports nothing of plan at run time)."""
    graph: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).parts
        src = rel[0].removesuffix(".py")
        for module in imports_of(path):
            parts = module.split(".")
            if len(parts) > 1 and parts[1] != src:
                graph.setdefault(src, set()).add(parts[1])
    # synth.base's imports are TYPE_CHECKING-only; the edge synth -> plan is real for
    # backends (they use the IR), plan -> synth only through synth.base's registry
    graph.get("plan", set()).discard("synth")
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

    for node in sorted(graph):
        visit(node, [])


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
