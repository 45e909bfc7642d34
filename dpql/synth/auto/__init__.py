"""``method: auto``: the planner picks the backend from public facts only, and says why.

The choice reads the spec's public row count, domain sizes, resolved workload and budget, never
data, so it is part of the plan (``dpql plan`` prints it; ``dpql verify`` re-plans to the same
choice). The rules, in order (the evidence is the benchmark suite, ``benchmarks/suite``):

1. The workload has threshold queries (``range``, ``halfspaces``): **rap**. Only RAP++ fits them;
   the graphical model would leave them to post-processing.
2. Otherwise (marginals, counts): **aim**, with its default options. On the suite's tables
   graphical-model estimation beat RAP++ at every epsilon tried, and AIM's noise-aware
   selection never measures a marginal whose noise swamps it.

The chosen backend's plan (budget lines, cost, config) is this plan
(:mod:`~dpql.synth.auto.plan`); ``run`` delegates to it (:mod:`~dpql.synth.auto.program`).

Not done: starting RAP++ from a graphical model's estimate. Where both
could run (marginal workloads) AIM alone won on every suite table and epsilon, so there is
nothing for RAP++ to add; where RAP++ must run (threshold workloads), a graphical model's
marginals would have to be measured out of RAP++'s own budget, and its first round already
measures the 1-way marginals such a model would mostly rest on at the example's budgets.
"""

from __future__ import annotations

from dpql.synth.auto import plan as planning
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult, Traits


class AutoBackend:
    name = "auto"
    traits = Traits()  # both candidates (rap, aim) append only zCDP events

    def declared_budget(self, spec: object) -> tuple[float, float]:
        return 0.0, 0.0

    def plan(self, ctx: PlanContext, options: object = None) -> SynthPlan:
        return planning.plan(ctx, options)

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        from dpql.synth.auto.program import run

        return run(plan, ctx)


BACKEND = AutoBackend()
