"""``method: auto``'s plan: the backend chosen by the documented rules (:mod:`dpql.synth.auto`),
planned with its default options, and the reason."""

from __future__ import annotations

from collections.abc import Sequence

from dpql.ir.queries import Halfspace, Prefix, Query
from dpql.spec.models import AimOptions, RapOptions
from dpql.synth.base import PlanContext, SynthPlan, backend

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


def plan(ctx: PlanContext, options: object = None) -> SynthPlan:
    """The chosen backend's plan with its default options, and the reason (``options``: the
    auto options model, which has none to read)."""
    name, reason = choose(ctx.queries, ctx.spec.rows, ctx.epsilon)
    chosen = backend(name)
    inner = chosen.plan(ctx, DEFAULT_OPTIONS[name]())
    if name == "aim":
        o = inner.options
        reason += (
            f"; its schedule (dpql.synth.aim.plan.default_schedule): {o['init_share']:.0%} of the "
            f"budget on the 1-way marginals, "
            + (f"then a spanning forest of {o['tree_edges']} pair(s), " if o["tree"] else "")
            + f"then {o['rounds']} round(s) of {o['per_round']} marginal(s); model size "
            f"at most {o['max_model_size']:g} MB (from this machine and the fits' work: "
            "dpql.synth.aim.plan.machine_model_cap, work_model_cap); the sampled rows balanced "
            "towards the model's "
            f"workload marginals ({o['balance_sweeps']} passes)"
        )
    return SynthPlan(
        "auto",
        inner.lines,
        (name, inner),
        inner.cost,
        {"chosen": name, "reason": reason, **inner.options},
    )
