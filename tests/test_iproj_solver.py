"""I-projection (dpql.postprocess.iproj): KKT conditions, hull projection, edge cases, measurement."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_iproj_support import DOMAIN, ExactOracle, make_table

from dpql import sampling
from dpql.diagnostics import DiagnosticError
from dpql.domain import EncodedTable
from dpql.ir.exact import answer, answer_all, per_row
from dpql.ir.queries import (
    CatIn,
    CentredProduct,
    CorrRequirement,
    Count,
    Halfspace,
    Marginal,
    MeanRequirement,
    ModelAccuracy,
    ModelRequirement,
    Moment,
    NumCmp,
    Prefix,
    Tolerance,
)
from dpql.plan.requirements import expand_requirements
from dpql.postprocess import dual, hull, iproj

REQS = [
    CorrRequirement(a, b, Tolerance(within=0.05))
    for a, b in [("age", "hours"), ("age", "x"), ("hours", "x"), ("age", "sex"), ("x", "income")]
]
QUERIES = expand_requirements(REQS, DOMAIN).queries


def test_per_row_means_equal_exact_answers(syn) -> None:
    qs = [
        Marginal(("age", "job")),
        Prefix(("age", "hours"), (0.5, 0.3), by="income"),
        Prefix(("x",), (0.5,)),
        Halfspace(("age", "x"), (0.3, -1.0), 0.1, by="sex"),
        Count(NumCmp("hours", ">", 0.4)),
        Moment(("age", "x"), CatIn("job", frozenset({1, 2}))),
        ModelAccuracy("logistic", ("age", "job"), "income", ((0,) * 4, (2, 0, 1, -1)), (0, -1)),
        ModelAccuracy("linear", ("x", "sex"), "hours", ((0.5, 0.1, 0.2),), (0.1,)),
    ]
    for q in qs:
        v = per_row(q, syn)
        assert v.shape == (syn.n, q.cells(DOMAIN))
        np.testing.assert_allclose(v.mean(axis=0), answer(q, syn), atol=1e-12)


def _random_problem(seed: int, m: int = 400, k: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    F = rng.random((m, k)) ** 2
    target = F.T @ rng.dirichlet(np.ones(m) * 0.5)  # reachable, away from uniform mean
    return F, target


@pytest.mark.parametrize("gamma", [1e-5, 5e-3])
def test_dual_solution_satisfies_kkt(gamma: float) -> None:
    F, target = _random_problem(0)
    sol = dual.solve_dual(F, target, gamma)
    w = np.exp(-(F - target) @ sol.lam)
    np.testing.assert_allclose(sol.weights, w / w.sum(), rtol=1e-9)  # w ∝ exp(F lambda)
    r = sol.weights @ F - target
    assert np.all(np.abs(r) <= gamma + 1e-8)  # primal feasibility
    active = sol.lam != 0
    np.testing.assert_allclose(r[active], gamma * np.sign(sol.lam[active]), atol=1e-8)
    assert dual.kkt_violation(F, target, gamma, sol) <= 1e-8
    if gamma == 5e-3:  # a wide box leaves some constraints slack, with lambda exactly 0
        assert (~active).any() and np.all(np.abs(r[~active]) <= gamma)


@pytest.mark.slow
def test_stochastic_solver_agrees_with_newton() -> None:
    F, target = _random_problem(1, m=2048, k=5)
    exact = dual.solve_dual(F, target, 1e-5, method="newton")
    sgd = dual.solve_dual(F, target, 1e-5, method="stochastic", epochs=40, batch=256)
    assert sgd.method == "stochastic"
    assert np.abs(sgd.weights @ F - target).max() < 5e-3
    assert np.abs(sgd.weights @ F - exact.weights @ F).max() < 5e-3


def test_hull_projection_is_the_euclidean_projection() -> None:
    F, _ = _random_problem(2, m=300, k=4)
    a = F.max(axis=0) + 0.05  # outside the hull
    h = hull.project_to_hull(F, a)
    # optimality of the projection x*: (a - x*) . (F_s - x*) <= 0 for every point of the hull
    assert np.max((F - h.projection) @ (a - h.projection)) <= 1e-6
    assert h.distance == pytest.approx(np.linalg.norm(a - h.projection))
    assert h.distance > 0.05
    inside = F.mean(axis=0) * 0.7 + F[0] * 0.3
    assert hull.project_to_hull(F, inside).distance < 1e-6


def _measurement(real, target: np.ndarray, sigma: float = 1e-3) -> iproj.Measurement:
    return iproj.Measurement(QUERIES, np.asarray(target, dtype=float), sigma, 1.0, real.n)


def test_iproject_moves_synthetic_moments_to_the_target(real, syn) -> None:
    true = np.concatenate(answer_all(QUERIES, real))
    res = iproj.iproject(syn, _measurement(real, true), seed=3)
    assert res.kkt_violation <= 1e-6 and not res.diagnostics
    assert np.abs(res.reweighted - true).max() <= 1e-5 + 1e-8
    assert np.abs(res.after - true).max() < 0.5 * np.abs(res.before - true).max()
    assert res.table.n == syn.n and 0 < res.ess <= syn.n and res.kl > 0
    js = res.to_json()
    assert js["sampling_seed"] == 3 and len(js["lambda"]) == len(QUERIES)
    again = iproj.iproject(syn, _measurement(real, true), seed=3)
    np.testing.assert_array_equal(again.table.codes["age"], res.table.codes["age"])


def test_unreachable_target_is_projected_and_reported(real, syn) -> None:
    target = np.concatenate(answer_all(QUERIES, syn))
    i = QUERIES.index(Moment(("age",)))
    target[i] = 1.5  # no reweighting gives E u_age = 1.5
    res = iproj.iproject(syn, _measurement(real, target))
    assert res.projection_distance > 0.3
    assert "W504" in [d.code for d in res.diagnostics]
    assert res.kkt_violation <= 1e-6  # exact with respect to the denoised target
    assert res.reweighted[i] < 1.0


def test_one_distinct_row_and_nan_rows(real, syn) -> None:
    one = syn.take(np.zeros(50, dtype=int))
    res = iproj.iproject(one, _measurement(real, np.concatenate(answer_all(QUERIES, real))))
    assert "W501" in [d.code for d in res.diagnostics]
    np.testing.assert_array_equal(res.table.scaled["age"], one.scaled["age"])
    assert np.all(res.lam == 0)

    scaled = {**syn.scaled, "x": syn.scaled["x"].copy()}
    scaled["x"][:10] = np.nan
    bad = EncodedTable(DOMAIN, syn.codes, scaled)
    res = iproj.iproject(bad, _measurement(real, np.concatenate(answer_all(QUERIES, real))))
    assert "W503" in [d.code for d in res.diagnostics]
    assert np.all(res.weights[:10] == 0) and np.isfinite(res.table.scaled["x"]).all()

    scaled["x"][:] = np.nan
    with pytest.raises(DiagnosticError) as e:
        iproj.iproject(
            EncodedTable(DOMAIN, syn.codes, scaled), _measurement(real, np.zeros(len(QUERIES)))
        )
    assert e.value.codes == ["E503"]


def test_constant_measure_warns(real, syn) -> None:
    scaled = {**syn.scaled, "x": np.full(syn.n, 0.5)}
    const = EncodedTable(DOMAIN, syn.codes, scaled)
    res = iproj.iproject(const, _measurement(real, np.concatenate(answer_all(QUERIES, real))))
    assert "W502" in [d.code for d in res.diagnostics]


def test_measure_is_one_gaussian_release_through_the_oracle(real) -> None:
    oracle = ExactOracle(real, seed=5)
    m = iproj.measure(QUERIES, oracle, 0.5, label="requirements")
    (event,) = oracle.ledger.events
    assert event.phase == "iproj.measure" and event.count == len(QUERIES)
    # first moments 1/n, centred products 1/(2n), centred squares 1/(4n)
    widths = [
        (0.25 if q.square else 0.5) if isinstance(q, CentredProduct) else 1.0 for q in QUERIES
    ]
    assert event.l2_sensitivity == pytest.approx(math.sqrt(sum(w * w for w in widths)) / real.n)
    assert m.sigma == pytest.approx(event.noise_scale)
    true = np.concatenate(answer_all(QUERIES, real))
    assert np.abs(m.noisy - true).max() < 5 * m.sigma.max()


def _uniform_table(n: int, seed: int) -> EncodedTable:
    """Every column independently uniform on its public domain (a poor, public-only table)."""
    rng = np.random.default_rng(seed)
    scaled = {c.name: rng.random(n) for c in DOMAIN.numeric}
    codes = {c.name: c.bin_of(c.lo + scaled[c.name] * c.span) for c in DOMAIN.numeric}
    codes.update({c.name: rng.integers(0, c.card, n).astype(np.int32) for c in DOMAIN.categorical})
    return EncodedTable(DOMAIN, codes, scaled)


# corr + a conditional mean + a logistic model: count(sex = F) + count(sex = M) = 1 and
# E[u_hours 1{F}] + E[u_hours 1{M}] = E u_hours hold on every row (redundant measures).
MIXED = expand_requirements(
    [
        CorrRequirement("age", "hours", Tolerance(within=0.1)),
        MeanRequirement("hours", CatIn("sex", frozenset({0})), Tolerance(within=1.0)),
        # measured by its moments (a `within` logistic: by its pilot alone)
        ModelRequirement("logistic", "income", ("age", "hours", "sex"), Tolerance(op=">=", bound=0.6)),
    ],
    DOMAIN,
).queries
FEMALE, MALE = Count(CatIn("sex", frozenset({0}))), Count(CatIn("sex", frozenset({1})))


@pytest.mark.parametrize("seed", [0, 1])
def test_newton_converges_fast_on_a_strong_tilt_with_redundant_measures(seed: int) -> None:
    """A uniform table tilted to a concentrated one: an ill-conditioned covariance with exact
    null directions. The proximal Newton direction must be solved to convergence (a fixed 200
    coordinate sweeps took ~50 Newton steps here, and stalled above the KKT tolerance on the
    adult-external example)."""
    real = make_table(6000, seed=1, shift=-1.0)
    true = np.concatenate(answer_all(MIXED, real))
    res = iproj.iproject(
        _uniform_table(4000, seed), iproj.Measurement(MIXED, true, 1e-4, 1.0, 6000)
    )
    assert res.iterations <= 20 and res.kkt_violation <= 1e-8
    assert not res.diagnostics and np.abs(res.lam).max() > 5  # a strong tilt indeed
    assert np.abs(res.reweighted - true).max() <= 1e-5 + 1e-8


def test_noise_that_breaks_an_identity_is_projected_away_without_bias() -> None:
    """count(F) + count(M) = 1 on every row; noisy answers break it. The affine projection
    removes exactly that component: every other target stays the noisy answer (no eta pull
    toward the synthetic mean), and no boundary warning is raised."""
    real = make_table(6000, seed=1, shift=-1.0)
    true = np.concatenate(answer_all(MIXED, real))
    noisy = true.copy()
    noisy[[MIXED.index(FEMALE), MIXED.index(MALE)]] += 0.003
    syn = _uniform_table(4000, 0)
    res = iproj.iproject(syn, iproj.Measurement(MIXED, noisy, 1e-3, 1.0, 6000))
    np.testing.assert_allclose(res.target, true, atol=1e-9)
    assert res.projection_distance == pytest.approx(0.003 * math.sqrt(2), rel=1e-6)
    assert "W504" not in [d.code for d in res.diagnostics]
    aff = hull.project_to_affine_hull(iproj.features(MIXED, syn), noisy)
    np.testing.assert_allclose(aff, true, atol=1e-9)


def test_resampling_keeps_each_rows_count_within_one_of_its_expectation(syn) -> None:
    rng = np.random.default_rng(11)
    w = rng.dirichlet(np.full(syn.n, 0.3))
    w[::7] = 0.0  # rows the I-projection gave no weight never appear
    w /= w.sum()
    for seed in range(3):
        out = sampling.resample(syn, w, 5000, seed)
        assert out.n == 5000
        # identify rows by a column with distinct values (x is continuous)
        counts = np.zeros(syn.n)
        pos = {v: i for i, v in enumerate(syn.scaled["x"])}
        for v in out.scaled["x"]:
            counts[pos[v]] += 1
        expected = 5000 * w
        assert np.all(counts >= np.floor(expected - 1e-9)) and np.all(
            counts <= np.ceil(expected + 1e-9)
        )
        assert counts[::7].sum() == 0
