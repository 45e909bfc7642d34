"""The JSON Schema of a provenance record (``spec/provenance.schema.json`` is generated from
:func:`record_schema`); :mod:`dpql.release.provenance` validates records against it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpql.spec.models import METHODS

RECORD_VERSION = 4  # the record layout; dpql.release.provenance writes and verifies this version

# ---------------------------------------------------------------------------------------------
# The record's JSON Schema (``python -m dpql.schemas`` writes spec/provenance.schema.json)

_NUMBER = {"type": "number"}
_NULLABLE_NUMBER = {"type": ["number", "null"]}
_NONNEG = {"type": "number", "minimum": 0}
_VERDICT = {"enum": ["pass", "fail", "inconclusive"]}
_SPEC_KEYS = ("dpql", "name", "data", "schema", "privacy", "workload", "synthesizer", "output")


def _object(
    properties: Mapping[str, Any], required: list[str] | None = None, *, closed: bool = True
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties) if required is None else required,
    }
    if closed:
        out["additionalProperties"] = False
    return out


# The postprocess keys every record has; the later ones (prior_rows, ess_floor, shrink,
# resampling_shift_sd, measure_error_sd_*, workload, boxes, policy, roles) are optional so records
# written before they existed still verify.
_POSTPROCESS_REQUIRED = [
    "method", "solver", "measures", "noise_sigma", "iterations", "gamma", "projection_distance",
    "kkt_violation", "kl_from_synthetic", "effective_sample_size", "sampling_seed", "lambda",
    "noisy", "target", "synthetic_before", "synthetic_after", "diagnostics",
]  # fmt: skip


_WORKLOAD_ERRORS = {
    f"{k}_{w}": v
    for w in ("before", "after")
    for k, v in (
        ("mean_abs_error", _NONNEG),
        ("max_abs_error", _NONNEG),
        ("mean_error_sd", _NULLABLE_NUMBER),
    )
}


# The rows the released table describes (``dpql.population``): every row, or the complete cases
# of the ``missing: drop`` columns, with the DP estimate of their share of the public n.
_POPULATION = {
    **_object(
        {
            "rows": {"enum": ["all", "complete cases"]},
            "describes": {"type": "string"},
            "complete_in": {"type": "array", "items": {"type": "string"}},
            "kept_share": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "kept_share_sd": {"type": ["number", "null"], "minimum": 0},
        }
    ),
    "description": "The population the table describes: all rows, or the rows where every "
    "missing: drop column is present (complete cases), with the DP estimate of their share of "
    "the public row count (post-processing of the measured marginals' totals) and its sd.",
}


def _vector(description: str) -> dict[str, Any]:
    return {"type": "array", "items": _NULLABLE_NUMBER, "description": description}


def _defs() -> dict[str, Any]:
    tolerance = _object(
        {
            "within": {"type": ["number", "null"], "exclusiveMinimum": 0},
            "metric": {"type": ["string", "null"]},
            "op": {"enum": ["<", "<=", ">", ">=", None]},
            "bound": _NULLABLE_NUMBER,
        }
    )
    common = {
        "requirement": {"type": "string", "description": "The requirement's canonical DSL."},
        "real_noisy": {
            **_NULLABLE_NUMBER,
            "description": "The DP-measured value on the real table (null: undefined).",
        },
        "sigma": {
            **_NULLABLE_NUMBER,
            "minimum": 0,
            "description": "Standard deviation of real_noisy from the DP noise.",
        },
        "synthetic_before": {
            **_NULLABLE_NUMBER,
            "description": "The value on the synthetic table before post-processing.",
        },
        "synthetic_after": {
            **_NULLABLE_NUMBER,
            "description": "The value on the released (post-processed) table.",
        },
        "tolerance": {"$ref": "#/$defs/tolerance"},
        "verdict": _VERDICT,
        "note": {"type": "string", "description": "Why a verdict is inconclusive, if it is."},
    }
    moment = _object({**common, "kind": {"enum": ["corr", "mean", "count"]}})
    risk_bound = _object(
        {
            "kind": {"const": "upper bound"},
            "value": _NUMBER,
            "a": _NONNEG,
            "rho": _NONNEG,
            "vacuous": {"type": "boolean"},
            "assumptions": {"type": "string"},
            "source": {"type": "string"},
        }
    )
    model = _object(
        {
            **common,
            "kind": {"enum": ["logistic", "linear"]},
            "metric": {"enum": ["accuracy", "f1", "rmse", "r2"]},
            "rho": {**_NONNEG, "description": "zCDP rho of the acceptance release it was in."},
            "excess_risk_bound": {
                "oneOf": [{"type": "null"}, {"$ref": "#/$defs/risk_bound"}],
                "description": "A certified upper bound on excess empirical loss (not a "
                "measurement, not accuracy); null where the paper gives none.",
            },
        }
    )
    event = _object(
        {
            "phase": {"type": "string"},
            "mechanism": {"enum": ["gaussian", "gumbel_top_k", "dpsgd", "external"]},
            "label": {"type": "string"},
            "count": {"type": "integer", "minimum": 1},
            "l2_sensitivity": _NONNEG,
            "score_sensitivity": _NONNEG,
            "noise_scale": _NONNEG,
            "rho": _NONNEG,
            "sampling_rate": _NONNEG,
            "steps": {"type": "integer", "minimum": 1},
            "noise_multiplier": _NONNEG,
            "epsilon": _NONNEG,
            "delta": _NONNEG,
            "neighbouring": {
                "enum": ["replace_one", "add_remove"],
                "description": "external events: the relation the declared guarantee holds "
                "under; epsilon and delta are its replace-one conversion (charged).",
            },
            "declared_epsilon": _NONNEG,
            "declared_delta": _NONNEG,
        },
        ["phase", "mechanism", "label", "count"],
    )
    diagnostic = _object(
        {
            "code": {"type": "string", "pattern": "^[A-Z][0-9]{3}$"},
            "severity": {"enum": ["error", "warning"]},
            "message": {"type": "string"},
            "hint": {"type": ["string", "null"]},
            "file": {"type": ["string", "null"]},
            "line": {"type": "integer"},
            "col": {"type": "integer"},
            "end_col": {"type": "integer"},
        },
        ["code", "severity", "message"],
    )
    postprocess = _object(
        {
            "method": {"const": "iproj"},
            "solver": {
                "enum": ["newton", "stochastic", "lbfgs", "none"],
                "description": "The dual solver; none: no requirement was outside its band, "
                "so the table did not move.",
            },
            "measures": {"type": "array", "items": {"type": "string"}},
            "noise_sigma": {
                "type": "array",
                "items": _NONNEG,
                "description": "Gaussian noise sd of each measure: its release's sd divided "
                "by the measure's scale (the noise spread at the synthetic table's moments); "
                "inverse-variance combined for a measure in several weighted releases.",
            },
            "iterations": {"type": "integer", "minimum": 0},
            "gamma": _NONNEG,
            "projection_distance": {
                **_NONNEG,
                "description": "L2 distance from the noisy answers to what reweighting the "
                "synthetic rows can reach (denoising step).",
            },
            "kkt_violation": _NONNEG,
            "kl_from_synthetic": _NONNEG,
            "effective_sample_size": _NONNEG,
            "sampling_seed": {"type": "integer"},
            "lambda": _vector("Dual variables, one per measure."),
            "noisy": _vector("DP answers of the measures on the real table."),
            "target": _vector("The noisy answers denoised onto the reachable set."),
            "synthetic_before": _vector("The measures on the synthetic table before."),
            "synthetic_after": _vector("The measures on the released table."),
            "prior_rows": {
                **_NULLABLE_NUMBER,
                "minimum": 0,
                "description": "Strength (in rows) of the synthetic table as the prior of the "
                "noise-aware (MAP) projection; null for the hard I-projection.",
            },
            "ess_floor": {
                **_NONNEG,
                "description": "Floor on the weights' effective sample size, in rows (W508 "
                "when it binds).",
            },
            "shrink": {
                **_NONNEG,
                "maximum": 1,
                "description": "Fraction of the way to the target kept to respect the ESS "
                "floor (1: not bound).",
            },
            "resampling_shift_sd": {
                **_NONNEG,
                "description": "Largest change of a measure from the reweighted table to the "
                "released rows, in noise sds (what resampling costs).",
            },
            "measure_error_sd_before": _vector(
                "Each measure's |value - noisy answer| / noise sd on the table before."
            ),
            "measure_error_sd_after": _vector("The same on the released table."),
            "boxes": {
                "type": "integer",
                "minimum": 0,
                "description": "Box constraints of the projection: one per requirement with "
                "a band, one per held score equation of a pilot.",
            },
            "policy": _object(
                {
                    "prior_rows": {**_NULLABLE_NUMBER, "minimum": 0},
                    "ess_floor": _NONNEG,
                    "z": _NONNEG,
                    "band": _NONNEG,
                }
            ),
            "roles": {
                "type": "array",
                "description": "Each requirement's role in post-processing "
                "(docs/postprocess.md): inside its band, constrained, no_room, unbanded.",
                "items": _object(
                    {
                        "requirement": {"type": "integer", "minimum": 0},
                        "role": {"enum": ["inside", "constrained", "no_room", "unbanded"]},
                        "before": _NULLABLE_NUMBER,
                        "noisy": _NULLABLE_NUMBER,
                        "sd": _NULLABLE_NUMBER,
                        "half_width": _NULLABLE_NUMBER,
                    }
                ),
            },
            "workload": {
                **_object(
                    {
                        "measured_queries": {"type": "integer", "minimum": 0},
                        "cells": {"type": "integer", "minimum": 0},
                        **_WORKLOAD_ERRORS,
                        "penalty_cells": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "Workload cells kept as penalties of the "
                            "projection (0: not penalised).",
                        },
                    },
                    ["measured_queries", "cells", *_WORKLOAD_ERRORS],
                ),
                "description": "The synthesizer's measured workload answers (DP outputs) "
                "against the table before and after post-processing.",
            },
            "diagnostics": {"type": "array", "items": {"$ref": "#/$defs/diagnostic"}},
        },
        _POSTPROCESS_REQUIRED,
    )
    return {
        "tolerance": tolerance,
        "moment_requirement": moment,
        "model_requirement": model,
        "risk_bound": risk_bound,
        "event": event,
        "diagnostic": diagnostic,
        "postprocess": postprocess,
    }


def record_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a provenance record of version :data:`RECORD_VERSION`.

    Closed objects (no unknown keys) everywhere dpql writes the content; the ``spec`` (the
    normalised release spec, see ``release.schema.json``) and ``synthesizer`` (backend
    settings and fit metrics) sections are checked for their required keys only.
    """
    budget = _object({"epsilon": _NONNEG, "delta": _NONNEG, "rho": _NONNEG})
    spent = _object(
        {
            "epsilon": _NONNEG,
            "delta": _NONNEG,
            "rho": {
                "type": ["number", "null"],
                "minimum": 0,
                "description": "zCDP rho of the release; null unless every event is zCDP "
                "(Gaussian, Gumbel top-k).",
            },
        }
    )
    curve = _object(
        {
            "orders": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 1}},
            "epsilons": {"type": "array", "items": _NONNEG},
            "external_epsilon": _NONNEG,
            "external_delta": _NONNEG,
        }
    )
    curve["description"] = (
        "The release's RDP curve (RDP epsilon at each order) of its non-external events, and "
        "the external (epsilon, delta) (replace-one) added by basic composition; lifetime "
        "composition sums curves order by order."
    )
    sha = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
    signature = _object(
        {
            "algorithm": {"const": "ed25519"},
            "public_key_sha256": {
                **sha,
                "description": "sha256 of the signing key's raw 32-byte Ed25519 public key.",
            },
            "value": {
                "type": "string",
                "pattern": "^[A-Za-z0-9+/]{86}==$",
                "description": "The 64-byte Ed25519 signature, base64.",
            },
        }
    )
    signature["description"] = (
        "Optional (dpql compile --sign-key): the curator's Ed25519 signature over the canonical "
        "JSON of the record without this section (dpql/release/signing.py); checked by "
        "dpql verify --key."
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"dpql provenance record, version {RECORD_VERSION}",
        "description": (
            "Written by `dpql compile`, checked by `dpql verify` (dpql/release/provenance.py)."
        ),
        **_object(
            {
                "dpql_provenance": {"const": RECORD_VERSION},
                "dpql_version": {"type": "string"},
                "dependencies": {"type": "object", "additionalProperties": {"type": "string"}},
                "created": {"type": "string"},
                "spec": _object({k: {} for k in _SPEC_KEYS}, closed=False),
                "spec_sha256": sha,
                "plan_sha256": sha,
                "privacy": _object(
                    {
                        "budget": budget,
                        "spent": spent,
                        "rdp": curve,
                        "accountant": {"type": "string"},
                        "neighbouring": {"type": "string"},
                        "events": {"type": "array", "items": {"$ref": "#/$defs/event"}},
                    }
                ),
                "synthesizer": _object(
                    {
                        "method": {"enum": list(METHODS)},
                        "round_queries": {
                            "type": "array",
                            "items": {
                                "type": "array",
                                "items": {"type": "integer", "minimum": 0},
                            },
                            "description": "RAP++: per selecting round, the queries it "
                            "measured as indices into the plan's candidates of the round's kind "
                            "(post-processing of the selections, public); dpql verify derives "
                            "each round's Gaussian count, L2 sensitivity and noise scale from "
                            "them.",
                        },
                        "selected": {
                            "type": "array",
                            "items": {"type": "array", "items": {"type": "string"}},
                            "description": "AIM: the cliques picked, round by round (the "
                            "plan's picks per round); dpql verify derives each round's Gaussian "
                            "count, L2 sensitivity and noise scale from them.",
                        },
                    },
                    ["method"],
                    closed=False,
                ),
                "postprocess": {
                    "oneOf": [{"type": "null"}, {"$ref": "#/$defs/postprocess"}],
                    "description": "The I-projection summary (null without post-processing).",
                },
                "requirements": {
                    "type": "array",
                    "items": {
                        "oneOf": [
                            {"$ref": "#/$defs/moment_requirement"},
                            {"$ref": "#/$defs/model_requirement"},
                        ]
                    },
                },
                "output": _object(
                    {
                        "file": {"type": "string"},
                        "sha256": sha,
                        "rows": {"type": "integer"},
                        "population": _POPULATION,
                    },
                    ["file", "sha256", "rows"],  # population: optional, so older records verify
                ),
                "signature": signature,
            },
            [*_RECORD_KEYS],  # every section but the optional signature
        ),
        "$defs": _defs(),
    }


_RECORD_KEYS = (
    "dpql_provenance",
    "dpql_version",
    "dependencies",
    "created",
    "spec",
    "spec_sha256",
    "plan_sha256",
    "privacy",
    "synthesizer",
    "postprocess",
    "requirements",
    "output",
)
