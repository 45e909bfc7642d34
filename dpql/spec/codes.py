"""Stable diagnostic codes of the spec/policy layer: ``E0xx`` YAML and document structure,
``E1xx`` release-spec and policy fields, ``W1xx`` warnings about spec fields, ``P0xx`` policy
violations found by ``dpql check``.

:data:`CODES` (``{code: title}``) is a view of the one registry of every dpql code,
:mod:`dpql.diagnostics_registry`, which documents them (``docs/diagnostics.md`` is generated
from it). Codes are never reused for a different meaning; tests match on them.
"""

from __future__ import annotations

from dpql.diagnostics_registry import titles

CODES: dict[str, str] = titles(["spec", "policy"])
