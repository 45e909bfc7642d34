"""DP-auto-GAN as a dpql backend: plan with :mod:`dpql.synth.gan.plan` (JAX-free), run with
:mod:`dpql.synth.gan.train` (imported only when a release trains).

Privacy boundary: DP-SGD reads private rows, through the data layer's row access
(``ctx.private.rows()``), and appends one ``dpsgd`` event per phase before it trains.

With a marginal share > 0 (``marginal_share``; default 0.5 with ``encoding: bins``)
the plan also reserves that fraction of the synthesizer's rho for one Gaussian release of
marginals (budget line ``gan.marginals``, measured through ``ctx.private.oracle`` before
training): every 1-way marginal and, with ``encoding: bins``, the workload's k-way marginals
that :func:`marginal_queries` picks from public facts. Mechanism: the discrete Gaussian on the
marginals' integer counts, replace-one neighbours at the public n, joint L2 sensitivity
``sqrt(2 K) / n`` for K marginals (one row changes two cells of each by 1/n), rho-zCDP.
DP-SGD is calibrated on the rest of the budget, composed with it. With ``encoding: bins`` the
generator is then trained on the noisy marginals too (:mod:`dpql.synth.gan.fidelity`; a
penalty on its WGAN loss, then non-private fine-tuning) and rows are sampled code by code;
sampling draws the synthetic rows from ``resample_pool`` times as many generated rows,
weighted by raking to the noisy 1-way marginals. All of that is post-processing of DP outputs.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from dpql.diagnostics import Diagnostic, DiagnosticError
from dpql.domain import EncodedTable
from dpql.ir.queries import Marginal, joint_l2_sensitivity
from dpql.privacy.budget import BudgetLine
from dpql.privacy.ledger import PrivacyEvent
from dpql.synth.base import PlanContext, RunContext, SynthPlan, SynthResult, Traits
from dpql.synth.gan import encoding
from dpql.synth.gan.options import GanOptions
from dpql.synth.gan.plan import GanPlan, plan_gan


class GanBackend:
    name = "gan"
    # the DP-SGD curve is known only once the run has appended it
    traits = Traits(zcdp_only=False, planned_curve=False)

    def declared_budget(self, spec: Any) -> tuple[float, float]:
        return 0.0, 0.0

    def plan(self, ctx: PlanContext, options: GanOptions | None = None) -> SynthPlan:
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
        if options is None:
            options = spec.model.synthesizer.options
        _refuse_kept_missing(spec)
        marginal_lines: tuple[BudgetLine, ...] = ()
        measured: tuple[Marginal, ...] = ()
        share = options.effective_marginal_share
        if share > 0 and ctx.phase_rho.get("synthesizer", 0.0) > 0:
            rho_m = share * ctx.phase_rho["synthesizer"]
            measured = marginal_queries(spec.domain, ctx.queries, options, rho_m, spec.rows)
            l2 = joint_l2_sensitivity(measured, spec.rows)
            sigma = l2 / math.sqrt(2 * rho_m)
            others.append(
                PrivacyEvent(
                    MARGINAL_PHASE,
                    "gaussian",
                    f"planned gan marginals ({len(measured)})",
                    l2_sensitivity=l2,
                    noise_scale=sigma,
                    rho=rho_m,
                )
            )
            marginal_lines = (
                BudgetLine(
                    f"gan.{MARGINAL_PHASE}",
                    "gaussian",
                    1,
                    rho_m,
                    sigma,
                    spec.rows,
                    sum(q.cells(spec.domain) for q in measured),
                ),
            )
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
        gan = dataclasses.replace(gan, marginals=tuple(q.columns for q in measured))
        lines = marginal_lines + tuple(
            BudgetLine(f"gan.{e.phase}", "dpsgd", e.steps or 1, None, e.noise_multiplier, spec.rows)
            for e in gan.events()
        )
        cost = gan_cost(
            spec.domain, options, spec.rows, spec.model.data.engine,
            encoding.width(spec.domain, options.encoding, options.integer_levels),
            sum(spec.domain.cells(q.columns) for q in measured) if options.finetune_steps else 0,
            spec.model.synthesizer.rows * (options.resample_pool if marginal_lines else 1),
        )  # fmt: skip
        return SynthPlan("gan", lines, gan, cost, options.model_dump(mode="json"))

    def run(self, plan: SynthPlan, ctx: RunContext) -> SynthResult:
        from dpql.synth.gan.train import sample, train_gan
        from dpql.synth.jax_cache import enable_compilation_cache

        enable_compilation_cache()
        gan: GanPlan = plan.config
        marginals = None
        line = next((x for x in plan.lines if x.phase == f"gan.{MARGINAL_PHASE}"), None)
        if line is not None:  # measured first: the plan's line order is the ledger's
            queries = tuple(Marginal(cols) for cols in gan.marginals)
            ways = max(len(q.columns) for q in queries)
            noisy = ctx.private.oracle.measure(
                queries, line.rho, phase=MARGINAL_PHASE,
                label=f"{len(queries)} marginals of at most {ways} columns",
            )  # fmt: skip
            marginals = [
                (q.columns, np.asarray(y, dtype=np.float64))
                for q, y in zip(queries, noisy, strict=True)
            ]
        # DP-SGD is the second privacy boundary: it reads the private rows (DESIGN inv. 2), in
        # memory, or for large files from an out-of-core row store (dpql.data.rows).
        with ctx.private.rows() as private:
            model = train_gan(
                private, gan, noise=ctx.noise, ledger=ctx.ledger, progress=ctx.progress,
                marginals=marginals,
            )  # fmt: skip
        rows = ctx.spec.model.synthesizer.rows
        if marginals is None:
            table = sample(model, rows, ctx.seed)
        else:
            pool = sample(model, rows * gan.options.resample_pool, ctx.seed)
            one_way = {cols[0]: y for cols, y in marginals if len(cols) == 1}
            table = resample_to_marginals(pool, one_way, rows, ctx.seed)
        return SynthResult(table, {"options": dict(plan.options)})


MARGINAL_PHASE = "marginals"


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def marginal_queries(
    domain: Any,
    workload: Sequence[Any] = (),
    options: GanOptions | None = None,
    rho: float = 0.0,
    n: int = 1,
) -> tuple[Marginal, ...]:
    """The marginals the ``gan.marginals`` phase releases, chosen from public facts only.

    Always every 1-way marginal, in domain order. With ``encoding: bins`` and
    ``marginal_ways >= 2``, also k-way marginals (2 <= k <= ``marginal_ways``) over column
    sets contained in a workload marginal (every column pair when the workload has no marginal
    over two or more columns), smallest (fewest cells) first, while the candidate's
    expected L1 noise ``sqrt(2/pi) * sigma * cells`` stays below ``marginal_noise_limit``,
    where ``sigma = sqrt(K) / (n sqrt(rho))`` is the per-cell noise (as a fraction of n) of one
    Gaussian release of all ``K`` chosen marginals at ``rho`` (joint L2 sensitivity
    ``sqrt(2 K) / n`` under replace-one). Depends on the domain, the workload, the options,
    ``rho`` and the public ``n``: never on data."""
    ones = tuple(Marginal((c.name,)) for c in domain)
    o = options
    if o is None or o.encoding != "bins" or o.marginal_ways < 2 or rho <= 0:
        return ones
    names = list(domain.names)
    candidates: set[tuple[str, ...]] = set()
    for q in workload:
        if isinstance(q, Marginal) and len(set(q.columns)) >= 2:
            cols = sorted(set(q.columns), key=names.index)
            for k in range(2, min(o.marginal_ways, len(cols)) + 1):
                candidates.update(itertools.combinations(cols, k))
    if not candidates:  # no k-way workload marginal: every pair, for a general-purpose table
        candidates.update(itertools.combinations(names, 2))
    ordered = sorted(candidates, key=lambda c: (domain.cells(c), [names.index(x) for x in c]))
    chosen: list[Marginal] = []
    for cols in ordered:
        sigma = math.sqrt(len(ones) + len(chosen) + 1) / (n * math.sqrt(rho))
        if SQRT_2_OVER_PI * sigma * domain.cells(cols) >= o.marginal_noise_limit:
            break  # cells grow and sigma grows along the order: no later candidate fits
        chosen.append(Marginal(cols))
    return ones + tuple(chosen)


def _simplex(y: np.ndarray) -> np.ndarray:
    """A noisy marginal made a distribution: clipped at 0 and normalised (post-processing)."""
    p = np.clip(np.asarray(y, dtype=np.float64), 0.0, None)
    total = p.sum()
    return p / total if total > 0 else np.full(p.shape, 1.0 / p.size)


def resample_to_marginals(
    pool: EncodedTable,
    marginals: Mapping[str, np.ndarray],
    rows: int,
    seed: int,
    iters: int = 50,
) -> EncodedTable:
    """``rows`` rows drawn with replacement from ``pool``, weighted by raking (iterative
    proportional fitting of row weights to the noisy 1-way ``marginals``). Post-processing of
    the generator and the DP marginals; ``seed`` fixes the draw only."""
    w = np.full(pool.n, 1.0 / pool.n)
    targets = {c: _simplex(y) for c, y in marginals.items()}
    for _ in range(iters):
        for c, target in targets.items():
            codes = pool.codes[c]
            have = np.bincount(codes, weights=w, minlength=target.size)
            ratio = np.where(have > 0, target / np.where(have > 0, have, 1.0), 0.0)
            new = w * ratio[codes]
            total = new.sum()
            if total > 0 and np.isfinite(total):  # else the pool cannot meet it: skip it
                w = new / total
    pick = np.random.default_rng(seed).choice(pool.n, size=rows, replace=True, p=w)
    return EncodedTable(
        pool.domain,
        {k: v[pick] for k, v in pool.codes.items()},
        {k: v[pick] for k, v in pool.scaled.items()},
    )



def _refuse_kept_missing(spec: Any) -> None:
    """E109 for a ``missing: keep`` column: the GAN's encoding has no state for a missing cell."""
    model, doc = spec.model, spec.doc
    diags = []
    for name, col in model.columns.items():
        if (col.missing or model.missing) != "keep":
            continue
        at = ("schema", name, "missing") if col.missing else ("missing",)
        diags.append(
            Diagnostic(
                "E109",
                f"missing: keep is not supported by the gan synthesizer (column '{name}'): "
                "its encoding has no state for a missing cell",
                doc.value_pos(at),
                "use method: rap (or aim), or missing: drop / fill for this column",
            )
        )
    if diags:
        raise DiagnosticError(diags)


BACKEND = GanBackend()
