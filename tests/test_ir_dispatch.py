"""Every evaluator of the query IR dispatches through one table per node family, and every node
class of the IR module has an entry in each: adding a node class without a handler fails here,
not at run time on the first release that uses it."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import get_args

import pytest

from dpql.data import query_sql
from dpql.ir import exact, queries
from dpql.plan import describe

# (evaluator, family) -> its dispatch table. DuckDB and Spark both answer through dpql.data.query_sql.
PRED_TABLES: dict[str, Mapping[type, object]] = {
    "numpy (dpql.ir.exact)": exact.PRED_MASKS,
    "SQL engines (dpql.data.query_sql)": query_sql.PRED_SQL,
    "describe (dpql.plan.describe)": describe.PRED_TEXT,
}
QUERY_TABLES: dict[str, Mapping[type, object]] = {
    "numpy (dpql.ir.exact)": exact.QUERY_RULES,
    "SQL engines (dpql.data.query_sql)": query_sql.QUERY_SQL,
    "describe (dpql.plan.describe)": describe.QUERY_TEXT,
}

# Dataclasses of the IR module that are not nodes an evaluator walks.
NOT_NODES = {queries.Sensitivity, queries.Tolerance, *get_args(queries.Requirement)}


def _ir_dataclasses() -> set[type]:
    return {
        cls
        for _, cls in inspect.getmembers(queries, inspect.isclass)
        if cls.__module__ == queries.__name__ and dataclasses.is_dataclass(cls)
    }


def _missing(table: Mapping[type, object], node_types: tuple[type, ...]) -> list[str]:
    return sorted(cls.__name__ for cls in node_types if cls not in table)


def test_every_ir_dataclass_is_a_registered_node_or_declared_otherwise() -> None:
    """A new dataclass in the IR module is either in the ``Pred`` or ``Query`` union (and so
    checked below) or declared here as no node."""
    nodes = set(queries.PRED_TYPES) | set(queries.QUERY_TYPES)
    assert not nodes & NOT_NODES
    unclassified = _ir_dataclasses() - nodes - NOT_NODES
    assert not unclassified, f"add {sorted(c.__name__ for c in unclassified)} to queries.Pred/Query"
    assert nodes <= _ir_dataclasses()


def test_every_query_class_has_a_kind() -> None:
    kinds = [cls.kind for cls in queries.QUERY_TYPES]
    assert len(set(kinds)) == len(kinds)


@pytest.mark.parametrize("evaluator", sorted(PRED_TABLES))
def test_every_predicate_class_has_a_handler(evaluator: str) -> None:
    table = PRED_TABLES[evaluator]
    assert not _missing(table, queries.PRED_TYPES), f"{evaluator} has no handler for these"
    assert set(table) == set(queries.PRED_TYPES), "a handler for a class that is no predicate"


@pytest.mark.parametrize("evaluator", sorted(QUERY_TABLES))
def test_every_query_class_has_a_handler(evaluator: str) -> None:
    table = QUERY_TABLES[evaluator]
    assert not _missing(table, queries.QUERY_TYPES), f"{evaluator} has no handler for these"
    assert set(table) == set(queries.QUERY_TYPES), "a handler for a class that is no query"


def test_the_coverage_check_flags_a_class_without_handler() -> None:
    @dataclasses.dataclass(frozen=True)
    class Quantile:
        column: str

        kind = "quantile"

    assert _missing(exact.QUERY_RULES, (*queries.QUERY_TYPES, Quantile)) == ["Quantile"]


def test_dispatch_refuses_a_value_that_is_no_node() -> None:
    with pytest.raises(TypeError, match="not an IR node"):
        queries.dispatch(exact.QUERY_RULES, ("age",))
    with pytest.raises(TypeError, match="not an IR node"):
        query_sql.pred_sql("age > 3", None)  # type: ignore[arg-type]
