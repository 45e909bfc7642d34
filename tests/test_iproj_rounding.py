"""The resampling keeps the statistics the verdicts read
(``dpql.sampling.balanced_counts``, ``resample(keep=...)``,
``dpql.postprocess.run.requirement_boxes``): a controlled rounding of the reweighted counts, every
row still ``floor`` or ``ceil`` of its expected count."""

from __future__ import annotations

import numpy as np
import pytest
from test_iproj_support import make_table

from dpql import sampling

# compile's statistics are in noise sds, a small fraction of a statistic's spread over rows
SPREAD = 30.0


def _draw(seed: int, rows: int = 5000, stats: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = rng.gamma(2.0, size=rows)
    keep = SPREAD * rng.normal(size=(rows, stats)) * np.array([1.0, 3.0, 0.2])[:stats]
    return weights / weights.sum(), keep


def _systematic(weights: np.ndarray, rows: int, seed: int) -> np.ndarray:
    u = np.random.default_rng(seed).random()
    idx = np.searchsorted(np.cumsum(weights), (u + np.arange(rows)) / rows, side="right")
    return np.bincount(np.minimum(idx, weights.size - 1), minlength=weights.size)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_balanced_counts_is_a_controlled_rounding(seed: int) -> None:
    """Same total, every count floor or ceil of the expected one, and the kept statistics' means
    within ``BALANCE_TOL`` of their weighted means (the sum's error at most ``BALANCE_TOL`` x
    rows, from systematic resampling's 1,540-3,640 rows x sd here)."""
    weights, keep = _draw(seed)
    rows = weights.size
    expected = rows * weights
    start = _systematic(weights, rows, seed)
    out = sampling.balanced_counts(start, expected, keep, np.random.default_rng(seed))
    assert out.sum() == rows
    assert np.all((out == np.floor(expected)) | (out == np.ceil(expected)))
    err0 = np.linalg.norm(start @ keep - expected @ keep)
    err = np.linalg.norm(out @ keep - expected @ keep)
    assert err <= sampling.BALANCE_TOL * rows < 0.05 * err0


@pytest.mark.slow
def test_balanced_counts_with_many_statistics() -> None:
    """Forty kept statistics (a spec with many requirements): the sampled pair search still
    reaches ``BALANCE_TOL`` (from systematic resampling's 10,160 rows x sd), the counts still a
    controlled rounding."""
    rng = np.random.default_rng(7)
    rows = 20000
    weights = rng.gamma(2.0, size=rows)
    weights /= weights.sum()
    keep = SPREAD * rng.normal(size=(rows, 40))
    expected = rows * weights
    start = _systematic(weights, rows, 7)
    out = sampling.balanced_counts(start, expected, keep, np.random.default_rng(7))
    assert out.sum() == rows
    assert np.all((out == np.floor(expected)) | (out == np.ceil(expected)))
    err0 = np.linalg.norm(start @ keep - expected @ keep)
    assert np.linalg.norm(out @ keep - expected @ keep) <= sampling.BALANCE_TOL * rows < 0.05 * err0


def test_balanced_counts_leaves_nothing_to_repair_alone() -> None:
    """Integer expected counts: nothing to round, the counts come back unchanged."""
    expected = np.array([2.0, 0.0, 1.0, 3.0])
    counts = expected.astype(int)
    keep = np.arange(8.0).reshape(4, 2)
    out = sampling.balanced_counts(counts, expected, keep, np.random.default_rng(0))
    assert np.array_equal(out, counts)


def test_resample_keeps_the_weighted_means() -> None:
    """``resample(keep=...)``, the statistics in units of a thirtieth of their spread (compile's
    are in noise sds): the drawn rows' means equal the weighted means to within ``BALANCE_TOL``
    of a unit, where plain systematic resampling misses by far more; rows with zero weight (NaN
    statistics) are never drawn."""
    table = make_table(3000, seed=4)
    rng = np.random.default_rng(9)
    w = rng.gamma(1.5, size=table.n)
    w[:50] = 0.0
    w /= w.sum()
    raw = np.stack([table.scaled["age"] * table.scaled["hours"], table.codes["sex"] * 1.0], 1)
    spread = raw[50:].std(axis=0) / SPREAD
    keep = raw / spread
    keep[:50] = np.nan
    plain = sampling.resample(table, w, table.n, seed=3)
    kept = sampling.resample(table, w, table.n, seed=3, keep=keep)
    target = w[50:] @ keep[50:]

    def miss(t) -> float:
        x = np.stack([t.scaled["age"] * t.scaled["hours"], t.codes["sex"] * 1.0], 1) / spread
        return float(np.max(np.abs(x.mean(axis=0) - target)))

    assert kept.n == table.n
    assert miss(kept) <= sampling.BALANCE_TOL < 5 * sampling.BALANCE_TOL < miss(plain)
