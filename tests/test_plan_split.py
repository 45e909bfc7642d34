"""Issue 15 item 1: the planner chooses the post-processing budget (dpql/plan/split.py).

Data-free: every spec here points at a data file that does not exist."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest

from dpql.plan.acceptance import Z
from dpql.plan.planner import build_plan
from dpql.plan.split import ACCEPT_SD_FRACTION, AUTO_SHARE_CAP
from dpql.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adult" / "adult.release.yaml"
IPROJ = "  method: iproj          # I-projection resampling toward the requirement measurements"


def _spec(tmp_path: Path, *reqs: str, share: float | None = None, epsilon: float = 1.0) -> Path:
    text = EXAMPLE.read_text().replace("adult_train.csv.gz", "no-such-file.csv")
    start, end = text.index("requirements:\n"), text.index("\nsynthesizer:")
    text = text[:start] + "requirements:\n" + "".join(f"  - {r}\n" for r in reqs) + text[end:]
    text = text.replace("epsilon: 1.0", f"epsilon: {epsilon!r}")
    if share is not None:
        text = text.replace(IPROJ, IPROJ + f"\n  share: {share}")
    path = tmp_path / "s.release.yaml"
    path.write_text(text)
    return path


REACHABLE = (
    "logistic(income ~ age + education_num + hours_per_week + sex + marital_status) within 0.02",
    "corr(age, hours_per_week) within 0.05",
    'mean(hours_per_week | sex == "Female") within 1.0',
    'count(income == ">50K") within 0.01',
)


def test_chosen_split_reaches_every_tolerance_with_the_least_budget(tmp_path: Path) -> None:
    plan = build_plan(load_spec(_spec(tmp_path, *REACHABLE)))
    split = plan.split
    assert split is not None and split.chosen
    rho = plan.budget.rho
    # every requirement's predicted test sd <= t / Z ...
    for rp in plan.requirement_plans:
        assert rp.reachable is True and not rp.diagnostics
        assert Z * rp.predicted_sd <= rp.tolerance * (1 + 1e-6)
    # ... and no more than that: the mean, whose measures no other requirement shares, sits
    # exactly at the threshold, the test at t / 8 (corr and count share first moments with the
    # logistic's release, so their inverse-variance averages are better), so a smaller
    # share would miss one of them
    logit, corr, mean, count = plan.requirement_plans
    assert Z * mean.predicted_sd == pytest.approx(mean.tolerance, rel=1e-6)
    for rp in (corr, count):
        assert Z * rp.predicted_sd < rp.tolerance
    assert logit.predicted_sd == pytest.approx(ACCEPT_SD_FRACTION * 0.02, rel=1e-6)
    # one release per requirement plus the tests; the share is the sum of what they need
    lines = [x for x in plan.table.lines if x.phase in ("iproj.measure", "accept.test")]
    assert [x.phase for x in lines] == ["iproj.measure"] * 4 + ["accept.test"]
    need = math.fsum(split.needs) + split.test_need
    assert float(split.share) * rho == pytest.approx(need, rel=1e-9)
    assert math.fsum(x.rho for x in lines) <= float(split.share) * rho * (1 + 1e-12)
    assert float(split.share) < 0.1  # the spec's old fixed 0.2 took twice as much and more
    # the whole budget is allocated and the synthesizer keeps the rest
    assert math.fsum(x.rho for x in plan.table.lines) == pytest.approx(rho, rel=1e-9)
    assert plan.phase_rho["synthesizer"] == pytest.approx((1 - float(split.share)) * rho)


def test_a_correlations_moments_no_longer_carry_the_logistics_noise(tmp_path: Path) -> None:
    chosen = build_plan(load_spec(_spec(tmp_path, *REACHABLE[:2])))
    fixed = build_plan(load_spec(_spec(tmp_path, *REACHABLE[:2], share=0.2)))
    assert fixed.split is not None and fixed.split.share == Fraction(1, 5)
    assert not fixed.split.chosen
    # with the fixed share the surplus goes to the measurement releases, so every sd is
    # smaller than the chosen (minimal) split's, and the tests get only their need
    for a, b in zip(chosen.requirement_plans, fixed.requirement_plans, strict=True):
        assert b.predicted_sd <= a.predicted_sd * (1 + 1e-9)
    assert fixed.phase_rho["accept.test"] == pytest.approx(chosen.phase_rho["accept.test"])


def test_an_unreachable_tolerance_names_the_smallest_epsilon(tmp_path: Path) -> None:
    spec = _spec(tmp_path, REACHABLE[0], "corr(age, hours_per_week) within 0.002")
    plan = build_plan(load_spec(spec))
    assert plan.split is not None and plan.split.share == AUTO_SHARE_CAP  # capped
    logit, corr = plan.requirement_plans
    assert logit.reachable is True
    assert corr.reachable is False and [d.code for d in corr.diagnostics] == ["W506"]
    eps = corr.smallest_epsilon
    assert eps is not None and 1.0 < eps < 1000
    assert f"{eps:.3g}" in corr.diagnostics[0].hint
    # at that epsilon the same spec reaches it, just below it does not
    above = build_plan(load_spec(_spec(tmp_path, REACHABLE[0], corr.requirement.text
                                       + "", epsilon=eps * 1.001)))  # fmt: skip
    assert above.requirement_plans[1].reachable is True
    below = build_plan(load_spec(_spec(tmp_path, REACHABLE[0], corr.requirement.text,
                                       epsilon=eps * 0.99)))  # fmt: skip
    assert below.requirement_plans[1].reachable is False


def test_manual_weights_stay_an_override(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        "corr(age, hours_per_week) within 0.05 weight 3",
        'mean(hours_per_week | sex == "Female") within 1.0 weight 1',
    )
    plan = build_plan(load_spec(spec))
    assert plan.measures is not None and plan.split is not None and plan.split.weighted
    assert [r.share for r in plan.measures.releases] == [Fraction(3, 4), Fraction(1, 4)]
    # the chosen share funds the requirement whose weight leaves it shortest of its need
    for rp in plan.requirement_plans:
        assert rp.reachable is True
    assert any(Z * rp.predicted_sd == pytest.approx(rp.tolerance, rel=1e-6)
               for rp in plan.requirement_plans)  # fmt: skip
