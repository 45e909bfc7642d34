"""A synthetic table made elsewhere (``synthesizer: {method: external}``): dpql only
post-processes it. Its declared (epsilon, delta) is charged to the ledger as one ``external``
event, converted to replace-one when declared under add/remove (docs/privacy.md).

* :mod:`~dpql.synth.external.plan`: the one budget line;
* :mod:`~dpql.synth.external.program`: reading the table (checked against the schema) and
  charging its event.
"""

from __future__ import annotations

from typing import Any

from dpql.privacy.accountant import replace_one_guarantee
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult, Traits
from dpql.synth.external import plan as planning


class ExternalBackend:
    name = "external"
    traits = Traits(zcdp_only=False, spends_budget=False)

    def declared_budget(self, spec: Any) -> tuple[float, float]:
        b = spec.model.synthesizer.budget
        return replace_one_guarantee(b.epsilon, b.delta, b.neighbouring)

    def plan(self, ctx: PlanContext, options: Any = None) -> SynthPlan:
        return planning.plan(ctx, options)

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        from dpql.synth.external.program import run

        return run(plan, ctx)


BACKEND = ExternalBackend()
