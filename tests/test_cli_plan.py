"""`dpql plan` and `dpql check` work without data; diagnostics exit 1 with positions."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from dpql.cli import main
from dpql.plan.split import BOUND_TEST_SD

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adult" / "adult.release.yaml"
POLICY = ROOT / "examples" / "policy.yaml"


@pytest.fixture()
def spec_without_data(tmp_path: Path) -> Path:
    """The example spec with its data path pointing at a file that does not exist."""
    text = EXAMPLE.read_text().replace("adult_train.csv.gz", "no-such-file.csv")
    path = tmp_path / "adult.release.yaml"
    path.write_text(text)
    return path


def test_plan_never_opens_the_data(spec_without_data: Path, capsys, monkeypatch):
    opened: list[str] = []
    real_open = open

    def spy(file, *a, **k):
        opened.append(str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr("builtins.open", spy)
    assert main(["plan", str(spec_without_data), "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["queries"] == {"marginal": 455, "prefix": 64, "halfspace": 500, "count": 1}
    assert plan["allocation"]["total_rho"] <= plan["budget"]["rho"]
    assert not any("no-such-file" in f for f in opened)


def test_plan_writes_versioned_json(spec_without_data: Path, tmp_path: Path):
    out = tmp_path / "plan.json"
    assert main(["plan", str(spec_without_data), "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["dpql_plan"] == 1 and data["method"] == "rap"
    assert [r["requirement"].split("(")[0] for r in data["requirements"]] == [
        "logistic",
        "corr",
        "mean",
    ]


def test_example_plans_without_data(capsys):
    assert main(["plan", str(EXAMPLE)]) == 0
    assert "no data was read" in capsys.readouterr().out


def test_unknown_column_is_a_positioned_error(spec_without_data: Path, capsys):
    text = spec_without_data.read_text().replace(
        "corr(age, hours_per_week)", "corr(age, hours_per_wek)"
    )
    spec_without_data.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "hours_per_wek" in t)
    assert main(["plan", str(spec_without_data)]) == 1
    err = capsys.readouterr().err
    assert f"adult.release.yaml:{line}:" in err and "did you mean 'hours_per_week'" in err


def test_check_with_policy(spec_without_data: Path, tmp_path: Path, capsys):
    policy = tmp_path / "policy.yaml"
    shutil.copy(POLICY, policy)
    # no ledger yet and none elsewhere: no earlier release (compile creates the ledger)
    assert main(["check", str(spec_without_data), "--policy", str(policy)]) == 0
    captured = capsys.readouterr()
    assert "recorded: 0 release(s)" in captured.out
    assert captured.err == ""  # a passing check prints no empty diagnostics block
    (tmp_path / "privacy-ledger.jsonl").touch()
    assert main(["check", str(spec_without_data), "--policy", str(policy)]) == 0
    assert main(["check", str(spec_without_data)]) == 0  # the policy beside the spec is found
    assert f"ok (policy {policy})" in capsys.readouterr().out
    strict = policy.read_text().replace("max_epsilon: 2.0", "max_epsilon: 0.5")
    policy.write_text(strict)
    assert main(["check", str(spec_without_data), "--policy", str(policy)]) == 1
    err = capsys.readouterr().err  # located at the key to change, like compile's refusal
    assert f"{spec_without_data}:" in err and "error[P001]" in err and "max_epsilon 0.5" in err


# ---------------------------------------------------------------------------------------------
# Requirements at plan time: predicted error, reachability, the acceptance plan check


def _plan_json(path: Path, capsys) -> dict:
    assert main(["plan", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _with_requirements(spec: Path, *reqs: str, epsilon: str | None = None) -> Path:
    text = spec.read_text()
    start = text.index("requirements:\n")
    end = text.index("\nsynthesizer:")
    text = text[:start] + "requirements:\n" + "".join(f"  - {r}\n" for r in reqs) + text[end:]
    if epsilon is not None:
        text = text.replace("epsilon: 1.0", f"epsilon: {epsilon}")
    spec.write_text(text)
    return spec


def test_plan_reports_reachable_and_unreachable_tolerances(spec_without_data: Path, capsys):
    spec = _with_requirements(
        spec_without_data,
        # its own release of the fixed share 0.2 gives 2 sd ~ 0.011 at epsilon 1: unreachable
        "corr(age, hours_per_week) within 0.005",
        "logistic(income ~ age + sex) within 0.02",  # the accuracy test's sd: 0.02 / 8
    )
    corr, logit = _plan_json(spec, capsys)["requirements"]
    assert corr["metric"] == "corr" and logit["metric"] == "accuracy"
    assert corr["reachable"] is False and 2 * corr["predicted_sd"] > 0.005
    assert corr["smallest_epsilon"] > 1.0
    (d,) = corr["diagnostics"]
    line = next(i for i, t in enumerate(spec.read_text().splitlines(), 1) if "corr(" in t)
    assert d["code"] == "W506" and d["line"] == line and "file" not in d
    assert logit["reachable"] is True and logit["diagnostics"] == []
    assert 2 * logit["predicted_sd"] <= 0.02 and logit["smallest_epsilon"] < 1.0
    assert logit["predicted_sd"] == pytest.approx(0.02 / 8, rel=1e-6)  # no more than needed
    assert main(["plan", str(spec)]) == 0
    out = capsys.readouterr()
    assert f"adult.release.yaml:{line}:5: warning[W506]" in out.err
    assert "W506" in out.out and "accuracy" in out.out and "within 0.005" in out.out

    # at the smallest epsilon the plan reports, the same tolerance becomes reachable
    raised = _with_requirements(
        spec, "corr(age, hours_per_week) within 0.005", epsilon=f"{corr['smallest_epsilon'] * 1.01}"
    )
    (corr2,) = _plan_json(raised, capsys)["requirements"]
    assert corr2["reachable"] is True and corr2["diagnostics"] == []
    assert corr2["predicted_sd"] < corr["predicted_sd"]


def test_plan_rejects_an_untestable_metric_with_its_position(spec_without_data: Path, capsys):
    spec = _with_requirements(spec_without_data, "logistic(income ~ age) auc >= 0.7")
    line = next(i for i, t in enumerate(spec.read_text().splitlines(), 1) if "auc" in t)
    assert main(["plan", str(spec)]) == 1
    err = capsys.readouterr().err
    assert f"adult.release.yaml:{line}:5: error[E505]" in err and "pairwise" in err
    assert "Traceback" not in err
    assert main(["check", str(spec)]) == 1  # CI catches it too


def test_plan_counts_f1_queries_and_flags_impossible_bounds(spec_without_data: Path, capsys):
    one = _plan_json(_with_requirements(spec_without_data, "logistic(income ~ age) f1 >= 0.3"), capsys)
    two = _plan_json(
        _with_requirements(
            spec_without_data, "logistic(income ~ age) f1 >= 0.3", "logistic(income ~ sex) accuracy >= 0.7"
        ),
        capsys,
    )

    def test_line(plan: dict) -> dict:
        return next(x for x in plan["allocation"]["lines"] if x["phase"] == "accept.test")

    # f1 = 2 counting queries, accuracy 1, plus each model's count of the rows where its columns
    # are present (every column is nullable under the default keep): sigma = sqrt(T)/n /
    # sqrt(2 rho) with T = 3, then 5; the planner gives the tests just the rho that brings each
    # bound's sd to BOUND_TEST_SD
    for plan, tests in ((one, 3), (two, 5)):
        line = test_line(plan)
        l2 = line["noise_scale"] * math.sqrt(2 * line["rho_per_release"]) * 32561
        assert l2 == pytest.approx(math.sqrt(tests))
    assert test_line(two)["rho_per_release"] > test_line(one)["rho_per_release"]
    for r in two["requirements"]:
        assert r["predicted_sd"] <= BOUND_TEST_SD * (1 + 1e-6)
    f1 = one["requirements"][0]
    assert f1["metric"] == "f1" and f1["reachable"] is None and f1["predicted_sd"] > 0
    bad = _plan_json(_with_requirements(spec_without_data, "logistic(income ~ age) accuracy > 1"), capsys)
    assert bad["requirements"][0]["reachable"] is False
    assert [d["code"] for d in bad["requirements"][0]["diagnostics"]] == ["W506"]


def test_plan_warns_when_requirements_are_never_tested(spec_without_data: Path, capsys):
    text = spec_without_data.read_text()
    start, end = text.index("postprocess:"), text.index("\noutput:")
    # left out, post-processing defaults to iproj when the spec lists requirements
    spec_without_data.write_text(text[:start] + text[end + 1 :])
    assert "iproj.measure" in _plan_json(spec_without_data, capsys)["budget"]["phases"]
    spec_without_data.write_text(text[:start] + "postprocess: null\n" + text[end + 1 :])
    plan = _plan_json(spec_without_data, capsys)
    assert "iproj.measure" not in plan["budget"]["phases"]
    for r in plan["requirements"]:
        assert r["reachable"] is None and [d["code"] for d in r["diagnostics"]] == ["W507"]


def test_python_dash_m_dpql_is_the_command(tmp_path: Path):
    """``python -m dpql`` runs the same CLI, exit codes included (a spec error exits 1)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ok = subprocess.run([sys.executable, "-m", "dpql", "check", str(EXAMPLE), "--policy",
                         str(POLICY)], capture_output=True, text=True, env=env)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "bad.release.yaml"
    bad.write_text("dpql: 1\nname: [\n")
    out = subprocess.run([sys.executable, "-m", "dpql", "check", str(bad)],
                         capture_output=True, text=True, env=env)  # fmt: skip
    assert out.returncode == 1
    assert "bad.release.yaml:" in out.stderr and "Traceback" not in out.stderr
