"""DP acceptance tests (dpql.postprocess.accept): model metrics via one counting query, moment verdicts."""

from __future__ import annotations

import itertools
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from test_iproj_support import DOMAIN, ExactOracle

from dpql.diagnostics import DiagnosticError
from dpql.domain import Domain, EncodedTable
from dpql.ir.exact import answer, answer_all, design_matrix
from dpql.ir.queries import (
    CatIn,
    CentredProduct,
    CorrRequirement,
    MeanRequirement,
    ModelRequirement,
    Moment,
    Or,
    Tolerance,
    TruePred,
)
from dpql.plan import acceptance
from dpql.plan.estimates import value_sd
from dpql.plan.requirements import expand_requirements, product_query
from dpql.postprocess import accept, iproj, risk, run

LOGIT = ModelRequirement(
    "logistic", "income", ("age", "hours", "sex", "job"), Tolerance(within=0.5), text="logit"
)
LINEAR = ModelRequirement(
    "linear", "hours", ("age", "x", "job"), Tolerance(metric="rmse", op="<=", bound=50.0), text="lin"
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


def test_fitted_model_scores_match_sklearn(syn) -> None:
    q = accept.fit_model(LOGIT, syn)
    assert len(q.coef) == 2 and len(q.coef[0]) == 1 + 1 + 2 + 3
    from sklearn.linear_model import LogisticRegression

    X = design_matrix(LOGIT.features, syn)
    ref = LogisticRegression(max_iter=2000, random_state=0).fit(X, syn.codes["income"])
    assert answer(q, syn)[0] == pytest.approx(ref.score(X, syn.codes["income"]))
    lin = accept.fit_model(LINEAR, syn)
    pred = np.clip(
        design_matrix(LINEAR.features, syn) @ np.asarray(lin.coef[0]) + lin.intercept[0], 0, 1
    )
    assert answer(lin, syn)[0] == pytest.approx(np.mean((syn.scaled["hours"] - pred) ** 2))


def test_models_are_measured_in_one_release_with_known_sigma(real, syn) -> None:
    oracle = ExactOracle(real, seed=7)
    rho = 2.0
    res = accept.accept_models([LOGIT, LINEAR], syn, oracle, rho)
    (event,) = oracle.ledger.events
    assert event.phase == "accept" and event.count == 2
    assert event.l2_sensitivity == pytest.approx(math.sqrt(2) / real.n)
    logit, lin = res
    assert logit.sigma == pytest.approx(event.noise_scale)
    true_acc = answer(accept.fit_model(LOGIT, syn), real)[0]
    assert abs(logit.real_noisy - true_acc) < 5 * logit.sigma
    true_rmse = 98 * math.sqrt(answer(accept.fit_model(LINEAR, syn), real)[0])
    assert lin.metric == "rmse" and lin.real_noisy == pytest.approx(true_rmse, rel=0.01)
    assert logit.verdict == "pass" and lin.verdict == "pass"
    assert math.isnan(logit.synthetic_before)  # no pre-post-processing table was given
    json.dumps([r.to_json() for r in res])


def test_tolerances_fail_and_bound_metrics(real, syn) -> None:
    oracle = ExactOracle(real, seed=8)
    tight = ModelRequirement("logistic", "income", LOGIT.features, Tolerance(within=1e-4))
    low = ModelRequirement(
        "logistic", "income", LOGIT.features, Tolerance(metric="accuracy", op=">=", bound=0.3)
    )
    high = ModelRequirement(
        "logistic", "income", LOGIT.features, Tolerance(metric="accuracy", op=">=", bound=0.999)
    )
    res = accept.accept_models([tight, low, high], syn, oracle, 50.0)
    assert abs(res[0].synthetic_after - res[0].real_noisy) > 10 * res[0].sigma  # shifted data
    assert [r.verdict for r in res] == ["fail", "pass", "fail"]


def test_auc_is_rejected_with_the_reason(real, syn) -> None:
    auc = ModelRequirement(
        "logistic", "income", ("age",), Tolerance(metric="auc", op=">=", bound=0.5), text="a"
    )
    (d,) = accept.plan_diagnostics(auc)
    assert d.code == "E505" and d.severity == "error" and "pairwise" in d.message
    assert "accuracy, f1" in (d.hint or "")
    oracle = ExactOracle(real, seed=9)
    with pytest.raises(DiagnosticError) as e:
        accept.accept_models([auc], syn, oracle, 1.0)
    assert e.value.codes == ["E505"] and not oracle.ledger.events  # nothing was spent


def test_f1_is_measured_from_accuracy_and_true_positives(real, syn) -> None:
    """F1 = 2 TP / (1 + 2 TP - acc): two counting queries of the fitted model on the real table."""
    from sklearn.metrics import f1_score

    req = ModelRequirement(
        "logistic", "income", LOGIT.features, Tolerance(metric="f1", op=">=", bound=0.2)
    )
    q = accept.fit_model(req, syn)
    tp = accept.true_positive_query(q)
    scores = design_matrix(q.features, real) @ np.asarray(q.coef).T + np.asarray(q.intercept)
    pred, y = np.argmax(scores, axis=1), real.codes["income"]
    assert answer(tp, real)[0] == pytest.approx(np.mean((pred == 1) & (y == 1)))
    exact = f1_score(y, pred)
    assert accept.metric_value("f1", [answer(q, real)[0], answer(tp, real)[0]]) == pytest.approx(
        exact
    )
    oracle = ExactOracle(real, seed=12)
    (res,) = accept.accept_models([req], syn, oracle, 20.0)
    (event,) = oracle.ledger.events
    assert event.count == 2 and event.l2_sensitivity == pytest.approx(math.sqrt(2) / real.n)
    assert res.metric == "f1" and 0 < res.sigma < 0.01
    assert abs(res.real_noisy - exact) < 5 * res.sigma
    assert res.synthetic_after == pytest.approx(f1_score(syn.codes["income"], _predict(q, syn)))
    assert res.verdict == ("pass" if exact - 2 * res.sigma > 0.2 else "inconclusive")
    assert acceptance.acceptance_queries(req, real.domain) == 2


def test_f1_of_a_two_valued_label_with_a_null_state(real, syn) -> None:
    """A two-valued label under ``missing: keep`` (the default; its null code a third class
    the model never predicts) has the F1 test of a binary label, over the rows where it is
    present."""
    from dataclasses import replace

    from sklearn.metrics import f1_score

    domain = Domain(tuple(replace(c, nullable=c.name == "income") for c in real.domain))

    def with_empty_labels(t: EncodedTable, seed: int) -> EncodedTable:
        y = t.codes["income"].copy()
        y[np.random.default_rng(seed).random(t.n) < 0.1] = domain["income"].null_code
        return EncodedTable(domain, {**t.codes, "income": y}, dict(t.scaled))

    r, s = with_empty_labels(real, 1), with_empty_labels(syn, 2)
    req = ModelRequirement(
        "logistic", "income", LOGIT.features, Tolerance(metric="f1", op=">=", bound=0.2)
    )
    q = accept.fit_model(req, accept.finite_rows(s, (*req.features, req.label)))
    tp = accept.true_positive_query(q)
    pred, y = _predict(q, r), r.codes["income"]
    present = y != domain["income"].null_code
    assert answer(tp, r)[0] == pytest.approx(np.mean((pred == 1) & (y == 1) & present))
    (res,) = accept.accept_models([req], s, ExactOracle(r, seed=12), 20.0)
    exact = f1_score(y[present], pred[present])
    assert abs(res.real_noisy - exact) < 5 * res.sigma


def _predict(q, table) -> np.ndarray:
    s = design_matrix(q.features, table) @ np.asarray(q.coef).T + np.asarray(q.intercept)
    return np.argmax(s, axis=1)


def test_r2_reuses_the_label_moments_of_the_iproj_measurements(real, syn) -> None:
    within = ModelRequirement("linear", "hours", ("age", "x", "job"), Tolerance(within=0.5))
    ev = _postprocessed(real, syn, [within])
    q = accept.fit_model(within, ev.table)
    u = real.scaled["hours"]
    pred = np.clip(design_matrix(q.features, real) @ np.asarray(q.coef[0]) + q.intercept[0], 0, 1)
    exact = 1 - np.mean((u - pred) ** 2) / np.var(u)
    oracle = ExactOracle(real, seed=13)
    (res,) = accept.accept_models([within], ev.table, oracle, 5.0, evidence=ev, before=syn)
    (event,) = oracle.ledger.events
    assert event.count == 1  # E u and E(u - 1/2)^2 come from the I-projection release
    assert res.metric == "r2" and abs(res.real_noisy - exact) < 5 * res.sigma
    assert 0 < res.sigma < 0.05 and math.isfinite(res.synthetic_before)
    alone = ExactOracle(real, seed=14)
    (res2,) = accept.accept_models([within], ev.table, alone, 5.0)
    assert alone.ledger.events[0].count == 3  # no evidence: the moments join the release
    assert abs(res2.real_noisy - exact) < 5 * res2.sigma


def test_metric_values_and_undefined_cases() -> None:
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 2, 500), rng.integers(0, 2, 500)
    from sklearn.metrics import f1_score

    acc, tp = np.mean(y == p), np.mean((y == 1) & (p == 1))
    assert accept.metric_value("f1", [acc, tp]) == pytest.approx(f1_score(y, p))
    assert math.isnan(accept.metric_value("f1", [1.0, 0.0]))  # no positive row, none predicted
    # parts: mse, E u, E(u - 1/2)^2; u ~ U[0, 1] predicted by its mean has R^2 = 0
    assert accept.metric_value("r2", [1 / 12, 0.5, 1 / 12]) == pytest.approx(0.0)
    assert accept.metric_value("r2", [1 / 24, 0.5, 1 / 12]) == pytest.approx(0.5)
    assert math.isnan(accept.metric_value("r2", [0.01, 0.7, 0.04]))  # constant label at 0.7
    assert accept.metric_value("rmse", [0.25], span=10.0) == pytest.approx(5.0)
    with pytest.raises(ValueError):
        accept.metric_value("auc", [0.5])


@pytest.mark.parametrize("metric", ["accuracy", "f1", "rmse", "r2"])
def test_predicted_sd_matches_monte_carlo_at_the_prior(metric: str) -> None:
    """The plan's delta-method sd of each test metric vs repeated Gaussian noise on its parts."""
    model = "logistic" if metric in ("accuracy", "f1") else "linear"
    label = "income" if model == "logistic" else "hours"
    req = ModelRequirement(model, label, ("age",), Tolerance(metric=metric, op=">=", bound=0.0))
    s_measure, s_test = 1e-3, 2e-3
    pred = acceptance.predicted_sd(req, s_measure, s_test, DOMAIN)
    parts = np.asarray(acceptance._PRIOR_PARTS[metric])
    k = acceptance.acceptance_queries(req, DOMAIN)
    sig = np.array([s_test] * k + [s_measure] * (parts.size - k))
    rng = np.random.default_rng(1)
    span = 98.0 if model == "linear" else 1.0
    draws = [accept.metric_value(metric, parts + rng.normal(0, sig), span) for _ in range(4000)]
    assert pred == pytest.approx(np.std(draws), rel=0.1)
    if metric == "accuracy":
        assert pred == pytest.approx(s_test)


def test_plan_diagnostics_reachability() -> None:
    corr = CorrRequirement("age", "hours", Tolerance(within=0.05), text="corr(age, hours)")
    (w,) = accept.plan_diagnostics(corr, predicted=0.03, smallest_epsilon=2.5)
    assert w.code == "W506" and w.severity == "warning" and "2.5" in (w.hint or "")
    assert accept.plan_diagnostics(corr, predicted=0.02) == []
    (w,) = accept.plan_diagnostics(corr, predicted=math.inf, smallest_epsilon=math.inf)
    assert w.code == "W506" and "no budget" in (w.hint or "")
    (w,) = accept.plan_diagnostics(corr, measured=False)
    assert w.code == "W507" and "postprocess" in (w.hint or "")
    impossible = [
        ModelRequirement("logistic", "income", ("age",), Tolerance(metric="accuracy", op=">", bound=1.0)),
        ModelRequirement("logistic", "income", ("age",), Tolerance(metric="f1", op=">=", bound=1.5)),
        ModelRequirement("linear", "hours", ("age",), Tolerance(metric="rmse", op="<", bound=0.0)),
        ModelRequirement("linear", "hours", ("age",), Tolerance(metric="r2", op=">", bound=1.0)),
    ]
    assert not any(acceptance.bound_can_hold(r, DOMAIN) for r in impossible)
    possible = [
        ModelRequirement("logistic", "income", ("age",), Tolerance(metric="accuracy", op=">=", bound=1.0)),
        ModelRequirement("linear", "hours", ("age",), Tolerance(metric="rmse", op="<=", bound=5.0)),
        ModelRequirement("linear", "hours", ("age",), Tolerance(metric="r2", op="<", bound=-3.0)),
    ]
    assert all(acceptance.bound_can_hold(r, DOMAIN) for r in possible)
    (w,) = accept.plan_diagnostics(impossible[0], bound_ok=False)
    assert w.code == "W506" and "holds on no table" in w.message


@pytest.mark.parametrize(("a", "digest"), [(1.0, 7.2e-4), (3.0, 2.7e-2)])
def test_even_quadratic_is_minimax(a: float, digest: float) -> None:
    """Equioscillation on a fine grid; the digest's LP values add a grid margin, so are larger."""
    q2, eps = risk._even_quadratic(a)
    z = np.linspace(0, a, 200_001)
    err = np.log(2 * np.cosh(z / 2)) - (math.log(2) + eps) - q2 * z**2
    assert np.abs(err).max() == pytest.approx(eps, rel=1e-4)
    assert err.max() == pytest.approx(eps, rel=1e-3) and err.min() == pytest.approx(-eps, rel=1e-3)
    assert 0.75 * digest < eps <= digest


def _postprocessed(
    real, syn, reqs: list, rho: float = 5.0, seed: int = 3
) -> iproj.IProjResult:
    rm = expand_requirements(reqs, DOMAIN)
    m = iproj.measure(rm.queries, ExactOracle(real, seed=seed), rho, label="reqs")
    return iproj.iproject(syn, m, seed=seed)


def test_linear_bound_covers_the_observed_loss_gap(real, syn) -> None:
    ev = _postprocessed(real, syn, [LINEAR])
    q = accept.fit_model(LINEAR, ev.table)
    bound = accept.excess_risk_bound(LINEAR, q, ev)
    assert bound is not None and bound.rho > 0 and "not the accuracy" in bound.assumptions

    def loss(t):  # unclipped squared loss on the [0, 1] scale
        s = design_matrix(LINEAR.features, t) @ np.asarray(q.coef[0]) + q.intercept[0]
        return float(np.mean((t.scaled["hours"] - s) ** 2))

    assert abs(loss(real) - loss(ev.table)) <= bound.value / 2
    # rho bounds every raw moment's gap (E f and E fg, though fg is measured centred), w.p. 95%
    factors = [("age", None), ("x", None), ("hours", None)]
    factors += [("job", k) for k in range(1, DOMAIN.card("job"))]  # not the reference level
    raw = [product_query([f, g]) for f, g in itertools.product(factors, repeat=2)]
    raw = [r for r in raw if not isinstance(r, float)]
    gap = np.abs(np.concatenate(answer_all(raw, real)) - np.concatenate(answer_all(raw, ev.table)))
    assert gap.max() <= bound.rho
    lb = accept.excess_risk_bound(LOGIT, accept.fit_model(LOGIT, ev.table), ev)
    assert lb is None  # the logistic requirement's moments were not measured


def test_moment_acceptance_reports_noisy_before_after(real, syn) -> None:
    corr = CorrRequirement("age", "hours", Tolerance(within=0.05), text="corr(age, hours)")
    mean = MeanRequirement("hours", CatIn("sex", frozenset({0})), Tolerance(within=1.0), text="m")
    ev = _postprocessed(real, syn, [corr, mean])
    true = np.corrcoef(real.scaled["age"], real.scaled["hours"])[0, 1]
    c, m = (accept.accept_moment(r, ev) for r in (corr, mean))
    assert abs(c.real_noisy - true) < 5 * c.sigma and c.sigma > 0
    assert c.verdict == "pass"  # resampling noise (not the tilt) dominates the corr gap here
    assert abs(m.synthetic_after - m.real_noisy) < 0.2 * abs(m.synthetic_before - m.real_noisy)
    assert m.verdict == "pass"
    female = 1 + 98 * real.scaled["hours"][real.codes["sex"] == 0]
    assert abs(m.real_noisy - female.mean()) < 5 * m.sigma
    other = accept.accept_moment(CorrRequirement("age", "x", Tolerance(within=0.1)), ev)
    assert other.verdict == "inconclusive" and "not measured" in other.note
    json.dumps([c.to_json(), m.to_json(), other.to_json()])


def test_a_moment_verdicts_sd_is_the_larger_of_its_two_estimates(real, syn) -> None:
    """The sd is the delta method at the noisy answers or at the reweighted moments, whichever
    is larger: a reweighted table whose variances stay above the real ones (the projection
    stopped short) would understate the noisy correlation's sd, and noisy answers whose
    variances came out high by chance would too."""
    import dataclasses

    corr = CorrRequirement("age", "hours", Tolerance(within=0.5), text="corr(age, hours)")
    ev = _postprocessed(real, syn, [corr], rho=0.5)
    squares = np.array([isinstance(q, CentredProduct) and q.square for q in ev.queries])
    sigmas = dict(zip(ev.queries, ev.sigma.tolist(), strict=True))

    def sd_at(values: np.ndarray) -> float:
        return value_sd(corr, dict(zip(ev.queries, values.tolist(), strict=True)), sigmas, DOMAIN)

    for factor in (2.0, 0.5):  # the reweighted variances twice / half the noisy ones
        moved = np.where(squares, factor * ev.noisy, ev.noisy)
        res = accept.accept_moment(corr, dataclasses.replace(ev, reweighted=moved))
        at_noisy, at_moved = sd_at(ev.noisy), sd_at(moved)
        assert (at_noisy > at_moved) == (factor > 1)
        assert res.sigma == pytest.approx(max(at_noisy, at_moved), rel=1e-12)


@pytest.mark.slow
def test_run_postprocess_spends_the_two_planned_phases(real, syn) -> None:
    reqs = (LOGIT, CorrRequirement("age", "hours", Tolerance(within=0.05)))
    plan = SimpleNamespace(
        measures=expand_requirements(reqs, DOMAIN),
        requirements=reqs,
        phase_rho={"iproj.measure": 1.0, "accept.test": 0.5},
    )
    oracle = ExactOracle(real, seed=11)
    out = run.run_postprocess(plan, oracle, syn, seed=4)
    assert [e.phase for e in oracle.ledger.events] == ["iproj.measure", "accept"]
    assert sum(e.rho for e in oracle.ledger.events) == pytest.approx(1.5)
    js = json.loads(json.dumps(out.to_json()))
    assert len(js["requirements"]) == 2 and js["iproj"]["sampling_seed"] == 4
    # measured by its pilot alone: no moments, no moment-based excess-risk bound
    assert js["requirements"][0]["excess_risk_bound"] is None
    for r in js["requirements"]:  # the record's per-requirement fields
        assert {"real_noisy", "sigma", "tolerance", "synthetic_before", "synthetic_after",
                "verdict"} <= set(r)  # fmt: skip
        assert r["synthetic_before"] is not None and r["synthetic_after"] is not None
    summary = out.summary_json()
    assert summary["method"] == "iproj" and len(summary["measures"]) == len(summary["noisy"])
    # the logistic's only measure, its pilot fitted on the synthetic table, then the corr's,
    # its three second moments centred at the synthetic means (dpql.postprocess.centre)
    assert summary["measures"][0].startswith("model_accuracy(")
    assert sum(m.startswith("model_accuracy(") for m in summary["measures"]) == 1
    centred = [q for q in out.iproj.queries
               if isinstance(q, CentredProduct) and q.centres != (0.5, 0.5)]  # fmt: skip
    assert len(centred) == 3
    assert len(out.iproj.queries) == len(plan.measures.queries) == 1 + 5
    exact = np.concatenate(answer_all(out.iproj.queries, real))
    if any(r.role == "constrained" for r in out.roles):  # moved toward the real table
        assert np.abs(out.iproj.after - exact).max() < np.abs(out.iproj.before - exact).max()
    else:  # every requirement inside its band or without room: the table does not move
        assert out.iproj.method == "none"
        assert np.array_equal(out.iproj.after, out.iproj.before)


# ---------------------------------------------------------------------------------------------
# Edge cases: a clear warning or an inconclusive verdict with a note, never a silent answer


def test_contradictory_mean_targets_are_reported_and_not_passed(real, syn) -> None:
    """Two mean requirements on one column whose measured targets are disjoint (the same
    statistic, written two ways): no reweighting meets both, so the I-projection warns (W504),
    reports the distance and the verdicts fail."""
    both = Or((CatIn("sex", frozenset({0})), CatIn("sex", frozenset({1}))))
    plain = MeanRequirement("hours", TruePred(), Tolerance(within=1.0), text="mean(hours)")
    again = MeanRequirement("hours", both, Tolerance(within=1.0), text="mean(hours | any sex)")
    rm = expand_requirements([plain, again], DOMAIN)
    noisy = np.concatenate(answer_all(rm.queries, real))
    noisy[rm.queries.index(Moment(("hours",)))] -= 0.05  # 4.9 hours below the truth
    noisy[rm.queries.index(Moment(("hours",), both))] += 0.05  # 4.9 hours above
    ev = iproj.iproject(syn, iproj.Measurement(rm.queries, noisy, 1e-3, 1.0, real.n), seed=1)
    assert "W504" in [d.code for d in ev.diagnostics]
    assert ev.projection_distance > 0.05
    a, b = accept.accept_moment(plain, ev), accept.accept_moment(again, ev)
    assert abs(a.real_noisy - b.real_noisy) > 9.0  # disjoint targets, each +- ~0.1
    assert a.verdict == b.verdict == "fail"
    true_mean = 1 + 98 * real.scaled["hours"].mean()
    assert abs(a.synthetic_after - true_mean) < 1.0  # the table went to the consistent middle


def test_constant_column_gives_a_warning_and_an_inconclusive_note(real, syn) -> None:
    const = EncodedTable(DOMAIN, syn.codes, {**syn.scaled, "x": np.full(syn.n, 0.5)})
    req = CorrRequirement("age", "x", Tolerance(within=0.5), text="corr(age, x)")
    rm = expand_requirements([req], DOMAIN)
    m = iproj.measure(rm.queries, ExactOracle(real, seed=2), 5.0, label="reqs")
    ev = iproj.iproject(const, m, seed=0)
    assert "W502" in [d.code for d in ev.diagnostics]
    res = accept.accept_moment(req, ev)
    assert math.isfinite(res.real_noisy) and math.isnan(res.synthetic_after)
    assert res.verdict == "inconclusive" and "undefined on the synthetic table" in res.note
    assert res.to_json()["synthetic_after"] is None  # JSON has no NaN


@pytest.mark.slow
def test_one_distinct_row_and_nan_rows_through_the_acceptance_path(real, syn) -> None:
    reqs = (LOGIT, CorrRequirement("age", "hours", Tolerance(within=0.5), text="corr"))
    plan = SimpleNamespace(
        measures=expand_requirements(reqs, DOMAIN),
        requirements=reqs,
        phase_rho={"iproj.measure": 1.0, "accept.test": 0.5},
    )
    one = syn.take(np.zeros(50, dtype=int))
    out = run.run_postprocess(plan, ExactOracle(real, seed=15), one, seed=0)
    assert "W501" in [d["code"] for d in out.summary_json()["diagnostics"]]
    model, corr = out.acceptance
    assert corr.verdict == "inconclusive" and "undefined" in corr.note
    assert model.synthetic_before == model.synthetic_after  # nothing could move
    assert model.excess_risk_bound is None or model.excess_risk_bound.vacuous

    scaled = {**syn.scaled, "age": syn.scaled["age"].copy()}
    scaled["age"][:25] = np.nan
    nan_table = EncodedTable(DOMAIN, syn.codes, scaled)
    out = run.run_postprocess(plan, ExactOracle(real, seed=16), nan_table, seed=0)
    assert "W503" in [d["code"] for d in out.summary_json()["diagnostics"]]
    assert np.isfinite(out.table.scaled["age"]).all()
    model, corr = out.acceptance
    assert math.isfinite(model.synthetic_before) and math.isfinite(corr.synthetic_before)
    json.dumps(out.to_json(), allow_nan=False)
