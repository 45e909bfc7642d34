"""dpql.lang: the query DSL of release specs (grammar, syntax tree, parser, canonical printer).

Reference: spec/language.md. Semantic checks against a schema live in :mod:`dpql.plan.resolve`.
"""

from dpql.lang.ast import to_dsl
from dpql.lang.parser import (
    parse_requirement,
    parse_requirements,
    parse_workload,
    parse_workload_item,
)

__all__ = [
    "parse_requirement",
    "parse_requirements",
    "parse_workload",
    "parse_workload_item",
    "to_dsl",
]
