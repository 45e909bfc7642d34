"""RAP++: relaxed adaptive projection for mixed-type data (Vietri et al. 2022; `rap_pp.md`).

The program (Algorithm 2, with the decisions below) is post-processing of the oracle's outputs:
it never sees data, only noisy measurements and noisy selections from a
:class:`~dpql.plan.oracle.MeasurementOracle`.

1. **Init round.** Measure every 1-way marginal of the columns that appear in marginal
   workloads, and every count / moment in the workload, in one Gaussian release (the same
   warm start as AIM; 1-way marginals are in the downward closure of the workload).
2. **Adaptive rounds** (Algorithm 2 lines 4-9). Marginal rounds and threshold rounds (halfspaces
   and ranges) are interleaved. Each round spends half its budget on one-shot Gumbel top-K
   selection (Definition 9, scale from `rap_pp.md` §4.2 with the true L1 score sensitivity, not
   the code's) and half on Gaussian measurement of the K selected queries (Definition 8).
   Candidates are the unmeasured workload queries plus, for marginals, their 2-way subsets.
   The selection score is the L1 error minus the expected L1 error of measuring the query
   (a data-independent penalty, pitfall 8), so large noisy marginals are not over-selected.
3. **Projection** (Algorithm 1): Adam (optax) on the relaxed rows against *all* measurements so
   far (the paper's joint loss, not the code's per-class loss), each squared residual weighted by
   the inverse noise variance of its release; old measurements are never re-noised (pitfall 5).
   The sigmoid inverse temperature is annealed geometrically from ``sigma_start`` to
   ``sigma_max`` within each round (a fixed schedule instead of the code's plateau rule, so the
   whole round is one ``lax.scan``).
4. **Rounding** (§5.7): output rows are spread evenly over the relaxed rows; each draws every
   column independently from its row's distribution (a numeric column draws a bin, then takes
   the row's within-bin position). The rounding seed is not a DP seed and may be recorded.

Paper-vs-code decisions (`rap_pp.md` §5.6): measurements once (paper), Gumbel scale with the
true sensitivity (neither), sum-of-squares loss (paper), fixed geometric annealing (neither;
documented above), joint loss (paper), numeric relaxation by public bins + position (see
:mod:`dpql.synth.relaxed`), softmax parameterisation of the simplex (allowed by pitfall 2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn
from dpql.plan.ir import Count, Halfspace, Marginal, Moment, Prefix, Query
from dpql.plan.oracle import MeasurementOracle
from dpql.synth.relaxed import Layout, RowModel, block_gather_index, pad_class, padded_probs
from dpql.synth.schedule import (
    Progress,
    RapOptions,
    RapSchedule,
    _split,
    release_sigma,
)

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
    class_blocks: dict[int, tuple[int, ...]]  # padded size -> blocks of that class
    class_gather: dict[int, np.ndarray]
    halfspace_groups: tuple[tuple[tuple[str, ...], str], ...]
    prefix_groups: tuple[tuple[tuple[str, ...], str | None], ...]
    scalars: tuple[Query, ...]


def _statics(layout: Layout, thresholds: Sequence[Query], scalars: Sequence[Query]) -> _Statics:
    classes: dict[int, list[int]] = {}
    for b, s in enumerate(layout.sizes):
        classes.setdefault(pad_class(s), []).append(b)
    class_blocks = {k: tuple(v) for k, v in classes.items()}
    gathers = {k: block_gather_index(layout, v, k) for k, v in class_blocks.items()}
    hs = tuple(dict.fromkeys((q.columns, q.by) for q in thresholds if isinstance(q, Halfspace)))
    pf = tuple(dict.fromkeys((q.columns, q.by) for q in thresholds if isinstance(q, Prefix)))
    return _Statics(layout, class_blocks, gathers, hs, pf, tuple(scalars))


def _marginal_key(
    statics: _Statics, columns: tuple[str, ...]
) -> tuple[tuple[int, ...], list[int], list[int]]:
    """Bucket key (sorted padded sizes), axis permutation and per-axis class-local indices."""
    layout = statics.layout
    blocks = [layout.block(c) for c in columns]
    classes = [pad_class(layout.sizes[b]) for b in blocks]
    perm = sorted(range(len(blocks)), key=lambda i: (classes[i], i))
    key = tuple(classes[i] for i in perm)
    local = [statics.class_blocks[classes[i]].index(blocks[i]) for i in perm]
    return key, perm, local


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
    buckets: dict[tuple[int, ...], list[tuple[list[int], np.ndarray, float]]] = {}
    scalar_t = np.zeros(len(statics.scalars))
    scalar_w = np.zeros(len(statics.scalars))
    thr_index = {q: i for i, q in enumerate(thresholds)}
    thr_t = {i: None for i in range(len(thresholds))}
    thr_w = np.zeros(len(thresholds))
    for m in measured:
        q = m.query
        w = 1.0 / m.sigma**2
        if isinstance(q, Marginal):
            key, perm, local = _marginal_key(statics, q.columns)
            shape = [domain.card(c) for c in q.columns]
            target = np.transpose(m.answer.reshape(shape), perm)
            padded = np.zeros(key)
            padded[tuple(slice(0, s) for s in target.shape)] = target
            buckets.setdefault(key, []).append((local, padded, w))
        elif isinstance(q, Count | Moment):
            i = statics.scalars.index(q)
            scalar_t[i], scalar_w[i] = float(m.answer[0]), w
        else:
            i = thr_index[q]
            thr_t[i], thr_w[i] = m.answer, w
    marg = {}
    for key, items in buckets.items():
        cap = 1 << (len(items) - 1).bit_length()
        idx = np.zeros((cap, len(key)), dtype=np.int32)
        tgt = np.zeros((cap, *key), dtype=np.float32)
        wt = np.zeros(cap, dtype=np.float32)
        for i, (local, padded, w) in enumerate(items):
            idx[i], tgt[i], wt[i] = local, padded, w
        marg["x".join(map(str, key))] = (jnp.asarray(idx), jnp.asarray(tgt), jnp.asarray(wt))
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
        out.append({
            "theta": jnp.asarray([q.theta for q in qs], jnp.float32),
            "tau": jnp.asarray([q.tau for q in qs], jnp.float32),
        })
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


def _loss(params, data, sigma, statics: _Statics, thr_params: list[dict]):
    logits, positions = params
    rm = RowModel(statics.layout, logits, positions, sigma)
    n = logits.shape[0]
    probs = {k: padded_probs(logits, jnp.asarray(g)) for k, g in statics.class_gather.items()}
    total = 0.0
    letters = "abcdefgh"
    for key_s, (idx, tgt, wt) in data["marginals"].items():
        key = tuple(int(s) for s in key_s.split("x"))
        factors = [probs[s][idx[:, j]] for j, s in enumerate(key)]  # (cap, n, s)
        sub = ",".join(f"wr{letters[j]}" for j in range(len(key)))
        est = jnp.einsum(f"{sub}->w{letters[: len(key)]}", *factors) / n
        total = total + jnp.sum(wt * jnp.sum((est - tgt) ** 2, axis=tuple(range(1, len(key) + 1))))
    for ans, (tgt, wt) in zip(
        _threshold_answers(rm, statics, thr_params), data["groups"], strict=True
    ):
        total = total + jnp.sum(wt * jnp.sum((ans - tgt) ** 2, axis=1))
    if statics.scalars:
        est = jnp.stack([_scalar(rm, q) for q in statics.scalars]) / n
        tgt, wt = data["scalars"]
        total = total + jnp.sum(wt * (est - tgt) ** 2)
    return total


def _scalar(rm: RowModel, q: Query) -> jnp.ndarray:
    if isinstance(q, Count):
        return jnp.sum(rm.pred(q.predicate))
    assert isinstance(q, Moment)
    return jnp.sum(rm.moment(q.columns, q.given))


@dataclass
class _Fitter:
    statics: _Statics
    thresholds: tuple[Query, ...]
    options: RapOptions
    optimizer: optax.GradientTransformation = field(init=False)

    def __post_init__(self) -> None:
        self.optimizer = optax.adam(self.options.learning_rate)
        self.thr_params = _threshold_arrays(self.statics, self.thresholds)
        self._run = jax.jit(self._scan)

    def _scan(self, params, data, sigmas):
        opt_state = self.optimizer.init(params)

        def step(carry, sigma):
            params, opt_state = carry
            loss, grads = jax.value_and_grad(_loss)(
                params, data, sigma, self.statics, self.thr_params
            )
            updates, opt_state = self.optimizer.update(grads, opt_state)
            params = optax.apply_updates(params, updates)
            params = (params[0], jnp.clip(params[1], 0.0, 1.0))
            return (params, opt_state), loss

        (params, _), losses = jax.lax.scan(step, (params, opt_state), sigmas)
        return params, losses

    def fit(self, params, measured: Sequence[_Measured]):
        data = _build_data(self.statics, measured, self.thresholds)
        o = self.options
        sigmas = jnp.asarray(
            np.geomspace(o.sigma_start, o.sigma_max, o.iterations), dtype=jnp.float32
        )
        return self._run(params, data, sigmas)


# ------------------------------------------------------------------------------------------
# Answers of the current relaxed rows (for selection: post-processing of past measurements)


def relaxed_marginal(probs: Mapping[str, np.ndarray], columns: tuple[str, ...]) -> np.ndarray:
    """Expected marginal of the relaxed rows, flattened in row-major cell order."""
    letters = "abcdefgh"
    sub = ",".join(f"r{letters[j]}" for j in range(len(columns)))
    n = next(iter(probs.values())).shape[0]
    return np.einsum(f"{sub}->{letters[: len(columns)]}", *[probs[c] for c in columns]).ravel() / n


def _answers_of_rows(
    params, layout: Layout, statics: _Statics, thr_params, thresholds, sigma: float, queries
) -> dict[Query, np.ndarray]:
    """Answers of ``queries`` on the current relaxed rows (expected values; sharp ``sigma``)."""
    logits, positions = params
    probs = {
        c: np.asarray(jax.nn.softmax(logits[:, o : o + s], axis=1))
        for c, o, s in zip(layout.domain.names, layout.offsets, layout.sizes, strict=True)
    }
    out: dict[Query, np.ndarray] = {}
    for q in queries:
        if isinstance(q, Marginal):
            out[q] = relaxed_marginal(probs, q.columns)
    if any(isinstance(q, Halfspace | Prefix) for q in queries):
        rm = RowModel(layout, logits, positions, sigma)
        answers = _threshold_answers(rm, statics, thr_params)
        for idx, ans in zip(_group_members(statics, thresholds), answers, strict=True):
            for i, a in zip(idx, np.asarray(ans), strict=True):
                out[thresholds[i]] = a
    return {q: out[q] for q in queries if q in out}


# ------------------------------------------------------------------------------------------
# The program


@dataclass(frozen=True)
class RapResult:
    """The synthetic table (encoded) and fit diagnostics computed against noisy measurements."""

    table: EncodedTable
    measured: tuple[Query, ...]
    noisy: tuple[np.ndarray, ...]
    fit_loss: tuple[float, ...]
    rounds: int


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
    _, _, scalars = _split(schedule.init_queries)
    statics = _statics(layout, thresholds, scalars)
    fitter = _Fitter(statics, thresholds, options)
    key = jax.random.PRNGKey(seed)
    k1, k2 = jax.random.split(key)
    params = (
        0.01 * jax.random.normal(k1, (options.relaxed_rows, layout.width)),
        jax.random.uniform(k2, (options.relaxed_rows, max(len(layout.numeric), 1))),
    )
    measured: list[_Measured] = []
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
        noisy = oracle.measure(
            chosen,
            rnd.rho_measure,
            phase="rap.measure",
            label=f"round {t}: {len(chosen)} {rnd.kind} queries",
        )
        sigma = release_sigma(chosen, rnd.rho_measure, n)
        for q, a in zip(chosen, noisy, strict=True):
            measured.append(_Measured(q, np.clip(a, 0.0, 1.0), sigma))
            done.add(q)
        params, loss = fitter.fit(params, measured)
        losses.append(float(loss[-1]))
        if progress:
            progress("rap", t + 1, total)
    table = round_rows(layout, params, rows, seed)
    return RapResult(
        table,
        tuple(m.query for m in measured),
        tuple(m.answer for m in measured),
        tuple(losses),
        total,
    )


def round_rows(layout: Layout, params, rows: int, seed: int) -> EncodedTable:
    """Randomised rounding of the relaxed rows to ``rows`` records (`rap_pp.md` §5.7).

    Rows are spread evenly over the relaxed rows. Within one relaxed row's ``c`` copies, each
    column is drawn by *systematic* sampling from its distribution (the quantiles
    ``(k + U) / c``, as the authors' code rounds ``c * p`` to counts), then the copies of each
    column are shuffled independently, so columns stay independent within a row as in the
    product distribution while the row's marginals are matched up to 1/c.
    """
    logits, positions = (np.asarray(p, dtype=np.float64) for p in params)
    positions = np.clip(positions, 0.0, 1.0)
    rng = np.random.default_rng(seed)
    m = logits.shape[0]
    copies = np.full(m, rows // m)
    copies[rng.choice(m, rows % m, replace=False)] += 1
    owner = np.repeat(np.arange(m), copies)
    start = np.repeat(np.cumsum(copies) - copies, copies)
    rank = np.arange(rows) - start
    shift = rng.random(m)
    codes: dict[str, np.ndarray] = {}
    scaled: dict[str, np.ndarray] = {}
    for col, off, size in zip(layout.domain.names, layout.offsets, layout.sizes, strict=True):
        z = logits[:, off : off + size]
        p = np.exp(z - z.max(axis=1, keepdims=True))
        cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)[owner]
        shuffled = rank[np.lexsort((rng.random(rows), owner))]
        u = (shuffled + shift[owner]) / copies[owner]
        draw = np.minimum((cdf < u[:, None]).sum(axis=1), size - 1).astype(np.int32)
        column = layout.domain[col]
        if isinstance(column, CategoricalColumn):
            codes[col] = draw
            continue
        assert isinstance(column, NumericColumn)
        x = _value_in_bin(column, draw, positions[owner, layout.numeric_index(col)])
        scaled[col] = (x - column.lo) / column.span
        codes[col] = column.bin_of(x)
    order = rng.permutation(rows)
    return EncodedTable(
        layout.domain,
        {k: v[order] for k, v in codes.items()},
        {k: v[order] for k, v in scaled.items()},
    )


def _value_in_bin(column: NumericColumn, bins: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """A value in original units inside public bin ``bins`` at relative position ``pos``."""
    edges = np.asarray(column.edges)
    lo, hi = edges[bins], edges[bins + 1]
    if column.integer:
        first = np.ceil(lo)
        count = np.maximum(np.ceil(hi) - first, 1)
        x = first + np.minimum(np.floor(pos * count), count - 1)
    else:
        x = lo + pos * (hi - lo)
    return np.clip(x, column.lo, column.hi)
