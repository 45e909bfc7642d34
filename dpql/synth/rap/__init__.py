"""RAP++ (relaxed adaptive projection, Vietri et al. 2022) as a dpql backend.

* :mod:`~dpql.synth.rap.plan`: options, the budget schedule and its cost (JAX-free);
* :mod:`~dpql.synth.rap.program`: the JAX program that runs a schedule against the oracle
  (with :mod:`~dpql.synth.rap.relaxed`, the relaxed table), imported only when a release runs.

Privacy: every round selects (Gumbel top-k) and measures (discrete Gaussian) through the
measurement oracle; the relaxed table is fitted to noisy answers only (post-processing).
"""

from __future__ import annotations

from dpql.spec.models import RapOptions
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult, Traits
from dpql.synth.rap import plan as planning


class RapBackend:
    name = "rap"
    traits = Traits()

    def declared_budget(self, spec: object) -> tuple[float, float]:
        return 0.0, 0.0

    def plan(self, ctx: PlanContext, options: RapOptions | None = None) -> SynthPlan:
        return planning.plan(ctx, options)

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        from dpql.synth.rap.program import run

        return run(plan, ctx)


BACKEND = RapBackend()
