"""`dpql compile` end to end on a small Adult subset; `dpql verify`; no partial outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from dpql.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adult"


@pytest.mark.e2e
def test_compile_writes_table_and_record_that_verify(small_release: Path, capsys):
    ledger = small_release.parent / "ledger.jsonl"
    args = ["compile", str(small_release), "--seed", "1", "--quiet", "--ledger", str(ledger)]
    assert main(args) == 0
    assert json.loads(ledger.read_text().splitlines()[-1])["epsilon"] <= 1.0 + 1e-9
    out = small_release.parent / "out"
    table = out / "adult_synthetic.csv"
    record_path = out / "adult_synthetic.provenance.json"
    df = pd.read_csv(table)
    assert len(df) == 3000 and df.columns[0] == "age"
    # under the default missing: keep, an empty cell is a declared value of every column; the
    # data has none, and the noise can leave a measured column a few only where it cannot tell
    # them apart (the columns outside the workload are unmeasured: any value, empty included)
    assert df["age"].dropna().between(17, 90).all()
    assert set(df["sex"].dropna()) <= {"Female", "Male"}
    assert df[["age", "sex", "income", "race"]].isna().mean().max() <= 0.02
    record = json.loads(record_path.read_text())
    assert record["privacy"]["spent"]["epsilon"] <= record["privacy"]["budget"]["epsilon"] + 1e-9
    phases = {e["phase"] for e in record["privacy"]["events"]}
    assert {"rap.measure", "rap.select", "iproj.measure", "accept"} <= phases
    assert len(record["requirements"]) == 3
    # nothing private in the public record: the true row count lives in the curator file only,
    # which is kept away from the published outputs
    curator = small_release.parent / "curator" / "adult_synthetic.CURATOR-ONLY.json"
    assert curator.exists() and sorted(p.name for p in out.iterdir()) == [
        "adult_synthetic.csv",
        "adult_synthetic.provenance.json",
    ]
    assert "timings_s" not in record and "timings_s" in json.loads(curator.read_text())
    # published outputs are readable by others (0666 less the umask); the curator file is not
    from dpql.io import public_mode

    assert [p.stat().st_mode & 0o777 for p in (table, record_path, curator)] == [
        public_mode(),
        public_mode(),
        0o600,
    ]
    assert main(["verify", str(record_path), "--synthetic", str(table)]) == 0
    table.write_text(table.read_text().replace("Male", "Female", 1))
    assert main(["verify", str(record_path), "--synthetic", str(table)]) == 1
    record["privacy"]["spent"]["epsilon"] = 0.5
    record_path.write_text(json.dumps(record))
    assert main(["verify", str(record_path)]) == 1


@pytest.mark.e2e
def test_interrupted_compile_leaves_no_output(small_release: Path, monkeypatch):
    import dpql.synth.rap.program as rap

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(rap, "run_rap", boom)
    assert main(["compile", str(small_release), "--quiet"]) == 130
    out = small_release.parent / "out"
    assert not out.exists() or not any(out.iterdir())


def test_an_undeclared_value_is_shown_by_validate_not_compile(small_release: Path, capsys):
    """Compile treats an undeclared category as missing (the outcome never depends on one
    record); the curator's strict look is ``dpql validate``: file, row and column, the value
    only with --show-values."""
    data = small_release.parent / "train.csv"
    df = pd.read_csv(data)
    df.loc[5, "race"] = "Martian"
    df.to_csv(data, index=False)
    capsys.readouterr()
    assert main(["validate", str(small_release)]) == 1
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Martian" not in text and "race" in text and "6" in text and "Traceback" not in text
    assert main(["validate", str(small_release), "--show-values"]) == 1
    out = capsys.readouterr()
    assert "Martian" in out.out + out.err


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    tests = [b for b in blocks if "pytest" in b]
    assert len(tests) == 1, "one README block runs the tests"
    test_cmd = tests[0].split("&&")[-1].strip()
    assert test_cmd.startswith("python3 -m pytest") and test_cmd in ci
