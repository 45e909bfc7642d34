"""``--format json`` on init, compile, check and verify: one parseable JSON document on stdout,
on success and on failure, and nothing else there (progress and notes go to stderr)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpql.cli import main

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
dpql: 1
name: pets
data: {path: pets.csv, rows: 300}
schema:
  age: {type: numeric, min: 0, max: 100, integer: true, bins: 10}
  pet: {type: categorical, values: [cat, dog, yak]}
privacy: {epsilon: 1.0, delta: 1.0e-6}
workload: [marginals(2)]
synthesizer: {method: aim, rows: 300, options: {iters: 50, final_iters: 50}}
output: {path: out/pets.csv, provenance: out/pets.provenance.json}
"""


@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    pd.DataFrame(
        {"age": rng.integers(0, 100, 300), "pet": rng.choice(["cat", "dog", "yak"], 300)}
    ).to_csv(tmp_path / "pets.csv", index=False)
    path = tmp_path / "pets.release.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return path


def _run(capsys, *argv: str) -> tuple[int, dict]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out)  # the whole of stdout is one document


@pytest.mark.e2e
def test_compile_verify_and_check_print_one_document(spec: Path, capsys) -> None:
    code, doc = _run(capsys, "compile", str(spec), "--seed", "0", "--format", "json")
    assert code == 0 and doc["ok"] is True
    assert Path(doc["table"]).is_file() and Path(doc["provenance"]).is_file()
    assert doc["privacy"]["spent"]["epsilon"] == pytest.approx(1.0)
    assert doc["quality"]["largest"]["column"] in ("age", "pet")
    assert "timings" not in json.dumps(doc)  # curator-only

    code, doc2 = _run(capsys, "verify", doc["provenance"], "--synthetic", doc["table"],
                      "--format", "json")  # fmt: skip
    assert code == 0 and doc2["ok"] is True and doc2["problems"] == []
    assert doc2["spent"]["epsilon"] == pytest.approx(1.0)

    Path(doc["table"]).write_text("age,pet\n1,cat\n", encoding="utf-8")  # tampered
    code, doc3 = _run(capsys, "verify", doc["provenance"], "--synthetic", doc["table"],
                      "--format", "json")  # fmt: skip
    assert code == 1 and doc3["ok"] is False and doc3["problems"][0]["code"].startswith("V")

    # a second compile is refused (E614): the diagnostics as one document
    code, doc4 = _run(capsys, "compile", str(spec), "--format", "json")
    assert code == 1 and [d["code"] for d in doc4["diagnostics"]] == ["E614"]


def test_check_json_with_and_without_violations(spec: Path, capsys, tmp_path: Path) -> None:
    code, doc = _run(capsys, "check", str(spec), "--format", "json")
    assert code == 0 and doc["ok"] is True and doc["violations"] == []
    policy = tmp_path / "policy.yaml"
    shutil.copy(ROOT / "examples" / "policy.yaml", policy)
    (tmp_path / "privacy-ledger.jsonl").write_text("", encoding="utf-8")
    code, doc = _run(capsys, "check", str(spec), "--policy", str(policy), "--format", "json")
    assert code == 0 and doc["ok"] is True, doc  # the example policy allows method aim
    strict = policy.read_text(encoding="utf-8").replace("max_epsilon: 2.0", "max_epsilon: 0.5")
    policy.write_text(strict.replace("[auto, aim, ", "["), encoding="utf-8")
    code, doc = _run(capsys, "check", str(spec), "--policy", str(policy), "--format", "json")
    assert code == 1 and doc["ok"] is False
    assert [v["code"] for v in doc["violations"]] == ["P001", "P004"]
    assert all(v["hint"] for v in doc["violations"])
    assert "0.5" in doc["violations"][0]["hint"]


def test_a_spec_error_is_one_json_document(spec: Path, capsys) -> None:
    spec.write_text(SPEC.replace("rows: 300}", "rows: TODO}"), encoding="utf-8")
    for command in ("check", "compile"):
        code, doc = _run(capsys, command, str(spec), "--format", "json")
        assert code == 1 and doc["diagnostics"][0]["code"] == "E030"


def test_the_example_policy_allows_the_default_method() -> None:
    from dpql.spec.load import load_policy

    allowed = load_policy(ROOT / "examples" / "policy.yaml").model.allowed_methods
    assert "auto" in allowed and "aim" in allowed
