"""The provenance record's JSON Schema (spec/provenance.schema.json): a real compile's record
validates, `dpql verify` rejects records that do not, and the requirement and I-projection
sections carry what the record promises (DP values only)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import jsonschema
import pytest
from test_iproj_support import spy_recentre

from dpql.cli import main
from dpql.evaluate.workload import describe_query
from dpql.ir.queries import ModelRequirement, joint_l2_sensitivity
from dpql.plan.planner import build_plan
from dpql.release.provenance import RECORD_VERSION, record_schema, verify_record
from dpql.schemas import SCHEMA_DIR
from dpql.spec.load import load_spec

SCHEMA = json.loads((SCHEMA_DIR / "provenance.schema.json").read_text(encoding="utf-8"))


def test_committed_schema_is_the_versioned_record_schema() -> None:
    assert SCHEMA == record_schema()
    assert SCHEMA["properties"]["dpql_provenance"] == {"const": RECORD_VERSION}
    assert str(RECORD_VERSION) in SCHEMA["title"]
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def _mutations(record: dict) -> dict[str, dict]:
    """Records that break the schema in one place each."""
    out = {}
    r = copy.deepcopy(record)
    r["requirements"][0]["true_value"] = 0.5  # an undeclared field (could leak private data)
    out["unknown requirement key"] = r
    r = copy.deepcopy(record)
    del r["postprocess"]
    out["missing postprocess"] = r
    r = copy.deepcopy(record)
    r["output"]["rows"] = "many"
    out["wrong type"] = r
    r = copy.deepcopy(record)
    r["requirements"][1]["verdict"] = "maybe"
    out["bad verdict"] = r
    r = copy.deepcopy(record)
    r["privacy"]["events"][0]["mechanism"] = "laplace"
    out["unknown mechanism"] = r
    r = copy.deepcopy(record)
    r["postprocess"]["weights"] = [0.1, 0.9]  # per-row data must not be recorded
    out["row weights"] = r
    return out


@pytest.mark.e2e
def test_compiled_record_validates_and_verify_rejects_invalid_ones(small_release: Path, capsys, monkeypatch):
    seen = spy_recentre(monkeypatch)
    assert main(["compile", str(small_release), "--seed", "3", "--quiet"]) == 0
    out = small_release.parent / "out"
    record_path = out / "adult_synthetic.provenance.json"
    record = json.loads(record_path.read_text())
    jsonschema.validate(record, SCHEMA)
    assert verify_record(record, out / "adult_synthetic.csv") == []

    # the requirement section: noisy real value, sigma, tolerance, before / after, verdict
    logit, corr, mean = record["requirements"]
    for r in (logit, corr, mean):
        assert r["verdict"] in ("pass", "fail", "inconclusive")
        if r["real_noisy"] is None:  # noise swamped the statistic (n = 3000): said, not hidden
            assert r["verdict"] == "inconclusive" and "undefined" in r["note"]
        else:
            assert r["sigma"] > 0
        assert r["synthetic_before"] is not None and r["synthetic_after"] is not None
    assert logit["kind"] == "logistic" and logit["metric"] == "accuracy"
    assert logit["tolerance"]["within"] == 0.02 and logit["rho"] > 0
    # measured by its pilot alone: no moments, so no moment-based excess-risk bound (a model
    # measured by its moments reports one: tests/test_requirement_weights.py)
    assert logit["excess_risk_bound"] is None
    assert corr["kind"] == "corr" and mean["kind"] == "mean"

    # the I-projection summary, aligned with its measures; accounting matches the ledger
    post = record["postprocess"]
    k = len(post["measures"])
    assert k > 0 and all(len(post[v]) == k for v in ("lambda", "noisy", "target"))
    assert post["kkt_violation"] <= 1e-6
    assert post["iterations"] >= 1 or post["solver"] == "none"  # none: nothing was constrained
    assert len(post["roles"]) == len(record["requirements"]) and post["policy"]["z"] == 2.0
    events = [e for e in record["privacy"]["events"] if e["phase"] == "iproj.measure"]
    assert len(post["noise_sigma"]) == k
    # one release per requirement (the planner's split), each planned from the spec
    # alone; within a release the noise is spread over its measures (sd = release sd / c_k)
    # with sum (c_k Delta_k)^2 = sum Delta_k^2, so the release keeps the sensitivity and sd of
    # equal noise
    spec = load_spec(small_release)
    plan = build_plan(spec)
    n = record["spec"]["data"]["rows"]
    # what compile measured: the plan's measures with the corr / mean ones centred at the
    # synthetic table's means (dpql.postprocess.centre), in the plan's releases
    (_, measured), = seen
    queries = measured.queries
    planned = len(queries)
    assert post["measures"][:planned] == [describe_query(q, spec.domain) for q in queries]
    # the logistic's only measure is its pilot (dpql.postprocess.run.with_pilots): the accuracy
    # of its model fitted on RAP's table, in the logistic's own release: its value in the roles
    logistic = next(i for i, r in enumerate(plan.requirements) if isinstance(r, ModelRequirement))
    (pilot,) = measured.index[logistic]
    assert k == planned and post["measures"][pilot].startswith("model_accuracy(")
    assert post["roles"][logistic]["noisy"] == pytest.approx(post["noisy"][pilot])
    releases = measured.releases
    assert len(events) == len(releases) == len(plan.measures.releases) == len(plan.requirements)
    times = [sum(i in r.cells for r in releases) for i in range(planned)]
    checked = 0
    for event, rel, mine in zip(events, releases, plan.measures.releases, strict=True):
        part = [queries[i] for i in rel.cells]
        assert event["count"] == len(rel.cells)
        # the plan's sensitivity whatever the centres and the pilot's fitted model (dpql verify)
        want = joint_l2_sensitivity([plan.measures.queries[i] for i in mine.cells], n)
        assert math.isclose(event["l2_sensitivity"], want)
        if any(times[i] > 1 for i in rel.cells):
            continue  # a shared measure's sd is an inverse-variance average over releases
        delta = [q.sensitivity(n).l2 for q in part]
        scales = [event["noise_scale"] / post["noise_sigma"][i] for i in rel.cells]
        spread = math.fsum((c * d) ** 2 for c, d in zip(scales, delta, strict=True))
        assert math.isclose(spread, want**2, rel_tol=1e-9)
        checked += 1
    assert checked >= 1
    logit_release = events[logistic]  # the pilot alone: one accuracy, sensitivity 1/n
    assert logit_release["count"] == 1 and math.isclose(logit_release["l2_sensitivity"], 1 / n)

    for what, bad in _mutations(record).items():
        problems = verify_record(bad)
        assert problems and {p.code for p in problems} == {"V003"}, what
    old = {**record, "dpql_provenance": RECORD_VERSION - 1}
    assert [p.code for p in verify_record(old)] == ["V001"]

    bad = _mutations(record)["unknown requirement key"]
    record_path.write_text(json.dumps(bad))
    capsys.readouterr()
    assert main(["verify", str(record_path)]) == 1
    assert "error[V003]" in capsys.readouterr().err


def test_schema_problems_name_the_place(tmp_path: Path) -> None:
    record = {"dpql_provenance": RECORD_VERSION, "output": {"rows": 1}}
    problems = verify_record(record)
    assert problems and all(p.code == "V003" for p in problems)
    assert any("'privacy' is a required property" in p.message for p in problems)
    assert any(p.message.startswith("output:") for p in problems)


@pytest.mark.parametrize("value", [[], "record", None])
def test_non_records_are_rejected(value) -> None:
    assert [p.code for p in verify_record(value)] == ["V001"]  # type: ignore[arg-type]
