"""``docs/reference.md``: every key of a release spec and of a privacy policy, generated from the
pydantic models (:mod:`dpql.spec.models`, :mod:`dpql.spec.columns`) so that it cannot drift
from them.

Each key gets its type and default (from the model), one line of meaning (the field's
``description``, else :data:`NOTES`) and one example (:data:`EXAMPLES`, else the default).
``tests/test_spec_reference.py`` fails when a model field has no line or no example, or when
the committed page is not what :func:`render` writes. After changing a model run::

    python -m dpql.spec.reference            # rewrites docs/reference.md
    python -m dpql.spec.reference --check    # exit 1 if it is stale
"""

from __future__ import annotations

import json
import sys
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from dpql.spec import columns as cols
from dpql.spec import models as m

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference.md"

#: (section title, model, key prefix) in page order
SECTIONS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("Top level", m.ReleaseSpec, ""),
    ("`data`", m.DataSpec, "data."),
    ("`schema`: a numeric column", cols.NumericSpec, "schema.COLUMN."),
    ("`schema`: a categorical column", cols.CategoricalSpec, "schema.COLUMN."),
    ("`schema`: a categorical column's `group`", cols.GroupSpec, "schema.COLUMN.group."),
    ("`privacy`", m.PrivacySpec, "privacy."),
    ("`synthesizer`: `method: auto` (the default)", m.AutoSynthesizer, "synthesizer."),
    ("`synthesizer`: `method: aim`", m.AimSynthesizer, "synthesizer."),
    ("`synthesizer.options` of `aim`", m.AimOptions, "synthesizer.options."),
    ("`synthesizer`: `method: rap`", m.RapSynthesizer, "synthesizer."),
    ("`synthesizer.options` of `rap`", m.RapOptions, "synthesizer.options."),
    ("`synthesizer`: `method: gan`", m.GanSynthesizer, "synthesizer."),
    ("`synthesizer.options` of `gan`", m.GanOptions, "synthesizer.options."),
    ("`synthesizer`: `method: external`", m.ExternalSynthesizer, "synthesizer."),
    ("`synthesizer.budget` of `external`", m.ExternalBudget, "synthesizer.budget."),
    ("`postprocess`", m.PostprocessSpec, "postprocess."),
    ("`output`", m.OutputSpec, "output."),
    ("Privacy policy (`dpql check --policy`)", m.Policy, ""),
    ("Policy `lifetime`", m.Lifetime, "lifetime."),
    ("Policy `require`", m.PolicyRequire, "require."),
    ("Project file (`dpql.yaml`, found above the spec)", m.ProjectFile, ""),
)

#: one line of meaning for the fields whose model gives no ``description`` ("Model.field")
NOTES: dict[str, str] = {
    "ReleaseSpec.name": "Name of the release (recorded in the provenance record).",
    "ReleaseSpec.description": "Free text about the release, for its readers.",
    "ReleaseSpec.data": "The private data file and its public row count.",
    "ReleaseSpec.columns": "Each released column's public domain, by name; a data column "
    "not listed is never read (W601 says which).",
    "ReleaseSpec.privacy": "The release's privacy budget.",
    "ReleaseSpec.synthesizer": "How the synthetic table is made (method and its options).",
    "ReleaseSpec.postprocess": "Post-processing toward the requirements (needs requirements).",
    "ReleaseSpec.output": "Where the published table and provenance record are written.",
    "NumericSpec.type": "A numeric column.",
    "NumericSpec.integer": "Values are whole numbers (synthetic values are rounded).",
    "CategoricalSpec.type": "A categorical column.",
    "PrivacySpec.epsilon": "Epsilon of (epsilon, delta)-DP for the whole release.",
    "PrivacySpec.delta": "Delta of (epsilon, delta)-DP; keep it below 1/rows.",
    "PrivacySpec.rho": "A zCDP budget instead of epsilon (delta then only reports it).",
    "RapSynthesizer.method": "RAP++ relaxed adaptive projection (needs range/halfspace "
    "workloads to shine).",
    "RapSynthesizer.options": "RAP++ options (section below).",
    "RapOptions.rounds": "Adaptive rounds of marginal selection and measurement.",
    "RapOptions.queries_per_round": "Marginals selected and measured per round.",
    "RapOptions.threshold_rounds": "Adaptive rounds for range and halfspace queries.",
    "RapOptions.thresholds_per_round": "Range or halfspace queries selected per such round.",
    "RapOptions.relaxed_rows": "Rows of the relaxed (continuous) table RAP optimises.",
    "RapOptions.iterations": "Optimiser steps of the first round.",
    "RapOptions.warm_iterations": "Optimiser steps of each later (warm-started) round.",
    "RapOptions.learning_rate": "Adam learning rate of the relaxed table.",
    "RapOptions.sigma_start": "Starting inverse temperature of the sigmoid thresholds.",
    "RapOptions.sigma_max": "Largest inverse temperature of the sigmoid thresholds.",
    "RapOptions.init_share": "Share of the synthesizer budget on the initial 1-way marginals.",
    "RapOptions.threshold_share": "Share of the synthesizer budget on range and halfspace "
    "rounds.",
    "GanSynthesizer.method": "DP-auto-GAN: an autoencoder and a WGAN trained with DP-SGD.",
    "GanSynthesizer.options": "DP-auto-GAN options (section below).",
    "GanOptions.ae_latent_dim": "Width of the autoencoder's latent code.",
    "GanOptions.ae_hidden": "Width of the autoencoder's hidden layer (default: from the "
    "encoding's width).",
    "GanOptions.ae_batch_size": "Expected batch size of the autoencoder's DP-SGD (Poisson "
    "sampling).",
    "GanOptions.ae_steps": "DP-SGD steps of the autoencoder.",
    "GanOptions.ae_learning_rate": "Learning rate of the autoencoder.",
    "GanOptions.ae_clip_norm": "Per-example gradient clip norm of the autoencoder's DP-SGD.",
    "GanOptions.critic_hidden": "Widths of the critic's hidden layers (default: from the "
    "latent width).",
    "GanOptions.critic_batch_size": "Expected batch size of the critic's DP-SGD.",
    "GanOptions.critic_steps": "DP-SGD steps of the critic.",
    "GanOptions.critic_learning_rate": "Learning rate of the critic.",
    "GanOptions.critic_clip_norm": "Per-example gradient clip norm of the critic's DP-SGD.",
    "GanOptions.critic_weight_clip": "WGAN weight clipping of the critic.",
    "GanOptions.critic_steps_per_generator_step": "Critic steps per generator step.",
    "GanOptions.generator_noise_dim": "Width of the generator's input noise.",
    "GanOptions.generator_learning_rate": "Learning rate of the generator.",
    "GanOptions.generator_layer_norm": "Layer normalisation in the generator.",
    "GanOptions.noise_multipliers": "Fixed DP-SGD noise multipliers [autoencoder, critic]; "
    "unset, the planner calibrates them to the budget.",
    "GanOptions.seed": "Seed of parameter initialisation only (never DP noise or sampling).",
    "AimSynthesizer.method": "AIM on a graphical model (mbi).",
    "AimSynthesizer.options": "AIM options (section below).",
    "AimOptions.select_share": "Share of each round's budget on selecting its marginals.",
    "AimOptions.iters": "Mirror-descent steps of each round's model fit.",
    "AimOptions.final_iters": "Mirror-descent steps of the final model fit.",
    "AutoSynthesizer.method": "The planner picks aim or rap from public facts; dpql plan "
    "says which and why.",
    "ExternalSynthesizer.method": "Post-process a synthetic table made by another tool.",
    "PostprocessSpec.method": "I-projection: reweight and resample the table toward the "
    "requirements' DP measurements.",
    "Policy.max_epsilon": "Largest epsilon one release may spend.",
    "Policy.max_delta": "Largest delta one release may spend.",
    "Policy.lifetime": "A cap over every release of the same data source (section below).",
    "Policy.forbidden_columns": "Columns that must never be released (case-insensitive).",
    "Policy.allowed_methods": "Synthesizer and post-processing methods a release may use.",
    "Policy.require": "Further rules (section below).",
    "Policy.max_minutes": "Longest compile time the plan may estimate (CI refuses longer specs).",
    "PolicyRequire.public_bounds": "Every numeric column has public min/max, every "
    "categorical its values.",
    "PolicyRequire.delta_below_inverse_rows": "delta < 1/rows.",
}

#: one example for the fields whose default is not a useful one ("Model.field": YAML)
EXAMPLES: dict[str, str] = {
    "ReleaseSpec.dpql": "dpql: 1",
    "ReleaseSpec.name": "name: adult-public",
    "ReleaseSpec.description": 'description: "Public-use synthetic Adult extract"',
    "ReleaseSpec.data": "data: {path: adult_train.csv.gz, rows: 32561}",
    "ReleaseSpec.columns": "schema: {age: {type: numeric, min: 17, max: 90}}",
    "ReleaseSpec.missing": "missing: drop",
    "ReleaseSpec.privacy": "privacy: {epsilon: 1.0, delta: 1e-9}",
    "ReleaseSpec.workload": "workload: [marginals(2), count(age >= 65)]",
    "ReleaseSpec.requirements": "requirements: [corr(age, hours_per_week) within 0.05]",
    "ReleaseSpec.synthesizer": "synthesizer: {rows: 32561}",
    "ReleaseSpec.postprocess": "postprocess: {method: iproj}",
    "ReleaseSpec.output": "output: {path: out/t.csv, provenance: out/t.provenance.json}",
    "DataSpec.path": "path: adult_train.csv.gz",
    "DataSpec.rows": "rows: 32561",
    "DataSpec.format": "format: parquet",
    "DataSpec.engine": "engine: duckdb",
    "NumericSpec.type": "type: numeric",
    "NumericSpec.min": "min: 17",
    "NumericSpec.max": "max: 90",
    "NumericSpec.integer": "integer: true",
    "NumericSpec.bins": "bins: 15",
    "NumericSpec.edges": "edges: [0, 1, 2000, 10000, 100000]",
    "NumericSpec.missing": "missing: keep",
    "NumericSpec.fill": "fill: 40",
    "NumericSpec.missing_values": "missing_values: [0, -9]",
    "CategoricalSpec.type": "type: categorical",
    "CategoricalSpec.values": "values: [Female, Male]",
    "CategoricalSpec.values_file": "values_file: occupations.txt",
    "CategoricalSpec.values_column": "values_column: code",
    "CategoricalSpec.values_sha256": "(written by dpql into the normalised spec)",
    "CategoricalSpec.group": "group: {file: occupation_groups.csv}",
    "CategoricalSpec.other": "other: Other",
    "CategoricalSpec.missing": "missing: other",
    "CategoricalSpec.fill": 'fill: "?"',
    "CategoricalSpec.missing_values": 'missing_values: [NA, ".", "99"]',
    "GroupSpec.file": "file: occupation_groups.csv",
    "GroupSpec.fine": "fine: code",
    "GroupSpec.coarse": "coarse: major_group",
    "GroupSpec.sha256": "(written by dpql into the normalised spec)",
    "GroupSpec.levels": "(written by dpql into the normalised spec)",
    "PrivacySpec.epsilon": "epsilon: 1.0",
    "PrivacySpec.delta": "delta: 1e-9",
    "PrivacySpec.rho": "rho: 0.05",
    "PrivacySpec.split": "split: {selection: 0.5, measurement: 0.5}",
    "RapSynthesizer.method": "method: rap",
    "RapSynthesizer.rows": "rows: 32561",
    "RapSynthesizer.options": "options: {rounds: 4}",
    "GanSynthesizer.method": "method: gan",
    "GanSynthesizer.rows": "rows: 32561",
    "GanSynthesizer.options": "options: {encoding: bins}",
    "GanOptions.ae_hidden": "ae_hidden: 128",
    "GanOptions.critic_hidden": "critic_hidden: [64, 32]",
    "GanOptions.noise_multipliers": "noise_multipliers: [1.1, 0.9]",
    "GanOptions.marginal_share": "marginal_share: 0.3",
    "AimSynthesizer.method": "method: aim",
    "AimSynthesizer.rows": "rows: 32561",
    "AimSynthesizer.options": "options: {rounds: 8}",
    "AimOptions.rounds": "rounds: 8",
    "AimOptions.per_round": "per_round: 2",
    "AimOptions.init_share": "init_share: 0.4",
    "AimOptions.max_model_size": "max_model_size: 80",
    "AutoSynthesizer.method": "method: auto",
    "AutoSynthesizer.rows": "rows: 32561",
    "ExternalSynthesizer.method": "method: external",
    "ExternalSynthesizer.path": "path: external_synthetic.csv.gz",
    "ExternalSynthesizer.budget": "budget: {epsilon: 0.5, delta: 1e-9, neighbouring: "
    "replace_one}",
    "ExternalSynthesizer.rows": "rows: 32561",
    "ExternalBudget.epsilon": "epsilon: 0.5",
    "ExternalBudget.delta": "delta: 1e-9",
    "ExternalBudget.neighbouring": "neighbouring: add_remove",
    "PostprocessSpec.method": "method: iproj",
    "PostprocessSpec.share": "share: 0.2",
    "OutputSpec.path": "path: out/adult_synthetic.csv",
    "OutputSpec.provenance": "provenance: out/adult_synthetic.provenance.json",
    "OutputSpec.ledger": "ledger: adult.ledger.jsonl",
    "OutputSpec.curator": "curator: private/adult.CURATOR-ONLY.json",
    "Policy.dpql_policy": "dpql-policy: 1",
    "Policy.max_epsilon": "max_epsilon: 2.0",
    "Policy.max_delta": "max_delta: 1.0e-6",
    "Policy.lifetime": "lifetime: {epsilon: 8.0, ledger: privacy-ledger.jsonl}",
    "Policy.forbidden_columns": "forbidden_columns: [ssn, name, email]",
    "Policy.allowed_methods": "allowed_methods: [auto, aim, rap, iproj]",
    "Policy.max_minutes": "max_minutes: 30",
    "Policy.require": "require: {public_bounds: true}",
    "Lifetime.epsilon": "epsilon: 8.0",
    "Lifetime.delta": "delta: 1.0e-5",
    "Lifetime.ledger": "ledger: privacy-ledger.jsonl",
    "ProjectFile.policy": "policy: rules/gss.policy.yaml",
    "ProjectFile.ledger": "ledger: rules/privacy-ledger.jsonl",
}


def fields(model: type[BaseModel]) -> Iterator[tuple[str, str, Any]]:
    """``(Model.field, key as written in YAML, FieldInfo)`` of each field of ``model``."""
    for name, info in model.model_fields.items():
        yield f"{model.__name__}.{name}", info.alias or name, info


def reachable_models() -> set[type[BaseModel]]:
    """Every model a release spec or a policy contains, found through the annotations."""
    seen: set[type[BaseModel]] = set()

    def visit(t: Any) -> None:
        if isinstance(t, type) and issubclass(t, BaseModel):
            if t not in seen:
                seen.add(t)
                for info in t.model_fields.values():
                    visit(info.annotation)
            return
        for arg in typing.get_args(t):
            visit(arg)

    visit(m.ReleaseSpec)
    visit(m.Policy)
    return seen


def meaning(key: str, info: Any) -> str | None:
    text = info.description or NOTES.get(key)
    return " ".join(text.split()) if text else None


def example(key: str, yaml_key: str, info: Any) -> str | None:
    if key in EXAMPLES:
        return EXAMPLES[key]
    default = _default(info)
    if default is None:
        return None
    return f"{yaml_key}: {json.dumps(default)}"


def _default(info: Any) -> Any:
    if info.default is PydanticUndefined or info.default is None:
        return None
    value = info.default
    if isinstance(value, BaseModel):
        return None
    return value


def _type(schema: dict[str, Any]) -> str:
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " | ".join(str(v) for v in schema["enum"])
    if "anyOf" in schema or "oneOf" in schema:
        parts = [_type(s) for s in schema.get("anyOf", schema.get("oneOf", []))]
        return " or ".join(dict.fromkeys(p for p in parts if p != "null"))
    if "$ref" in schema:
        return "mapping"
    kind = schema.get("type")
    if kind == "array":
        inner = schema.get("items") or (schema.get("prefixItems") or [{}])[0]
        return f"list of {_type(inner)}"
    if kind == "object":
        return "mapping"
    return {"integer": "integer", "number": "number", "string": "text",
            "boolean": "true/false"}.get(str(kind), str(kind))  # fmt: skip


def _default_text(info: Any) -> str:
    if info.is_required():
        return "required"
    value = _default(info)
    if value is None:
        return "-"
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The whole page."""
    out = [
        "# Spec and policy reference",
        "",
        "Every key of a release spec (`*.release.yaml`) and of a privacy policy, generated from",
        "the pydantic models in `dpql/spec/models.py` by `python -m dpql.spec.reference` (do not",
        "edit by hand). `COLUMN` stands for a column's name. The workload and requirement",
        "expressions are in [`spec/language.md`](../spec/language.md); `dpql init DATA` drafts a",
        "spec ([`docs/init.md`](init.md)). A key marked required has no default.",
    ]
    for title, model, prefix in SECTIONS:
        schema = model.model_json_schema(by_alias=True)
        props = schema.get("properties", {})
        out += ["", f"## {title}", "", "| key | type | default | meaning | example |",
                "|---|---|---|---|---|"]  # fmt: skip
        for key, yaml_key, info in fields(model):
            prop = props.get(yaml_key, {})
            row = [
                f"`{prefix}{yaml_key}`",
                _type(prop) or "-",
                _default_text(info),
                meaning(key, info) or "",
                f"`{example(key, yaml_key, info) or ''}`",
            ]
            out.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    text = render()
    if "--check" in args:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is stale: run python -m dpql.spec.reference", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
