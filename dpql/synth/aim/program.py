"""AIM's run (see :mod:`dpql.synth.aim`): the 1-way release, each round's picks (one
exponential mechanism at a time, through the oracle) and release, mbi's fits, and the sampled,
balanced rows. Everything after a release is post-processing of its noisy answers; mbi and JAX
are imported when the run starts."""

from __future__ import annotations

import numpy as np

from dpql.answers import NoisyAnswer
from dpql.ir.queries import Marginal
from dpql.synth.aim.plan import (
    NOISE_L1_LIMIT,
    SQRT_2_OVER_PI,
    AimSchedule,
    overlaps,
    select_parts,
)
from dpql.synth.base import RunContext, SynthPlan, SynthResult
from dpql.synth.nulls import complete_columns

#: a cell of a noisy 1-way marginal below this many sigmas is "rare" (MST's domain compression)
RARE_SIGMAS = 3.0


def pool_rare(y: np.ndarray, sigma: float) -> np.ndarray:
    """A noisy 1-way marginal with its rare cells (noisy value below ``RARE_SIGMAS`` sigma)
    shrunk towards their mean, where there are at least three: the empirical-Bayes (James-Stein)
    estimate ``m + (1 - b)(y - m)`` with ``b = sigma^2 / (sigma^2 + tau^2)`` and ``tau^2`` the
    rare cells' variance beyond the noise's. Where noise dwarfs the rare counts (``tau^2 = 0``)
    this is MST's domain compression (one merged cell, decompressed uniformly; McKenna et al.
    2021, sec. 4) without changing the domain; where the rare cells really differ (a long
    ordinal tail) it leaves them nearly as measured. Post-processing of ``y`` only."""
    rare = y < RARE_SIGMAS * sigma
    if rare.sum() < 3:
        return y
    m = float(y[rare].mean())
    tau2 = max(0.0, float(y[rare].var(ddof=1)) - sigma**2)
    b = sigma**2 / (sigma**2 + tau2)
    out = y.copy()
    out[rare] = m + (1.0 - b) * (y[rare] - m)
    return out


class FitDomain:
    """The domain mbi fits: the release's, less the null cell of every ``missing: keep`` column
    whose noisy 1-way null share the noise cannot tell from zero
    (:func:`dpql.synth.nulls.complete_columns`). Such a column gets no empty cell in the
    table anyway (``dpql.population``); fitting its null cell would only spend model size,
    selection penalty and mirror-descent steps on a structural zero. The null code is a
    column's last (``dpql.domain``), so the fit's codes are the release's codes.

    Post-processing of the 1-way release. Every marginal is still measured over the
    release's full domain (the noise per cell does not depend on the cells measured), and
    :meth:`restrict` drops the null cells from the answers before mbi sees them."""

    def __init__(self, dom, columns: tuple[str, ...], closed: tuple[str, ...]):
        self.closed = frozenset(closed)
        self.full = {c: dom.card(c) for c in columns}
        self.card = {c: k - 1 if c in self.closed else k for c, k in self.full.items()}

    def cells(self, cl: tuple[str, ...]) -> int:
        return int(np.prod([self.card[c] for c in cl]))

    def restrict(self, cl: tuple[str, ...], y: np.ndarray) -> np.ndarray:
        """A marginal over ``cl`` in the release's domain (row-major), in the fit's."""
        if not self.closed.intersection(cl):
            return np.asarray(y, dtype=np.float64)
        cube = np.asarray(y, dtype=np.float64).reshape([self.full[c] for c in cl])
        return cube[tuple(slice(0, self.card[c]) for c in cl)].ravel()

    def expand(self, cl: tuple[str, ...], y: np.ndarray) -> np.ndarray:
        """A marginal over ``cl`` in the fit's domain, in the release's (zero null cells)."""
        if not self.closed.intersection(cl):
            return y
        cube = np.zeros([self.full[c] for c in cl])
        cube[tuple(slice(0, self.card[c]) for c in cl)] = np.reshape(y, [self.card[c] for c in cl])
        return cube.ravel()


def _pick_forest(oracle, s: AimSchedule, model, rs: float, sigma: float,
                 fit: FitDomain) -> list[tuple[str, ...]]:  # fmt: skip
    """The spanning-forest round's ``s.tree`` picks (MST's tree selection, McKenna et al. 2021
    sec. 4, as Kruskal's algorithm with an exponential mechanism per edge): each among the
    planned pairs that join two components of the forest so far, scored by their L1 error
    against ``model`` (the 1-way model) less their expected noise, as every AIM pick is.
    ``s.tree`` is the planned pairs' spanning-forest size, so every pick has a pool."""
    from dpql.synth.aim.graphical import model_marginals

    n = s.n
    synth = {cl: fit.expand(cl, m) / n
             for cl, m in zip(s.tree_pairs, model_marginals(model, s.tree_pairs), strict=True)}
    where = {c: i for i, c in enumerate(s.columns)}  # column -> its component's label
    cls: list[tuple[str, ...]] = []
    for j, r in enumerate(select_parts(rs, s.tree)):
        pool = [cl for cl in s.tree_pairs if where[cl[0]] != where[cl[1]]]
        chosen = oracle.select(
            [Marginal(cl) for cl in pool], [synth[cl] for cl in pool], 1, r, phase=s.phase(0),
            label=f"spanning forest, edge {j + 1}/{s.tree}",
            penalty=[SQRT_2_OVER_PI * sigma * fit.cells(cl) for cl in pool],
        )  # fmt: skip
        a, b = pool[chosen[0]]
        old, new = where[a], where[b]
        where = {c: new if w == old else w for c, w in where.items()}
        cls.append((a, b))
    return cls


def _pick_round(oracle, s: AimSchedule, i: int, model, rs: float, sigma: float, limit: float,
                mdom, fit: FitDomain) -> list[tuple[str, ...]]:
    """An adaptive round's ``s.k()`` picks, one at a time, among the candidates that the
    round's noise would not swamp and that keep the model, with the round's earlier picks,
    within ``limit`` MB (where none does, those that grow it least)."""
    from dpql.synth.aim.graphical import model_marginals
    from dpql.synth.aim.junction import junction_cells_each

    n = s.n
    cells = fit.cells
    card = dict(zip(mdom.attributes, mdom.shape, strict=True))
    now = [tuple(c) for c in model.cliques]

    def sizes(pool: list[tuple[str, ...]], chosen: list[tuple[str, ...]]) -> dict:
        """MB of the model with ``chosen`` and each of ``pool`` (mbi's junction tree of the
        measured cliques)."""
        cells = junction_cells_each(card, [*now, *chosen], pool)
        return {cl: k * 8 / 2**20 for cl, k in zip(pool, cells, strict=True)}

    quiet = [cl for cl in s.candidates if SQRT_2_OVER_PI * sigma * cells(cl) < NOISE_L1_LIMIT]
    size = sizes(quiet, [])
    live = [cl for cl in quiet if size[cl] <= limit]
    if len(live) < s.k():  # public fallback: the smallest candidates (events are planned)
        live += [c for c in sorted(s.candidates, key=cells) if c not in live]
        live = live[: max(s.k(), len(live))]
    synth = {cl: fit.expand(cl, m) / n
             for cl, m in zip(live, model_marginals(model, live), strict=True)}
    cls: list[tuple[str, ...]] = []
    # k selections one at a time, each among the candidates that share no column pair with
    # this round's earlier picks (all unpicked ones if none is left): one release per round
    # still re-fits once, but its marginals tell different things. A clique already measured
    # is picked again only where its error beats its noise (the penalty), i.e. where it pays.
    for j, r in enumerate(select_parts(rs, s.k())):
        pool = [cl for cl in live if cl not in cls]
        if cls:  # the model-size filter with this round's earlier picks
            size = sizes(pool, cls)
            least = min(size.values())
            pool = [cl for cl in pool if size[cl] <= max(limit, least)]
        pool = [cl for cl in pool if not any(overlaps(cl, c) for c in cls)] or pool
        chosen = oracle.select(
            [Marginal(cl) for cl in pool], [synth[cl] for cl in pool], 1, r,
            phase=s.phase(i), label=f"{s.phase(i)}, pick {j + 1}/{s.k()}",
            penalty=[SQRT_2_OVER_PI * sigma * cells(cl) for cl in pool],
        )  # fmt: skip
        cls.append(pool[chosen[0]])
    return cls


def run(plan: SynthPlan, ctx: RunContext) -> SynthResult:
    """The backend's run: the schedule's releases and fits, then the sampled, balanced rows."""
    from dpql.synth.aim.graphical import import_mbi

    import_mbi()
    from mbi import Domain, LinearMeasurement

    from dpql.domain import EncodedTable, NumericColumn
    from dpql.synth.aim.graphical import (
        IndependentModel,
        balance_rows,
        model_marginals,
        quick_start_mirror_descent,
        sample_rows,
        tree_model,
    )
    from dpql.synth.aim.hostfit import HostProgram, fits_on_host, host_estimate
    from dpql.synth.jax_cache import enable_compilation_cache

    enable_compilation_cache()
    s, options = plan.config
    oracle = ctx.private.oracle
    n = s.n
    dom = ctx.spec.domain

    engines: list[str] = []

    def estimate(meas, iters, warm=None):
        program = HostProgram(mdom, meas)
        if fits_on_host(program, iters):
            engines.append("host")
            return host_estimate(program, float(n), iters, warm)
        engines.append("xla")
        return quick_start_mirror_descent().estimate(
            mdom, meas, known_total=float(n), iters=iters, warm_start=warm
        )

    ones = [Marginal((c,)) for c in s.columns]
    sigma0 = s.init_sigma()
    noisy = oracle.measure(ones, s.rho_init, phase="aim.init",
                           label=f"{len(ones)} one-way marginals")  # fmt: skip
    measured = [NoisyAnswer(q, y, sigma0) for q, y in zip(ones, noisy, strict=True)]
    fit = FitDomain(dom, s.columns, complete_columns(dom, measured))
    mdom = Domain(list(s.columns), [fit.card[c] for c in s.columns])
    # the model learns from the 1-way answers with rare cells pooled; post-processing gets
    # them as released (``measured``)
    fitted = [fit.restrict((c,), y) for c, y in zip(s.columns, noisy, strict=True)]
    if options.pool_rare:
        fitted = [pool_rare(y, sigma0) for y in fitted]
    meas = [
        LinearMeasurement(y * n, (c,), stddev=sigma0 * n)
        for c, y in zip(s.columns, fitted, strict=True)
    ]
    # the 1-way model is the product of the (clipped, normalised) noisy 1-way marginals:
    # no mirror descent (and no XLA compilation) for it
    model = IndependentModel(
        {c: np.clip(y, 0, None) for c, y in zip(s.columns, fitted, strict=True)}, n
    )
    picked: list[tuple[str, ...]] = []
    tree: list[tuple[str, ...]] = []
    for i, (rs, rm) in enumerate(s.rounds):
        sigma = s.round_sigma(i)
        limit = options.max_model_size * s.spent_share(i)
        if i == 0 and s.tree:
            cls = _pick_forest(oracle, s, model, rs, sigma, fit)
            tree = list(cls)
        else:
            cls = _pick_round(oracle, s, i, model, rs, sigma, limit, mdom, fit)
        ys = oracle.measure([Marginal(cl) for cl in cls], rm, phase=s.phase(i),
                            label=f"{s.phase(i)}: {cls}")  # fmt: skip
        for cl, y in zip(cls, ys, strict=True):
            meas.append(LinearMeasurement(fit.restrict(cl, y) * n, cl, stddev=sigma * n))
            measured.append(NoisyAnswer(Marginal(cl), y, sigma))
            picked.append(cl)
        last = i == len(s.rounds) - 1
        iters = options.final_iters if last and options.final_iters else options.iters
        if i == 0 and s.tree and not last:
            # the forest's model in closed form (a Bayesian network over it): no mirror
            # descent and no compile for a structure the next round's fit replaces
            pairs = {cl: fit.restrict(cl, y) for cl, y in zip(cls, ys, strict=True)}
            model = tree_model(mdom, dict(zip(s.columns, fitted, strict=True)), pairs, n)
        else:
            model = estimate(meas, iters, model if i else None)
        if ctx.progress:
            ctx.progress("aim", i + 1, len(s.rounds))
    if not s.rounds:
        model = estimate(meas, options.final_iters or options.iters)
    rows = ctx.spec.model.synthesizer.rows
    rng = np.random.default_rng(ctx.seed)
    data = sample_rows(model, rows, rng)
    if options.balance_sweeps:
        # the workload's marginals (the maximal candidates), at the model's expected counts
        scale = rows / float(n)
        margs = model_marginals(model, s.targets)
        targets = [(cl, m * scale) for cl, m in zip(s.targets, margs, strict=True)]
        data = balance_rows(data, targets, fit.card, rng,
                            sweeps=options.balance_sweeps)  # fmt: skip
    order = rng.permutation(rows)
    codes, scaled = {}, {}
    for c in s.columns:
        code = np.asarray(data[c], dtype=np.int32)[order]
        column = dom[c]
        if isinstance(column, NumericColumn):  # with missing: keep, the null bin among them
            code, scaled[c] = column.decode_bins(code, rng.random(rows))
        codes[c] = code
    table = EncodedTable(dom, codes, scaled)
    info = {
        "options": dict(plan.options),
        "selected": [list(c) for c in picked],
        "spanning_forest": [list(c) for c in tree],
        "fitted_without_null_cell": sorted(fit.closed),
        "picks_per_round": [s.picks(i) for i in range(len(s.rounds))],
        "model_cliques": [list(c) for c in model.cliques],
        "fits": engines,
    }
    return SynthResult(table, info, tuple(measured))
