"""Graphical models of ``mbi`` 2.x, used by the ``aim`` backend without mbi's eager JAX work.

On a small machine most of an AIM release's time goes to XLA compiling small programs, not to
computing (the measurements are in ``benchmarks/suite``). mbi compiles
one fused program per clique structure for its mirror-descent steps (unavoidable, and the work
that matters) but also, eagerly and per new array shape, every operation of its initial state,
warm-start expansion, model projections and row sampling. Those are tiny computations; here
they are numpy:

* :class:`QuickStartMirrorDescent` is mbi's ``MirrorDescent`` (Algorithm 1 of McKenna et al.
  2019, Armijo steps) with an initial state built on the host: warm-start potentials expanded
  in numpy (:func:`expand_potentials`), and placeholder marginals and loss of the right shapes
  (the first step recomputes both; neither is read before). Its final model's marginals are the
  last step's (one step behind its potentials), which nothing here reads: every marginal is
  :func:`model_marginal` of the potentials.
* :func:`model_marginal` is any marginal of the model from its calibrated junction tree in
  numpy (:mod:`dpql.synth.aim.inference`; mbi's ``variable_elimination`` compiles per
  (model, clique) pair).
* :func:`sample_rows` is mbi's ``synthetic_data(method="round")`` (the columns in reverse
  elimination order, each drawn by systematic sampling within the groups of its already drawn
  parents, so every column's counts are its conditional's rounded expected counts) with the
  marginals from :func:`model_marginal` and randomness from the caller's generator.
* :func:`balance_rows` then swaps values within columns so that the rows' workload marginals
  come closer to the model's expected counts: an ``n``-row sample carries sampling noise in
  every marginal the sampler does not round, which on small tables is most of the error.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Sequence
from types import ModuleType

import numpy as np

#: What ``import mbi`` warns about JAX's configuration (float32, the persistent compilation
#: cache): advice for mbi's own experiment sweeps, about settings dpql chooses on purpose.
_MBI_IMPORT_WARNINGS = (
    r"JAX is running in float32 mode",
    r"JAX persistent compilation cache is enabled",
)


def import_mbi() -> ModuleType:
    """``mbi``, imported without its two configuration warnings (every other warning, and
    every warning outside this import, is left as it is). Call it before any ``from mbi
    import``: the module's warnings are issued once, on its first import."""
    with warnings.catch_warnings():
        for message in _MBI_IMPORT_WARNINGS:
            warnings.filterwarnings("ignore", message, UserWarning, r"mbi(\.|$)")
        import mbi
    return mbi


class IndependentModel:
    """The model of 1-way measurements only (what mirror descent would converge to): the
    product of the clipped, normalised noisy 1-way marginals."""

    def __init__(self, probs: dict[str, np.ndarray], n: int):
        self.p = {c: (v / v.sum() if v.sum() > 0 else np.full(v.size, 1 / v.size))
                  for c, v in probs.items()}  # fmt: skip
        self.cliques = [(c,) for c in probs]
        self.n = n

    def marginal(self, cl: tuple[str, ...]) -> np.ndarray:
        out = np.ones(1)
        for c in cl:
            out = np.multiply.outer(out, self.p[c]).ravel()
        return out * self.n


def tree_model(domain, one_way: dict[str, np.ndarray], pairs: dict[tuple[str, str], np.ndarray],
               n: int):
    """The model of a spanning forest's measurements without mirror descent (no XLA compile):
    a Bayesian network over the forest, each component rooted at its first column, the root's
    distribution its clipped, normalised noisy 1-way marginal and each other column's its
    conditional given its parent from the clipped noisy pair marginal (where a parent value's
    row is empty, the column's 1-way marginal). An mbi ``MarkovRandomField`` whose log-potentials
    live on the pairs (and on the columns no pair touches), so it serves selection, warm starts
    and sampling like a fitted model. Post-processing of the noisy answers only."""
    import jax.numpy as jnp
    from mbi import CliqueVector, Factor
    from mbi.markov_random_field import MarkovRandomField

    def dist(v: np.ndarray) -> np.ndarray:
        v = np.clip(np.asarray(v, dtype=np.float64), 0, None)
        return v / v.sum() if v.sum() > 0 else np.full(v.size, 1.0 / v.size)

    card = dict(zip(domain.attributes, domain.shape, strict=True))
    nbrs: dict[str, list[tuple[str, str]]] = {c: [] for c in domain.attributes}
    for a, b in pairs:
        nbrs[a].append((a, b))
        nbrs[b].append((a, b))
    tables: dict[tuple[str, ...], np.ndarray] = {}
    seen: set[str] = set()
    for root in domain.attributes:
        if root in seen:
            continue
        seen.add(root)
        log_root = np.log(np.maximum(dist(one_way[root]), 1e-300))
        if not nbrs[root]:
            tables[(root,)] = log_root
            continue
        stack, first = [root], True
        while stack:
            parent = stack.pop()
            for pair in nbrs[parent]:
                child = pair[1] if pair[0] == parent else pair[0]
                if child in seen:
                    continue
                seen.add(child)
                stack.append(child)
                joint = np.clip(np.asarray(pairs[pair], dtype=np.float64), 0, None)
                joint = joint.reshape(card[pair[0]], card[pair[1]])
                flip = pair[0] != parent
                if flip:
                    joint = joint.T  # rows: the parent's values
                rows = joint.sum(axis=1, keepdims=True)
                cond = np.where(rows > 0, joint / np.where(rows > 0, rows, 1.0),
                                dist(one_way[child])[None, :])  # fmt: skip
                logp = np.log(np.maximum(cond, 1e-300))
                if first:  # the root's distribution rides on its first edge
                    logp = logp + log_root[:, None]
                    first = False
                tables[pair] = logp.T if flip else logp  # in the pair's own column order
    dtype = jnp.result_type(float)
    cliques = list(tables)
    factors = {cl: Factor(domain.project(cl), jnp.asarray(v, dtype=dtype))
               for cl, v in tables.items()}  # fmt: skip
    potentials = CliqueVector(domain, cliques, factors)
    return MarkovRandomField(potentials=potentials, marginals=None, total=float(n))


def model_marginal(model, cl: tuple[str, ...]) -> np.ndarray:
    """The model's marginal on ``cl`` in counts (row-major over ``cl``, like
    ``Factor.datavector``); :func:`model_marginals` for one clique."""
    return model_marginals(model, [cl])[0]


def model_marginals(model, cls: Sequence[tuple[str, ...]]) -> list[np.ndarray]:
    """The model's marginals on each of ``cls`` in counts (row-major over each clique, like
    ``Factor.datavector``): one calibration of the model's junction tree for all of ``cls``,
    then each marginal from the smallest part of the tree that covers it
    (:class:`dpql.synth.aim.inference.CalibratedTree`). Unlike mbi's ``variable_elimination``
    it compiles nothing per (model, clique) pair."""
    if isinstance(model, IndependentModel):
        return [model.marginal(cl) for cl in cls]
    from dpql.synth.aim.inference import CalibratedTree

    tree = CalibratedTree(model)
    return [tree.marginal(cl) for cl in cls]


def aligned(attrs: tuple[str, ...], arr: np.ndarray, union: tuple[str, ...]) -> np.ndarray:
    """``arr`` over ``attrs`` as a broadcastable array over ``union`` (size-1 axes elsewhere)."""
    ours = [a for a in union if a in attrs]
    arr = np.transpose(arr, [attrs.index(a) for a in ours])
    return arr.reshape([arr.shape[ours.index(a)] if a in attrs else 1 for a in union])


def expand_potentials(warm, domain, cliques: Sequence[tuple[str, ...]]):
    """``warm``'s potentials re-expressed over ``cliques`` (each old clique added into the
    smallest new clique containing it; zeros without ``warm``): the same distribution, as
    mbi's ``CliqueVector.expand``, in numpy."""
    import jax.numpy as jnp

    import_mbi()
    from mbi import CliqueVector, Factor
    from mbi.clique_utils import reverse_clique_mapping

    cliques = [tuple(c) for c in cliques]
    tables: dict[tuple[str, ...], np.ndarray] = {
        cl: np.zeros(domain.project(cl).shape) for cl in cliques
    }
    if warm is not None:
        old = warm.potentials
        mapping = reverse_clique_mapping(cliques, old.cliques, domain=domain)
        for cl, subs in mapping.items():
            for sub in subs:
                v = np.asarray(old[sub].values, dtype=np.float64)
                tables[cl] = tables[cl] + aligned(tuple(sub), v, cl)
    dtype = jnp.result_type(float)
    return CliqueVector(
        domain, cliques,
        {cl: Factor(domain.project(cl), jnp.asarray(v, dtype=dtype)) for cl, v in tables.items()},
    )  # fmt: skip


@functools.cache
def _quick_start_class() -> type:
    """Defined lazily: ``plan`` imports neither mbi nor JAX."""
    import jax
    import jax.numpy as jnp

    import_mbi()
    from mbi.estimation import MirrorDescent, MirrorDescentState
    from mbi.markov_random_field import MarkovRandomField

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class QuickStartMirrorDescent(MirrorDescent):
        """mbi's MirrorDescent with a host-built initial state and final model, and the
        marginals carried from step to step (module doc)."""

        def _init(self, domain, loss_fn, known_total, *, warm_start=None, constraints=()):
            from dpql.synth.aim.hostfit import HostProgram

            potentials = expand_potentials(warm_start, domain, loss_fn.cliques)
            # the starting marginals by message passing on the host (no compile of the oracle)
            program = HostProgram(domain, list(loss_fn.data))
            mu = program.clique_vector(
                program.marginals(program.to_host(potentials), float(known_total))
            )
            loss = jax.eval_shape(loss_fn, mu)  # shape only: every step computes its own
            alpha = 2.0 / (loss_fn.lipschitz * known_total)
            return MirrorDescentState(mu, potentials, alpha,
                                      jnp.asarray(np.zeros(loss.shape, loss.dtype)))  # fmt: skip

        def _step(self, state, loss_fn, known_total, constraints=()):
            """mbi's Armijo step, with ``state.mu`` the marginals of ``state.potentials``:
            a taken step carries its trial marginals, a refused one keeps them, so each step
            passes messages once (mbi's passes twice, the first recomputing ``state.mu``)."""
            if self.stepsize is not None:
                return super()._step(state, loss_fn, known_total, constraints)
            oracle = self._oracle(loss_fn.cliques, state.potentials.domain,
                                  constraints=constraints)  # fmt: skip
            mu = state.mu
            loss, grad = jax.value_and_grad(loss_fn)(mu)
            theta2 = state.potentials - state.alpha * grad
            mu2 = oracle(theta2, known_total)
            loss2 = loss_fn(mu2)
            ok = loss - loss2 >= 0.5 * state.alpha * grad.dot(mu - mu2)
            alpha = jax.lax.select(ok, 1.01 * state.alpha, 0.5 * state.alpha)
            potentials, mu = jax.lax.cond(ok, lambda: (theta2, mu2),
                                          lambda: (state.potentials, mu))  # fmt: skip
            return MirrorDescentState(mu, potentials, alpha, jax.lax.select(ok, loss2, loss))

        def _finalize(self, state, known_total, constraints=()):
            return MarkovRandomField(potentials=state.potentials, marginals=state.mu,
                                     total=known_total, constraints=constraints)  # fmt: skip

    return QuickStartMirrorDescent


def quick_start_mirror_descent():
    """A ``QuickStartMirrorDescent`` estimator (the class is built on first use)."""
    return _quick_start_class()()


def sample_rows(model, rows: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``rows`` records from ``model`` as codes per attribute: mbi's ``synthetic_data`` with
    randomized rounding (module doc). Each column's conditional comes from the model marginal
    of the column and its drawn neighbours in the junction tree."""
    if isinstance(model, IndependentModel):
        card = {c: p.size for c, p in model.p.items()}
        cliques = [set(c) for c in model.cliques]
        order = [c[0] for c in model.cliques]
        marginal = model.marginal
    else:
        from dpql.synth.aim.inference import CalibratedTree

        tree = CalibratedTree(model)
        card = tree.card
        cliques = [set(cl) for cl in tree.nodes]
        order = tree.elimination[::-1]
        marginal = tree.marginal
    parents_of = {
        col: tuple(a for a in order[:i] if any(col in cl and a in cl for cl in cliques))
        for i, col in enumerate(order)
    }
    margs = [marginal((*parents_of[col], col)) for col in order]
    data: dict[str, np.ndarray] = {}
    for col, marg in zip(order, margs, strict=True):
        size = card[col]
        parents = parents_of[col]
        marg = marg.reshape([card[a] for a in parents] + [size])
        if not parents:
            data[col] = _round_counts(marg, rows, rng)
            continue
        cond = marg / np.maximum(marg.sum(axis=-1, keepdims=True), 1e-300)
        cdf = np.cumsum(cond.reshape(-1, size), axis=-1)
        group = np.ravel_multi_index(tuple(data[a] for a in parents),
                                     [card[a] for a in parents])  # fmt: skip
        # systematic sampling within each parent group, in a random order: the k-th of the
        # group's m rows takes quantile (k + u) / m of the group's conditional
        perm = rng.permutation(rows)
        perm = perm[np.argsort(group[perm], kind="stable")]
        g = group[perm]
        starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
        counts = np.diff(np.r_[starts, rows])
        rank = np.arange(rows) - np.repeat(starts, counts)
        u = (rank + rng.random(rows)) / np.repeat(counts, counts)
        # one searchsorted over all groups' cdfs, each shifted by 2 x its group index
        shift = 2.0 * np.arange(cdf.shape[0])
        choice = np.searchsorted((cdf + shift[:, None]).ravel(), u + shift[g], side="right")
        choice = choice - g * size
        out = np.empty(rows, dtype=np.int64)
        out[perm] = np.minimum(choice, size - 1)
        data[col] = out
    return data


def _round_counts(marg: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` codes whose counts are ``marg``'s expected counts, randomly rounded (mbi's
    ``synthetic_col``): floors, plus one for ``rows - sum(floors)`` codes drawn without
    replacement in proportion to the fractional parts, shuffled."""
    counts = np.asarray(marg, dtype=np.float64).ravel()
    counts = (
        counts * (rows / counts.sum())
        if counts.sum() > 0
        else np.full(counts.size, rows / counts.size)
    )
    frac, whole = np.modf(counts)
    whole = whole.astype(np.int64)
    extra = rows - int(whole.sum())
    if extra > 0:
        idx = rng.choice(counts.size, extra, replace=False, p=frac / frac.sum())
        whole[idx] += 1
    return rng.permutation(np.repeat(np.arange(counts.size), whole))


def _counts(data: dict[str, np.ndarray], cl: tuple[str, ...], card: dict[str, int]) -> np.ndarray:
    """The rows' marginal on ``cl`` in counts, row-major over ``cl``."""
    shape = [card[c] for c in cl]
    idx = np.ravel_multi_index(tuple(data[c] for c in cl), shape)
    return np.bincount(idx, minlength=math.prod(shape))


def marginal_l1(data: dict[str, np.ndarray], targets: Sequence[tuple[tuple[str, ...], np.ndarray]],
                card: dict[str, int]) -> float:  # fmt: skip
    """``sum_t ||counts_t(data) - target_t||_1`` over the targets (row-major over their
    columns): the objective :func:`balance_rows` lowers."""
    return sum(float(np.abs(_counts(data, cl, card) - t).sum()) for cl, t in targets)


#: the default work of :func:`balance_rows`: swap proposals times the targets a column is in
#: (enough proposals for the 3-way marginals of a dozen columns, bounded so that balancing
#: stays a small part of a release)
BALANCE_WORK = 70_000_000
#: row pairs judged at once (one scan step)
BALANCE_BATCH = 64


def balance_rows(
    data: dict[str, np.ndarray],
    targets: Sequence[tuple[tuple[str, ...], np.ndarray]],
    card: dict[str, int],
    rng: np.random.Generator,
    *,
    sweeps: int,
    max_proposals: int | None = None,
) -> dict[str, np.ndarray]:
    """Rows drawn from a model, rearranged so that their marginals on ``targets`` (the model's
    expected counts in ``data``'s row count, row-major over each target's columns) are as close
    as value swaps can make them.

    An ``n``-row sample carries sampling noise in every marginal the sampler does not round
    (:func:`sample_rows` rounds only the junction tree's cliques), which on small tables moves
    the sample's 3-way marginals measurably further from the real table than the model's
    *expected* marginals (``benchmarks/suite``).

    Greedy local search on :func:`marginal_l1`: a proposal swaps one column's values between
    two rows, which keeps that column's counts (and every marginal without it) exactly, and is
    taken when it lowers the L1 distance of the targets that contain the column. Each of
    ``sweeps`` passes visits the columns in random order and pairs all rows at random, at most
    ``max_proposals`` in all (default: :data:`BALANCE_WORK` over the most targets one column
    is in; fewer pairs per pass where that allows less than one pass).
    :data:`BALANCE_BATCH` disjoint pairs of one column are judged at once against the same
    counts: the counts stay exact (each taken swap adds its own rows' changes), only a decision
    can be stale where two pairs of one batch touch one cell. One ``lax.scan``, one XLA compile.

    Post-processing of the model's rows with the release's seeded generator: no data is read.
    """
    import jax.numpy as jnp

    cols = list(data)
    n = len(data[cols[0]]) if cols else 0
    targets = [(cl, np.asarray(t, np.float64).ravel()) for cl, t in targets if len(cl) >= 2]
    if n < 2 or not targets or sweeps <= 0:
        return data
    pos = {c: i for i, c in enumerate(cols)}
    x = np.stack([np.asarray(data[c], dtype=np.int32) for c in cols], axis=1)
    # every target's cells in one flat array; for each column, the targets containing it as
    # (their other columns, those columns' strides, the column's stride, the target's offset)
    width = max(len(cl) for cl, _ in targets) - 1
    entries: list[list[tuple[list[int], list[int], int, int]]] = [[] for _ in cols]
    counts, start = [], 0
    for cl, t in targets:
        shape = [card[c] for c in cl]
        strides = [math.prod(shape[k + 1 :]) for k in range(len(cl))]
        for k, c in enumerate(cl):
            rest = [(pos[o], st) for o, st in zip(cl, strides, strict=True) if o != c]
            rest += [(0, 0)] * (width - len(rest))
            others, other_strides = [r for r, _ in rest], [st for _, st in rest]
            entries[pos[c]].append((others, other_strides, strides[k], start))
        counts.append(_counts(data, cl, card))
        start += t.size
    m = max(len(e) for e in entries)
    oth = np.zeros((len(cols), m, width), np.int32)
    ostride = np.zeros((len(cols), m, width), np.int32)
    cstride = np.zeros((len(cols), m), np.int32)
    offset = np.zeros((len(cols), m), np.int32)
    valid = np.zeros((len(cols), m), bool)
    for ci, col_entries in enumerate(entries):
        for j, (o, st, cs, b) in enumerate(col_entries):
            oth[ci, j], ostride[ci, j], cstride[ci, j], offset[ci, j] = o, st, cs, b
            valid[ci, j] = True
    movable = [ci for ci, e in enumerate(entries) if e]
    max_proposals = max_proposals or max(1, BALANCE_WORK // m)
    props = _swap_proposals(n, movable, rng, sweeps, max_proposals)
    tables = tuple(map(jnp.asarray, (oth, ostride, cstride, offset, valid)))
    target = jnp.asarray(np.concatenate([t for _, t in targets]), jnp.float32)
    x = np.vstack([x, np.zeros((1, len(cols)), np.int32)])  # row n: the never-counted dummy
    out = np.asarray(_balance_scan()(jnp.asarray(x), jnp.asarray(np.concatenate(counts),
                                     jnp.float32), target, tables, props))  # fmt: skip
    return {c: out[:n, pos[c]].astype(np.int64) for c in cols}


def _swap_proposals(
    n: int, movable: Sequence[int], rng: np.random.Generator, sweeps: int, max_proposals: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(column, rows i, rows j) per scan step: each pass over the columns in random order, each
    column's rows paired by a random permutation, in batches; padding pairs the dummy row ``n``
    with itself (equal values: never swapped)."""
    half = n // 2
    batch = min(BALANCE_BATCH, max(8, n // 64))
    sweeps = max(1, min(sweeps, max_proposals // max(len(movable) * half, 1)))
    pairs = min(half, max(batch, max_proposals // (sweeps * len(movable))))
    nb = -(-pairs // batch)
    cs, ii, jj = [], [], []
    for _ in range(sweeps):
        for ci in rng.permutation(np.asarray(movable)):
            perm = rng.permutation(n)
            i = np.full(nb * batch, n, np.int32)
            j = np.full(nb * batch, n, np.int32)
            i[:pairs], j[:pairs] = perm[:pairs], perm[pairs : 2 * pairs]
            cs.append(np.full(nb, ci, np.int32))
            ii.append(i.reshape(nb, batch))
            jj.append(j.reshape(nb, batch))
    return np.concatenate(cs), np.concatenate(ii), np.concatenate(jj)


@functools.cache
def _balance_scan():
    """The jitted swap search of :func:`balance_rows` (built on first use: jax stays out of
    plan-time imports)."""
    import jax
    import jax.numpy as jnp

    sign = jnp.asarray([-1.0, 1.0, -1.0, 1.0], jnp.float32)[None, :, None]

    def run(x, counts, target, tables, props):
        oth, ostride, cstride, offset, valid = tables

        def step(carry, p):
            xs, cnt = carry
            c, i, j = p
            a, b = xs[i, c], xs[j, c]
            o, s = oth[c], ostride[c]
            # each pair's cell in every target containing c, without c: (batch, targets)
            bi = offset[c] + jnp.sum(xs[i][:, o] * s, axis=-1)
            bj = offset[c] + jnp.sum(xs[j][:, o] * s, axis=-1)
            live = valid[c][None] & (bi != bj) & (a != b)[:, None]
            st = cstride[c][None]
            cells = jnp.stack([bi + a[:, None] * st, bi + b[:, None] * st,
                               bj + b[:, None] * st, bj + a[:, None] * st], axis=1)  # fmt: skip
            now, want = cnt[cells], target[cells]
            gain = jnp.abs(now + sign - want) - jnp.abs(now - want)
            take = jnp.sum(jnp.where(live[:, None], gain, 0.0), axis=(1, 2)) < -1e-6
            step_counts = jnp.where(live[:, None] & take[:, None, None], sign, 0.0)
            cnt = cnt.at[cells.ravel()].add(jnp.broadcast_to(step_counts, cells.shape).ravel())
            xs = xs.at[i, c].set(jnp.where(take, b, a)).at[j, c].set(jnp.where(take, a, b))
            return (xs, cnt), None

        return jax.lax.scan(step, (x, counts), props)[0][0]

    return jax.jit(run)
