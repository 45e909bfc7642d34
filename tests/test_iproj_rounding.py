"""Issue 15 item 5: the resampling keeps the statistics the verdicts read
(``dpql.postprocess.iproj.balanced_counts``, ``resample(keep=...)``,
``dpql.postprocess.run.kept_statistics``): a controlled rounding of the reweighted counts, every
row still ``floor`` or ``ceil`` of its expected count."""

from __future__ import annotations

import numpy as np
import pytest
from test_iproj_support import make_table

from dpql.postprocess import iproj


def _draw(seed: int, rows: int = 5000, stats: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = rng.gamma(2.0, size=rows)
    keep = rng.normal(size=(rows, stats)) * np.array([1.0, 3.0, 0.2])[:stats]
    return weights / weights.sum(), keep


def _systematic(weights: np.ndarray, rows: int, seed: int) -> np.ndarray:
    u = np.random.default_rng(seed).random()
    idx = np.searchsorted(np.cumsum(weights), (u + np.arange(rows)) / rows, side="right")
    return np.bincount(np.minimum(idx, weights.size - 1), minlength=weights.size)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_balanced_counts_is_a_controlled_rounding(seed: int) -> None:
    """Same total, every count floor or ceil of the expected one, and the kept statistics' sum
    within a small fraction of systematic resampling's error (measured: 0.012-0.03% of it, whose
    norm is 51-158 rows x sd here: a random rounding's)."""
    weights, keep = _draw(seed)
    rows = weights.size
    expected = rows * weights
    start = _systematic(weights, rows, seed)
    out = iproj.balanced_counts(start, expected, keep, np.random.default_rng(seed))
    assert out.sum() == rows
    assert np.all((out == np.floor(expected)) | (out == np.ceil(expected)))
    err0 = np.linalg.norm(start @ keep - expected @ keep)
    err = np.linalg.norm(out @ keep - expected @ keep)
    assert err0 > 5.0  # the systematic rounding's error, in rows x sd
    assert err < 0.001 * err0


def test_balanced_counts_leaves_nothing_to_repair_alone() -> None:
    """Integer expected counts: nothing to round, the counts come back unchanged."""
    expected = np.array([2.0, 0.0, 1.0, 3.0])
    counts = expected.astype(int)
    keep = np.arange(8.0).reshape(4, 2)
    out = iproj.balanced_counts(counts, expected, keep, np.random.default_rng(0))
    assert np.array_equal(out, counts)


def test_resample_keeps_the_weighted_means() -> None:
    """``resample(keep=...)``: the drawn rows' means of the kept statistics equal the weighted
    means to within a thousandth of a statistic's spread per row, where plain systematic
    resampling misses by far more; rows with zero weight (NaN statistics) are never drawn."""
    table = make_table(3000, seed=4)
    rng = np.random.default_rng(9)
    w = rng.gamma(1.5, size=table.n)
    w[:50] = 0.0
    w /= w.sum()
    keep = np.stack([table.scaled["age"] * table.scaled["hours"], table.codes["sex"] * 1.0], 1)
    keep[:50] = np.nan
    plain = iproj.resample(table, w, table.n, seed=3)
    kept = iproj.resample(table, w, table.n, seed=3, keep=keep)
    target = w[50:] @ keep[50:]

    def miss(t) -> float:
        x = np.stack([t.scaled["age"] * t.scaled["hours"], t.codes["sex"] * 1.0], 1)
        return float(np.max(np.abs(x.mean(axis=0) - target) / keep[50:].std(axis=0)))

    assert kept.n == table.n
    assert miss(kept) < 1e-3 < miss(plain)
