"""The adult Domain and DSL lists, read from the example spec with plain YAML (no spec loader).

Tests use this so they do not depend on ``dpql.spec``; ``bins: k`` becomes
:func:`dpql.domain.numeric_edges`, ``edges`` are taken as given.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from dpql.domain import CategoricalColumn, Column, Domain, NumericColumn, numeric_edges

ADULT_SPEC = Path(__file__).resolve().parents[1] / "examples" / "adult" / "adult.release.yaml"


@cache
def adult_spec() -> dict[str, Any]:
    return yaml.safe_load(ADULT_SPEC.read_text(encoding="utf-8"))


def column_of(name: str, decl: dict[str, Any]) -> Column:
    if decl["type"] == "categorical":
        return CategoricalColumn(name, tuple(str(v) for v in decl["values"]))
    lo, hi, integer = float(decl["min"]), float(decl["max"]), bool(decl.get("integer", False))
    if "edges" in decl:
        edges = tuple(float(e) for e in decl["edges"])
    else:
        edges = numeric_edges(lo, hi, integer, int(decl["bins"]))
    return NumericColumn(name, lo, hi, integer, edges)


@cache
def adult_domain() -> Domain:
    schema = adult_spec()["schema"]
    return Domain(tuple(column_of(name, decl) for name, decl in schema.items()))


def adult_rows() -> int:
    return int(adult_spec()["data"]["rows"])
