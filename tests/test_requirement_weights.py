"""Requirement weights (spec/language.md sec. 5.3): one Gaussian release per weighted
requirement, inverse-variance averaging of shared measures, and the noise-weighted hull
projection of the post-processing step."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from test_cli_plan import _plan_json, _with_requirements, spec_without_data  # noqa: F401
from test_iproj_support import DOMAIN, ExactOracle

from dpql.cli import main
from dpql.diagnostics import DiagnosticError
from dpql.ir.exact import answer_all
from dpql.ir.queries import (
    CorrRequirement,
    MeanRequirement,
    Tolerance,
    TruePred,
    joint_l2_sensitivity,
)
from dpql.lang.ast import to_dsl
from dpql.lang.parser import parse_requirement, parse_requirements
from dpql.plan.requirements import expand_requirements
from dpql.plan.resolve import resolve_requirements
from dpql.postprocess import hull, iproj

TOL = Tolerance(within=0.05)


def _resolve(*texts: str):
    return resolve_requirements(parse_requirements(list(texts)), DOMAIN)


def test_weight_parses_round_trips_and_resolves() -> None:
    node = parse_requirement("corr(age, hours) within 0.05 weight 2.5")
    assert node.weight is not None and node.weight.value == 2.5
    assert to_dsl(node) == "corr(age, hours) within 0.05 weight 2.5"
    assert parse_requirement(to_dsl(node)) == node
    corr, mean = _resolve("corr(age, hours) within 0.05 weight 3", "mean(x) within 0.1 weight 1")
    assert (corr.weight, mean.weight) == (3.0, 1.0)
    assert corr.text == "corr(age, hours) within 0.05"  # the statistic and its tolerance
    (plain,) = _resolve("corr(age, hours) within 0.05")
    assert plain.weight is None


@pytest.mark.parametrize(
    ("texts", "code", "col"),
    [
        (["corr(age, hours) within 0.05 weight 0"], "E313", 30),
        (["corr(age, hours) within 0.05 weight 1", "mean(x) within 0.1"], "E314", 1),
    ],
)
def test_bad_weights_are_errors_with_positions(texts: list[str], code: str, col: int) -> None:
    with pytest.raises(DiagnosticError) as e:
        _resolve(*texts)
    (d,) = e.value.diagnostics
    assert d.code == code and d.pos is not None and d.pos.col == col


def test_releases_split_the_budget_by_weight_and_share_measures() -> None:
    a = CorrRequirement("age", "hours", TOL, weight=3.0)
    b = CorrRequirement("age", "x", TOL, weight=1.0)  # shares E age, E age^2 with a
    m = expand_requirements([a, b], DOMAIN)
    assert [r.share for r in m.releases] == [Fraction(3, 4), Fraction(1, 4)]
    assert [len(r.cells) for r in m.releases] == [5, 5] and len(m.queries) == 8
    n, rho = 6000, 0.02
    sig = m.cell_sigmas(n, rho)
    # a corr's release: E a, E b (1/n each), two centred squares (1/(4n)), a centred product
    # (1/(2n))
    l2 = math.sqrt(1 + 1 + 2 / 16 + 1 / 4) / n
    s_a = l2 / math.sqrt(2 * rho * 0.75)
    s_b = l2 / math.sqrt(2 * rho * 0.25)
    shared = sorted(set(m.releases[0].cells) & set(m.releases[1].cells))
    assert len(shared) == 2
    np.testing.assert_allclose(sig[shared], (s_a**-2 + s_b**-2) ** -0.5)
    only_a = sorted(set(m.releases[0].cells) - set(shared))
    np.testing.assert_allclose(sig[only_a], s_a)
    # no weights: one joint release, the same sd everywhere
    joint = expand_requirements([CorrRequirement("age", "hours", TOL)], DOMAIN)
    assert [r.share for r in joint.releases] == [1]
    np.testing.assert_allclose(joint.cell_sigmas(n, rho), l2 / math.sqrt(2 * rho))


def test_measure_runs_one_release_per_weight_and_averages_shared_measures(real) -> None:
    reqs = [
        CorrRequirement("age", "hours", TOL, weight=3.0),
        CorrRequirement("age", "x", TOL, weight=1.0),
        MeanRequirement("hours", TruePred(), TOL, weight=1.0),  # its 1 measure is in release 0
    ]
    m = expand_requirements(reqs, DOMAIN)
    rho = 0.02
    oracle = ExactOracle(real, seed=3)
    meas = iproj.measure(m.queries, oracle, rho, label="req", releases=m.releases)
    events = oracle.ledger.events
    assert [e.count for e in events] == [len(r.cells) for r in m.releases]
    assert math.fsum(e.rho for e in events) <= rho  # exact split: never above the budget
    assert math.fsum(e.rho for e in events) == pytest.approx(rho, rel=1e-12)
    np.testing.assert_allclose(meas.sigma, m.cell_sigmas(real.n, rho), rtol=1e-9)

    # The averaged answers are unbiased with the stated sd: over 400 independent draws the
    # standardised errors of every cell have mean 0 and variance 1 (tolerances: 4 standard
    # errors of the mean, sd 1/sqrt(400), and of the variance, sqrt(2/399)).
    true = np.concatenate(answer_all(list(m.queries), real))
    z = np.array(
        [
            (
                iproj.measure(
                    m.queries, ExactOracle(real, seed=s), rho, label="r", releases=m.releases
                ).noisy
                - true
            )
            / meas.sigma
            for s in range(400)
        ]
    )
    assert np.abs(z.mean(axis=0)).max() < 4 / math.sqrt(400)
    assert np.abs(z.var(axis=0, ddof=1) - 1).max() < 4 * math.sqrt(2 / 399)


def test_weighted_hull_projection_is_optimal_in_the_noise_metric() -> None:
    rng = np.random.default_rng(7)
    F = rng.random((300, 4)) ** 2
    a = F.max(axis=0) + np.array([0.05, -0.4, 0.02, 0.3])
    scale = np.array([1.0, 10.0, 0.5, 3.0])  # 1 / sigma
    h = hull.project_to_hull(F, a, scale=scale)
    w = scale**2
    # first-order optimality of x* in the metric sum_k w_k (.)_k^2 over the hull:
    # (a - x*)' W (F_i - x*) <= 0 for every row
    assert np.max((F - h.projection) @ (w * (a - h.projection))) <= 1e-6
    assert h.distance == pytest.approx(np.linalg.norm(scale * (a - h.projection)))
    euclid = hull.project_to_hull(F, a)
    assert np.linalg.norm(scale * (a - euclid.projection)) > h.distance + 1e-6
    # the affine-hull step in the same metric: a residual W-orthogonal to the hull's directions
    G = np.vstack([F[:3], F[:3].mean(axis=0) + 0.1 * (F[1] - F[0])])  # rank-2 affine hull
    p = hull.project_to_affine_hull(G, a, scale=scale)
    np.testing.assert_allclose((G[1:] - G[0]) @ (w * (a - p)), 0.0, atol=1e-9)


def test_weighted_requirements_post_process_and_report_per_measure_noise(real, syn) -> None:
    reqs = [
        CorrRequirement("age", "hours", TOL, weight=9.0),
        MeanRequirement("x", TruePred(), TOL, weight=1.0),
    ]
    m = expand_requirements(reqs, DOMAIN)
    meas = iproj.measure(m.queries, ExactOracle(real, seed=4), 0.5, label="r", releases=m.releases)
    res = iproj.iproject(syn, meas, seed=0)
    assert res.kkt_violation <= 1e-6
    record = res.to_json()
    assert len(record["noise_sigma"]) == len(m.queries)
    assert len(set(record["noise_sigma"])) == 2  # two releases, two noise levels
    json.dumps(record, allow_nan=False)


def test_plan_lists_one_release_per_weighted_requirement(spec_without_data: Path, capsys) -> None:  # noqa: F811
    reqs = (
        "corr(age, hours_per_week) within 0.05",
        "logistic(income ~ age + marital_status) within 0.02",
    )
    joint = _plan_json(_with_requirements(spec_without_data, *reqs), capsys)
    weighted = _plan_json(
        _with_requirements(spec_without_data, f"{reqs[0]} weight 9", f"{reqs[1]} weight 1"), capsys
    )
    assert [r["weight"] for r in weighted["requirements"]] == [9, 1]
    assert [r["weight"] for r in joint["requirements"]] == [None, None]
    lines = [a for a in weighted["allocation"]["lines"] if a["phase"] == "iproj.measure"]
    assert len(lines) == 2
    phase = weighted["budget"]["phases"]["iproj.measure"]
    assert math.fsum(a["rho"] for a in lines) <= phase
    assert lines[0]["rho"] == pytest.approx(0.9 * phase) and lines[1]["rho"] == pytest.approx(
        0.1 * phase
    )
    # the correlation no longer shares its noise with the logistic regression's many moments:
    # at its weight its release decides its tolerance; the planner's own split (no weights)
    # also buys it room for a pass (dpql.plan.split.PASS_ROOM), so it is at least as precise
    corr_joint, corr_weighted = joint["requirements"][0], weighted["requirements"][0]
    assert 2 * corr_weighted["predicted_sd"] <= 0.05 * (1 + 1e-6)
    assert corr_joint["predicted_sd"] <= corr_weighted["predicted_sd"]
    assert main(["plan", str(spec_without_data)]) == 0


def test_compile_step_with_weights_spends_one_event_per_release_and_reports_each_sd(
    real, syn
) -> None:
    from types import SimpleNamespace

    from dpql.ir.queries import ModelRequirement
    from dpql.postprocess import run

    # a bound: measured by its moments (a `within` logistic is measured by its pilot alone)
    bound = Tolerance(op=">=", bound=0.6)
    logit = ModelRequirement("logistic", "income", ("age", "job"), bound, weight=1.0)
    corr = CorrRequirement("age", "hours", TOL, weight=3.0)

    def plan_of(*reqs: object) -> SimpleNamespace:  # what run_postprocess reads of a plan
        return SimpleNamespace(
            measures=expand_requirements(reqs, DOMAIN),
            requirements=reqs,
            phase_rho={"iproj.measure": 1.0, "accept.test": 0.5},
        )

    plan = plan_of(logit, corr)
    oracle = ExactOracle(real, seed=12)
    out = run.run_postprocess(plan, oracle, syn, seed=4)
    assert [e.phase for e in oracle.ledger.events] == ["iproj.measure"] * 2 + ["accept"]
    assert math.fsum(e.rho for e in oracle.ledger.events) <= 1.5
    js = json.loads(json.dumps(out.to_json()))
    corr_js = js["requirements"][1]
    # the corr's sd comes from its own, larger release: the delta method at its cells' sigmas
    sig = plan.measures.cell_sigmas(real.n, 1.0)
    assert sig[list(plan.measures.index[1])].max() < sig[list(plan.measures.index[0])].max()
    # ... which is smaller than in one joint release of all the measures (same budget)
    joint_plan = plan_of(replace(logit, weight=None), replace(corr, weight=None))
    joint = run.run_postprocess(joint_plan, ExactOracle(real, seed=12), syn, seed=4)
    joint_corr = json.loads(json.dumps(joint.to_json()))["requirements"][1]
    # (its release's sigma is smaller: 3/4 of the budget for a fraction of the sensitivity)
    qs = plan.measures.queries
    l2 = joint_l2_sensitivity(joint_plan.measures.queries, real.n)
    l2_corr = joint_l2_sensitivity([qs[k] for k in plan.measures.index[1]], real.n)
    assert l2_corr / math.sqrt(0.75) < 0.7 * l2
    assert corr_js["sigma"] < 0.8 * joint_corr["sigma"]
    assert js["requirements"][0]["excess_risk_bound"]["kind"] == "upper bound"
