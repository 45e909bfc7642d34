"""The paper's metrics: perfect on identical tables, worse when columns are made independent."""

from __future__ import annotations

import numpy as np
import pytest

from dpql.domain import CategoricalColumn, Domain, EncodedTable, NumericColumn, numeric_edges
from dpql.evaluate import gan_metrics as metrics

DOMAIN = Domain(
    (
        CategoricalColumn("a", ("x", "y", "z")),
        CategoricalColumn("b", ("x", "y", "z")),
        CategoricalColumn("label", ("no", "yes")),
        NumericColumn("v", 0.0, 100.0, False, numeric_edges(0.0, 100.0, False, 5)),
    )
)


def dependent_table(n: int, seed: int) -> EncodedTable:
    """b copies a 90% of the time, label = (a == z), v = 30 * a + noise: strong dependence."""
    rng = np.random.default_rng(seed)
    a = rng.choice(3, n, p=[0.6, 0.3, 0.1]).astype(np.int32)
    b = np.where(rng.random(n) < 0.9, a, rng.integers(0, 3, n)).astype(np.int32)
    label = (a == 2).astype(np.int32)
    v = np.clip(30.0 * a + rng.normal(0, 5.0, n), 0, 100)
    codes = {"a": a, "b": b, "label": label, "v": DOMAIN["v"].bin_of(v)}
    return EncodedTable(DOMAIN, codes, {"v": v / 100})


def independent_columns(t: EncodedTable, seed: int) -> EncodedTable:
    """Same 1-way marginals, every column shuffled on its own (all dependence destroyed)."""
    rng = np.random.default_rng(seed)
    perms = {name: rng.permutation(t.n) for name in t.domain.names}
    codes = {k: v[perms[k]] for k, v in t.codes.items()}
    return EncodedTable(t.domain, codes, {k: v[perms[k]] for k, v in t.scaled.items()})


@pytest.fixture(scope="module")
def tables():
    return dependent_table(600, 0), dependent_table(400, 1)


def test_identical_tables_score_perfectly(tables):
    train, test = tables
    p, q = metrics.dimension_wise_probability(train, train)
    np.testing.assert_array_equal(p, q)
    scores = metrics.dimension_wise_prediction(train, test, train)
    assert metrics.mean_distance_to_diagonal(scores) == 0.0
    for column, (jsd, kl) in metrics.diversity(train, train).items():
        assert jsd == pytest.approx(0.0, abs=1e-12) and kl == pytest.approx(0.0, abs=1e-12), column


def test_independent_columns_keep_marginals_but_lose_prediction(tables):
    train, test = tables
    shuffled = independent_columns(train, 2)
    p, q = metrics.dimension_wise_probability(train, shuffled)
    np.testing.assert_allclose(p, q)  # same 1-way marginals...
    scores = {s.column: s for s in metrics.dimension_wise_prediction(train, test, shuffled)}
    # ...but a is predicted from b with F1 ~ 0.9 on real data and at chance level from noise.
    assert scores["a"].real > 0.8 and scores["a"].synthetic < 0.75
    assert scores["v"].real > 0.8 and scores["v"].synthetic < 0.1  # R^2
    assert metrics.mean_distance_to_diagonal(tuple(scores.values())) > 0.1


def test_smoothed_kl_matches_the_papers_collapsed_race_value():
    # Digest section 6.4: full-ADULT race shares vs all mass on "White" gives D_KL^mu = 0.4654,
    # JSD = 0.0531 (the DP-SYN entries of the paper's Tables 2, 6 and 7).
    p = np.array([0.0096, 0.0311, 0.0959, 0.0083, 0.8550])
    collapsed = np.array([0, 0, 0, 0, 1.0])
    assert metrics.smoothing_mu(p) == pytest.approx(1.009e-3, rel=1e-2)
    assert metrics.smoothed_kl(p, collapsed) == pytest.approx(0.4654, abs=2e-3)
    assert metrics.jensen_shannon(p, collapsed) == pytest.approx(0.0531, abs=1e-3)
    # A small, fully supported perturbation costs far less than a collapse.
    assert metrics.smoothed_kl(p, 0.9 * p + 0.1 / 5) < 0.05


def test_dimension_wise_prediction_threads_and_row_cap(tables):
    """Fitting on several threads gives the same scores; a row cap fits on a seeded sample."""
    train, test = tables
    shuffled = independent_columns(train, 2)
    calls: list[tuple[int, int]] = []
    one = metrics.dimension_wise_prediction(train, test, shuffled, 3)
    two = metrics.dimension_wise_prediction(
        train, test, shuffled, 3, workers=2, progress=lambda d, t: calls.append((d, t))
    )
    assert one == two
    assert sorted(calls) == [(i, 8) for i in range(1, 9)]  # 2 models per column, 4 columns
    assert metrics.dimension_wise_prediction(train, test, shuffled, 3, max_train_rows=600) == one
    sample = metrics.sample_rows(train, 200, seed=5)
    assert sample.n == 200 and metrics.sample_rows(train, 200, seed=5).codes["a"].tolist() == (
        sample.codes["a"].tolist()
    )
    capped = metrics.dimension_wise_prediction(train, test, shuffled, 3, max_train_rows=200)
    assert capped != one and capped[0].real > 0.8  # still learns a from b on 200 rows


def test_row_cap_keeps_identical_tables_identical(tables):
    train, test = tables
    scores = metrics.dimension_wise_prediction(train, test, train, 1, max_train_rows=300)
    assert all(s.real == s.synthetic for s in scores)
    assert metrics.mean_distance_to_diagonal(scores) == 0.0
