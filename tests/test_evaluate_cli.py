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
    (d,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert d["code"] == "E601" and "did you mean 'a'" in d["hint"]
    assert not (spec.parent / "r").exists()  # nothing written
