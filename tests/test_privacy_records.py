"""Honest privacy records.

* An external table's budget states its neighbouring relation; an add/remove (e, d) guarantee is
  charged as (2e, (1 + e^e) d) under dpql's replace-one relation, and the record keeps both.
* ``spent.rho`` is null unless every event is zCDP; the record and the lifetime ledger carry the
  release's RDP curve; ``dpql check`` composes curves (never rhos) and caps the lifetime delta.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from dpql.diagnostics import DiagnosticError
from dpql.plan.planner import build_plan
from dpql.privacy.accountant import (
    calibrate_dpsgd_noise,
    eps_from_rho,
    epsilon_from_events,
    replace_one_guarantee,
    rho_from_eps_delta,
)
from dpql.privacy.ledger import Ledger, PrivacyEvent
from dpql.privacy.mechanisms import gaussian_sigma
from dpql.release.lifetime import ReleaseRecord
from dpql.release.policy import (
    ReleaseBudget,
    check_policy,
    compose_releases,
    lifetime_budget,
    planned_curve,
    planned_spend,
    zcdp_epsilon,
)
from dpql.release.provenance import build_record, sha256_json, verify_record
from dpql.spec import load_policy, load_spec

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL_SPEC = ROOT / "examples" / "adult-external" / "adult-external.release.yaml"
CORPUS = Path(__file__).parent / "specs"
DELTA = 1e-9
_SPEC_KEYS = ("dpql", "name", "data", "schema", "privacy", "workload", "synthesizer", "output")


def _gaussian(rho: float, label: str = "m") -> PrivacyEvent:
    sigma = gaussian_sigma(1.0, rho)
    return PrivacyEvent("iproj.measure", "gaussian", label, 1, 1.0, noise_scale=sigma, rho=rho)


def _gan_events(epsilon: float = 2.0) -> list[PrivacyEvent]:
    """A Gaussian measurement plus DP-SGD calibrated so the release is epsilon-DP at DELTA."""
    measure = _gaussian(0.02)
    q, steps = 0.004, 2000
    z = calibrate_dpsgd_noise(q, steps, epsilon, DELTA, other_events=[measure])
    sgd = PrivacyEvent.dpsgd(
        "gan.generator", "generator", sampling_rate=q, noise_multiplier=z, steps=steps
    )
    return [measure, sgd]


def _external(epsilon: float, delta: float, neighbouring: str) -> PrivacyEvent:
    return PrivacyEvent.external(
        "external", "external table", epsilon=epsilon, delta=delta, neighbouring=neighbouring
    )


def _record(events: list[PrivacyEvent], tmp_path: Path, epsilon_budget: float = 3.0) -> dict:
    """A provenance record of ``events`` (public placeholders elsewhere) that verifies."""
    spec_json = {k: {} for k in _SPEC_KEYS}
    table = tmp_path / "t.csv"
    table.write_text("a\n1\n")
    return build_record(
        spec_json=spec_json,
        spec_sha256=sha256_json(spec_json),
        plan_sha256="0" * 64,
        budget={"epsilon": epsilon_budget, "delta": DELTA, "rho": 0.05},
        ledger=Ledger(events),
        synthesizer={"method": "gan"},
        requirements=[],
        output_path=table,
        output_rows=1,
        created="2024-05-01T00:00:00+00:00",
    )


def _ledger_line(record: dict) -> ReleaseRecord:
    spent = record["privacy"]["spent"]
    return ReleaseRecord(
        name="earlier",
        spec_sha256="0" * 64,
        epsilon=spent["epsilon"],
        delta=spent["delta"],
        rho=spent["rho"],
        rdp=record["privacy"]["rdp"],
        time="2024-05-01T00:00:00+00:00",
    )


# ---------------------------------------------------------------------------------------------
# Item 4: external budgets and neighbouring relations


def test_external_budget_without_neighbouring_is_a_located_error() -> None:
    path = CORPUS / "missing_external_neighbouring.release.yaml"
    with pytest.raises(DiagnosticError) as info:
        load_spec(path)
    (d,) = info.value.diagnostics
    assert (d.code, d.pos.file, d.pos.line, d.pos.col) == ("E011", str(path), 31, 3)
    assert "'neighbouring'" in d.message and "synthesizer.budget" in d.message
    assert "replace_one" in d.hint and "add_remove" in d.hint


def test_add_remove_converts_by_group_privacy() -> None:
    assert replace_one_guarantee(0.5, 1e-10, "replace_one") == (0.5, 1e-10)
    eps, delta = replace_one_guarantee(0.5, 1e-10, "add_remove")
    assert eps == 1.0
    exact = (1 + math.exp(0.5)) * 1e-10
    assert exact <= delta <= exact * (1 + 1e-14)  # rounded up, never down
    with pytest.raises(ValueError):
        replace_one_guarantee(0.5, 1e-10, "add-remove")


def test_add_remove_external_is_charged_converted_and_recorded_both_ways(tmp_path: Path) -> None:
    event = _external(0.5, 1e-10, "add_remove")
    assert (event.epsilon, event.declared_epsilon, event.declared_delta) == (1.0, 0.5, 1e-10)
    assert event.delta == pytest.approx((1 + math.exp(0.5)) * 1e-10, rel=1e-14)
    record = _record([_gaussian(0.03), event], tmp_path)
    (_, ext) = record["privacy"]["events"]
    assert ext["neighbouring"] == "add_remove"
    assert (ext["declared_epsilon"], ext["declared_delta"]) == (0.5, 1e-10)
    assert (ext["epsilon"], ext["delta"]) == (event.epsilon, event.delta)
    # the converted budget is what is charged
    spent = record["privacy"]["spent"]["epsilon"]
    assert spent == pytest.approx(eps_from_rho(0.03, DELTA - event.delta) + 1.0, abs=1e-9)
    assert record["privacy"]["rdp"]["external_epsilon"] == 1.0
    assert verify_record(record) == []
    # a record whose charged value is not the declared one's conversion does not verify
    forged = copy.deepcopy(record)
    forged["privacy"]["events"][1]["epsilon"] = 0.5
    assert [p.code for p in verify_record(forged)] == ["V002"]
    with pytest.raises(ValueError, match="needs 'declared_epsilon'"):
        PrivacyEvent("external", "external", "x", epsilon=0.5, delta=1e-10)
    with pytest.raises(ValueError, match="neighbouring"):  # a relation must be stated
        PrivacyEvent(
            "external",
            "external",
            "x",
            epsilon=0.5,
            delta=1e-10,
            declared_epsilon=0.5,
            declared_delta=1e-10,
        )


def test_planner_and_check_charge_the_converted_external_budget(tmp_path: Path) -> None:
    text = EXTERNAL_SPEC.read_text().replace(
        "neighbouring: replace_one", "neighbouring: add_remove"
    )
    assert "neighbouring: add_remove" in text
    path = tmp_path / "ext.release.yaml"
    path.write_text(text.replace("../adult/adult_train.csv.gz", "absent.csv.gz"))
    spec = load_spec(path)
    budget = build_plan(spec).budget  # no data is read
    assert budget.external_epsilon == 1.0
    assert budget.external_delta == pytest.approx((1 + math.exp(0.5)) * 1e-10, rel=1e-14)
    assert eps_from_rho(budget.rho, DELTA - budget.external_delta) == pytest.approx(1.0, abs=1e-9)
    spend = planned_spend(spec)
    assert spend.rho is None and spend.rdp is not None
    assert spend.rdp.external_epsilon == 1.0


# ---------------------------------------------------------------------------------------------
# Item 5: rho only for all-zCDP releases, RDP curves, lifetime composition


def test_rho_is_null_unless_every_event_is_zcdp(tmp_path: Path) -> None:
    zcdp = _record([_gaussian(0.01), _gaussian(0.02, "n")], tmp_path)
    assert zcdp["privacy"]["spent"]["rho"] == pytest.approx(0.03, rel=1e-12)
    gan = _record(_gan_events(), tmp_path)
    external = _record([_gaussian(0.03), _external(0.5, 1e-10, "replace_one")], tmp_path)
    for record in (zcdp, gan, external):
        assert verify_record(record) == []
    assert gan["privacy"]["spent"]["rho"] is None
    assert external["privacy"]["spent"]["rho"] is None
    # the old behaviour (rho of the Gaussian/Gumbel events only) is rejected by verify
    old = copy.deepcopy(gan)
    old["privacy"]["spent"]["rho"] = 0.02
    assert [p.code for p in verify_record(old)] == ["V013"]


def test_record_curve_is_recomputed_by_verify(tmp_path: Path) -> None:
    record = _record(_gan_events(), tmp_path)
    curve = record["privacy"]["rdp"]
    assert len(curve["orders"]) == len(curve["epsilons"]) > 100
    assert all(a > 1 for a in curve["orders"]) and curve["external_epsilon"] == 0
    bad = copy.deepcopy(record)
    bad["privacy"]["rdp"]["epsilons"][-1] *= 0.5
    assert [p.code for p in verify_record(bad)] == ["V014"]
    bad = copy.deepcopy(record)
    bad["privacy"]["rdp"]["orders"].pop()
    assert [p.code for p in verify_record(bad)] == ["V014"]


def test_lifetime_of_a_single_epsilon_2_release_is_at_least_epsilon_2(tmp_path: Path) -> None:
    events = _gan_events(2.0)
    record = _record(events, tmp_path)
    line = _ledger_line(record)
    assert line.epsilon == pytest.approx(2.0, abs=1e-3) and line.rho is None
    # composing the release with nothing else gives back its own epsilon
    alone = compose_releases([(line.epsilon, line.delta, line.rdp)])
    assert alone is not None and alone[0] == pytest.approx(line.epsilon, abs=1e-9)
    # with a small new release on top, the lifetime epsilon is above the first release's
    this = ReleaseBudget(0.01, 1e-12, 1e-6, planned_curve(1e-6, 1e-12))
    budget = lifetime_budget(8.0, [line], this, composition="rdp")
    assert budget.total_epsilon >= line.epsilon
    assert budget.composed_epsilon is not None and budget.composed_epsilon >= line.epsilon
    assert budget.total_delta == line.delta  # converted at the releases' delta; no delta added
    # a real second release at the same delta: above the first one, below basic composition
    rho = rho_from_eps_delta(0.3, DELTA)
    second = lifetime_budget(
        8.0, [line], ReleaseBudget(0.3, DELTA, rho, planned_curve(rho, DELTA)), composition="rdp"
    )
    assert line.epsilon + 0.01 < second.total_epsilon < second.basic_epsilon - 0.2
    # what the old check printed: zCDP composition of the Gaussian events' rho alone
    old = zcdp_epsilon(Ledger(events).total_rho() + 1e-6, line.delta + 1e-12)
    assert old < line.epsilon


def test_the_issue_history_no_longer_composes_below_its_release(tmp_path: Path) -> None:
    """One recorded release of epsilon 2.0 (an external table of 0.5 plus dpql's own
    Gaussian measurements), then an epsilon-1.0 release: the old rho-only composition printed
    1.994, below the recorded release alone."""
    ext = _external(0.5, 1e-10, "replace_one")
    own = rho_from_eps_delta(1.5, DELTA - 1e-10)
    line = _ledger_line(_record([_gaussian(own), ext], tmp_path))
    assert line.epsilon == pytest.approx(2.0, abs=1e-9) and line.rho is None
    rho = rho_from_eps_delta(1.0, DELTA)
    budget = lifetime_budget(
        8.0, [line], ReleaseBudget(1.0, DELTA, rho, planned_curve(rho, DELTA)), composition="rdp"
    )
    assert zcdp_epsilon(own + rho, 2 * DELTA) == pytest.approx(1.994, abs=1e-3)  # the old figure
    assert 2.29 <= budget.total_epsilon < budget.basic_epsilon == pytest.approx(3.0)
    assert budget.total_delta == pytest.approx(DELTA + 1e-10)  # RDP part at 9e-10, external on top


def test_rdp_composition_of_zcdp_releases_is_the_composed_rho() -> None:
    rho = 0.01
    eps = eps_from_rho(rho, DELTA)
    curve = planned_curve(rho, DELTA)
    line = ReleaseRecord(
        name="r",
        spec_sha256="0" * 64,
        epsilon=eps,
        delta=DELTA,
        rho=rho,
        rdp=curve,
        time="2024-05-01T00:00:00+00:00",
    )
    budget = lifetime_budget(
        3 * eps, [line, line], ReleaseBudget(eps, DELTA, rho, curve), composition="rdp"
    )
    exact = eps_from_rho(3 * rho, DELTA)  # three rho-zCDP releases are one 3 rho-zCDP release
    assert exact <= budget.total_epsilon <= 1.01 * exact < budget.basic_epsilon
    assert budget.total_delta == DELTA and budget.basic_delta == pytest.approx(3 * DELTA)
    assert "RDP composition of 3 release curve(s)" in budget.describe()
    # a line without a curve adds its (epsilon, delta) by basic composition (rho is never used)
    bare = line.model_copy(update={"rdp": None})
    mixed = lifetime_budget(
        9.0, [bare, line], ReleaseBudget(eps, DELTA, rho, curve), composition="rdp"
    )
    two = eps + eps_from_rho(2 * rho, DELTA)
    assert two <= mixed.total_epsilon <= 1.01 * two
    assert mixed.total_delta == pytest.approx(2 * DELTA)


def test_external_release_composes_its_external_part_by_basic_composition(tmp_path: Path) -> None:
    ext = _external(0.5, 1e-10, "add_remove")
    record = _record([_gaussian(0.03), ext], tmp_path)
    line = _ledger_line(record)
    alone = compose_releases([(line.epsilon, line.delta, line.rdp)])
    assert alone is not None and alone[0] == pytest.approx(line.epsilon, abs=1e-9)
    twice = compose_releases([(line.epsilon, line.delta, line.rdp)] * 2)
    assert twice is not None
    rdp_part = epsilon_from_events([_gaussian(0.03), _gaussian(0.03, "n")], DELTA - ext.delta)
    assert twice[1] == pytest.approx(DELTA + ext.delta)  # the external deltas add
    # the curves share dp-accounting's orders, not the composed optimum: at most slightly looser
    assert 0 <= twice[0] - (rdp_part.epsilon + 2 * ext.epsilon) <= 1e-3 * twice[0]


POLICY = """dpql-policy: 1
max_epsilon: 2.0
max_delta: 1.0e-6
lifetime:
  epsilon: 8.0
  delta: 2.5e-9
  ledger: ledger.jsonl
"""


def test_lifetime_delta_cap_is_enforced(tmp_path: Path) -> None:
    spec_text = (
        (CORPUS / "range_share.release.yaml").read_text().replace("share: 1.5", "share: 0.2")
    )
    (tmp_path / "s.release.yaml").write_text(spec_text)
    (tmp_path / "policy.yaml").write_text(POLICY)
    spec, policy = load_spec(tmp_path / "s.release.yaml"), load_policy(tmp_path / "policy.yaml")
    assert policy.model.lifetime is not None and policy.model.lifetime.delta == 2.5e-9
    from dpql.release.lifetime import append_release

    line = ReleaseRecord(
        name="r", spec_sha256="0" * 64, epsilon=0.5, delta=1e-9, time="2024-05-01T00:00:00+00:00"
    )
    append_release(tmp_path / "ledger.jsonl", line)
    assert check_policy(spec, policy) == []  # delta 1e-9 + 1e-9 <= 2.5e-9
    append_release(tmp_path / "ledger.jsonl", line)
    (v,) = check_policy(spec, policy)  # epsilon 2 of 8 is fine; delta 3e-9 is not
    assert v.code == "P008" and "delta 3e-09 of 2.5e-09" in v.message
    # without lifetime.delta the summed delta is reported, not capped
    uncapped = tmp_path / "uncapped.yaml"
    uncapped.write_text(POLICY.replace("  delta: 2.5e-9\n", ""))
    assert check_policy(spec, load_policy(uncapped), ledger_path=tmp_path / "ledger.jsonl") == []
