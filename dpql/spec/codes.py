"""Stable diagnostic codes of the spec/policy layer (documented in ``docs/diagnostics.md``).

Scheme: ``E0xx`` YAML and document structure, ``E1xx`` release-spec and policy fields, ``W1xx``
warnings about spec fields, ``P0xx`` policy violations found by ``dpql check``. ``E2xx`` (DSL
syntax), ``E3xx`` (DSL semantics) and ``E4xx`` (data) belong to other layers. Codes are never
reused for a different meaning; tests match on them.
"""

from __future__ import annotations

CODES: dict[str, str] = {
    "E001": "YAML syntax error",
    "E002": "duplicate mapping key",
    "E003": "empty document, or the document is not a mapping",
    "E004": "mapping key that is not a plain scalar",
    "E005": "file cannot be read (missing, unreadable, not UTF-8)",
    "E006": "document over the size limits (characters, nesting depth, values once aliases are "
    "expanded) or with a recursive alias",
    "E010": "unknown key",
    "E011": "required field missing",
    "E012": "value has the wrong type",
    "E020": "malformed privacy-ledger line",
    "E101": "number out of range (epsilon <= 0, delta outside (0, 1), rows <= 0, ...)",
    "E102": "value not among the allowed choices (method, type, format, version, ...)",
    "E103": "empty list or string where at least one item is required",
    "E104": "numeric bounds invalid (min >= max, or non-integral bounds on an integer column)",
    "E105": "bin edges invalid (not strictly increasing or not covering [min, max]), or both "
    "bins and edges given",
    "E106": "duplicate categorical value",
    "E107": "privacy budget form invalid (need epsilon and delta, or rho)",
    "E108": "privacy split invalid (unknown phase for the method, or shares not summing to 1)",
    "E109": "missing-value rule invalid (fill/other value not declared or not in the domain)",
    "E110": "data format cannot be inferred from the path; set data.format",
    "E111": "list or string longer than its limit (name, description, columns, workload items, "
    "requirements, one DSL string)",
    "W101": "delta is not below 1/rows (allowed in the spec; policies usually forbid it)",
    "P001": "epsilon exceeds the policy's max_epsilon",
    "P002": "delta exceeds the policy's max_delta",
    "P003": "the schema has a column the policy forbids",
    "P004": "synthesizer or post-processing method not allowed by the policy",
    "P005": "a column lacks public bounds (numeric min/max, categorical values)",
    "P006": "delta is not below 1/rows",
    "P007": "lifetime privacy budget would be exceeded",
    "P008": "lifetime delta (the policy's lifetime.delta) would be exceeded",
}
