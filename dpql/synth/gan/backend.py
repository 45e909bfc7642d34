"""DP-auto-GAN as a dpql backend: plan with :mod:`dpql.synth.gan.plan` (JAX-free), run with
:mod:`dpql.synth.gan.train` (imported only when a release trains).

Privacy boundary: DP-SGD reads private rows, through the data layer's row access
(``ctx.private.rows()``), and appends one ``dpsgd`` event per phase before it trains.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.privacy.budget import BudgetLine
from dpql.privacy.ledger import PrivacyEvent
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult
from dpql.synth.gan.options import GanOptions
from dpql.synth.gan.plan import GanPlan, plan_gan


class GanBackend:
    name = "gan"
    zcdp_only = False
    planned_curve = False  # the DP-SGD curve is known only once the run has appended it
    spends_budget = True

    def declared_budget(self, spec: Any) -> tuple[float, float]:
        return 0.0, 0.0

    def plan(self, ctx: PlanContext) -> SynthPlan:
        """DP-SGD noise for the GAN so that it and the planned zCDP phases fit (epsilon,
        delta) together (the other phases enter as placeholder Gaussian events of their rho)."""
        from dpql.plan.resources import gan_cost

        spec = ctx.spec
        others = [
            PrivacyEvent(
                phase,
                "gaussian",
                f"planned {phase}",
                l2_sensitivity=1.0,
                noise_scale=1.0 / math.sqrt(2 * rho),
                rho=rho,
            )
            for phase, rho in ctx.phase_rho.items()
            if phase != "synthesizer" and rho > 0
        ]
        doc = spec.doc
        where = ("synthesizer", "options") if doc.has(("synthesizer", "options")) else (
            "synthesizer",
        )
        pos = doc.key_pos(where)
        options: GanOptions = spec.model.synthesizer.options
        target = SimpleNamespace(epsilon=ctx.epsilon, delta=ctx.delta)
        try:
            gan = plan_gan(
                options, spec.rows, target, spec.model.privacy.split, other_events=tuple(others)
            )
        except (ValueError, ArithmeticError) as e:  # noise multipliers the accountant refuses
            raise DiagnosticError(
                [
                    Diagnostic(
                        "E152",
                        f"the gan options cannot be planned: {e or type(e).__name__}",
                        pos,
                        "use noise multipliers and step counts in the range of the paper's "
                        "(noise about 0.5 to 10), or leave noise_multipliers out to calibrate "
                        "them",
                    )
                ]
            ) from None
        lines = tuple(
            BudgetLine(f"gan.{e.phase}", "dpsgd", e.steps or 1, None, e.noise_multiplier, spec.rows)
            for e in gan.events()
        )
        return SynthPlan(
            "gan", lines, gan, gan_cost(spec.domain, options, spec.rows, spec.model.data.engine),
            options.model_dump(mode="json"),
        )

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        from dpql.synth.gan.train import sample, train_gan

        gan: GanPlan = plan.config
        # DP-SGD is the second privacy boundary: it reads the private rows (DESIGN inv. 2), in
        # memory, or for large files from an out-of-core row store (dpql.data.rows).
        with ctx.private.rows() as private:
            model = train_gan(
                private, gan, noise=ctx.noise, ledger=ctx.ledger, progress=ctx.progress
            )
        table = sample(model, ctx.spec.model.synthesizer.rows, ctx.seed)
        return SynthResult(table, {"options": dict(plan.options)})


BACKEND = GanBackend()
