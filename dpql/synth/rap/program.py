"""RAP++: relaxed adaptive projection for mixed-type data (Vietri et al. 2022).

The program (Algorithm 2, with the decisions below) is post-processing of the oracle's outputs:
it never sees data, only noisy measurements and noisy selections from a
:class:`~dpql.ir.oracle.MeasurementOracle`.

1. **Init round.** Measure every 1-way marginal of the columns that appear in marginal
   workloads, and every count / moment in the workload, in one Gaussian release (the same
   warm start as AIM; 1-way marginals are in the downward closure of the workload).
2. **Adaptive rounds** (Algorithm 2 lines 4-9). Marginal rounds and threshold rounds (halfspaces
   and ranges) are interleaved. Each round spends a share of its budget (``select_share``) on
   one-shot Gumbel top-K selection (Definition 9, scale from
   :func:`~dpql.privacy.mechanisms.gumbel_beta` with the L1 score's sensitivity 2/n) and the rest
   on Gaussian measurement of the K selected queries (Definition 8).
   Candidates are the unmeasured workload queries plus, for marginals, their 2-way subsets.
   The selection score is the L1 error minus the expected L1 error of measuring the query
   (a data-independent penalty, so post-processing), so large noisy marginals, whose error is
   mostly noise, are not over-selected.
3. **Projection** (Algorithm 1): Adam (optax) on the relaxed rows against *all* measurements so
   far (the paper's joint loss, not the code's per-class loss), each squared residual weighted by
   the inverse noise variance of its release; each query is measured once (Algorithm 2 keeps
   the answers of earlier rounds), since measuring it again would spend budget again.
   The sigmoid inverse temperature is annealed geometrically from ``sigma_start`` to
   ``sigma_max`` within each round (a fixed schedule instead of the code's plateau rule, so the
   whole round is one annealing pass). The first fit runs ``iterations`` steps from random
   rows, later fits ``warm_iterations`` steps from the previous round's rows.
4. **Rounding**: output rows are spread evenly over the relaxed rows; each draws every
   column independently from its row's distribution (a numeric column draws a bin, then takes
   the row's within-bin position). The rounding seed is not a DP seed and may be recorded.

Where the paper leaves a choice: measurements once (Algorithm 2), a Gumbel scale from the
score's sensitivity (Definition 9's printed scale is not), the sum-of-squares loss (§3),
fixed geometric annealing (documented above), the joint loss over all measurements (Algorithm
1), numeric relaxation by public bins + position (see :mod:`dpql.synth.rap.relaxed`), and a softmax
parameterisation of each categorical block, which keeps it on the simplex by construction.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from threadpoolctl import threadpool_limits

from dpql.answers import NoisyAnswer
from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn
from dpql.ir.oracle import MeasurementOracle
from dpql.ir.queries import Count, Halfspace, Marginal, Moment, Prefix, Query
from dpql.progress import Progress
from dpql.synth.base import RunContext, SynthPlan, SynthResult
from dpql.synth.nulls import complete_columns
from dpql.synth.rap.plan import (
    TILE,
    RapOptions,
    RapSchedule,
    capacity,
    release_sigma,
    split_queries,
)
from dpql.synth.rap.relaxed import Layout, RowModel, block_index, tile_starts, tiled_probs

# ------------------------------------------------------------------------------------------
# Measurements and the loss


@dataclass
class _Measured:
    """Noisy answers kept for the joint loss (never re-noised)."""

    query: Query
    answer: np.ndarray
    sigma: float


@dataclass(frozen=True)
class _Statics:
    """Static (trace-time) structure of the relaxed problem."""

    layout: Layout
    blocks: tuple[np.ndarray, ...]  # padded softmax groups, relaxed.block_index
    tile_start: tuple[int, ...]  # first tile of each block
    halfspace_groups: tuple[tuple[tuple[str, ...], str], ...]
    prefix_groups: tuple[tuple[tuple[str, ...], str | None], ...]
    scalars: tuple[Query, ...]


def _statics(layout: Layout, thresholds: Sequence[Query], scalars: Sequence[Query]) -> _Statics:
    hs = tuple(dict.fromkeys((q.columns, q.by) for q in thresholds if isinstance(q, Halfspace)))
    pf = tuple(dict.fromkeys((q.columns, q.by) for q in thresholds if isinstance(q, Prefix)))
    return _Statics(layout, block_index(layout), tile_starts(layout), hs, pf, tuple(scalars))


def _marginal_tiles(statics: _Statics, columns: tuple[str, ...], answer: np.ndarray):
    """A measured marginal cut into tiles: (tiles, k) tile ids and (tiles, TILE, ..., TILE)
    targets, zero-padded past each column's size."""
    layout = statics.layout
    sizes = [layout.domain.card(c) for c in columns]
    counts = [-(-s // TILE) for s in sizes]
    k = len(columns)
    padded = np.zeros([t * TILE for t in counts], dtype=np.float32)
    padded[tuple(slice(0, s) for s in sizes)] = answer.reshape(sizes)
    split = padded.reshape([x for t in counts for x in (t, TILE)])
    blocks = split.transpose([*range(0, 2 * k, 2), *range(1, 2 * k, 2)])
    targets = blocks.reshape(-1, *([TILE] * k))
    starts = [statics.tile_start[layout.block(c)] for c in columns]
    ids = np.stack([g.ravel() + s for g, s in zip(np.indices(counts), starts, strict=True)], axis=1)
    return ids.astype(np.int32), targets


def _group_members(statics: _Statics, thresholds: Sequence[Query]) -> list[list[int]]:
    """Indices into ``thresholds`` of each halfspace group, then each prefix group."""
    keyed = [(Halfspace, g) for g in statics.halfspace_groups]
    keyed += [(Prefix, g) for g in statics.prefix_groups]
    return [
        [i for i, q in enumerate(thresholds) if isinstance(q, kind) and (q.columns, q.by) == g]
        for kind, g in keyed
    ]


def _build_data(
    statics: _Statics, measured: Sequence[_Measured], thresholds: Sequence[Query]
) -> dict:
    """Arrays (targets, weights, indices) of every measurement, grouped for the jitted loss."""
    layout = statics.layout
    domain = layout.domain
    by_arity: dict[int, list[tuple[np.ndarray, np.ndarray, float]]] = {}
    scalar_t = np.zeros(len(statics.scalars))
    scalar_w = np.zeros(len(statics.scalars))
    thr_index = {q: i for i, q in enumerate(thresholds)}
    thr_t = {i: None for i in range(len(thresholds))}
    thr_w = np.zeros(len(thresholds))
    for m in measured:
        q = m.query
        w = 1.0 / m.sigma**2
        if isinstance(q, Marginal):
            ids, targets = _marginal_tiles(statics, q.columns, m.answer)
            by_arity.setdefault(len(q.columns), []).append((ids, targets, w))
        elif isinstance(q, Count | Moment):
            i = statics.scalars.index(q)
            scalar_t[i], scalar_w[i] = float(m.answer[0]), w
        else:
            i = thr_index[q]
            thr_t[i], thr_w[i] = m.answer, w
    marg = {}
    for k, items in sorted(by_arity.items()):
        ids = np.concatenate([i for i, _, _ in items])
        tgt = np.concatenate([t for _, t, _ in items])
        wt = np.concatenate([np.full(len(i), w, np.float32) for i, _, w in items])
        cap = capacity(len(ids))
        pad = cap - len(ids)  # empty slots: tile 0 with weight 0
        marg[str(k)] = (
            jnp.asarray(np.pad(ids, ((0, pad), (0, 0)))),
            jnp.asarray(np.pad(tgt, [(0, pad)] + [(0, 0)] * k)),
            jnp.asarray(np.pad(wt, (0, pad))),
        )
    groups = []
    keys = statics.halfspace_groups + statics.prefix_groups
    for (_, by), members in zip(keys, _group_members(statics, thresholds), strict=True):
        cells = domain.card(by) if by else 1
        t = np.zeros((len(members), cells), dtype=np.float32)
        for r, i in enumerate(members):
            if thr_t[i] is not None:
                t[r] = thr_t[i]
        groups.append((jnp.asarray(t), jnp.asarray(thr_w[members], dtype=jnp.float32)))
    return {
        "marginals": marg,
        "groups": groups,
        "scalars": (jnp.asarray(scalar_t, jnp.float32), jnp.asarray(scalar_w, jnp.float32)),
    }


def _threshold_arrays(statics: _Statics, thresholds: Sequence[Query]) -> list[dict]:
    """Static per-group parameters of halfspace / prefix families (theta, tau, thresholds)."""
    out = []
    members = _group_members(statics, thresholds)
    for idx in members[: len(statics.halfspace_groups)]:
        qs = [thresholds[i] for i in idx]
        out.append(
            {
                "theta": jnp.asarray([q.theta for q in qs], jnp.float32),
                "tau": jnp.asarray([q.tau for q in qs], jnp.float32),
            }
        )
    for idx in members[len(statics.halfspace_groups) :]:
        qs = [thresholds[i] for i in idx]
        out.append({"thresholds": jnp.asarray([q.thresholds for q in qs], jnp.float32)})
    return out


def _threshold_answers(rm: RowModel, statics: _Statics, params: list[dict]) -> list[jnp.ndarray]:
    """Relaxed answers (queries, cells) of each halfspace / prefix group."""
    out = []
    n = rm.logits.shape[0]
    groups = statics.halfspace_groups + statics.prefix_groups
    for (cols, by), p in zip(groups, params, strict=True):
        label = rm.probs(by) if by else jnp.ones((n, 1), rm.logits.dtype)
        if "theta" in p:
            mean = jnp.stack([rm.mean(c) for c in cols], axis=1)  # (n, r)
            hit = jax.nn.sigmoid(rm.sigma * (mean @ p["theta"].T - p["tau"][None, :]))
        else:
            hit = jnp.ones((n, p["thresholds"].shape[0]), rm.logits.dtype)
            for j, c in enumerate(cols):
                v = rm.bin_values(c)  # (n, bins)
                s = jax.nn.sigmoid(rm.sigma * (p["thresholds"][None, None, :, j] - v[:, :, None]))
                hit = hit * jnp.einsum("nb,nbq->nq", rm.probs(c), s)
        out.append(hit.T @ label / n)
    return out


def _marginals_loss(params, marginals: Mapping[str, tuple], statics: _Statics):
    """Weighted squared error of the measured marginals, one batch of tiles per arity.

    ``marginals`` maps the arity ``k`` (as a string) to ``(ids, tgt, wt)``: ``ids`` (cap, k)
    are each tile's per-axis tile ids, ``tgt`` (cap, TILE, ..., TILE) its noisy cells, ``wt``
    the inverse noise variance (0 for empty slots). The estimate is Definition 10's mean of
    outer products over the relaxed rows, evaluated tile by tile; padding cells are 0 on both
    sides, so the sum over tiles is exactly the sum over the marginal's cells.
    """
    logits = params[0]
    n = logits.shape[0]
    probs = tiled_probs(logits, statics.blocks)  # (tiles, n, TILE)
    letters = "abcdefgh"
    total = 0.0
    for k_s, (ids, tgt, wt) in marginals.items():
        k = int(k_s)
        factors = [probs[ids[:, j]] for j in range(k)]  # (cap, n, TILE)
        sub = ",".join(f"wr{letters[j]}" for j in range(k))
        est = jnp.einsum(f"{sub}->w{letters[:k]}", *factors) / n
        err = jnp.sum((est - tgt) ** 2, axis=tuple(range(1, k + 1)))
        total = total + jnp.sum(wt * err)
    return total


def _rest_loss(params, groups, scalars, sigma, statics: _Statics, thr_params: list[dict]):
    """Weighted squared error of the threshold families and the scalar (count, moment) queries
    at sigmoid inverse temperature ``sigma``; unmeasured queries have weight 0."""
    logits, positions = params
    rm = RowModel(statics.layout, logits, positions, sigma)
    n = logits.shape[0]
    total = 0.0
    for ans, (tgt, wt) in zip(_threshold_answers(rm, statics, thr_params), groups, strict=True):
        total = total + jnp.sum(wt * jnp.sum((ans - tgt) ** 2, axis=1))
    if statics.scalars:
        est = jnp.stack([_scalar(rm, q) for q in statics.scalars]) / n
        tgt, wt = scalars
        total = total + jnp.sum(wt * (est - tgt) ** 2)
    return total


def _scalar(rm: RowModel, q: Query) -> jnp.ndarray:
    if isinstance(q, Count):
        return jnp.sum(rm.pred(q.predicate))
    assert isinstance(q, Moment)
    return jnp.sum(rm.moment(q.columns, q.given))


@dataclass
class _Fitter:
    """Adam (optax) on the joint loss of all measurements so far (Algorithm 1).

    One optimisation step is two jitted calls: the threshold and scalar term (every candidate
    present, unmeasured ones with weight 0, so its shapes never change and it compiles once),
    then the marginal term fused with the Adam update. Marginals are cut into equal tiles (one
    tensor shape per arity, capacity doubling), so the marginal step recompiles only when the
    measured tiles double, never per round, and never the sigmoid-heavy threshold term.

    The loop over steps runs in Python (two dispatches per step, asynchronous) rather than in a
    ``lax.scan``: a scan would fuse both terms into one program that recompiles whole whenever a
    round adds marginals, which cost more than the whole optimisation on the Adult workload.
    """

    statics: _Statics
    thresholds: tuple[Query, ...]
    options: RapOptions
    optimizer: optax.GradientTransformation = field(init=False)

    def __post_init__(self) -> None:
        self.optimizer = optax.adam(self.options.learning_rate)
        self.thr_params = _threshold_arrays(self.statics, self.thresholds)
        s = self.statics
        self._rest = jax.jit(
            jax.value_and_grad(partial(_rest_loss, statics=s, thr_params=self.thr_params))
        )
        # Until a threshold query is measured its term is identically 0: skip its sigmoids.
        scalars_only = dataclasses.replace(s, halfspace_groups=(), prefix_groups=())
        self._scalars = jax.jit(
            jax.value_and_grad(partial(_rest_loss, statics=scalars_only, thr_params=[]))
        )
        self._step = jax.jit(self._marginal_step)
        self._init = jax.jit(self.optimizer.init)

    def _marginal_step(self, params, opt_state, rest_loss, rest_grad, marginals, closed):
        loss, grad = jax.value_and_grad(_marginals_loss)(params, marginals, self.statics)
        grad = jax.tree_util.tree_map(jnp.add, grad, rest_grad)
        updates, opt_state = self.optimizer.update(grad, opt_state)
        params = optax.apply_updates(params, updates)
        logits = jnp.where(closed, CLOSED_LOGIT, params[0])
        return (logits, jnp.clip(params[1], 0.0, 1.0)), opt_state, loss + rest_loss

    def fit(self, params, measured: Sequence[_Measured], iterations: int, closed):
        """``iterations`` Adam steps from ``params``, the logits where ``closed`` (a (width,)
        bool mask) held at :data:`CLOSED_LOGIT`; returns (params, final loss)."""
        data = _build_data(self.statics, measured, self.thresholds)
        o = self.options
        sigmas = np.geomspace(o.sigma_start, o.sigma_max, iterations).astype(np.float32)
        thresholds = set(self.thresholds)
        if any(m.query in thresholds for m in measured):
            rest, groups = self._rest, data["groups"]
        else:
            rest, groups = (self._scalars if self.statics.scalars else None), []
        opt_state = self._init(params)
        rest_loss = jnp.zeros((), jnp.float32)
        rest_grad = jax.tree_util.tree_map(jnp.zeros_like, params)
        loss = jnp.zeros((), jnp.float32)
        for sigma in sigmas:
            if rest is not None:
                rest_loss, rest_grad = rest(params, groups, data["scalars"], sigma)
            params, opt_state, loss = self._step(
                params, opt_state, rest_loss, rest_grad, data["marginals"], closed
            )
        return params, loss


# ------------------------------------------------------------------------------------------
# Answers of the current relaxed rows (for selection: post-processing of past measurements)


def column_probs(layout: Layout, logits, dtype=np.float64) -> dict[str, np.ndarray]:
    """Each column's value (or bin) probabilities per relaxed row: the softmax of its block."""
    z = np.asarray(logits, dtype=dtype)
    out = {}
    for c, o, s in zip(layout.domain.names, layout.offsets, layout.sizes, strict=True):
        e = np.exp(z[:, o : o + s] - z[:, o : o + s].max(axis=1, keepdims=True))
        out[c] = e / e.sum(axis=1, keepdims=True)
    return out


def relaxed_marginals(
    probs: Mapping[str, np.ndarray], marginals: Sequence[tuple[str, ...]]
) -> dict[tuple[str, ...], np.ndarray]:
    """Expected marginals of the relaxed rows (Definition 10), flattened in row-major order.

    Marginals sharing all but their last column share one Khatri-Rao (row-wise outer) product
    of the leading columns' probabilities, multiplied by the stacked last columns in one matrix
    product: ``n * cells`` multiply-adds in BLAS, no dense query matrix.
    """
    n = next(iter(probs.values())).shape[0]
    groups: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for cols in dict.fromkeys(marginals):
        groups.setdefault(cols[:-1], []).append(cols)
    # Many small products: a multi-threaded BLAS spends more time waking threads (and fighting
    # XLA's) than multiplying; one thread was 10x faster on the Adult workload.
    with threadpool_limits(1, user_api="blas"):
        return _relaxed_marginals(probs, groups, n)


def _relaxed_marginals(
    probs: Mapping[str, np.ndarray], groups: Mapping[tuple[str, ...], list[tuple[str, ...]]], n: int
) -> dict[tuple[str, ...], np.ndarray]:
    out: dict[tuple[str, ...], np.ndarray] = {}
    for lead, members in groups.items():
        left = np.ones((n, 1), dtype=np.float32)
        for c in lead:
            left = (left[:, :, None] * probs[c][:, None, :]).reshape(n, -1)
        lasts = [probs[m[-1]] for m in members]
        prod = (left.T @ np.concatenate(lasts, axis=1)) / n
        offset = 0
        for m, last in zip(members, lasts, strict=True):
            out[m] = prod[:, offset : offset + last.shape[1]].ravel()
            offset += last.shape[1]
    return out


def _answers_of_rows(
    params, layout: Layout, statics: _Statics, thr_params, thresholds, sigma: float, queries
) -> dict[Query, np.ndarray]:
    """Answers of ``queries`` on the current relaxed rows (expected values; sharp ``sigma``)."""
    logits, positions = params
    probs = column_probs(layout, logits, np.float32)  # float32: selection only ranks errors
    marginals = [q for q in queries if isinstance(q, Marginal)]
    answers = relaxed_marginals(probs, [q.columns for q in marginals])
    out: dict[Query, np.ndarray] = {q: answers[q.columns] for q in marginals}
    if any(isinstance(q, Halfspace | Prefix) for q in queries):
        rm = RowModel(layout, logits, positions, sigma)
        answers = _threshold_answers(rm, statics, thr_params)
        for idx, ans in zip(_group_members(statics, thresholds), answers, strict=True):
            for i, a in zip(idx, np.asarray(ans), strict=True):
                out[thresholds[i]] = a
    return {q: out[q] for q in queries if q in out}


# ------------------------------------------------------------------------------------------
# The program

# A closed cell's logit: its softmax probability is about exp(-30) ~ 1e-13, below what a
# float32 sum of the fit resolves, and it stays finite, so gradients through the softmax do too.
CLOSED_LOGIT = -30.0


def _closed_nulls(layout: Layout, answers: Sequence[NoisyAnswer]) -> jnp.ndarray:
    """The (width,) mask of the null cells of the columns whose noisy 1-way answers cannot tell
    their null share from zero (``dpql.synth.nulls.complete_columns``): post-processing of the
    init round's DP answers, so the rest of the fit keeps no mass on empty cells that the
    noise alone would give them."""
    mask = np.zeros(layout.width, bool)
    for name in complete_columns(layout.domain, answers):
        mask[layout.offsets[layout.block(name)] + layout.domain[name].null_code] = True
    return jnp.asarray(mask)


@dataclass(frozen=True)
class RapResult:
    """The synthetic table (encoded) and fit diagnostics computed against noisy measurements."""

    table: EncodedTable
    measured: tuple[Query, ...]
    noisy: tuple[np.ndarray, ...]
    fit_loss: tuple[float, ...]
    rounds: int
    sigma: tuple[float, ...] = ()  # each measured query's noise sd (aligned with ``measured``)
    #: per round that measured: the indices of its queries in its round kind's pool (init
    #: queries, marginal or threshold candidates of the schedule); post-processing of the
    #: selections, public
    selected: tuple[tuple[int, ...], ...] = ()


def run_rap(
    oracle: MeasurementOracle,
    domain: Domain,
    workload: Sequence[Query],
    schedule: RapSchedule,
    options: RapOptions,
    rows: int,
    seed: int,
    progress: Progress | None = None,
) -> RapResult:
    """Run the schedule against the oracle and round to ``rows`` records (Algorithm 2)."""
    layout = Layout.of(domain)
    n = oracle.n
    thresholds = schedule.threshold_candidates
    _, _, scalars = split_queries(schedule.init_queries)
    statics = _statics(layout, thresholds, scalars)
    fitter = _Fitter(statics, thresholds, options)
    rng = np.random.default_rng(seed)  # optimisation randomness, not DP noise
    params = (
        jnp.asarray(0.01 * rng.standard_normal((options.relaxed_rows, layout.width)), jnp.float32),
        jnp.asarray(rng.random((options.relaxed_rows, max(len(layout.numeric), 1))), jnp.float32),
    )
    measured: list[_Measured] = []
    unclipped: list[np.ndarray] = []
    closed = jnp.zeros(layout.width, bool)
    selected: list[tuple[int, ...]] = []
    done: set[Query] = set()
    losses: list[float] = []
    total = len(schedule.rounds)
    for t, rnd in enumerate(schedule.rounds):
        if rnd.kind == "init":
            chosen = list(schedule.init_queries)
        else:
            pool = schedule.marginal_candidates if rnd.kind == "marginal" else thresholds
            cands = [q for q in pool if q not in done]
            if not cands:
                continue
            synth = _answers_of_rows(
                params, layout, statics, fitter.thr_params, thresholds, options.sigma_max, cands
            )
            sigma_meas = release_sigma([cands[0]] * rnd.k, rnd.rho_measure, n)
            penalty = [math.sqrt(2 / math.pi) * sigma_meas * q.cells(domain) for q in cands]
            picked = oracle.select(
                cands,
                [synth[q] for q in cands],
                rnd.k,
                rnd.rho_select,
                phase="rap.select",
                label=f"round {t}: top-{rnd.k} {rnd.kind} queries",
                penalty=penalty,
            )
            chosen = [cands[i] for i in picked]
            selected.append(tuple(pool.index(q) for q in chosen))
        noisy = oracle.measure(
            chosen,
            rnd.rho_measure,
            phase="rap.measure",
            label=f"round {t}: {len(chosen)} {rnd.kind} queries",
        )
        sigma = release_sigma(chosen, rnd.rho_measure, n)
        for q, a in zip(chosen, noisy, strict=True):
            # the fit reads the answer clipped to [0, 1] (a share); downstream inference (the
            # null-share rule, post-processing's workload term) reads the unbiased noisy one
            measured.append(_Measured(q, np.clip(a, 0.0, 1.0), sigma))
            unclipped.append(np.asarray(a, dtype=np.float64))
            done.add(q)
        if rnd.kind == "init":
            init = [NoisyAnswer(q, a, sigma) for q, a in zip(chosen, noisy, strict=True)]
            closed = _closed_nulls(layout, init)
            params = (jnp.where(closed, CLOSED_LOGIT, params[0]), params[1])
        # The first fit starts from noise; later ones are warm-started from the last rows.
        steps = options.warm_iterations if losses else options.iterations
        params, loss = fitter.fit(params, measured, steps, closed)
        losses.append(float(loss))
        if progress:
            progress("rap", t + 1, total)
    table = round_rows(layout, params, rows, seed)
    return RapResult(
        table,
        tuple(m.query for m in measured),
        tuple(unclipped),
        tuple(losses),
        total,
        tuple(float(m.sigma) for m in measured),
        tuple(selected),
    )


def round_rows(layout: Layout, params, rows: int, seed: int) -> EncodedTable:
    """Randomised rounding of the relaxed rows to ``rows`` records (the release is a table of
    the domain's records, not the relaxed rows the paper evaluates).

    Rows are spread evenly over the relaxed rows. Within one relaxed row's ``c`` copies, each
    column is drawn by *systematic* sampling from its distribution (the quantiles
    ``(k + U) / c``, as the authors' code rounds ``c * p`` to counts), then the copies of each
    column are shuffled independently, so columns stay independent within a row as in the
    product distribution while the row's marginals are matched up to 1/c: every value gets
    ``floor(c p)`` or ``ceil(c p)`` copies, ``c p`` in expectation.

    The shift ``U`` is drawn per relaxed row *and column*: one shift shared by all columns
    would draw every column of a row at the same quantile whenever ``c = 1``, coupling the
    columns through their declared value order.
    """
    probs = column_probs(layout, params[0])
    positions = np.clip(np.asarray(params[1], dtype=np.float64), 0.0, 1.0)
    rng = np.random.default_rng(seed)
    m = positions.shape[0]
    copies = np.full(m, rows // m)
    copies[rng.choice(m, rows % m, replace=False)] += 1
    owner = np.repeat(np.arange(m), copies)
    start = np.repeat(np.cumsum(copies) - copies, copies)
    rank = np.arange(rows) - start
    codes: dict[str, np.ndarray] = {}
    scaled: dict[str, np.ndarray] = {}
    for col, size in zip(layout.domain.names, layout.sizes, strict=True):
        cdf = np.cumsum(probs[col], axis=1)[owner]
        shuffled = rank[np.lexsort((rng.random(rows), owner))]
        shift = rng.random(m)  # per column: independent columns within a relaxed row
        u = (shuffled + shift[owner]) / copies[owner]
        draw = np.minimum((cdf < u[:, None]).sum(axis=1), size - 1).astype(np.int32)
        column = layout.domain[col]
        if isinstance(column, CategoricalColumn):
            codes[col] = draw
            continue
        assert isinstance(column, NumericColumn)
        # the null code is drawn only where the column is nullable (missing: keep)
        codes[col], scaled[col] = column.decode_bins(
            draw, positions[owner, layout.numeric_index(col)]
        )
    return EncodedTable(layout.domain, codes, scaled).take(rng.permutation(rows))


def run(plan: SynthPlan, ctx: RunContext) -> SynthResult:
    """The backend's run: :func:`run_rap` on the plan's schedule, with the record's section."""
    from dpql.ir.exact import answer_all
    from dpql.synth.jax_cache import enable_compilation_cache

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
        err = np.concatenate([np.abs(a - m) for a, m in zip(answers, res.noisy, strict=True)])
        info["mean_abs_error_vs_noisy"] = float(err.mean())
        info["max_abs_error_vs_noisy"] = float(err.max())
    sigmas = res.sigma or (float("nan"),) * len(res.measured)
    measurements = tuple(
        NoisyAnswer(q, y, s) for q, y, s in zip(res.measured, res.noisy, sigmas, strict=True)
    )
    return SynthResult(res.table, info, measurements)
