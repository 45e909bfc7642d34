"""One lifetime ledger per data source, found without flags (dpql.release.project): ``dpql compile`` and
``dpql check`` find the policy (or ``dpql.yaml``) by walking up from the spec and record in,
and enforce, the policy's ledger; releases of one data source in several ledgers are refused;
``dpql ledger`` reports the spend per data source and per release."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_release_commit import POLICY, _refuse, _spec

from dpql.cli import main
from dpql.release.lifetime import ReleaseRecord, read_ledger
from dpql.release.policy import lifetime_budget, planned_spend
from dpql.spec.load import load_spec


def _three_specs(folder: Path) -> list[Path]:
    """Three specs of one data file (``train.csv``) in ``folder``, with their own outputs."""
    base = _spec(folder)
    text = base.read_text(encoding="utf-8")
    base.unlink()
    specs = []
    for k in (1, 2, 3):
        spec = folder / f"s{k}.release.yaml"
        spec.write_text(
            text.replace("name: small-external", f"name: s{k}").replace(
                "out/adult_synthetic", f"out/s{k}"
            ),
            encoding="utf-8",
        )
        specs.append(spec)
    return specs


def _three_releases(spec: Path, composition: str) -> tuple[float, float]:
    """The lifetime spend of two and of three releases of ``spec`` under ``composition``."""
    spend = planned_spend(load_spec(spec))
    one = ReleaseRecord(
        name="s",
        spec_sha256="0" * 64,
        epsilon=spend.epsilon,
        delta=spend.delta,
        rdp=spend.rdp,
        time="2026-01-01T00:00:00+00:00",
    )
    two = lifetime_budget(math.inf, [one], spend, composition=composition).total_epsilon
    three = lifetime_budget(math.inf, [one, one], spend, composition=composition).total_epsilon
    return two, three


def test_epsilons_add_against_a_cap_unless_the_policy_composes_by_rdp(tmp_path: Path) -> None:
    """Three epsilon-1 releases spend 3 of a basic cap (the default: what a custodian reads a
    cap to mean); ``composition: rdp`` enforces the smaller, still sound, RDP composition."""
    (spec,) = _three_specs(tmp_path)[:1]
    assert _three_releases(spec, "basic") == pytest.approx((2.0, 3.0))
    two, three = _three_releases(spec, "rdp")
    assert 1.0 < two < three < 2.5


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.e2e
def test_three_specs_of_one_data_file_share_the_policy_found_beside_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "project"
    specs = _three_specs(folder)
    cap = 2.5  # three releases of epsilon 1 each: the third passes the cap
    policy = folder / "policy.yaml"  # the ledger does not exist yet: compile creates it
    policy.write_text(POLICY.format(cap=cap), encoding="utf-8")
    ledger = folder / "privacy-ledger.jsonl"
    for spec in specs[:2]:
        code, out, err = _run(capsys, "compile", str(spec), "--seed", "0", "--quiet")
        assert code == 0, err
        assert f"ledger: recorded in {ledger} (policy {policy})" in out
    lines = read_ledger(ledger)
    assert [r.name for r in lines] == ["s1", "s2"]
    assert all(r.data_source and r.data_source.path == "train.csv" for r in lines)
    assert all(r.data_source and r.data_source.data_hmac_sha256 for r in lines)
    assert not list(folder.glob("*.ledger.jsonl"))  # no per-spec or per-data default ledger
    with monkeypatch.context() as m:  # the third is refused before any data is read
        m.setattr("dpql.data.private.open_private", _refuse)
        code, out, err = _run(capsys, "compile", str(specs[2]), "--seed", "0", "--quiet")
        assert code == 1 and "error[P007]" in err and f"of {cap:g}" in err
        assert "Traceback" not in err and not (folder / "out" / "s3.csv").exists()
        for argv in (["--policy", str(policy)], []):
            code, out, err = _run(capsys, "check", str(specs[2]), *argv)
            assert code == 1 and "error[P007]" in err, out + err
    assert len(read_ledger(ledger)) == 2

    code, out, _ = _run(capsys, "ledger", str(specs[0]), "--format", "json")
    assert code == 0
    report = json.loads(out)
    assert report["ledger"] == str(ledger) and report["policy"] == str(policy)
    assert report["lifetime"] == {"epsilon": cap, "delta": None}
    (source,) = report["sources"]
    assert source["data"] == str(folder / "train.csv") and source["this_spec"]
    assert [r["name"] for r in source["releases"]] == ["s1", "s2"]
    assert 0 < source["remaining_epsilon"] < cap and not source["over_cap"]
    assert source["spent"]["epsilon"] <= source["spent"]["basic_epsilon"]
    code, text, _ = _run(capsys, "ledger", str(ledger))  # the ledger itself: same policy found
    assert code == 0 and f"policy {policy}: lifetime epsilon {cap:g}" in text
    assert "2 release(s)" in text and "s1" in text and "s2" in text


def test_releases_of_one_data_source_in_several_ledgers_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old per-spec ledger beside the spec plus the policy's ledger: compile and check
    refuse (E616) before any data is read, naming both and how to merge them."""
    monkeypatch.setattr("dpql.data.private.open_private", _refuse)
    folder = tmp_path / "project"
    spec = _three_specs(folder)[0]
    (folder / "policy.yaml").write_text(POLICY.format(cap=8.0), encoding="utf-8")
    old = folder / "s1.release.ledger.jsonl"  # a line from before lines named their data
    old.write_text(
        ReleaseRecord(
            name="s1", spec_sha256="0" * 64, epsilon=1.0, delta=1e-9, time="2026-01-01T00:00:00"
        ).model_dump_json()
        + "\n",
        encoding="utf-8",
    )
    ledger = folder / "privacy-ledger.jsonl"
    for argv in (["compile", str(spec), "--quiet"], ["check", str(spec)], ["ledger", str(spec)]):
        code, out, err = _run(capsys, *argv)
        assert code == 1 and "error[E616]" in err, out + err
        assert str(old) in err and str(ledger) in err and f"cat {old} >> {ledger}" in err
    assert not ledger.exists()


def test_discovery_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The nearest folder with a project or policy file decides; dpql.yaml names the policy
    and the ledger; two candidates in one folder are ambiguous (E617); a YAML file named like
    a policy without ``dpql-policy`` is not a policy."""
    folder = tmp_path / "project"
    spec = _three_specs(folder / "specs" / "gss")[0]
    (folder / "specs" / "policy.yaml").write_text("title: not a policy\n", encoding="utf-8")
    code, out, _ = _run(capsys, "check", str(spec))
    assert code == 0 and "no policy given or found" in out
    (folder / "rules").mkdir()
    (folder / "rules" / "gss.policy.yaml").write_text(POLICY.format(cap=8.0), encoding="utf-8")
    (folder / "dpql.yaml").write_text(
        "policy: rules/gss.policy.yaml\nledger: rules/privacy-ledger.jsonl\n", encoding="utf-8"
    )
    code, out, _ = _run(capsys, "check", str(spec))
    assert code == 0 and f"ok (policy {folder / 'rules' / 'gss.policy.yaml'})" in out
    (folder / "policy.yaml").write_text(POLICY.format(cap=8.0), encoding="utf-8")
    code, _, err = _run(capsys, "check", str(spec))
    assert code == 1 and "error[E617]" in err and "dpql.yaml, policy.yaml" in err
    (folder / "policy.yaml").unlink()
    (folder / "dpql.yaml").write_text("ledger: other.jsonl\n", encoding="utf-8")
    code, _, err = _run(capsys, "check", str(spec))  # no policy named: its ledger is used
    assert code == 0
    (folder / "dpql.yaml").write_text("policy: rules/gss.policy.yaml\nledgr: x\n")
    code, _, err = _run(capsys, "check", str(spec))
    assert code == 1 and "dpql.yaml:2:1" in err and "ledger" in err  # did you mean
