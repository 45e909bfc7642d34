"""``method: auto``: the planner picks the backend from public facts only, and says why.

The choice reads the spec's public row count, domain sizes, resolved workload and budget, never
data, so it is part of the plan (``dpql plan`` prints it; ``dpql verify`` re-plans to the same
choice). The rules, in order (the evidence is the benchmark suite, ``benchmarks/suite``):

1. The workload has threshold queries (``range``, ``halfspaces``): **rap**. Only RAP++ fits them;
   the graphical model would leave them to post-processing.
2. Otherwise (marginals, counts): **aim**, with its default options. On the suite's tables
   graphical-model estimation beat RAP++ at every epsilon tried, and AIM's noise-aware
   selection never measures a marginal whose noise swamps it.

The chosen backend's plan (budget lines, cost, config) is this plan; ``run`` delegates to it.

Not done: starting RAP++ from a graphical model's estimate. Where both
could run (marginal workloads) AIM alone won on every suite table and epsilon, so there is
nothing for RAP++ to add; where RAP++ must run (threshold workloads), a graphical model's
marginals would have to be measured out of RAP++'s own budget, and its first round already
measures the 1-way marginals such a model would mostly rest on at the example's budgets.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpql.ir.queries import Halfspace, Prefix, Query
from dpql.spec.models import AimOptions, RapOptions
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult, Traits, backend

#: the options each candidate backend runs with when auto picks it
DEFAULT_OPTIONS = {"aim": AimOptions, "rap": RapOptions}


def choose(queries: Sequence[Query], rows: int, epsilon: float) -> tuple[str, str]:
    """(backend name, reason) by the documented rules (public facts only)."""
    thresholds = sum(isinstance(q, Halfspace | Prefix) for q in queries)
    if thresholds:
        return "rap", (
            f"the workload has {thresholds} threshold queries (range/halfspaces), which only "
            "rap fits"
        )
    return "aim", (
        f"marginal workload ({len(queries)} queries, {rows} rows, epsilon {epsilon:g}): "
        "graphical-model estimation with noise-aware selection (aim)"
    )


class AutoBackend:
    name = "auto"
    traits = Traits()  # both candidates (rap, aim) append only zCDP events

    def declared_budget(self, spec: object) -> tuple[float, float]:
        return 0.0, 0.0

    def plan(self, ctx: PlanContext, options: object = None) -> SynthPlan:
        """``options``: the auto options model (it has none to read)."""
        name, reason = choose(ctx.queries, ctx.spec.rows, ctx.epsilon)
        chosen = backend(name)
        inner = chosen.plan(ctx, DEFAULT_OPTIONS[name]())
        if name == "aim":
            o = inner.options
            reason += (
                f"; its schedule (dpql.synth.aim.default_schedule): {o['init_share']:.0%} of the "
                f"budget on the 1-way marginals, "
                + (f"then a spanning forest of {o['tree_edges']} pair(s), " if o["tree"] else "")
                + f"then {o['rounds']} round(s) of {o['per_round']} marginal(s); model size "
                f"at most {o['max_model_size']:g} MB (from this machine: "
                "dpql.synth.aim.machine_model_cap); the sampled rows balanced towards the model's "
                f"workload marginals ({o['balance_sweeps']} passes)"
            )
        return SynthPlan(
            "auto",
            inner.lines,
            (name, inner),
            inner.cost,
            {"chosen": name, "reason": reason, **inner.options},
        )

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        name, inner = plan.config
        res = backend(name).run(inner, ctx)
        return SynthResult(res.table, {"chosen": name, **res.info}, res.measurements)


BACKEND = AutoBackend()
