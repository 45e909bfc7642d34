"""``dpql evaluate`` end to end on a tiny spec: report written, bad label reported as E601."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SPEC = """\
dpql: 1
name: tiny
data: {path: real.csv, rows: 60}
schema:
  a: {type: categorical, values: [x, y]}
  n: {type: numeric, min: 0, max: 10, integer: true, bins: 2}
  m: {type: numeric, min: 0, max: 1}
privacy: {epsilon: 1.0, delta: 1e-6}
workload:
  - marginals(2)
  - count(n > 4)
requirements:
  - corr(n, m) within 0.1
synthesizer: {method: rap, rows: 60}
output: {path: out/synthetic.csv, provenance: out/synthetic.provenance.json}
"""


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """The test machine is shared: oversubscribed OpenMP makes gradient boosting crawl."""
    pytest.importorskip("sklearn.ensemble")  # load the OpenMP runtime first, so it is limited
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1):
        yield


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    for name in ("real", "synthetic"):
        pd.DataFrame(
            {
                "a": rng.choice(["x", "y"], 60),
                "n": rng.integers(0, 11, 60),
                "m": rng.random(60).round(3),
            }
        ).to_csv(tmp_path / f"{name}.csv", index=False)
    (tmp_path / "tiny.release.yaml").write_text(SPEC)
    return tmp_path / "tiny.release.yaml"


@pytest.mark.slow
def test_evaluate_writes_private_report(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpql.cli import main

    out = spec.parent / "report"
    argv = ["evaluate", str(spec), "--synthetic", str(spec.parent / "synthetic.csv")]
    assert main([*argv, "--output", str(out), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["private"] is True and printed["label"] == "a"  # only 2-valued categorical
    assert [c["kind"] for c in printed["workload"]] == ["marginal", "count"]
    assert printed["workload"][0]["count"] == 3  # marginals(2) over three columns
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"]["real"] == summary["rows"]["synthetic"] == 60
    assert (out / "index.html").is_file() and all(
        (out / f).is_file() for f in summary["figures"].values()
    )


def test_evaluate_rejects_unknown_label(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpql.cli import main

    argv = ["evaluate", str(spec), "--synthetic", str(spec.parent / "synthetic.csv")]
    rc = main([*argv, "--output", str(spec.parent / "r"), "--label", "aa", "--format", "json"])
    assert rc == 1
    out, err = capsys.readouterr()
    (d,) = json.loads(out)["diagnostics"]
    assert d["code"] == "E601" and "did you mean 'a'" in d["hint"]
    assert not (spec.parent / "r").exists()  # nothing written
    assert "CONFIDENTIAL" not in err  # refused before the private data is read


def test_default_report_is_curator_only_beside_the_release(
    spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --output: the report goes beside the curator-only file (curator/ next to the spec),
    never into the current folder or the published out/; private modes (0700 / 0600)."""
    from dpql.cli import main

    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    argv = ["evaluate", str(spec), "--synthetic", str(spec.parent / "synthetic.csv")]
    assert main([*argv, "--format", "json"]) == 0
    report = spec.parent / "curator" / "synthetic.CURATOR-ONLY-report"
    assert json.loads(capsys.readouterr().out)["report"] == str(report / "index.html")
    assert not any(cwd.iterdir()) and not (spec.parent / "out").exists()
    files = sorted(report.iterdir())
    assert {"index.html", "summary.json"} <= {f.name for f in files}
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    for folder in (report, report.parent):
        assert folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.slow
def test_progress_lines_when_stderr_is_not_a_terminal(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Logs and CI get plain progress lines: each long step's start and end, with times."""
    import io

    from dpql.cli import main
    from dpql.evaluate.cli import plain_progress

    argv = ["evaluate", str(spec), "--synthetic", str(spec.parent / "synthetic.csv")]
    assert main([*argv, "--output", str(spec.parent / "r")]) == 0
    out, err = capsys.readouterr()
    marginals = next(ln for ln in out.splitlines() if ln.lstrip().startswith("marginal "))
    assert marginals.endswith(")") and " (marginal(" in marginals  # the worst one, named
    assert "  predicting 'a', trained on real / on synthetic, tested on real:" in out
    for step in ("workload", "train on synthetic, test on real", "dimension-wise prediction"):
        assert f"evaluate: {step} " in err, err
    assert "evaluate: dimension-wise prediction 6/6, " in err  # 3 columns x (real, synthetic)
    stream = io.StringIO()
    update, _ = plain_progress(stream, every=3600)
    for done in range(11):
        update("step", done, 10)
    update("step", 10, 10)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("evaluate: step 0/10, ")
    assert lines[1].startswith("evaluate: step 10/10, ")
