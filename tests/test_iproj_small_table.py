"""Post-processing on a small table: a 1,000-row table toward two requirements must
not collapse it (effective sample size >= 50% of the rows) nor hurt its 3-way marginals (mean
TVD against the private table at most 1.05x the unprocessed table's).

The private table is a 1,000-row sample of examples/adult/adult_train.csv.gz; the "synthetic"
table (external synthesizer) is another 1,000-row sample whose columns outside
(age, sex) are shuffled independently, so it keeps the marginals but not the dependence the
requirements measure (a poor generator's output). The last three tests check the projection
itself: within-noise targets leave the table alone, noisy measures move it less, the ESS floor
holds."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpql.cli import main

ROOT = Path(__file__).resolve().parents[1]
ADULT = ROOT / "examples" / "adult"
COLUMNS = ["age", "sex", "hours_per_week", "education_num", "marital_status", "income", "race"]


def _spec(tmp_path: Path, private: Path, synthetic: Path) -> Path:
    text = (ADULT / "adult.release.yaml").read_text()
    schema = {
        line.split(":")[0].strip(): line
        for line in text.splitlines()
        if line.startswith("  ") and "{type:" in line
    }
    body = "\n".join(schema[c] for c in COLUMNS)
    spec = f"""dpql: 1
name: small-table
data:
  path: {private}
  rows: 1000
schema:
{body}
privacy:
  epsilon: 2.0
  delta: 1e-9
workload:
  - marginals(2)
requirements:
  - corr(age, hours_per_week) within 0.1
  - mean(hours_per_week | sex == "Female") within 3.0
synthesizer:
  method: external
  path: {synthetic}
  budget: {{epsilon: 0.5, delta: 1e-10, neighbouring: replace_one}}
  rows: 1000
output:
  path: out/small.csv
  provenance: out/small.provenance.json
"""
    path = tmp_path / "small.release.yaml"
    path.write_text(spec)
    return path


def _tvd3(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """Mean TVD over all 3-way marginals (numeric columns in 10 equal-width bins)."""

    def enc(df: pd.DataFrame) -> pd.DataFrame:
        out = df[COLUMNS].copy()
        for c in ("age", "hours_per_week", "education_num"):
            out[c] = pd.cut(df[c], np.linspace(0, 100, 11), labels=False)
        return out.astype(str)

    ea, eb = enc(a), enc(b)
    tv = []
    for cols in itertools.combinations(COLUMNS, 3):
        pa = ea.groupby(list(cols)).size() / len(ea)
        pb = eb.groupby(list(cols)).size() / len(eb)
        tv.append(0.5 * pa.sub(pb, fill_value=0).abs().sum())
    return float(np.mean(tv))


@pytest.mark.e2e
@pytest.mark.parametrize("seed", [0, 1])
def test_small_table_keeps_its_rows_and_marginals(tmp_path: Path, seed: int) -> None:
    full = pd.read_csv(ADULT / "adult_train.csv.gz")[COLUMNS]
    rng = np.random.default_rng(100 + seed)
    idx = rng.permutation(len(full))
    private, synth = full.iloc[idx[:1000]].reset_index(drop=True), full.iloc[idx[1000:2000]]
    synth = synth.reset_index(drop=True)
    for c in COLUMNS:
        if c not in ("age", "sex"):
            synth[c] = rng.permutation(synth[c].to_numpy())
    p, s = tmp_path / "private.csv", tmp_path / "synthetic.csv"
    private.to_csv(p, index=False)
    synth.to_csv(s, index=False)
    spec = _spec(tmp_path, p, s)
    assert main(["compile", str(spec), "--seed", str(seed), "--quiet"]) == 0
    out = pd.read_csv(tmp_path / "out" / "small.csv")
    record = json.loads((tmp_path / "out" / "small.provenance.json").read_text())
    post = record["postprocess"]
    assert len(out) == 1000
    assert post["effective_sample_size"] >= 500 - 1e-6
    assert post["prior_rows"] == 1000 and post["ess_floor"] == 500
    before, after = _tvd3(private, synth), _tvd3(private, out)
    assert after <= 1.05 * before, (before, after)
    codes = [d["code"] for d in post["diagnostics"]]
    if post["shrink"] < 1:  # held at the floor: said so, with figures
        assert "W508" in codes


# --- the noise-aware projection itself (dpql.postprocess.iproj.iproject) ----------------------


def _table_and_queries(rows: int = 2000):
    from dpql.data.codec import encode_frame
    from dpql.ir.exact import answer_all
    from dpql.ir.queries import CorrRequirement, Tolerance
    from dpql.plan.requirements import expand_requirements
    from dpql.spec.load import load_spec

    domain = load_spec(ADULT / "adult.release.yaml").domain
    df = pd.read_csv(ADULT / "adult_train.csv.gz").sample(rows, random_state=0)
    table = encode_frame(df[list(domain.names)], domain).table
    req = CorrRequirement("age", "hours_per_week", Tolerance(within=0.05))
    queries = expand_requirements([req], domain).queries
    return table, queries, np.concatenate(answer_all(queries, table))


def _project(offset: float, sigma: float, **kw):
    from dpql.postprocess.iproj import Measurement, iproject

    table, queries, truth = _table_and_queries()
    signs = np.where(np.arange(len(truth)) % 2 == 0, 1.0, -1.0)
    m = Measurement(queries, truth + offset * signs, sigma, 0.1, 32561)
    return iproject(table, m, seed=0, **kw), truth, signs


def test_a_table_within_noise_of_its_targets_is_left_alone() -> None:
    res, truth, _ = _project(0.5 * 0.01, 0.01, prior_rows=2000, ess_floor=0.5)
    assert res.ess >= 0.99 * 2000
    assert np.max(np.abs(res.reweighted - truth)) < 0.3 * 0.01
    hard, _, _ = _project(0.5 * 0.01, 0.01)  # the paper's projection goes all the way
    assert np.max(np.abs(hard.reweighted - hard.target)) < 1e-4


def test_a_noisy_measure_moves_the_table_less_than_a_precise_one() -> None:
    offset = 0.01
    moved = {}
    for sigma in (1e-4, 0.05):
        res, truth, signs = _project(offset, sigma, prior_rows=2000, ess_floor=0.0)
        moved[sigma] = float(np.mean((res.reweighted - truth) * signs)) / offset
    assert moved[1e-4] > 0.5 and moved[0.05] < 0.1, moved


def test_the_ess_floor_holds_and_says_so() -> None:
    res, _, _ = _project(0.08, 1e-4, prior_rows=2000, ess_floor=0.5)
    assert res.ess >= 0.5 * 2000 - 1e-6 and 0 <= res.shrink < 1
    (w,) = [d for d in res.diagnostics if d.code == "W508"]
    assert "effective" in w.message and "of 2000 rows" in w.message
    free, _, _ = _project(0.08, 1e-4, prior_rows=2000, ess_floor=0.0)
    assert free.ess < 0.5 * 2000  # without the floor the same targets concentrate the table
