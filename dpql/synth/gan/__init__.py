"""DP-auto-GAN synthesizer (Tantipongpipat et al. 2019) as a dpql backend.

**Privacy boundary.** This package is the ONLY synthesizer code that touches private rows: its
DP-SGD loops (:mod:`.dpsgd`, driven by :func:`train_gan`) read the private
:class:`~dpql.domain.EncodedTable` handed over by the pipeline. Every other synthesizer fits to
noisy measurements only. It never imports :mod:`dpql.data`; it receives rows, a
:class:`~dpql.privacy.noise.NoiseSource` and a :class:`~dpql.privacy.ledger.Ledger`.

* :mod:`~dpql.synth.gan.plan` (JAX-free): both DP-SGD phases' noise, calibrated to the budget
  (:func:`plan_gan`), the marginals measured beside them, budget lines and resource cost;
* :mod:`~dpql.synth.gan.program`: the run, training (:mod:`.train`, with :mod:`.dpsgd`,
  :mod:`.nets`, :mod:`.fidelity`) and sampling; imported only when a release trains.

Pipeline use::

    plan = plan_gan(options, n_public, budget, split)                # calibrates noise, no data
    model = train_gan(private_rows, plan, noise=noise, ledger=ledger, progress=callback,
                      marginals=noisy)         # optional: DP marginals to fit
    table = sample(model, rows, seed)                                # post-processing

With a marginal share > 0 (``marginal_share``; default 0.5 with ``encoding: bins``) the plan
also reserves that fraction of the synthesizer's rho for one Gaussian release of marginals
(budget line ``gan.marginals``, measured through ``ctx.private.oracle`` before training): every
1-way marginal and, with ``encoding: bins``, the workload's k-way marginals that
:func:`~dpql.synth.gan.plan.marginal_queries` picks from public facts. Mechanism: the discrete
Gaussian on the marginals' integer counts, replace-one neighbours at the public n, joint L2
sensitivity ``sqrt(2 K) / n`` for K marginals (one row changes two cells of each by 1/n),
rho-zCDP. DP-SGD is calibrated on the rest of the budget, composed with it. With
``encoding: bins`` the generator is then trained on the noisy marginals too
(:mod:`.fidelity`; a penalty on its WGAN loss, then non-private fine-tuning) and rows are
sampled code by code; sampling draws the synthetic rows from ``resample_pool`` times as many
generated rows, weighted by raking to the noisy 1-way marginals. All of that is
post-processing of DP outputs.

Privacy accounting: two Poisson-subsampled Gaussian phases (autoencoder, critic), appended to
the ledger as ``dpsgd`` events and composed by :mod:`dpql.privacy.accountant` under dpql's
replace-one relation (see that module for the add/remove -> replace-one bound).
"""

from __future__ import annotations

from typing import Any

from dpql.spec.models import GanOptions
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult, Traits
from dpql.synth.gan import plan as planning
from dpql.synth.gan.plan import GanPlan, plan_gan

__all__ = ["BACKEND", "GanModel", "GanOptions", "GanPlan", "plan_gan", "sample", "train_gan"]


class GanBackend:
    name = "gan"
    # the DP-SGD curve is known only once the run has appended it
    traits = Traits(zcdp_only=False, planned_curve=False)

    def declared_budget(self, spec: Any) -> tuple[float, float]:
        return 0.0, 0.0

    def plan(self, ctx: PlanContext, options: GanOptions | None = None) -> SynthPlan:
        return planning.plan(ctx, options)

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        from dpql.synth.gan.program import run

        return run(plan, ctx)


BACKEND = GanBackend()


def __getattr__(name: str) -> Any:
    # the training program imports JAX: load it only when asked, so planning stays JAX-free
    if name in ("GanModel", "sample", "train_gan"):
        from dpql.synth.gan import train

        return getattr(train, name)
    if name in ("dpsgd", "encoding", "fidelity", "nets", "program", "train"):
        import importlib

        return importlib.import_module(f"dpql.synth.gan.{name}")
    raise AttributeError(name)
