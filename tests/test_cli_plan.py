"""`dpql plan` and `dpql check` work without data; diagnostics exit 1 with positions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dpql.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHARED_SPEC = ROOT.parent / "shared" / "spec-examples" / "adult.release.yaml"
EXAMPLE = ROOT / "examples" / "adult" / "adult.release.yaml"


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


@pytest.mark.skipif(not SHARED_SPEC.exists(), reason="shared spec examples not present")
def test_shared_example_plans_unchanged(capsys):
    assert main(["plan", str(SHARED_SPEC)]) == 0
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
    shutil.copy(ROOT.parent / "shared" / "spec-examples" / "policy.yaml", policy)
    assert main(["check", str(spec_without_data), "--policy", str(policy)]) == 0
    strict = policy.read_text().replace("max_epsilon: 2.0", "max_epsilon: 0.5")
    policy.write_text(strict)
    assert main(["check", str(spec_without_data), "--policy", str(policy)]) == 1
    assert "epsilon" in capsys.readouterr().out
