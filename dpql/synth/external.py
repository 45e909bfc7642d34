"""A synthetic table made elsewhere (``synthesizer: {method: external}``): dpql only
post-processes it. Its declared (epsilon, delta) is charged to the ledger as one ``external``
event, converted to replace-one when declared under add/remove (docs/privacy.md)."""

from __future__ import annotations

from typing import Any

from dpql.privacy.accountant import replace_one_guarantee
from dpql.privacy.budget import BudgetLine
from dpql.privacy.ledger import PrivacyEvent
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult, Traits


class ExternalBackend:
    name = "external"
    traits = Traits(zcdp_only=False, spends_budget=False)

    def declared_budget(self, spec: Any) -> tuple[float, float]:
        b = spec.model.synthesizer.budget
        return replace_one_guarantee(b.epsilon, b.delta, b.neighbouring)

    def plan(self, ctx: PlanContext, options: Any = None) -> SynthPlan:
        return SynthPlan("external", (BudgetLine("external", "external", 1, None),), None)

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
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


BACKEND = ExternalBackend()
