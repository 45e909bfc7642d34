"""The notebook API: ``dpql.compile(spec, data=DataFrame | path, overrides=..., progress=...)``,
``Release.summary()`` and ``quality``, ``dpql.evaluate_report`` returning its report; and no
UserWarning on a compile (mbi's import-time warnings are filtered where dpql imports it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from guards import run_or_fail

import dpql

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
dpql: 1
name: pets
data: {path: pets.csv, rows: 400}
schema:
  age: {type: numeric, min: 0, max: 100, integer: true, bins: 10}
  pet: {type: categorical, values: [cat, dog, yak]}
  owner: {type: categorical, values: ["no", "yes"]}
privacy: {epsilon: 1.0, delta: 1.0e-6}
workload: [marginals(2)]
synthesizer: {method: aim, rows: 400, options: {iters: 50, final_iters: 50}}
output: {path: out/pets.csv, provenance: out/pets.provenance.json}
"""


def _frame(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame(
        {
            "age": rng.integers(0, 100, n),
            "pet": rng.choice(["cat", "dog", "yak"], n, p=[0.5, 0.3, 0.2]),
            "owner": rng.choice(["no", "yes"], n),
        }
    )


@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "pets.release.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return path


@pytest.mark.e2e
def test_compile_a_dataframe(spec: Path) -> None:
    df = _frame()
    seen: list[str] = []
    release = dpql.compile(
        spec, data=df, seed=1, force=True, progress=lambda phase, i, n: seen.append(phase)
    )
    table = release.table()
    assert list(table.columns) == ["age", "pet", "owner"] and len(table) == 400
    assert {"load data", "scan data"} <= set(seen)
    assert not (spec.parent / "pets.csv").exists()  # the frame is never written
    curator = json.loads(release.result.curator_path.read_text(encoding="utf-8"))
    assert curator["source"] == "pandas.DataFrame (in memory)"
    assert "hash_pandas_object" in curator["data_hmac"] and curator["rows_read"] == 400
    # the frame's content fingerprint: the same frame gives the same one, another does not
    fp = [curator["data_hmac_sha256"]]
    for frame in (df.copy(), df.iloc[::-1]):
        again = dpql.compile(spec, data=frame, seed=2, force=True)
        fp.append(json.loads(again.result.curator_path.read_text())["data_hmac_sha256"])
    assert fp[0] == fp[1] != fp[2]
    assert dpql.verify(again.record_path, synthetic=again.table_path) == []


@pytest.mark.e2e
def test_a_dataframe_goes_through_the_codec(spec: Path, capsys: pytest.CaptureFixture) -> None:
    df = _frame()
    df.loc[5, "pet"] = "emu"  # not a declared category: missing under the column's rule
    release = dpql.compile(spec, data=df, seed=1)
    assert "emu" not in capsys.readouterr().err
    assert set(release.table()["pet"].dropna()) <= set(_frame()["pet"])
    curator = json.loads(release.result.curator_path.read_text(encoding="utf-8"))
    assert "emu" not in json.dumps(curator)


@pytest.mark.e2e
def test_overrides_summary_and_quality(spec: Path) -> None:
    _frame().to_csv(spec.parent / "elsewhere.csv", index=False)
    release = dpql.compile(
        spec,
        data=spec.parent / "elsewhere.csv",
        overrides={"privacy.epsilon": 2.0, "synthesizer.rows": 300},
        seed=0,
    )
    assert release.record["privacy"]["budget"]["epsilon"] == pytest.approx(2.0)
    assert len(release.table()) == 300
    text = release.summary()
    assert str(release.table_path) in text and "privacy spent: epsilon 2 of 2" in text
    q = release.quality
    assert q is not None and {c.column for c in q.columns} == {"age", "pet", "owner"}
    assert all(0 <= c.tvd <= 1 and c.scale > 0 for c in q.columns)
    assert q.text() in text


def test_a_bad_override_is_a_diagnostic(spec: Path) -> None:
    with pytest.raises(dpql.DiagnosticError) as err:
        dpql.compile(spec, data=_frame(), overrides={"privacy.epsilon": -1.0})
    d = err.value.diagnostics[0]
    assert d.code == "E101" and "with overrides: privacy.epsilon" in d.pos.file


@pytest.mark.e2e
def test_evaluate_report_returns_its_headline(spec: Path, capsys) -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    df = _frame()
    df.to_csv(spec.parent / "pets.csv", index=False)
    release = dpql.compile(spec, seed=0)
    report = dpql.evaluate_report(spec, release.table_path, output=spec.parent / "report")
    assert report.path == spec.parent / "report" / "index.html" and report.path.is_file()
    h = report.headline
    assert h is not None and h.against == "the real table"
    assert h.worst.column in {"age", "pet", "owner"} and h.worst.scale > 0
    page = report.path.read_text(encoding="utf-8")
    assert "Largest 1-way shift from the real table" in page
    assert "DP-auto-GAN metrics" not in page  # an aim release
    from dpql.cli import main

    out = spec.parent / "report2"
    assert main(["evaluate", str(spec), "--synthetic", str(release.table_path), "--output",
                 str(out), "--format", "json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)  # one document on stdout
    assert doc["report"] == str(out / "index.html")
    assert doc["headline"]["largest"]["column"] in {"age", "pet", "owner"}


@pytest.mark.e2e
def test_no_user_warning_on_compile(spec: Path) -> None:
    """A fresh interpreter, so that mbi's import-time warnings would be issued here."""
    _frame().to_csv(spec.parent / "pets.csv", index=False)
    proc = run_or_fail(
        [sys.executable, "-W", "error::UserWarning", "-m", "dpql.cli", "compile", str(spec),
         "--seed", "0", "--quiet"],
        "dpql compile in a fresh interpreter", capture_output=True, text=True, check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(spec.parent)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "UserWarning" not in proc.stderr
