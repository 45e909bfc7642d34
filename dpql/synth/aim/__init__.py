"""AIM (McKenna et al. 2022) on the graphical-model estimators of ``mbi`` 2.x, as a dpql backend.

The mechanism logic follows ``benchmarks/suite/peers.py`` (which follows the reference script),
but every private access goes through dpql's measurement oracle (exact discrete Gaussian,
Gumbel top-k, dpql's ledger), with these deliberate differences from the reference script:

* **Fixed schedule.** AIM anneals its per-round budget from the data (it halves sigma when a
  round's measurement barely moved the model), so its number of rounds is data-dependent. dpql
  prints every ledger event before any data is read, so here the schedule is fixed by the plan:
  one release of every column's 1-way marginal (``init_share`` of rho), then ``rounds`` equal
  rounds, each ``per_round`` one-at-a-time Gumbel selections (``select_share`` of the round)
  and one discrete Gaussian release of the chosen marginals. Options left unset follow a public
  rule from n, the budget and the domain (:func:`default_schedule`): small or low-budget tables
  put more on the 1-way marginals and select fewer marginals; at most 4 rounds, since each
  re-fit of a large new clique structure costs seconds of XLA compilation.
* **Diverse picks.** The picks of one round share no column pair (each selection is among the
  candidates that share none with the round's earlier picks), so a round's single re-fit learns
  as much as several one-marginal rounds would, at the compile cost of one (the comparison
  with plain top-k rounds is in ``benchmarks/suite``).
* **Unweighted scores.** The oracle's selection score is ``||a(D) - model||_1 - penalty`` with
  sensitivity 2/n; the penalty is AIM's expected noise L1 of measuring that marginal in this
  round (``sqrt(2/pi) sigma cells``), so a candidate's score is its expected improvement.
* **Noise-aware candidates.** A candidate whose expected noise L1 at the round's sigma is >= 1
  (half the largest possible L1 error, 2) is never offered: its measurement would tell less than
  it adds. AIM's model-size filter (``max_model_size`` MB, scaled by the share of the budget
  spent) is kept, and holds for a round's picks together. Its default also bounds the work of
  the fits (model cells times mirror-descent steps, :func:`~dpql.synth.aim.plan.work_model_cap`):
  where n is large, noise no longer limits the cliques worth measuring, and without it the
  selection fills the machine's cap with cliques whose fits take minutes.
* **Warm starts; small fits without a compile.** Each round's estimate starts from the last
  (``iters`` mirror-descent steps), the final one runs ``final_iters``. A fit whose steps times
  junction-tree cells are small runs mbi's mirror descent in numpy
  (:mod:`dpql.synth.aim.hostfit`, the same steps in float64), since compiling mbi's fused
  program for its clique structure would cost more than running it; larger fits run mbi's
  compiled program (the record's ``fits`` says which ran where). Everything around it
  (initial state, warm-start expansion, model marginals, row sampling, the model-size filter)
  runs in numpy (:mod:`dpql.synth.aim.graphical`), since mbi would compile each of those small
  eager operations anew for every clique structure.
* **Balanced rows.** The rows sampled from the final model are rearranged by value swaps within
  columns until their marginals on the workload (the maximal candidates) are close to the
  model's expected counts (``balance_sweeps`` passes, ``dpql.synth.aim.graphical.balance_rows``),
  which removes most of the sampling noise an ``n``-row sample adds to those marginals
  (``benchmarks/suite``).

Only marginal queries of the workload drive the candidates (the downward closure of its
marginals, 2-way and up; all column pairs when it has none); other queries (thresholds,
moments) are left to post-processing.

* :mod:`~dpql.synth.aim.plan`: the fixed schedule, its budget lines and cost (imports neither
  mbi nor JAX);
* :mod:`~dpql.synth.aim.program`: the run (mbi, JAX), with :mod:`~dpql.synth.aim.graphical`
  and :mod:`~dpql.synth.aim.hostfit`.
"""

from __future__ import annotations

from dpql.spec.models import AimOptions
from dpql.synth.aim import plan as planning
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult, Traits


class AimBackend:
    name = "aim"
    traits = Traits()

    def declared_budget(self, spec: object) -> tuple[float, float]:
        return 0.0, 0.0

    def plan(self, ctx: PlanContext, options: AimOptions | None = None) -> SynthPlan:
        return planning.plan(ctx, options)

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        from dpql.synth.aim.program import run

        return run(plan, ctx)


BACKEND = AimBackend()
