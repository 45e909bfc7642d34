"""DP-auto-GAN's run: the ``gan.marginals`` release (when planned), DP-SGD training
(:mod:`dpql.synth.gan.train`, JAX) and sampling the synthetic rows.

Privacy boundary: DP-SGD reads private rows, through the data layer's row access
(``ctx.private.rows()``), and appends one ``dpsgd`` event per phase before it trains. Everything
after training (sampling, raking to the noisy 1-way marginals) is post-processing.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dpql.domain import EncodedTable
from dpql.ir.queries import Marginal
from dpql.sampling import resample
from dpql.synth.base import RunContext, SynthPlan, SynthResult
from dpql.synth.gan.plan import MARGINAL_PHASE, GanPlan


def run(plan: SynthPlan, ctx: RunContext) -> SynthResult:
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
    """``rows`` rows drawn from ``pool``, weighted by raking (iterative proportional fitting of
    row weights to the noisy 1-way ``marginals``), by post-processing's controlled rounding
    (:func:`dpql.sampling.resample`: every pool row the floor or the ceiling of its expected
    count, no multinomial sampling noise on top of the weights). Post-processing of the
    generator and the DP marginals; ``seed`` fixes the draw only."""
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
    return resample(pool, w, rows, seed)
