"""The synthesizer's own noisy workload answers are kept as penalties of the
noise-aware projection (``iproj.sparse_workload``, ``dual.solve_penalised``), so
post-processing toward the requirements drifts less from what the synthesizer fitted."""

from __future__ import annotations

import numpy as np
import pytest
from test_iproj_support import DOMAIN, ExactOracle

from dpql.answers import NoisyAnswer
from dpql.ir.exact import answer_all, per_row
from dpql.ir.queries import (
    CatIn,
    CorrRequirement,
    Count,
    Marginal,
    MeanRequirement,
    Prefix,
    Tolerance,
)
from dpql.plan.requirements import expand_requirements
from dpql.postprocess import iproj

WORKLOAD_SD = 0.004


def _workload(syn, seed: int = 5) -> list[NoisyAnswer]:
    """What a synthesizer measured and fitted: syn's own answers plus noise of sd WORKLOAD_SD
    (so syn fits them within noise, as a synthesizer's output does)."""
    rng = np.random.default_rng(seed)
    qs = [
        Marginal(("sex", "job")),
        Marginal(("job", "income")),
        Marginal(("age", "sex")),
        Marginal(("hours",)),
        Prefix(("age",), (0.5,), "income"),
        Count(CatIn("job", frozenset({2}))),
    ]
    return [
        NoisyAnswer(q, a + rng.normal(0, WORKLOAD_SD, a.shape), WORKLOAD_SD)
        for q, a in zip(qs, answer_all(qs, syn), strict=True)
    ]


def _weighted_error(workload: list[NoisyAnswer], weights: np.ndarray, syn) -> float:
    """Mean |E_w g - b| over the workload's cells (the reweighted table, before resampling)."""
    errs = [np.abs(weights @ per_row(m.query, syn) - m.value) for m in workload]
    return float(np.concatenate(errs).mean())


def test_sparse_features_match_the_dense_ones(syn) -> None:
    workload = _workload(syn)
    sparse = iproj.sparse_workload(workload, syn, prior_rows=100.0)
    assert sparse is not None and sparse.size == sum(m.query.cells(DOMAIN) for m in workload)
    w = np.random.default_rng(0).dirichlet(np.ones(syn.n))
    for m, got in zip(workload, sparse.means(w), strict=True):
        np.testing.assert_allclose(got, w @ per_row(m.query, syn), atol=1e-12)
    assert all(np.allclose(r, 100.0 * WORKLOAD_SD**2) for r in sparse.ridge)


@pytest.mark.parametrize("draw", [0, 1])
def test_keeping_the_workload_reduces_its_drift(draw: int, real, syn) -> None:
    tol = Tolerance(within=0.05)
    reqs = [
        CorrRequirement("age", "hours", tol),
        MeanRequirement("hours", CatIn("sex", frozenset({0})), Tolerance(within=3.0)),
    ]
    m = expand_requirements(reqs, DOMAIN)
    meas = iproj.measure(m.queries, ExactOracle(real, seed=10 + draw), 0.5, label="req")
    workload = _workload(syn)
    prior = 0.1 * syn.n  # a weak prior: the requirements move the table a long way
    plain = iproj.iproject(syn, meas, seed=draw, prior_rows=prior, ess_floor=0.2)
    kept = iproj.iproject(
        syn, meas, seed=draw, prior_rows=prior, ess_floor=0.2,
        workload=iproj.sparse_workload(workload, syn, prior),
    )  # fmt: skip
    assert kept.method == "lbfgs" and kept.penalty_cells > 0 and plain.penalty_cells == 0
    assert kept.kkt_violation <= 1e-6
    uniform = np.full(syn.n, 1.0 / syn.n)
    start, drift, held = (_weighted_error(workload, w, syn) for w in
                          (uniform, plain.weights, kept.weights))  # fmt: skip
    # without the penalties post-processing moves the workload answers well past their noise;
    # with them the drift is at least halved
    assert drift > 2 * start
    assert held - start < 0.5 * (drift - start)
    # and the requirements' measures still move toward the noisy answers
    for res in (plain, kept):
        before = np.abs(res.before - res.noisy) / res.sigma
        after = np.abs(res.reweighted - res.noisy) / res.sigma
        assert after.sum() < 0.8 * before.sum()


@pytest.mark.parametrize("workload", [False, True])
def test_a_box_is_met_with_or_without_the_workload(workload: bool, real, syn) -> None:
    """A box constraint (``iproj.Boxes``) on a per-row statistic is met at its edge by the
    reweighting, whether the dual is solved by proximal Newton (no workload) or by L-BFGS-B with
    the workload's penalties (``dual.solve_penalised``, the L1 term split into two bounded
    halves), and the controlled rounding keeps it on the released rows."""
    reqs = [CorrRequirement("age", "hours", Tolerance(within=0.05))]
    m = expand_requirements(reqs, DOMAIN)
    meas = iproj.measure(m.queries, ExactOracle(real, seed=30), 0.5, label="req")
    F = iproj.features(m.queries, syn)
    col, sd = F[:, 0], meas.sigma[0]  # E age
    start = float(col.mean())
    box = iproj.Boxes(col[:, None], np.array([start + 5 * sd]), np.array([sd]), np.array([sd]))
    prior = syn.n
    res = iproj.iproject(
        syn, meas, seed=0, prior_rows=prior, ess_floor=0.2, boxes=box,
        workload=iproj.sparse_workload(_workload(syn), syn, prior) if workload else None,
    )  # fmt: skip
    assert res.method == ("lbfgs" if workload else "newton") and res.boxes == 1
    assert res.kkt_violation <= 1e-6
    got = float(res.weights @ col)
    assert got == pytest.approx(start + 4 * sd, abs=1e-3 * sd)  # the box's near edge
    released = float(iproj.features(m.queries, res.table)[:, 0].mean())
    assert abs(released - got) < 0.05 * sd


def test_the_noise_scaled_prior_holds_the_workload_where_a_full_prior_lets_it_drift(
    real, syn
) -> None:
    """A box that moves the table: with the prior worth ``z / s`` rows
    (``PostprocessPolicy.prior_strength``) the measured workload answers drift less from their
    noisy values than with a prior worth every row, which outweighs their evidence."""
    from dpql.postprocess.policy import PostprocessPolicy

    reqs = [CorrRequirement("age", "hours", Tolerance(within=0.05))]
    m = expand_requirements(reqs, DOMAIN)
    meas = iproj.measure(m.queries, ExactOracle(real, seed=31), 0.5, label="req")
    F = iproj.features(m.queries, syn)
    col, sd = F[:, 0], meas.sigma[0]
    box = iproj.Boxes(col[:, None], np.array([col.mean() + 5 * sd]), np.array([sd]),
                      np.array([sd]))  # fmt: skip
    workload = _workload(syn)
    derived = PostprocessPolicy().prior_strength(syn.n, [w.sd for w in workload])
    assert derived == pytest.approx(min(syn.n, 2.0 / WORKLOAD_SD))
    assert PostprocessPolicy(prior_rows=0.5).prior_strength(syn.n, []) == 0.5 * syn.n
    assert PostprocessPolicy().prior_strength(syn.n, []) == syn.n  # nothing measured
    drift = {}
    for prior in (float(syn.n), derived):
        res = iproj.iproject(
            syn, meas, seed=0, prior_rows=prior, ess_floor=0.2, boxes=box,
            workload=iproj.sparse_workload(workload, syn, prior),
        )  # fmt: skip
        drift[prior] = _weighted_error(workload, res.weights, syn)
    assert drift[derived] < drift[float(syn.n)]
