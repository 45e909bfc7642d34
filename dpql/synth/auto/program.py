"""``method: auto``'s run: the chosen backend's."""

from __future__ import annotations

from dpql.synth.base import RunContext, SynthPlan, SynthResult, backend


def run(plan: SynthPlan, ctx: RunContext) -> SynthResult:
    """The chosen backend's run of its plan; the record names the choice."""
    name, inner = plan.config
    res = backend(name).run(inner, ctx)
    return SynthResult(res.table, {"chosen": name, **res.info}, res.measurements)
