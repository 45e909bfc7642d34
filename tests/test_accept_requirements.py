"""DP acceptance tests (dpql.accept): model metrics via one counting query, moment verdicts."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from test_iproj_support import DOMAIN, ExactOracle, make_table

from dpql import accept
from dpql.diagnostics import DiagnosticError
from dpql.plan.exact import answer, answer_all, design_matrix
from dpql.plan.ir import (
    CatIn,
    CorrRequirement,
    MeanRequirement,
    ModelRequirement,
    Tolerance,
)
from dpql.plan.requirements import expand_requirements
from dpql.synth import iproj

REAL = make_table(8000, seed=1)
SYN = make_table(4000, seed=2, shift=0.5)
LOGIT = ModelRequirement(
    "logistic", "income", ("age", "hours", "sex", "job"), Tolerance(within=0.5), text="logit"
)
LINEAR = ModelRequirement(
    "linear", "hours", ("age", "x", "job"), Tolerance(within=50.0), text="lin"
)


def test_verdict_rules() -> None:
    assert accept.within_verdict(0.01, 0.001, 0.05) == "pass"
    assert accept.within_verdict(0.10, 0.001, 0.05) == "fail"
    assert accept.within_verdict(0.049, 0.01, 0.05) == "inconclusive"  # threshold within 2 sigma
    assert accept.within_verdict(math.nan, 0.01, 0.05) == "inconclusive"
    assert accept.bound_verdict(0.85, 0.87, ">=", 0.8) == "pass"
    assert accept.bound_verdict(0.70, 0.75, ">=", 0.8) == "fail"
    assert accept.bound_verdict(0.79, 0.81, ">=", 0.8) == "inconclusive"
    assert accept.bound_verdict(0.10, 0.12, "<=", 0.2) == "pass"


def test_fitted_model_scores_match_sklearn() -> None:
    q = accept.fit_model(LOGIT, SYN)
    assert len(q.coef) == 2 and len(q.coef[0]) == 1 + 1 + 2 + 3
    from sklearn.linear_model import LogisticRegression

    X = design_matrix(LOGIT.features, SYN)
    ref = LogisticRegression(max_iter=2000, random_state=0).fit(X, SYN.codes["income"])
    assert answer(q, SYN)[0] == pytest.approx(ref.score(X, SYN.codes["income"]))
    lin = accept.fit_model(LINEAR, SYN)
    pred = np.clip(
        design_matrix(LINEAR.features, SYN) @ np.asarray(lin.coef[0]) + lin.intercept[0], 0, 1
    )
    assert answer(lin, SYN)[0] == pytest.approx(np.mean((SYN.scaled["hours"] - pred) ** 2))


def test_models_are_measured_in_one_release_with_known_sigma() -> None:
    oracle = ExactOracle(REAL, seed=7)
    rho = 2.0
    res = accept.accept_models([LOGIT, LINEAR], SYN, oracle, rho)
    (event,) = oracle.ledger.events
    assert event.phase == "accept" and event.count == 2
    assert event.l2_sensitivity == pytest.approx(math.sqrt(2) / REAL.n)
    logit, lin = res
    assert logit.sigma == pytest.approx(event.noise_scale)
    true_acc = answer(accept.fit_model(LOGIT, SYN), REAL)[0]
    assert abs(logit.real - true_acc) < 5 * logit.sigma
    true_rmse = 98 * math.sqrt(answer(accept.fit_model(LINEAR, SYN), REAL)[0])
    assert lin.metric == "rmse" and lin.real == pytest.approx(true_rmse, rel=0.01)
    assert logit.verdict == "pass" and lin.verdict == "pass"
    json.dumps([r.to_json() for r in res])


def test_tolerances_fail_and_bound_metrics() -> None:
    oracle = ExactOracle(REAL, seed=8)
    tight = ModelRequirement("logistic", "income", LOGIT.features, Tolerance(within=1e-4))
    low = ModelRequirement(
        "logistic", "income", LOGIT.features, Tolerance(metric="accuracy", op=">=", bound=0.3)
    )
    high = ModelRequirement(
        "logistic", "income", LOGIT.features, Tolerance(metric="accuracy", op=">=", bound=0.999)
    )
    res = accept.accept_models([tight, low, high], SYN, oracle, 50.0)
    assert abs(res[0].synthetic - res[0].real) > 10 * res[0].sigma  # shifted synthetic data
    assert [r.verdict for r in res] == ["fail", "pass", "fail"]
    f1 = ModelRequirement(
        "logistic", "income", ("age",), Tolerance(metric="f1", op=">=", bound=0.5)
    )
    assert [d.code for d in accept.plan_diagnostics(f1)] == ["E505"]
    with pytest.raises(DiagnosticError):
        accept.accept_models([f1], SYN, oracle, 1.0)


@pytest.mark.parametrize(("a", "digest"), [(1.0, 7.2e-4), (3.0, 2.7e-2)])
def test_even_quadratic_is_minimax(a: float, digest: float) -> None:
    """Equioscillation on a fine grid; the digest's LP values add a grid margin, so are larger."""
    q2, eps = accept._even_quadratic(a)
    z = np.linspace(0, a, 200_001)
    err = np.log(2 * np.cosh(z / 2)) - (math.log(2) + eps) - q2 * z**2
    assert np.abs(err).max() == pytest.approx(eps, rel=1e-4)
    assert err.max() == pytest.approx(eps, rel=1e-3) and err.min() == pytest.approx(-eps, rel=1e-3)
    assert 0.75 * digest < eps <= digest


def _postprocessed(reqs: list, rho: float = 5.0, seed: int = 3) -> iproj.IProjResult:
    rm = expand_requirements(reqs, DOMAIN)
    m = iproj.measure(rm.queries, ExactOracle(REAL, seed=seed), rho, label="reqs")
    return iproj.iproject(SYN, m, seed=seed)


def test_linear_bound_covers_the_observed_loss_gap() -> None:
    ev = _postprocessed([LINEAR])
    q = accept.fit_model(LINEAR, ev.table)
    bound = accept.excess_risk_bound(LINEAR, q, ev)
    assert bound is not None and bound.rho > 0 and "not the accuracy" in bound.assumptions

    def loss(t):  # unclipped squared loss on the [0, 1] scale
        s = design_matrix(LINEAR.features, t) @ np.asarray(q.coef[0]) + q.intercept[0]
        return float(np.mean((t.scaled["hours"] - s) ** 2))

    assert abs(loss(REAL) - loss(ev.table)) <= bound.value / 2
    lb = accept.excess_risk_bound(LOGIT, accept.fit_model(LOGIT, ev.table), ev)
    assert lb is None  # the logistic requirement's moments were not measured


def test_moment_acceptance_reports_noisy_before_after() -> None:
    corr = CorrRequirement("age", "hours", Tolerance(within=0.05), text="corr(age, hours)")
    mean = MeanRequirement("hours", CatIn("sex", frozenset({0})), Tolerance(within=1.0), text="m")
    ev = _postprocessed([corr, mean])
    true = np.corrcoef(REAL.scaled["age"], REAL.scaled["hours"])[0, 1]
    c, m = (accept.accept_moment(r, ev) for r in (corr, mean))
    assert abs(c.real_noisy - true) < 5 * c.sigma and c.sigma > 0
    assert c.verdict == "pass"  # resampling noise (not the tilt) dominates the corr gap here
    assert abs(m.synthetic_after - m.real_noisy) < 0.2 * abs(m.synthetic_before - m.real_noisy)
    assert m.verdict == "pass"
    female = 1 + 98 * REAL.scaled["hours"][REAL.codes["sex"] == 0]
    assert abs(m.real_noisy - female.mean()) < 5 * m.sigma
    other = accept.accept_moment(CorrRequirement("age", "x", Tolerance(within=0.1)), ev)
    assert other.verdict == "inconclusive" and "not measured" in other.note
    json.dumps([c.to_json(), m.to_json(), other.to_json()])


def test_run_postprocess_spends_the_two_planned_phases() -> None:
    reqs = (LOGIT, CorrRequirement("age", "hours", Tolerance(within=0.05)))
    plan = SimpleNamespace(
        measures=expand_requirements(reqs, DOMAIN),
        requirements=reqs,
        phase_rho={"iproj.measure": 1.0, "accept.test": 0.5},
    )
    oracle = ExactOracle(REAL, seed=11)
    out = accept.run_postprocess(plan, oracle, SYN, seed=4)
    assert [e.phase for e in oracle.ledger.events] == ["iproj.measure", "accept"]
    assert sum(e.rho for e in oracle.ledger.events) == pytest.approx(1.5)
    js = json.loads(json.dumps(out.to_json()))
    assert len(js["requirements"]) == 2 and js["iproj"]["sampling_seed"] == 4
    assert js["requirements"][0]["bound"] is not None  # the logistic moments were measured
    exact = np.concatenate(answer_all(plan.measures.queries, REAL))
    assert np.abs(out.iproj.after - exact).max() < np.abs(out.iproj.before - exact).max()
