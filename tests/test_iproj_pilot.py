"""A logistic requirement's *pilot* (``dpql.plan.requirements.piloted``,
``dpql.postprocess.run.with_pilots``). Its test compares the final model's accuracy on the
synthetic table with the same model's accuracy on the real one; moments the projection matches
do not move that gap, so the requirement is measured by its pilot alone: compile fits the model
on the table it post-processes (public), measures that model's accuracy on the real table in the
requirement's own release (the plan's stand-in replaced, same sensitivity) and pulls the table
onto it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from test_iproj_support import DOMAIN, ExactOracle, make_table, planned, spy_recentre

from dpql.answers import NoisyAnswer
from dpql.domain import EncodedTable
from dpql.ir.exact import answer_all
from dpql.ir.queries import (
    CatIn,
    CorrRequirement,
    Count,
    Marginal,
    ModelAccuracy,
    ModelRequirement,
    Tolerance,
    joint_l2_sensitivity,
)
from dpql.plan.requirements import expand_requirements, pilot_query, piloted, release_rhos
from dpql.plan.split import PILOT_SD_FRACTION, pilot_sd, requirement_need
from dpql.postprocess import run

N = 4000
REAL = make_table(N, seed=1)
LOGIT = ModelRequirement(
    "logistic", "income", ("age", "hours", "sex", "job"), Tolerance(within=0.04), text="logit"
)
CORR = CorrRequirement("age", "hours", Tolerance(within=0.1), text="corr")


def _sharp(table: EncodedTable, factor: float, seed: int) -> EncodedTable:
    """``table`` with its label redrawn from ``make_table``'s logit times ``factor``: the same
    features, a label more predictable than the real one (``factor`` > 1). A model fitted on it
    scores higher on it than on the real table, as a synthesizer's too-clean table does."""
    u0, u1 = table.scaled["age"], table.scaled["hours"]
    logit = 3 * (u0 - 0.5) + 2 * (u1 - 0.5) + 0.8 * table.codes["sex"] - 1.0
    rng = np.random.default_rng(seed)
    income = (rng.random(table.n) < 1 / (1 + np.exp(-factor * logit))).astype(np.int32)
    return EncodedTable(table.domain, {**table.codes, "income": income}, table.scaled)


SYN = _sharp(make_table(N, seed=2), 1.5, seed=3)


def _workload(table: EncodedTable, seed: int = 5) -> list[NoisyAnswer]:
    """What a synthesizer measured and fitted: the table's own answers plus a little noise."""
    rng = np.random.default_rng(seed)
    qs = [Marginal(("sex", "income")), Marginal(("job", "income")), Marginal(("age", "sex")),
          Count(CatIn("job", frozenset({2})))]  # fmt: skip
    return [NoisyAnswer(q, a + rng.normal(0, 0.004, a.shape), 0.004)
            for q, a in zip(qs, answer_all(qs, table), strict=True)]  # fmt: skip


def _plan(rho: float = 0.5) -> SimpleNamespace:
    return planned((LOGIT, CORR), rho, N)


def test_the_plan_measures_the_pilot_alone() -> None:
    """A logistic ``within`` requirement's only measure is its pilot's stand-in (unfitted, not
    evaluable); its release needs the rho at which that accuracy (sensitivity 1/n) has sd
    PILOT_SD_FRACTION t. A bound, f1 or a linear model keeps its moments and has no pilot."""
    m = expand_requirements([LOGIT], DOMAIN)
    assert piloted(LOGIT) and m.queries == (pilot_query(LOGIT, DOMAIN),)
    (q,) = m.queries
    assert isinstance(q, ModelAccuracy) and not q.fitted
    with pytest.raises(ValueError, match="fitted at compile time"):
        answer_all([q], REAL)
    s_p = PILOT_SD_FRACTION * 0.04
    assert pilot_sd(LOGIT) == pytest.approx(s_p)
    need = requirement_need(LOGIT, m, m.index[0], N, DOMAIN)
    assert need == pytest.approx((1 / (N * s_p)) ** 2 / 2, rel=1e-8)
    assert (1 / N) / math.sqrt(2 * need) == pytest.approx(s_p, rel=1e-8)
    for other in (
        ModelRequirement(
            "logistic", "income", ("age",), Tolerance(metric="f1", op=">=", bound=0.5)
        ),
        ModelRequirement("logistic", "income", ("age",), Tolerance(metric="f1", within=0.05)),
        ModelRequirement("logistic", "income", ("age",), Tolerance(op=">=", bound=0.7)),
        ModelRequirement("linear", "hours", ("age",), Tolerance(within=0.05)),
        CORR,
    ):
        assert pilot_sd(other) is None and not piloted(other)
        mm = expand_requirements([other], DOMAIN)
        assert not any(isinstance(x, ModelAccuracy) for x in mm.queries) and mm.queries


@pytest.mark.slow
def test_the_pilot_keeps_each_release_at_its_planned_sensitivity(monkeypatch) -> None:
    """The fitted pilot replaces the plan's stand-in in the logistic's own release, and each
    ledger event keeps the plan line's rho and L2 sensitivity (what ``dpql verify`` checks), the
    corr's release too with its second moments centred at the synthetic means."""
    plan = _plan()
    oracle = ExactOracle(REAL, seed=21)
    seen = spy_recentre(monkeypatch)
    out = run.run_postprocess(plan, oracle, SYN, seed=0, workload=_workload(SYN))
    m = plan.measures
    (_, measured), = seen
    rhos = release_rhos(m.releases, plan.phase_rho["iproj.measure"])
    events = [e for e in oracle.ledger.events if e.phase == "iproj.measure"]
    assert len(events) == len(m.releases)
    for rel, rho, e in zip(m.releases, rhos, events, strict=True):
        assert e.rho == pytest.approx(rho, rel=1e-12)
        planned = joint_l2_sensitivity([m.queries[c] for c in rel.cells], N)
        assert e.l2_sensitivity == pytest.approx(planned, rel=1e-9)
    pilots = [i for i, q in enumerate(out.iproj.queries) if isinstance(q, ModelAccuracy)]
    assert len(pilots) == 1 and len(out.iproj.queries) == len(measured.queries)
    (k,) = pilots
    assert measured.index[0] == (k,) and out.iproj.queries[k].fitted
    others = [i for i in range(len(measured.queries)) if i != k]
    assert [out.iproj.queries[i] for i in others] == [measured.queries[i] for i in others]
    assert out.iproj.sigma[k] == pytest.approx(PILOT_SD_FRACTION * 0.04, rel=1e-6)
    summary = out.summary_json()
    assert summary["measures"][k].startswith("model_accuracy(")
    # the record says which policy placed the table and each requirement's role
    assert summary["policy"] == out.policy.to_json()
    assert [r["requirement"] for r in summary["roles"]] == [0, 1]
    assert summary["roles"][0]["noisy"] == pytest.approx(out.iproj.noisy[k])


def test_a_table_without_usable_rows_measures_the_constant_model() -> None:
    """No row with every feature and the label: the stand-in becomes the constant predictor of
    the label's first value (measured as planned, so the event matches; not a pilot)."""
    m = expand_requirements([LOGIT], DOMAIN)
    empty = EncodedTable(
        SYN.domain, SYN.codes, {**SYN.scaled, "age": np.full(SYN.n, np.nan)}
    )
    out, pilots = run.with_pilots(m, [LOGIT], empty)
    (q,) = out.queries
    assert pilots == () and q.fitted
    assert answer_all([q], REAL)[0][0] == pytest.approx(np.mean(REAL.codes["income"] == 0))


@pytest.mark.slow
@pytest.mark.parametrize("draw", [0, 1])
def test_the_pilot_closes_the_accuracy_gap(draw: int) -> None:
    """On a synthetic table whose label is more predictable than the real one, the model fitted
    on it scores higher there than on the real table (the exact gap before post-processing,
    0.053 here); the pilot brings the table's accuracy to the real one: the model refitted on
    the released table holds on the real table within the tolerance, its gap under half the one
    before, and the test passes: the pilot is placed inside its band (half of ``t - 2 sd``
    around its noisy value), and the model refitted on the released table stays near it."""
    from dpql.postprocess.accept import fit_model

    def gap(table: EncodedTable) -> float:
        q = fit_model(LOGIT, table, seed=draw)
        return abs(float(answer_all([q], table)[0][0] - answer_all([q], REAL)[0][0]))

    out = run.run_postprocess(
        _plan(), ExactOracle(REAL, seed=40 + draw), SYN, seed=draw, workload=_workload(SYN)
    )
    before, after = gap(SYN), gap(out.table)
    assert before > 0.03
    assert after <= LOGIT.tolerance.within and after < 0.5 * before
    assert out.acceptance[0].verdict == "pass"
    assert out.roles[0].role == "constrained"
    assert out.iproj.ess > 0.9 * N
    assert not [d for d in out.iproj.diagnostics if d.code == "W510"]


@pytest.mark.slow
def test_a_pilot_out_of_reach_is_reported_with_its_figures() -> None:
    """A table whose label is close to noise (its model scores about 0.54 on it, 0.69 as the
    noisy real accuracy): reaching the band would concentrate the table below a strict ESS
    floor (a policy passed explicitly), so the projection stops part of the way (``W508``) and
    compile says the requirement is out of reach (``W510``) with the figures: the pilot before,
    after and the noisy real value; the verdict does not pass."""
    from dpql.postprocess.policy import PostprocessPolicy

    syn = _sharp(make_table(N, seed=2), 0.1, seed=3)
    plan = planned((LOGIT,), 0.5, N)
    policy = PostprocessPolicy(ess_floor=0.95)
    out = run.run_postprocess(plan, ExactOracle(REAL, seed=41), syn, seed=0, policy=policy)
    (w,) = [d for d in out.iproj.diagnostics if d.code == "W510"]
    assert "W508" in [d.code for d in out.iproj.diagnostics]
    assert out.summary_json()["policy"]["ess_floor"] == 0.95
    k = next(i for i, q in enumerate(out.iproj.queries) if isinstance(q, ModelAccuracy))
    before, moved, noisy = (float(getattr(out.iproj, a)[k])
                            for a in ("before", "reweighted", "noisy"))  # fmt: skip
    assert before < moved < noisy - 0.02  # part of the way, not within reach
    assert "'logit'" in w.message and f"{before:.4g}" in w.message and f"{noisy:.4g}" in w.message
    assert out.acceptance[0].verdict != "pass"


def test_without_room_nothing_is_constrained_and_it_is_said() -> None:
    """Noise too loud for a pass (``t <= z sd``, here through a policy with a large z): the
    requirement gets no box, the table does not move (solver ``none``, every row kept once)
    and ``W511`` names it."""
    from dpql.postprocess.policy import PostprocessPolicy

    syn = _sharp(make_table(N, seed=2), 0.1, seed=3)
    plan = planned((LOGIT,), 0.5, N)
    out = run.run_postprocess(plan, ExactOracle(REAL, seed=41), syn, seed=0,
                              policy=PostprocessPolicy(z=10.0))  # fmt: skip
    assert [r.role for r in out.roles] == ["no_room"]
    assert out.iproj.method == "none" and out.iproj.boxes == 0
    assert all(np.array_equal(out.table.codes[c], syn.codes[c]) for c in syn.codes)
    (w,) = [d for d in out.iproj.diagnostics if d.code == "W511"]
    # the figure is z sd, said as such (a requirement's own line prints +- one sd)
    z_sd = 10.0 * out.roles[0].sd
    assert "'logit'" in w.message and f"10 sd = {z_sd:.2g} >= tolerance" in w.message
