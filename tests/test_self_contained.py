"""A fresh clone passes its own tests: nothing a test or an example reads lives outside the repo.

A user's clone has no ``../shared`` sibling, no ``/work`` tree and none of the git-ignored build
outputs (``out/``, ``curator/``), so a test that reads one either fails there or, worse, skips
silently. The guards here read the test modules' source (every path they build from
``__file__`` or from a literal is resolved and must stay inside the repository, exist and not be
git-ignored; no string names a path outside it) and the example specs (their data and external
tables ship in the repo). The last test runs pytest the way the README says and checks that it
ends with pytest's "N passed" line.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from guards import run_or_fail

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# every test module but this one, whose examples of broken paths are the point
TEST_FILES = sorted(
    p
    for p in TESTS.rglob("*.py")
    if "__pycache__" not in p.parts and p != Path(__file__).resolve()
)

# a string naming a path outside the repo: absolute paths into the usual trees, the sibling
# ``shared`` checkout, or a climb out of the repository
OUTSIDE = re.compile(
    r"(^|[\s'\"=(,:])/(work|home|root|mnt|data|srv|opt|Users|tmp)/"  # absolute path
    r"|(^|[/\\])shared([/\\]|$)"  # ../shared/... or .../shared
    r"|^\.\.$|^\.\./\.\."  # a bare ".." component, or two levels up
)


class _Unknown(Exception):
    """The expression is not a path the checker can resolve statically."""


def _path_of(node: ast.AST, env: dict[str, Path], here: Path) -> Path:
    """Resolve ``Path(__file__).resolve().parents[1] / "examples"``-like expressions."""
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise _Unknown
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id == "Path" and len(node.args) == 1:
            (arg,) = node.args
            if isinstance(arg, ast.Name) and arg.id == "__file__":
                return here
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return Path(os.path.normpath(ROOT / arg.value))  # relative: run from the root
            return _path_of(arg, env, here)
        if isinstance(f, ast.Attribute) and f.attr in ("resolve", "absolute") and not node.args:
            return _path_of(f.value, env, here)
        if isinstance(f, ast.Attribute) and f.attr == "joinpath":
            parts = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if len(parts) != len(node.args) or not all(isinstance(p, str) for p in parts):
                raise _Unknown
            return Path(os.path.normpath(_path_of(f.value, env, here).joinpath(*parts)))
        raise _Unknown
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        return _path_of(node.value, env, here).parent
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "parents"
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, int)
    ):
        base = _path_of(node.value.value, env, here)
        try:
            return base.parents[node.slice.value]
        except IndexError:
            return Path("/")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left = _path_of(node.left, env, here)
        if isinstance(node.right, ast.Constant) and isinstance(node.right.value, str):
            return Path(os.path.normpath(left / node.right.value))
        raise _Unknown
    raise _Unknown


def _module_paths(tree: ast.Module, here: Path) -> dict[str, Path]:
    """Module-level names bound to a resolvable path (``ROOT = Path(__file__)...``)."""
    env: dict[str, Path] = {}
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        elif isinstance(stmt, ast.Assign):
            value = stmt.value
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Name):
                try:
                    env[t.id] = _path_of(value, env, here)
                except _Unknown:
                    env.pop(t.id, None)
    return env


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of docstring nodes (prose may say 'shared' freely)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def resolved_paths(tree: ast.Module, here: Path) -> Iterator[tuple[int, Path]]:
    """(line, path) of every path expression of a module at ``here`` that resolves statically."""
    env = _module_paths(tree, here)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call | ast.Attribute | ast.Subscript | ast.BinOp | ast.Name):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                continue
            try:
                yield node.lineno, _path_of(node, env, here)
            except _Unknown:
                pass


def outside_strings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, text) of every string (docstrings aside) that names a path outside the repo."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if OUTSIDE.search(node.value):
                yield node.lineno, node.value


def _git_ignored(paths: list[Path]) -> set[Path]:
    """Those of ``paths`` git ignores (absent from a fresh clone); empty without git."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists() or not paths:
        return set()
    proc = subprocess.run(
        [git, "-C", str(ROOT), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(str(p.relative_to(ROOT)) for p in paths),
        capture_output=True,
        text=True,
        check=False,
    )
    return {(ROOT / line).resolve() for line in proc.stdout.splitlines() if line}


def problems(source: str, here: Path) -> list[str]:
    """What in the test module ``source`` (living at ``here``) would break on a fresh clone."""
    tree = ast.parse(source, str(here))
    rel = here.relative_to(ROOT)
    out = [f"{rel}:{line}: names a path outside the repo: {s[:80]!r}"
           for line, s in outside_strings(tree)]  # fmt: skip
    inside: dict[Path, int] = {}
    for line, p in resolved_paths(tree, here):
        if not p.is_relative_to(ROOT):
            out.append(f"{rel}:{line}: builds the path {p}, outside the repo {ROOT}")
        elif p.exists():
            inside.setdefault(p, line)
    for p in sorted(_git_ignored(list(inside))):
        out.append(f"{rel}:{inside[p]}: reads {p.relative_to(ROOT)}, which git ignores")
    return out


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_no_test_reads_outside_the_repo(path: Path) -> None:
    assert problems(path.read_text(encoding="utf-8"), path) == []


BROKEN = """\
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "spec-examples" / "policy.yaml"
UP = Path(__file__).parent.parent.parent / "data"
DATA = Path("/work/shared/data/adult/adult_train.csv")
OUT = ROOT / "examples" / "adult" / "out" / "adult_synthetic.csv"
OK = ROOT / "examples" / "adult" / "adult.release.yaml"
def f():
    return Path(__file__).resolve().parents[2] / "x.csv", ROOT.joinpath("..", "y")
"""


def test_the_guard_reports_what_broke_a_fresh_clone(tmp_path: Path) -> None:
    """The guard itself: each pattern that broke a fresh clone is reported at its line."""
    found = problems(BROKEN, TESTS / "test_broken.py")
    lines = {int(f.split(":")[1]) for f in found}
    assert {3, 4, 5, 9} <= lines, found
    assert 7 not in lines  # the shipped example is fine
    assert any("'/work/shared/data/adult/adult_train.csv'" in f for f in found)
    out = ROOT / "examples" / "adult" / "out" / "adult_synthetic.csv"
    if out.exists() and _git_ignored([out]):  # a build output here; a clone has none
        assert 6 in lines, found


EXAMPLE_SPECS = sorted((ROOT / "examples").glob("*/*.release.yaml"))


@pytest.mark.parametrize("spec", EXAMPLE_SPECS, ids=lambda p: p.parent.name)
def test_example_specs_read_only_files_shipped_in_the_repo(spec: Path) -> None:
    data = yaml.safe_load(spec.read_text(encoding="utf-8"))
    files = [data["data"]["path"]]
    synth = data.get("synthesizer") or {}
    if isinstance(synth, dict) and synth.get("path"):
        files.append(synth["path"])
    for name in files:
        path = Path(os.path.normpath(spec.parent / name))
        assert path.is_relative_to(ROOT), f"{spec.name}: {name} is outside the repo"
        assert path.is_file(), f"{spec.name}: {name} is not in the repo"
        assert not _git_ignored([path]), f"{spec.name}: {name} is git-ignored"


def test_example_policy_ships_in_the_repo() -> None:
    from dpql.spec import load_policy

    policy = load_policy(ROOT / "examples" / "policy.yaml")
    assert policy.model.max_epsilon >= 1.0  # the Adult example passes `dpql check` with it


@pytest.mark.slow
def test_readme_test_command_ends_with_the_passed_line(tmp_path: Path) -> None:
    """``-q`` in the README plus ``-q`` in pyproject's addopts would give ``-qq``, which hides
    pytest's final "N passed" line: run the README's command with the project's configuration
    on a one-test file and look at its last line."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    command = next(b for b in blocks if "pytest" in b).split("&&")[-1].split()
    assert command[:3] == ["python3", "-m", "pytest"], command
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    proc = run_or_fail(
        [sys.executable, "-m", "pytest", *command[3:], "-c", str(ROOT / "pyproject.toml"),
         "--rootdir", str(tmp_path), "-p", "no:cacheprovider", str(tmp_path / "test_one.py")],
        "pytest on a one-test file", capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    assert re.fullmatch(r"=*\s*1 passed in [\d.]+s\s*=*", lines[-1].strip()), lines[-1]
