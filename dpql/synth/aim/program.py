"""AIM's run (see :mod:`dpql.synth.aim`): the 1-way release, each round's picks (one
exponential mechanism at a time, through the oracle) and release, mbi's fits, and the sampled,
balanced rows. Everything after a release is post-processing of its noisy answers; mbi and JAX
are imported when the run starts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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


def rare_cells(y: np.ndarray, sigma: float) -> np.ndarray:
    """The cells of a noisy 1-way marginal ``y`` (noise sd ``sigma`` per cell) that the 1-way
    release cannot tell from empty, alone or together: from the smallest answer up, while each
    stays below ``RARE_SIGMAS`` sigma and the sum of the first ``k`` below ``RARE_SIGMAS``
    times its own noise sd, ``sqrt(k)`` sigma. Merging cells loses what pairs would tell
    within them, so the merged cell must itself be indistinguishable from empty.
    Post-processing of ``y`` only."""
    order = np.argsort(y, kind="stable")
    k = np.arange(1, y.size + 1)
    ok = (y[order] < RARE_SIGMAS * sigma) & (np.cumsum(y[order]) < RARE_SIGMAS * sigma * np.sqrt(k))
    return order[: int(np.argmin(ok)) if not ok.all() else ok.size]


class FitDomain:
    """The domain mbi fits: the release's, with two public changes per column, both
    post-processing of the 1-way release (each column's map from release codes to fit codes,
    ``-1`` for a cell left out):

    * the null cell of every ``missing: keep`` column whose noisy 1-way null share the noise
      cannot tell from zero (:func:`dpql.synth.nulls.complete_columns`) is left out. Such a
      column gets no empty cell in the table anyway (``dpql.population``); fitting its null
      cell would only spend model size, selection penalty and mirror-descent steps on a
      structural zero;
    * the ``rare`` cells (:func:`rare_cells`), where there are at least two, are merged into
      one: MST's domain compression (McKenna et al. 2021, sec. 4).
      A pair over such a column is selected and measured over the merged cells
      (:meth:`merge_map`, the oracle's ``merge``), so its noise spreads over fewer cells and
      fewer of them are noise alone; :meth:`to_release` gives a sampled row in the merged
      cell one of its values in proportion to the pooled 1-way answers.

    Kept cells keep their order, so with nothing merged the fit's codes are the release's
    (the null code is a column's last, ``dpql.domain``). A pair with no merged cell is
    measured over the release's cells, and :meth:`restrict` drops the null cells from its
    answer before mbi sees it."""

    def __init__(self, dom, columns: tuple[str, ...], closed: tuple[str, ...],
                 rare: Mapping[str, np.ndarray] | None = None):  # fmt: skip
        self.closed = frozenset(closed)
        self.full = {c: dom.card(c) for c in columns}
        rare = rare or {}
        self.maps = {
            c: column_map(k, c in self.closed, rare.get(c, ())) for c, k in self.full.items()
        }
        self.card = {c: int(m.max()) + 1 for c, m in self.maps.items()}
        self.merged = frozenset(c for c, m in self.maps.items() if self.card[c] < (m >= 0).sum())

    def cells(self, cl: tuple[str, ...]) -> int:
        return int(np.prod([self.card[c] for c in cl]))

    def cell_map(self, cl: tuple[str, ...]) -> np.ndarray:
        """Each release cell of ``cl`` (row-major) to its fit cell (``-1``: left out)."""
        index = np.zeros((1,) * len(cl), dtype=np.int64)
        kept = np.ones((1,) * len(cl), dtype=bool)
        for d, c in enumerate(cl):
            m = self.maps[c].reshape([-1 if e == d else 1 for e in range(len(cl))])
            index = index * self.card[c] + m
            kept = kept & (m >= 0)
        return np.where(kept, index, -1).ravel()

    def merges(self, cl: tuple[str, ...]) -> bool:
        """Whether a column of ``cl`` has merged cells (a marginal over it is measured over
        the fit's cells, else over the release's)."""
        return bool(self.merged.intersection(cl))

    def merge_map(self, cl: tuple[str, ...]) -> np.ndarray | None:
        """The oracle's ``merge`` for a marginal over ``cl``: its :meth:`cell_map` where it
        :meth:`merges`, else None (measured over the release's cells)."""
        return self.cell_map(cl) if self.merges(cl) else None

    def restrict(self, cl: tuple[str, ...], y: np.ndarray) -> np.ndarray:
        """A marginal over ``cl`` in the release's domain (row-major), in the fit's."""
        y = np.asarray(y, dtype=np.float64)
        if not (self.closed | self.merged).intersection(cl):
            return y
        index = self.cell_map(cl)
        kept = index >= 0
        return np.bincount(index[kept], weights=y[kept], minlength=self.cells(cl))

    def fitted(self, cl: tuple[str, ...], measured: np.ndarray) -> np.ndarray:
        """A measured answer over ``cl`` (merged where :meth:`merge_map` says), in the fit's
        domain."""
        if self.merges(cl):
            return np.asarray(measured, dtype=np.float64)
        return self.restrict(cl, measured)

    def as_measured(self, cl: tuple[str, ...], y: np.ndarray) -> np.ndarray:
        """A model marginal over ``cl`` (fit domain) in the cells a measurement of ``cl`` has
        (:meth:`merge_map`): merged cells as they are, left-out null cells as zeros."""
        if self.merges(cl) or not self.closed.intersection(cl):
            return y
        cube = np.zeros([self.full[c] for c in cl])
        cube[tuple(slice(0, self.card[c]) for c in cl)] = np.reshape(y, [self.card[c] for c in cl])
        return cube.ravel()

    def to_release(self, c: str, codes: np.ndarray, weight: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:  # fmt: skip
        """Fit codes of column ``c`` as release codes: a merged cell's rows get its values at
        random in proportion to ``weight`` (the release's 1-way estimates; clipped at zero,
        equal where none is positive)."""
        if c not in self.merged:
            return codes
        m = self.maps[c]
        out = np.empty_like(codes)
        for f in range(self.card[c]):
            values = np.flatnonzero(m == f)
            rows = codes == f
            p = np.clip(weight[values], 0.0, None)
            p = p / p.sum() if p.sum() > 0 else None
            out[rows] = rng.choice(values, size=int(rows.sum()), p=p)
        return out


def column_map(card: int, closed: bool, rare: Iterable[int]) -> np.ndarray:
    """A column's release codes to fit codes (:class:`FitDomain`): the null cell (the last)
    left out where ``closed``, the ``rare`` codes merged into one last cell where there are
    two or more, the rest in their order."""
    out = np.full(card, -1, dtype=np.int64)
    dropped = {card - 1} if closed else set()
    merged = sorted(set(int(r) for r in rare) - dropped)
    if len(merged) < 2:
        merged = []
    kept = [k for k in range(card) if k not in dropped and k not in merged]
    out[kept] = np.arange(len(kept))
    out[merged] = len(kept)
    return out


def merge_maps(fit: FitDomain, cls: list[tuple[str, ...]]) -> list[np.ndarray | None] | None:
    """The oracle's ``merge`` for marginals over ``cls`` (None where none has merged cells)."""
    maps = [fit.merge_map(cl) for cl in cls]
    return None if all(m is None for m in maps) else maps


def _pick_forest(oracle, s: AimSchedule, model, rs: float, sigma: float,
                 fit: FitDomain) -> list[tuple[str, ...]]:  # fmt: skip
    """The spanning-forest round's ``s.tree`` picks (MST's tree selection, McKenna et al. 2021
    sec. 4, as Kruskal's algorithm with an exponential mechanism per edge): each among the
    pairs that join two components of the forest so far (the planned ones and those whose
    noise over the fit's cells is below ``NOISE_L1_LIMIT``), scored by their L1 error
    against ``model`` (the 1-way model) less their expected noise, as every AIM pick is.
    ``s.tree`` is the planned pairs' spanning-forest size, so every pick has a pool."""
    from dpql.synth.aim.graphical import model_marginals

    n = s.n
    # the planned pairs, and every other pair whose noise over the fit's (merged) cells the
    # forest's measurement would not swamp: the plan counts the edges on the declared cells,
    # and a larger pool still spans at least as many
    pairs = [*s.tree_pairs, *(
        cl for cl in s.candidates
        if len(cl) == 2 and cl not in s.tree_pairs
        and SQRT_2_OVER_PI * sigma * fit.cells(cl) < NOISE_L1_LIMIT
    )]  # fmt: skip
    synth = {cl: fit.as_measured(cl, m) / n
             for cl, m in zip(pairs, model_marginals(model, pairs), strict=True)}
    where = {c: i for i, c in enumerate(s.columns)}  # column -> its component's label
    cls: list[tuple[str, ...]] = []
    for j, r in enumerate(select_parts(rs, s.tree)):
        pool = [cl for cl in pairs if where[cl[0]] != where[cl[1]]]
        chosen = oracle.select(
            [Marginal(cl) for cl in pool], [synth[cl] for cl in pool], 1, r, phase=s.phase(0),
            label=f"spanning forest, edge {j + 1}/{s.tree}",
            penalty=[SQRT_2_OVER_PI * sigma * fit.cells(cl) for cl in pool],
            merge=merge_maps(fit, pool),
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
    synth = {cl: fit.as_measured(cl, m) / n
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
            merge=merge_maps(fit, pool),
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
    rare = {c: rare_cells(y, sigma0)
            for c, y in zip(s.columns, noisy, strict=True)} if options.compress else None
    fit = FitDomain(dom, s.columns, complete_columns(dom, measured), rare)
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
                            label=f"{s.phase(i)}: {cls}", merge=merge_maps(fit, cls))  # fmt: skip
        for cl, y in zip(cls, ys, strict=True):
            meas.append(LinearMeasurement(fit.fitted(cl, y) * n, cl, stddev=sigma * n))
            if not fit.merges(cl):  # post-processing reads answers over release cells
                measured.append(NoisyAnswer(Marginal(cl), y, sigma))
            picked.append(cl)
        last = i == len(s.rounds) - 1
        iters = options.final_iters if last and options.final_iters else options.iters
        if i == 0 and s.tree and not last:
            # the forest's model in closed form (a Bayesian network over it): no mirror
            # descent and no compile for a structure the next round's fit replaces
            pairs = {cl: fit.fitted(cl, y) for cl, y in zip(cls, ys, strict=True)}
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
    weight = dict(zip(s.columns, noisy, strict=True))
    if options.pool_rare:
        weight = {c: pool_rare(np.asarray(y, dtype=np.float64), sigma0) for c, y in weight.items()}
    for c in s.columns:
        code = fit.to_release(c, np.asarray(data[c], dtype=np.int32)[order], weight[c], rng)
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
        "merged_rare_cells": {c: int(fit.full[c] - fit.card[c] - (c in fit.closed) + 1)
                              for c in sorted(fit.merged)},
        "picks_per_round": [s.picks(i) for i in range(len(s.rounds))],
        "model_cliques": [list(c) for c in model.cliques],
        "fits": engines,
    }
    return SynthResult(table, info, tuple(measured))
