"""RAP++ (relaxed adaptive projection, Vietri et al. 2022) as a
dpql backend.

* :mod:`~dpql.synth.rap.schedule`: options and the budget schedule (JAX-free; the plan);
* :mod:`~dpql.synth.rap.program`: the JAX program that runs a schedule against the oracle.

Privacy: every round selects (Gumbel top-k) and measures (discrete Gaussian) through the
measurement oracle; the relaxed table is fitted to noisy answers only (post-processing).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpql.privacy.budget import BudgetLine
from dpql.privacy.mechanisms import gumbel_beta
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult, Traits
from dpql.synth.rap.schedule import RapOptions, RapSchedule, plan_rap, release_sigma

# Default 1:3. The paper halves each round (Vietri et al. 2022, App. C, proof of Theorem 1:
# rho/2T to selection, rho/2TK to each of the K measurements); the noise of the measurements,
# not the choice of queries, limits the fit, so selection gets the smaller share.
DEFAULT_SELECTION_SHARE = 0.25


def budget_lines(rap: RapSchedule, n: int, cards: dict[str, int]) -> list[BudgetLine]:
    """One line per round and mechanism: Gumbel selection (L1 score sensitivity 2/n) and the
    discrete Gaussian release of the round's queries (with its count of values for the init
    round, whose queries are fixed; ``cards``: the domain's cardinalities)."""
    from dpql.plan.resolve import query_cells

    lines = []
    for i, r in enumerate(rap.rounds):
        phase = f"rap.{r.kind}[{i}]"
        if r.rho_select > 0:
            beta = gumbel_beta(2.0 / n, r.k, r.rho_select)
            lines.append(BudgetLine(phase, "gumbel_top_k", 1, r.rho_select, beta, n))
        pool = (
            rap.init_queries
            if r.kind == "init"
            else (rap.marginal_candidates if r.kind == "marginal" else rap.threshold_candidates)
        )
        chosen = list(pool) if r.kind == "init" else list(pool[: r.k])
        sigma = release_sigma(chosen, r.rho_measure, n)
        count = sum(query_cells(q, cards) for q in chosen) if r.kind == "init" else None
        lines.append(BudgetLine(phase, "gaussian", 1, r.rho_measure, sigma, n, count))
    return lines


class RapBackend:
    name = "rap"
    traits = Traits()

    def declared_budget(self, spec: object) -> tuple[float, float]:
        return 0.0, 0.0

    def plan(self, ctx: PlanContext, options: RapOptions | None = None) -> SynthPlan:
        from dpql.plan.resources import rap_cost

        spec = ctx.spec
        if options is None:
            options = spec.model.synthesizer.options
        split = spec.model.privacy.split or {}
        sel = Fraction(split.get("selection", DEFAULT_SELECTION_SHARE)).limit_denominator(10**6)
        meas = Fraction(split.get("measurement", 1 - DEFAULT_SELECTION_SHARE)).limit_denominator(
            10**6
        )
        schedule = plan_rap(
            ctx.queries, ctx.phase_rho.get("synthesizer", 0.0), options, sel / (sel + meas)
        )
        return SynthPlan(
            "rap",
            tuple(budget_lines(schedule, spec.rows, {c.name: c.card for c in spec.domain})),
            (schedule, options),
            rap_cost(spec.domain, ctx.queries, schedule, options),
            options.model_dump(),
        )

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        from dpql.ir.exact import answer_all
        from dpql.synth.jax_cache import enable_compilation_cache
        from dpql.synth.rap.program import run_rap

        enable_compilation_cache()
        schedule, options = plan.config
        rows = ctx.spec.model.synthesizer.rows
        res = run_rap(
            ctx.private.oracle,
            ctx.spec.domain,
            ctx.queries,
            schedule,
            options,
            rows,
            ctx.seed,
            ctx.progress,
        )
        info: dict[str, object] = {
            "options": dict(plan.options),
            "rounds": res.rounds,
            "measured_queries": len(res.measured),
            "round_queries": [list(s) for s in res.selected],
        }
        if res.measured:  # errors against the *noisy* measurements, never the real data
            answers = answer_all(list(res.measured), res.table)
            err = np.concatenate(
                [np.abs(a - m) for a, m in zip(answers, res.noisy, strict=True)]
            )
            info["mean_abs_error_vs_noisy"] = float(err.mean())
            info["max_abs_error_vs_noisy"] = float(err.max())
        sigmas = res.sigma or (float("nan"),) * len(res.measured)
        return SynthResult(
            res.table, info, tuple(zip(res.measured, res.noisy, sigmas, strict=True))
        )


BACKEND = RapBackend()
