"""Provenance records: what was released, under which spec, at what privacy cost.

A record (JSON, schema ``spec/provenance.schema.json``, version :data:`RECORD_VERSION`) holds the
dpql and dependency versions, the normalised spec and its sha256, the plan's sha256, every
privacy-ledger event, the total (epsilon, delta) *recomputed from the events* by the accountant
(dp-accounting), the synthesizer's settings and fit metrics (computed against noisy
measurements only), the requirement reports, the output's sha256 and row count, and timings.

Nothing in a record is derived from private data except DP outputs (ledger events carry only
public calibration values). The curator-only facts (true row count, clip counts, the data
file's hash) go to a separate ``*.curator.json`` that must not be published.

``verify_record`` recomputes the accounting and the hashes; any mismatch is reported.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from dpql import __version__
from dpql.privacy.accountant import epsilon_from_events
from dpql.privacy.ledger import Ledger, PrivacyEvent

RECORD_VERSION = 1
DEPENDENCIES = ("jax", "jaxlib", "optax", "dp-accounting", "numpy", "pandas", "lark", "pydantic")
EPS_TOLERANCE = 1e-9


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_json(obj: Any) -> str:
    """Hash of a JSON value in canonical form (sorted keys, no whitespace)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def dependency_versions() -> dict[str, str]:
    out = {}
    for name in DEPENDENCIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def build_record(
    *,
    spec_json: Mapping[str, Any],
    spec_sha256: str,
    plan_sha256: str,
    budget: Mapping[str, float],
    ledger: Ledger,
    synthesizer: Mapping[str, Any],
    requirements: list[Mapping[str, Any]],
    output_path: Path,
    output_rows: int,
    timings: Mapping[str, float],
    created: str,
) -> dict[str, Any]:
    """Assemble a record; (epsilon, delta) spent is recomputed from the ledger here."""
    delta = float(budget["delta"])
    accounted = epsilon_from_events(ledger.events, delta)
    return {
        "dpql_provenance": RECORD_VERSION,
        "dpql_version": __version__,
        "dependencies": dependency_versions(),
        "created": created,
        "spec": dict(spec_json),
        "spec_sha256": spec_sha256,
        "plan_sha256": plan_sha256,
        "privacy": {
            "budget": dict(budget),
            "spent": {"epsilon": accounted.epsilon, "delta": delta, "rho": ledger.total_rho()},
            "accountant": "dp-accounting RDP (zCDP events as Gaussian RDP curves)",
            "neighbouring": "replace-one, public row count",
            "events": [e.to_json() for e in ledger.events],
        },
        "synthesizer": dict(synthesizer),
        "requirements": requirements,
        "output": {
            "file": output_path.name,
            "sha256": sha256_file(output_path),
            "rows": output_rows,
        },
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
    }


@dataclass(frozen=True)
class VerifyProblem:
    code: str
    message: str


def verify_record(record: Mapping[str, Any], synthetic: Path | None = None) -> list[VerifyProblem]:
    """Recompute accounting and hashes of a record; an empty list means it verifies."""
    problems: list[VerifyProblem] = []
    if record.get("dpql_provenance") != RECORD_VERSION:
        return [VerifyProblem("V001", f"not a dpql provenance record of version {RECORD_VERSION}")]
    try:
        privacy = record["privacy"]
        events = [PrivacyEvent.from_json(e) for e in privacy["events"]]
        budget = privacy["budget"]
        spent = privacy["spent"]
    except (KeyError, TypeError, ValueError) as exc:
        return [VerifyProblem("V002", f"malformed record: {exc}")]
    accounted = epsilon_from_events(events, float(spent["delta"]))
    if not math.isclose(
        accounted.epsilon, float(spent["epsilon"]), rel_tol=0, abs_tol=EPS_TOLERANCE
    ):
        problems.append(
            VerifyProblem(
                "V010",
                f"epsilon recomputed from the ledger is {accounted.epsilon:.12g}, "
                f"the record says {float(spent['epsilon']):.12g}",
            )
        )
    if accounted.epsilon > float(budget["epsilon"]) + EPS_TOLERANCE:
        problems.append(
            VerifyProblem(
                "V011",
                f"spent epsilon {accounted.epsilon:.6g} exceeds the budget {budget['epsilon']}",
            )
        )
    if float(spent["delta"]) > float(budget["delta"]):
        problems.append(VerifyProblem("V012", "spent delta exceeds the budget"))
    if sha256_json(record.get("spec")) != record.get("spec_sha256"):
        problems.append(VerifyProblem("V020", "the spec in the record does not match spec_sha256"))
    if synthetic is not None:
        digest = sha256_file(synthetic)
        if digest != record.get("output", {}).get("sha256"):
            problems.append(
                VerifyProblem(
                    "V030",
                    f"{synthetic} does not match the record's output sha256 (modified table?)",
                )
            )
    return problems
