"""Drawing a table's rows by weights with controlled rounding (post-processing randomness).

Shared by post-processing (the I-projection's resampling, :mod:`dpql.postprocess.iproj`) and by
synthesizers that draw their output rows from a weighted pool (the gan's raking,
:mod:`dpql.synth.gan.program`): every row appears the floor or the ceiling of its expected
count, so the drawn table's statistics vary less around the weighted ones than a multinomial
draw's, whose sampling noise no measurement paid for.
"""

from __future__ import annotations

import numpy as np

from dpql.domain import EncodedTable


def resample(
    table: EncodedTable,
    weights: np.ndarray,
    rows: int,
    seed: int,
    keep: np.ndarray | None = None,
) -> EncodedTable:
    """Draw ``rows`` rows with probabilities ``weights`` (paper sec. 3: same size as the input).

    Systematic resampling: one uniform offset ``u`` and the points ``(u + j) / rows`` on the
    weights' cumulative sum. Every row appears ``floor(rows w_i)`` or ``ceil(rows w_i)`` times
    and ``rows w_i`` times in expectation, as with the paper's multinomial draw, but the
    released table's statistics vary less around the reweighted ones: the multinomial draw adds
    sampling noise of sd ``~ sqrt(w_i / rows)`` per row that the measurements never paid for.
    ``keep`` (one row per table row, one column per statistic, on a common scale): the rounding
    is then repaired so that those statistics' means over the drawn rows equal their weighted
    means (:func:`balanced_counts`), every row still ``floor`` or ``ceil`` times. The offset
    and the repair's choices are post-processing randomness (``seed``, recorded), not DP noise.
    """
    rng = np.random.default_rng(seed)
    u = rng.random()
    cdf = np.cumsum(weights, dtype=np.float64)
    idx = np.searchsorted(cdf, (u + np.arange(rows)) / rows * cdf[-1], side="right")
    idx = np.minimum(idx, table.n - 1)
    if keep is not None and keep.shape[1]:
        counts = np.bincount(idx, minlength=table.n)
        expected = rows * np.asarray(weights, dtype=np.float64) / cdf[-1]
        idx = np.repeat(np.arange(table.n), balanced_counts(counts, expected, keep, rng))
    return table.take(idx)


BALANCE_MOVES = 200  # most swaps of balanced_counts (a few dozen suffice on Adult)
BALANCE_PROBES = 256  # rows rounded up tried per swap
BALANCE_PARTNERS = 4096  # rows rounded down tried per swap
BALANCE_MISSES = 4  # stop after this many samples in a row without a shrinking swap
# stop when the kept statistics' means are this close to their weighted means (in the units of
# ``keep``: noise sds in compile, where a hundredth of an sd is nothing a verdict can see, and
# about what one row is worth to a pilot accuracy on the example: 1 / (n sd) = 0.012)
BALANCE_TOL = 0.01


def balanced_counts(
    counts: np.ndarray, expected: np.ndarray, keep: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """A controlled rounding of ``expected`` (sums to ``sum(counts)``) starting from ``counts``,
    a floor / ceil rounding of it (systematic resampling's): greedy swaps, each moving one row
    from ``ceil`` to ``floor`` and another from ``floor`` to ``ceil`` (so the total and the
    floor / ceil property hold), chosen to shrink ``||counts @ keep - expected @ keep||_2``,
    until it is below ``BALANCE_TOL`` times the rows or ``BALANCE_MISSES`` samples in a row hold
    no swap that shrinks it (at most ``BALANCE_MOVES`` samples). Each sample scores every pair of
    ``BALANCE_PROBES`` random rows rounded up and ``BALANCE_PARTNERS`` random rows rounded down
    (one matrix product: linear in the number of kept statistics, where a nearest-neighbour
    search degrades with it) and takes the best; a row moves at most once. ``keep`` rows of rows
    with zero weight are never used (may be
    NaN)."""
    counts = counts.copy()
    frac = expected - np.floor(expected)
    live = (frac > 1e-12) & np.isfinite(keep).all(axis=1)
    H = np.where(live[:, None], keep, 0.0)
    err = counts @ H - expected @ H
    # rows that may go up (now floor) and down (now ceil)
    up = np.flatnonzero(live & (counts == np.floor(expected)))
    down = np.flatnonzero(live & (counts == np.floor(expected) + 1))
    can_up = np.ones(up.size, dtype=bool)
    can_down = np.ones(down.size, dtype=bool)
    sq = np.einsum("ij,ij->i", H, H)
    done = (BALANCE_TOL * counts.sum()) ** 2
    misses = 0  # consecutive samples without a shrinking swap
    for _ in range(BALANCE_MOVES):
        e2 = float(err @ err)
        ups, downs = np.flatnonzero(can_up), np.flatnonzero(can_down)
        if e2 <= done or ups.size == 0 or downs.size == 0:
            break
        j = down[_candidates(downs, -(H[down[downs]] @ err), BALANCE_PROBES, rng)]
        i = up[_candidates(ups, H[up[ups]] @ err, BALANCE_PARTNERS, rng)]
        # the swap (i up, j down) leaves err + H[i] - H[j]: its squared norm, for every pair
        target = H[j] - err
        new = (target * target).sum(axis=1)[:, None] + sq[i][None, :] - 2.0 * target @ H[i].T
        r, c = np.unravel_index(int(np.argmin(new)), new.shape)
        if new[r, c] >= e2:
            misses += 1
            if misses == BALANCE_MISSES:
                break
            continue
        misses = 0
        counts[i[c]] += 1
        counts[j[r]] -= 1
        err = err + H[i[c]] - H[j[r]]
        can_up[np.searchsorted(up, i[c])] = False
        can_down[np.searchsorted(down, j[r])] = False
    return counts


def _candidates(
    pool: np.ndarray, score: np.ndarray, size: int, rng: np.random.Generator
) -> np.ndarray:
    """Half of ``size`` from ``pool``: the lowest ``score`` (the rows that move the error most
    along its own direction: what a large error needs), half at random (with replacement: a
    repeated row only repeats a pair), so a small error still finds its fine partners."""
    if pool.size <= size:
        return pool
    half = size // 2
    best = pool[np.argpartition(score, half)[:half]]
    return np.concatenate([best, pool[rng.integers(0, pool.size, size=size - half)]])
