"""The private measurer: ledger events, calibration, unbiasedness, caching, what leaves it."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest

from dpql.data.codec import encode_frame
from dpql.data.engines import InMemoryEngine
from dpql.data.measure import PrivateMeasurer
from dpql.diagnostics import InternalError
from dpql.domain import CategoricalColumn, Domain, NumericColumn
from dpql.ir.queries import CatIn, Count, Marginal, Moment, NumCmp, Query, query_grid
from dpql.privacy.ledger import Ledger
from dpql.privacy.mechanisms import gumbel_beta
from dpql.privacy.noise import NoiseSource

TRUE_ROWS = 437  # what the file holds; the spec's public n below differs on purpose
PUBLIC_N = 500
DOMAIN = Domain(
    (
        CategoricalColumn("a", ("p", "q", "r")),
        CategoricalColumn("b", ("u", "v")),
        NumericColumn("x", 0.0, 1.0, False, (0.0, 0.5, 1.0)),
    )
)
QUERIES: list[Query] = [
    Marginal(("a", "b")),
    Count(CatIn("a", frozenset({0}))),
    Moment(("x",)),
    Moment(()),
]


class CountingEngine(InMemoryEngine):
    """Records every query the measurer asks the engine for."""

    asked: list[Query]

    def sums(self, queries: Sequence[Query]) -> list[np.ndarray]:
        self.asked = [*getattr(self, "asked", []), *queries]
        return super().sums(queries)


def make(seed: int = 0) -> tuple[PrivateMeasurer, CountingEngine, Ledger]:
    rng = np.random.default_rng(1)
    df = pd.DataFrame(
        {
            "a": rng.choice(["p", "q", "r"], TRUE_ROWS, p=[0.5, 0.3, 0.2]),
            "b": rng.choice(["u", "v"], TRUE_ROWS),
            "x": rng.random(TRUE_ROWS).astype(str),
        }
    )
    encoded = encode_frame(df, DOMAIN)
    engine = CountingEngine(encoded.table, encoded.curator_log)
    ledger = Ledger()
    return PrivateMeasurer(engine, PUBLIC_N, ledger, NoiseSource.for_testing(seed)), engine, ledger


def exact(engine: InMemoryEngine, queries: Sequence[Query]) -> list[np.ndarray]:
    sums = InMemoryEngine.sums(engine, queries)
    return [s * query_grid(q) / PUBLIC_N for q, s in zip(queries, sums, strict=True)]


def test_measure_appends_one_gaussian_event_with_the_concatenated_sensitivity() -> None:
    m, _, ledger = make()
    out = m.measure(QUERIES, 0.01, phase="measurement", label="round 1")
    assert [o.shape for o in out] == [(6,), (1,), (1,), (1,)]
    (event,) = ledger.events
    l2 = math.sqrt(2 / PUBLIC_N**2 + 3 / PUBLIC_N**2)  # one vector query, three scalar ones
    assert event.mechanism == "gaussian" and event.phase == "measurement"
    assert event.l2_sensitivity == pytest.approx(l2, rel=1e-12)
    assert event.noise_scale == pytest.approx(l2 / math.sqrt(2 * 0.01), rel=1e-12)
    assert event.count == 9 and event.rho == 0.01
    assert m.measure([], 0.01, phase="measurement", label="nothing") == []
    assert len(ledger) == 1


def test_measure_is_unbiased_with_the_calibrated_spread_and_uses_the_public_n() -> None:
    m, engine, ledger = make(seed=7)
    reps, rho = 400, 0.02
    draws = np.array(
        [np.concatenate(m.measure(QUERIES, rho, phase="m", label="r")) for _ in range(reps)]
    )
    truth = np.concatenate(exact(engine, QUERIES))
    sigma = ledger.events[0].noise_scale
    assert sigma is not None
    # mean of `reps` draws: sd sigma / sqrt(reps); 4.5 sd over 9 cells fails with p < 1e-4
    assert np.max(np.abs(draws.mean(axis=0) - truth)) < 4.5 * sigma / math.sqrt(reps)
    # sample variance of 3600 standard normals: sd sqrt(2 / 3600) = 0.024
    assert np.var((draws - truth) / sigma) == pytest.approx(1.0, abs=0.11)
    # the all-rows moment averages over the public n, not the true count
    assert truth[-1] == TRUE_ROWS / PUBLIC_N
    assert abs(draws[:, -1].mean() - 1.0) > 50 * sigma / math.sqrt(reps)


def test_published_answers_are_whole_grid_steps_over_the_public_n() -> None:
    """Exact discrete noise: answer * n / grid is an integer for every published value, so a
    value carries no float bits beyond its noisy integer (float Gaussian samples do)."""
    m, _, _ = make(seed=3)
    for _ in range(20):
        out = m.measure(QUERIES, 0.5, phase="m", label="r", scales=[1.0, 2.0, 0.5, 3.0])
        for q, a in zip(QUERIES, out, strict=True):
            # the published double is the one nearest k * grid / n for an integer k
            k = np.rint(a * PUBLIC_N / query_grid(q))
            np.testing.assert_array_equal(a, k * query_grid(q) / PUBLIC_N)
    assert query_grid(QUERIES[0]) == 1.0 and query_grid(QUERIES[2]) == 2.0**-20


def test_exact_answers_are_computed_once_per_distinct_query() -> None:
    m, engine, _ = make()
    m.measure(QUERIES, 0.01, phase="m", label="1")
    m.measure(QUERIES[:2] + QUERIES[:2], 0.01, phase="m", label="2")
    m.select(QUERIES, [np.zeros(q.cells(DOMAIN)) for q in QUERIES], 2, 0.01, phase="s", label="3")
    assert sorted(map(repr, engine.asked)) == sorted(map(repr, QUERIES))


def test_select_event_uses_the_largest_l1_sensitivity() -> None:
    m, _, ledger = make()
    synthetic = [np.zeros(q.cells(DOMAIN)) for q in QUERIES]
    chosen = m.select(QUERIES, synthetic, 2, 0.05, phase="selection", label="t")
    assert len(set(chosen)) == 2 and all(0 <= i < len(QUERIES) for i in chosen)
    (event,) = ledger.events
    assert event.mechanism == "gumbel_top_k" and event.count == 2
    assert event.score_sensitivity == pytest.approx(2 / PUBLIC_N)  # a marginal is a candidate
    assert event.noise_scale == pytest.approx(gumbel_beta(2 / PUBLIC_N, 2, 0.05))
    m.select(QUERIES[1:], synthetic[1:], 1, 0.05, phase="selection", label="scalars")
    assert ledger.events[1].score_sensitivity == pytest.approx(1 / PUBLIC_N)


def test_select_finds_the_worst_answered_query_and_respects_the_penalty() -> None:
    m, engine, _ = make()
    synthetic = exact(engine, QUERIES)
    synthetic[2] = synthetic[2] + 0.3
    assert m.select(QUERIES, synthetic, 1, 1e3, phase="s", label="t") == [2]
    penalty = [0.0, 0.0, 0.5, 0.0]
    assert m.select(QUERIES, synthetic, 1, 1e3, phase="s", label="t", penalty=penalty) != [2]


def test_select_follows_the_exponential_mechanism_on_l1_errors() -> None:
    # Gumbel-argmax picks i with probability prop. to exp(score_i / beta): a score gap of
    # beta * ln 3 gives 3/4. Over 2000 draws the frequency has sd 0.0097; tolerance 4.5 sd.
    m, engine, _ = make(seed=3)
    pair = [Count(CatIn("a", frozenset({1}))), Count(NumCmp("x", "<=", 0.5))]
    rho = 0.5
    beta = gumbel_beta(1 / PUBLIC_N, 1, rho)
    truth = exact(engine, pair)
    synthetic = [truth[0], truth[1] - beta * math.log(3)]
    picks = [m.select(pair, synthetic, 1, rho, phase="s", label="t")[0] for _ in range(2000)]
    assert np.mean(np.array(picks) == 1) == pytest.approx(0.75, abs=0.044)


def test_the_true_row_count_stays_with_the_curator() -> None:
    m, _, ledger = make()
    m.measure(QUERIES, 0.01, phase="m", label="r")
    m.select(QUERIES, [np.zeros(q.cells(DOMAIN)) for q in QUERIES], 1, 0.01, phase="s", label="t")
    assert m.n == PUBLIC_N
    public = json.dumps(ledger.to_json()) + repr(m)
    assert str(TRUE_ROWS) not in public
    for name in dir(m):
        value = getattr(m, name)
        if not name.startswith("_") and not callable(value):
            assert value != TRUE_ROWS, name
    summary = m.curator_summary().to_json()
    assert summary["curator_only"] is True
    assert (summary["rows_kept"], summary["public_rows"]) == (TRUE_ROWS, PUBLIC_N)


def test_programming_errors_are_internal_errors() -> None:
    m, _, _ = make()
    with pytest.raises(InternalError):
        m.select(QUERIES, [np.zeros(1)] * 4, 1, 0.1, phase="s", label="t")
    with pytest.raises(InternalError):
        m.select(
            QUERIES,
            [np.zeros(q.cells(DOMAIN)) for q in QUERIES],
            1,
            0.1,
            phase="s",
            label="t",
            penalty=[0.0],
        )
    with pytest.raises(InternalError):
        PrivateMeasurer(m._engine, 0, Ledger(), NoiseSource.for_testing(0))


def test_merged_cells_are_measured_and_scored_at_the_marginals_sensitivity() -> None:
    """A public cell map answers a marginal over merged cells (one left out): the exact
    answer is the sum over each merged cell's own, the noise and the ledger event are the
    unmerged marginal's, and a selection scores the merged answer."""
    m, engine, ledger = make(seed=5)
    query = Marginal(("a", "b"))  # cells (p,u) (p,v) (q,u) (q,v) (r,u) (r,v)
    cells = np.array([0, 1, 2, 2, 2, -1])  # q and r merged; (r, v) left out
    truth = exact(engine, [query])[0]
    merged = np.array([truth[0], truth[1], truth[2:5].sum()])
    reps, rho = 400, 0.02
    draws = np.array([m.measure([query], rho, phase="m", label="r", merge=[cells])[0]
                      for _ in range(reps)])  # fmt: skip
    sigma = ledger.events[0].noise_scale
    assert sigma is not None and draws.shape == (reps, 3)
    assert {e.l2_sensitivity for e in ledger.events} == {math.sqrt(2) / PUBLIC_N}
    assert {e.count for e in ledger.events} == {3}
    # mean of `reps` draws: sd sigma / sqrt(reps); 4.5 sd over 3 cells fails with p < 1e-4
    assert np.max(np.abs(draws.mean(axis=0) - merged)) < 4.5 * sigma / math.sqrt(reps)
    # sample variance of 1200 standard normals: sd sqrt(2 / 1200) = 0.041
    assert np.var((draws - merged) / sigma) == pytest.approx(1.0, abs=0.18)
    other = Marginal(("b", "a"))
    wrong = merged.copy()
    wrong[2] += 0.3
    synthetic = [wrong, exact(engine, [other])[0]]
    picks = m.select([query, other], synthetic, 1, 1e3, phase="s", label="t", merge=[cells, None])
    assert picks == [0] and ledger.events[-1].score_sensitivity == pytest.approx(2 / PUBLIC_N)
    with pytest.raises(InternalError):  # a map over another number of cells
        m.measure([query], rho, phase="m", label="r", merge=[cells[:5]])
