"""missing: drop as a population (dpql.population): answers renormalised to the kept rows by the
DP estimate of their share, taken from the first release's marginal totals (no extra budget)."""

from __future__ import annotations

import numpy as np
import pytest
from test_iproj_support import make_table

from dpql.answers import NoisyAnswer
from dpql.data.codec import CuratorLog
from dpql.data.engines import InMemoryEngine
from dpql.data.measure import PrivateMeasurer
from dpql.ir.queries import Count, Marginal, TruePred
from dpql.population import PopulationOracle
from dpql.privacy.ledger import Ledger
from dpql.privacy.noise import NoiseSource

KEPT, N = 3000, 5000  # the file's rows left after drop, and the public n


def _oracle(seed: int = 0) -> tuple[PopulationOracle, Ledger]:
    table = make_table(KEPT, seed=3)
    ledger = Ledger()
    engine = InMemoryEngine(table, CuratorLog("test", N, KEPT))
    inner = PrivateMeasurer(engine, N, ledger, NoiseSource.for_testing(seed))
    return PopulationOracle(inner, ("income",)), ledger


def test_answers_are_averages_over_the_kept_rows() -> None:
    oracle, ledger = _oracle()
    ones = [Marginal((c,)) for c in ("age", "sex", "job", "income")]
    answers = oracle.measure(ones, 0.05, phase="init", label="1-way")
    assert oracle.share is not None and oracle.share_sd is not None
    assert abs(oracle.share - KEPT / N) <= 4 * oracle.share_sd
    for a in answers:  # each marginal now sums to about 1, not to KEPT / N
        assert abs(a.sum() - 1.0) < 0.05
    # later releases share the one estimate; nothing was spent on it
    share = oracle.share
    (kept,) = oracle.measure([Count(TruePred())], 0.05, phase="x", label="count")
    assert oracle.share == share
    assert abs(float(kept[0]) - 1.0) < 0.05
    assert len(ledger.events) == 2 and oracle.n == N
    assert oracle.sd_scale == pytest.approx(1 / oracle.share)


def test_a_selection_compares_like_with_like() -> None:
    """The real answers inside the selection are over n; the synthetic (normalised) answers
    are scaled back by the estimate, so a synthetic table equal to the kept rows scores 0."""
    oracle, _ = _oracle(1)
    ones = [Marginal(("sex",)), Marginal(("job",))]
    exact = [a / a.sum() for a in oracle.measure(ones, 10.0, phase="init", label="1-way")]
    seen: list[list[np.ndarray]] = []

    def select(cands, synthetic, k, rho, **kw):
        seen.append(synthetic)
        return [0]

    oracle._inner.select = select  # type: ignore[method-assign]
    oracle.select(ones, exact, 1, 0.1, phase="s", label="s")
    assert sum(float(s.sum()) for s in seen[0]) == pytest.approx(2 * oracle.share)


def test_a_null_state_the_measurement_cannot_see_gets_no_empty_cells() -> None:
    """Under keep, a column with no empty cells still has its public null state; the few empty
    cells the noise gives it go where its 1-way answer cannot tell the null share from 0."""
    from dpql.domain import CategoricalColumn, Domain, EncodedTable
    from dpql.population import without_unsupported_nulls

    d = Domain((CategoricalColumn("a", ("x", "y"), nullable=True),
                CategoricalColumn("b", ("u", "v"), nullable=True)))  # fmt: skip
    rng = np.random.default_rng(0)
    codes = {c: rng.choice(3, 1000, p=[0.5, 0.45, 0.05]).astype(np.int32) for c in "ab"}
    table = EncodedTable(d, codes, {})
    measured = [
        NoisyAnswer(Marginal(("a",)), np.array([0.52, 0.47, 0.003]), 0.002),  # 1.5 sd: unseen
        NoisyAnswer(Marginal(("b",)), np.array([0.50, 0.45, 0.05]), 0.002),  # 25 sd: real
    ]
    out = without_unsupported_nulls(table, measured, seed=0)
    assert not (out.codes["a"] == 2).any() and (out.codes["b"] == codes["b"]).all()
    assert abs((out.codes["a"] == 0).mean() - 0.5 / 0.95) < 0.05  # redrawn from the others


def test_the_null_share_is_read_from_every_marginal_that_holds_the_column() -> None:
    """Without a 1-way answer, the null share is the inverse-variance average of what the
    measured k-way marginals give (each null slice summed, its sd grown with its cells)."""
    from dpql.domain import CategoricalColumn, Domain, EncodedTable
    from dpql.population import without_unsupported_nulls
    from dpql.synth.nulls import measured_null_share

    d = Domain((CategoricalColumn("a", ("x", "y"), nullable=True),
                CategoricalColumn("b", ("u", "v"), nullable=True)))  # fmt: skip
    cube = np.array([[0.30, 0.20, 0.001], [0.25, 0.20, 0.002], [0.01, 0.015, 0.002]])
    rng = np.random.default_rng(1)
    codes = {c: rng.choice(3, 1000, p=[0.5, 0.45, 0.05]).astype(np.int32) for c in "ab"}
    table = EncodedTable(d, codes, {})
    measured = [NoisyAnswer(Marginal(("a", "b")), cube.ravel(), 0.002)]
    share_a, sd_a = measured_null_share(d, "a", measured)
    share_b, sd_b = measured_null_share(d, "b", measured)
    assert share_a == pytest.approx(0.027) and share_b == pytest.approx(0.005)
    assert sd_a == pytest.approx(0.002 * np.sqrt(3)) == sd_b
    out = without_unsupported_nulls(table, measured, seed=0)
    assert (out.codes["a"] == codes["a"]).all()  # 7.8 sd: a real null share stays
    assert not (out.codes["b"] == 2).any()  # 1.4 sd: indistinguishable from none
    only_b = [NoisyAnswer(Marginal(("b",)), cube.sum(0), 0.002)]
    assert measured_null_share(d, "a", only_b) is None
