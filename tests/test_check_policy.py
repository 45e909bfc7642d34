"""Policy checks, the release ledger and lifetime budget composition."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dpql.diagnostics import DiagnosticError, InternalError
from dpql.domain import Domain, NumericColumn
from dpql.privacy.accountant import eps_from_rho
from dpql.release.lifetime import (
    RdpCurve,
    ReleaseRecord,
    append_release,
    read_ledger,
    release_record,
)
from dpql.release.policy import (
    ReleaseBudget,
    check_policy,
    lifetime_budget,
    planned_curve,
    zcdp_epsilon,
)
from dpql.spec import LoadedPolicy, LoadedSpec, load_policy, load_spec

CORPUS = Path(__file__).parent / "specs"
TINY = (CORPUS / "range_share.release.yaml").read_text().replace("share: 1.5", "share: 0.2")
POLICY = """dpql-policy: 1
max_epsilon: 2.0
max_delta: 1.0e-6
lifetime:
  epsilon: 8.0
  ledger: ledger/releases.jsonl
forbidden_columns: [ssn, name, email, phone]
allowed_methods: [rap, gan, iproj, external]
require:
  public_bounds: true
  delta_below_inverse_rows: true
"""


def _setup(
    tmp_path: Path, spec: str = TINY, policy: str = POLICY
) -> tuple[LoadedSpec, LoadedPolicy]:
    (tmp_path / "s.release.yaml").write_text(spec)
    (tmp_path / "policy.yaml").write_text(policy)
    (tmp_path / "ledger").mkdir(exist_ok=True)
    (tmp_path / "ledger" / "releases.jsonl").touch()  # a policy's ledger must exist
    return load_spec(tmp_path / "s.release.yaml"), load_policy(tmp_path / "policy.yaml")


def _codes(spec: LoadedSpec, policy: LoadedPolicy, **kw: float) -> list[str]:
    return [v.code for v in check_policy(spec, policy, **kw)]


def _record(
    epsilon: float, rho: float | None = None, delta: float = 1e-9, rdp: RdpCurve | None = None
) -> ReleaseRecord:
    return ReleaseRecord(
        name="r",
        spec_sha256="0" * 64,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        rdp=rdp,
        time="2024-05-01T00:00:00+00:00",
    )


def test_conforming_spec_passes_and_ledger_is_relative_to_the_policy(tmp_path: Path) -> None:
    spec, policy = _setup(tmp_path)
    assert policy.ledger_path == tmp_path / "ledger" / "releases.jsonl"
    assert check_policy(spec, policy) == []


def test_each_rule_reports_its_code(tmp_path: Path) -> None:
    spec, policy = _setup(tmp_path)
    assert _codes(spec, policy, requested_epsilon=2.5) == ["P001"]
    assert _codes(spec, policy, requested_epsilon=2.0) == []  # the limit itself is allowed
    wide = TINY.replace("delta: 1e-9", "delta: 1e-5")  # above max_delta, below 1/rows = 1e-3
    assert _codes(*_setup(tmp_path, wide)) == ["P002"]
    loose = POLICY.replace("max_delta: 1.0e-6", "max_delta: 0.5")
    big_delta = TINY.replace("delta: 1e-9", "delta: 0.002")
    assert _codes(*_setup(tmp_path, big_delta, loose)) == ["P006"]
    unchecked = loose.replace("delta_below_inverse_rows: true", "delta_below_inverse_rows: false")
    assert _codes(*_setup(tmp_path, big_delta, unchecked)) == []
    ssn = TINY.replace("  sex:", "  SSN:    {type: categorical, values: [a, b]}\n  sex:")
    violations = check_policy(*_setup(tmp_path, ssn))
    assert [v.code for v in violations] == ["P003"] and "'SSN'" in violations[0].message
    only_rap = POLICY.replace("[rap, gan, iproj, external]", "[rap]")
    assert _codes(*_setup(tmp_path, TINY, only_rap)) == ["P004"]  # iproj not allowed
    gan = TINY.replace("method: rap", "method: gan").replace(
        "options: {rounds: 5, queries_per_round: 10}", "options: {}"
    )
    assert _codes(*_setup(tmp_path, gan, POLICY.replace(" gan,", ""))) == ["P004"]


def test_public_bounds_are_checked_on_the_domain(tmp_path: Path) -> None:
    spec, policy = _setup(tmp_path)
    broken = Domain(
        tuple(
            NumericColumn(c.name, c.lo, math.inf, c.integer, c.edges)
            if isinstance(c, NumericColumn)
            else c
            for c in spec.domain
        )
    )
    violations = check_policy(dataclasses.replace(spec, domain=broken), policy)
    assert [v.code for v in violations] == ["P005", "P005"]
    assert str(violations[0]).startswith("P005: column 'age' lacks")


def test_lifetime_budget_uses_basic_composition(tmp_path: Path) -> None:
    spec, policy = _setup(tmp_path)
    ledger = policy.ledger_path
    for eps in (3.0, 4.0):
        append_release(ledger, _record(eps))
    assert check_policy(spec, policy) == []  # 3 + 4 + 1 = 8 <= 8
    append_release(ledger, _record(0.1))
    (v,) = check_policy(spec, policy)
    assert v.code == "P007" and "8.1 of 8" in v.message and "basic composition" in v.message
    other = tmp_path / "elsewhere.jsonl"
    other.touch()
    assert check_policy(spec, policy, ledger_path=other) == []  # an explicit ledger wins


def test_a_typo_in_the_policy_ledger_or_an_unusable_ledger_is_an_error(tmp_path: Path) -> None:
    """A policy ledger that does not exist yet holds no release, unless the releases are in
    another ledger beside the policy or the spec: a typo in the policy's ledger path must not
    read as "no earlier releases" (E616 names the real one); a directory or BOM-prefixed ledger
    is refused with a located error too."""
    from dpql.release.project import choose_ledger

    spec, policy = _setup(tmp_path)
    ledger = policy.ledger_path
    assert ledger is not None
    ledger.unlink()
    assert check_policy(spec, policy) == [] and choose_ledger(spec).records == ()
    real = tmp_path / "privacy-ledger.jsonl"
    real.write_text(_record(0.5).model_dump_json() + "\n", encoding="utf-8")
    with pytest.raises(DiagnosticError) as e:
        choose_ledger(spec)
    (d,) = e.value.diagnostics
    assert d.code == "E616" and str(real) in d.message and f"cat {real} >> {ledger}" in d.hint
    real.unlink()
    ledger.mkdir()
    with pytest.raises(DiagnosticError) as e:
        check_policy(spec, policy)
    assert [d.code for d in e.value.diagnostics] == ["E615"]
    ledger.rmdir()
    ledger.write_text("\ufeff" + _record(0.5).model_dump_json() + "\n", encoding="utf-8")
    with pytest.raises(DiagnosticError) as e:
        check_policy(spec, policy)
    (d,) = e.value.diagnostics
    assert d.code == "E020" and d.pos.line == 1


def test_lifetime_composes_rdp_curves_not_rhos() -> None:
    rho, delta = 0.01, 1e-9
    eps = eps_from_rho(rho, delta)
    curve = planned_curve(rho, delta)
    this = ReleaseBudget(epsilon=eps, delta=delta, rho=rho, rdp=curve)
    records = [_record(eps, rho=rho, rdp=curve), _record(eps, rho=rho, rdp=curve)]
    assert lifetime_budget(2.5 * eps, records, this).exceeded  # basic composition by default
    budget = lifetime_budget(2.5 * eps, records, this, composition="rdp")
    assert budget.basic_epsilon == pytest.approx(3 * eps) and not budget.exceeded
    assert eps_from_rho(3 * rho, delta) <= budget.total_epsilon < 2.5 * eps
    assert "RDP composition" in budget.describe()
    # records with only a rho (no curve) compose by basic composition: rho is never trusted
    bare = [_record(eps, rho=rho), _record(eps, rho=rho)]
    rdp = lifetime_budget(2.5 * eps, bare, this, composition="rdp")
    assert rdp.total_epsilon == pytest.approx(3 * eps) and rdp.exceeded


def test_zcdp_conversion_matches_the_closed_form() -> None:
    # rap_pp.md §4.2: rho = (sqrt(L + eps) - sqrt(L))^2 inverts eps = rho + 2 sqrt(rho L).
    eps, delta = 1.0, 1e-9
    big_l = math.log(1 / delta)
    rho = (math.sqrt(big_l + eps) - math.sqrt(big_l)) ** 2
    assert zcdp_epsilon(rho, delta) == pytest.approx(eps, rel=1e-12)


def test_rho_only_spec_needs_the_privacy_layers_epsilon(tmp_path: Path) -> None:
    spec, policy = _setup(
        tmp_path, TINY.replace("  epsilon: 1.0\n  delta: 1e-9\n", "  rho: 0.01\n")
    )
    with pytest.raises(InternalError):
        check_policy(spec, policy)
    assert _codes(spec, policy, requested_epsilon=1.2) == []
    assert _codes(spec, policy, requested_epsilon=2.2) == ["P001"]


def test_read_ledger_reports_every_malformed_line(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    good = _record(1.0).model_dump_json()
    bad_field = json.dumps({**json.loads(good), "epsilon": -1})
    path.write_text(f"{good}\n\n{{not json\n{bad_field}\n{good}\n")
    with pytest.raises(DiagnosticError) as info:
        read_ledger(path)
    diags = info.value.diagnostics
    assert [(d.code, d.pos.line) for d in diags] == [("E020", 3), ("E020", 4)]
    assert diags[0].pos.file == str(path) and "epsilon" in diags[1].message
    assert read_ledger(tmp_path / "absent.jsonl") == []


def test_append_release_is_atomic_and_refuses_a_corrupt_ledger(tmp_path: Path) -> None:
    spec, _ = _setup(tmp_path)
    record = release_record(spec, 1.0, 1e-9, rho=0.01, time=datetime(2024, 5, 1, tzinfo=UTC))
    assert record.spec_sha256 == spec.spec_hash and record.time == "2024-05-01T00:00:00+00:00"
    path = tmp_path / "deep" / "l.jsonl"
    append_release(path, record)
    append_release(path, record)
    assert read_ledger(path) == [record, record]
    path.write_text(path.read_text() + "garbage\n")
    before = path.read_text()
    with pytest.raises(DiagnosticError):
        append_release(path, record)
    assert path.read_text() == before
    leftovers = [p.name for p in path.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_concurrent_appends_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"

    def worker(k: int) -> None:
        for j in range(5):
            append_release(path, _record(float(k * 10 + j)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.epsilon for r in read_ledger(path)) == sorted(
        float(k * 10 + j) for k in range(6) for j in range(5)
    )


def test_ci_doc_has_a_valid_workflow_running_dpql_check() -> None:
    import re

    import yaml

    doc = (Path(__file__).resolve().parents[1] / "docs" / "ci.md").read_text()
    workflow = yaml.safe_load(re.search(r"```yaml\n(.*?)```", doc, re.S).group(1))
    assert "pull_request" in workflow[True]  # PyYAML reads the key `on` as True
    steps = workflow["jobs"]["dpql-check"]["steps"]
    script = steps[-1]["run"]
    assert 'dpql check "$spec" --policy "$POLICY"' in script and ".release.yaml" in script
