"""Every registered backend has the one shape of ``dpql.synth.base``: a package with a JAX-free
``plan`` module and a ``program`` module that only ``run`` loads, one ``plan(ctx, options)``
signature and one ``Traits`` value."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import pytest
from guards import run_or_fail

from dpql.synth.base import BACKENDS, Traits, backend

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_backend_is_a_package_with_plan_and_program(name: str) -> None:
    folder = ROOT / "dpql" / "synth" / name
    assert {"__init__.py", "plan.py", "program.py"} <= {p.name for p in folder.glob("*.py")}
    b = backend(name)
    assert b.name == name
    assert isinstance(b.traits, Traits)
    params = list(inspect.signature(b.plan).parameters.values())
    assert [p.name for p in params] == ["ctx", "options"]
    assert params[1].default is None
    assert callable(importlib.import_module(f"dpql.synth.{name}.plan").plan)


def test_planning_loads_no_program() -> None:
    """Importing every backend and its plan module loads neither JAX, optax nor mbi, nor any
    backend's program (a fresh interpreter: what ``dpql plan`` pulls in)."""
    code = (
        "import sys\n"
        "from dpql.synth.base import BACKENDS, backend\n"
        "import dpql.plan.planner, dpql.plan.resources\n"
        "for n in BACKENDS:\n"
        "    backend(n); __import__(f'dpql.synth.{n}.plan')\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = run_or_fail(
        [sys.executable, "-c", code], "importing the backends' plans", cwd=ROOT,
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "dpql.synth.rap.plan" in loaded  # the check sees what was imported
    heavy = [
        m
        for m in loaded
        if m.split(".")[0] in ("jax", "jaxlib", "optax", "mbi")
        or m.endswith((".program", ".relaxed", ".graphical", ".train", ".dpsgd", ".nets"))
    ]
    assert heavy == []


def test_the_method_list_is_the_registry_and_the_spec_models() -> None:
    """``dpql.spec.models.METHODS`` is the one list: each method has its options model (the
    spec's discriminated union), its split phases, its entry in the policy's allowed methods
    and in the record's schema, and a backend package."""
    from typing import get_args

    from dpql.release.provenance_schema import record_schema
    from dpql.spec.models import METHODS, PHASES_OF_METHOD, Policy, SynthesizerSpec

    union = get_args(get_args(SynthesizerSpec)[0])
    assert sorted(get_args(m.model_fields["method"].annotation)[0] for m in union) == sorted(
        METHODS
    )
    assert set(PHASES_OF_METHOD) == set(METHODS) == set(BACKENDS)
    assert set(METHODS) < set(Policy.model_fields["allowed_methods"].default_factory())
    synth = record_schema()["properties"]["synthesizer"]["properties"]["method"]
    assert synth["enum"] == list(METHODS)
