"""The external backend's run: the table read as public input, its declared budget charged."""

from __future__ import annotations

from dpql.privacy.ledger import PrivacyEvent
from dpql.synth.base import RunContext, SynthPlan, SynthResult


def run(plan: SynthPlan, ctx: RunContext) -> SynthResult:
    """The external table, checked against the schema, and its ``external`` ledger event."""
    model = ctx.spec.model.synthesizer
    # public input checked against the schema, not private data
    table = ctx.private.public_table(ctx.spec.resolve(model.path))
    ctx.ledger.append(
        PrivacyEvent.external(
            "external",
            f"external table {model.path}",
            epsilon=model.budget.epsilon,
            delta=model.budget.delta,
            neighbouring=model.budget.neighbouring,  # charged under replace-one
        )
    )
    return SynthResult(table, {"method": "external"})
