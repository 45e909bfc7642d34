"""Large categorical domains: public value lists from a file (``values_file``) and
public groupings (``group``) so that the workload sees a coarse level while the released table
keeps the fine values. Every file is written under ``tmp_path``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpql.data.codec import Fill, decode_values, encode_frame
from dpql.diagnostics import DiagnosticError
from dpql.ir.queries import Marginal
from dpql.spec.load import load_normalised_spec, load_spec, normalised_spec_json

N_FINE, N_GROUPS, ROWS = 10_000, 50, 30_000


def fine_codes(k: int = N_FINE) -> list[str]:
    return [f"R{i:05d}" for i in range(k)]


def group_of(i: int) -> str:
    return f"S{i % N_GROUPS:02d}"


def write_files(d: Path, k: int = N_FINE) -> None:
    codes = fine_codes(k)
    (d / "regions.txt").write_text("\n".join(codes) + "\n")
    pd.DataFrame({"region": codes, "state": [group_of(i) for i in range(k)]}).to_csv(
        d / "region_to_state.csv", index=False
    )


def write_data(d: Path, rows: int = ROWS, k: int = N_FINE) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    state = rng.integers(0, N_GROUPS, rows)
    fine = state + N_GROUPS * rng.integers(0, k // N_GROUPS, rows)
    codes = np.asarray(fine_codes(k))
    df = pd.DataFrame(
        {
            "region": codes[fine],
            "age": rng.integers(18, 91, rows),
            "sex": rng.choice(["F", "M"], rows),
            "income": np.where(rng.random(rows) < 0.2 + 0.01 * (state % 20), ">50K", "<=50K"),
        }
    )
    df.to_csv(d / "data.csv", index=False)
    return df


def write_spec(d: Path, region: str, workload: str = "marginals(3)", rows: int = ROWS) -> Path:
    path = d / "spec.yaml"
    path.write_text(
        f"""dpql: 1
name: large-domain
data: {{path: data.csv, rows: {rows}}}
schema:
  region: {region}
  age: {{type: numeric, min: 18, max: 90, integer: true, bins: 8}}
  sex: {{type: categorical, values: [F, M]}}
  income: {{type: categorical, values: ["<=50K", ">50K"]}}
privacy: {{epsilon: 1.0, delta: 1e-9}}
workload:
  - {workload}
synthesizer: {{method: rap, rows: {rows}}}
output: {{path: out/synth.csv, provenance: out/synth.provenance.json}}
"""
    )
    return path


GROUPED = "{type: categorical, values_file: regions.txt, group: {file: region_to_state.csv}}"


def codes_of(excinfo: pytest.ExceptionInfo[DiagnosticError]) -> list[str]:
    return [d.code for d in excinfo.value.diagnostics]


# ------------------------------------------------------------------------------------------------
# values_file


def test_values_file_one_per_line_is_read_and_pinned(tmp_path: Path) -> None:
    write_files(tmp_path, k=100)
    spec = load_spec(write_spec(tmp_path, "{type: categorical, values_file: regions.txt}"))
    col = spec.model.columns["region"]
    assert col.values == fine_codes(100)
    digest = hashlib.sha256((tmp_path / "regions.txt").read_bytes()).hexdigest()
    assert col.values_sha256 == digest
    assert spec.domain.card("region") == 100 + 1  # and its null state (the default keep)
    normalised = json.loads(normalised_spec_json(spec.model))
    region = next(c for c in normalised["schema"] if c["name"] == "region")
    assert region["values_sha256"] == digest and len(region["values"]) == 100
    # a changed file changes the spec hash
    (tmp_path / "regions.txt").write_text("\n".join(fine_codes(99)) + "\n")
    assert load_spec(tmp_path / "spec.yaml").spec_hash != spec.spec_hash


def test_values_file_csv_column(tmp_path: Path) -> None:
    write_files(tmp_path, k=100)
    spec = load_spec(
        write_spec(
            tmp_path,
            "{type: categorical, values_file: region_to_state.csv, values_column: region}",
        )
    )
    assert spec.model.columns["region"].values == fine_codes(100)


@pytest.mark.parametrize(
    ("region", "content", "code", "where"),
    [
        ("{type: categorical, values_file: nowhere.txt}", None, "E120", "spec"),
        ("{type: categorical, values_file: v.txt}", "\n\n", "E120", "spec"),
        ("{type: categorical, values_file: v.txt}", "a\nb\na\n", "E106", "file"),
        ("{type: categorical, values_file: v.txt, values: [a]}", "a\n", "E120", "spec"),
        ("{type: categorical}", None, "E120", "spec"),
        ("{type: categorical, values_file: v.txt, values_column: x}", "a,b\n1,2\n", "E120", "spec"),
    ],
)
def test_values_file_errors_are_located(
    tmp_path: Path, region: str, content: str | None, code: str, where: str
) -> None:
    if content is not None:
        (tmp_path / "v.txt").write_text(content)
    path = write_spec(tmp_path, region)
    with pytest.raises(DiagnosticError) as e:
        load_spec(path)
    assert code in codes_of(e)
    d = next(d for d in e.value.diagnostics if d.code == code)
    assert d.pos is not None
    if where == "file":
        assert d.pos.file.endswith("v.txt") and d.pos.line == 3
    else:
        assert d.pos.file.endswith("spec.yaml") and d.pos.line == 5


# ------------------------------------------------------------------------------------------------
# groups


def test_group_gives_a_coarse_domain(tmp_path: Path) -> None:
    write_files(tmp_path, k=200)
    spec = load_spec(write_spec(tmp_path, GROUPED))
    col = spec.domain["region"]
    assert col.card == N_GROUPS + 1 and col.fine is not None and len(col.fine) == 200
    assert col.values[0] == "S00" and col.parent[:3] == (0, 1, 2)
    assert spec.model.columns["region"].group.levels[51] == "S01"


def test_group_errors_are_located(tmp_path: Path) -> None:
    write_files(tmp_path, k=100)
    (tmp_path / "bad.csv").write_text("region,state\nR00000,S00\nR00000,S01\nX,S02\n")
    region = "{type: categorical, values_file: regions.txt, group: {file: bad.csv}}"
    with pytest.raises(DiagnosticError) as e:
        load_spec(write_spec(tmp_path, region))
    diags = [d for d in e.value.diagnostics if d.code == "E121"]
    lines = sorted(d.pos.line for d in diags if d.pos and d.pos.file.endswith("bad.csv"))
    assert lines == [3, 4]  # mapped twice; unknown value
    assert any("maps no group to 99" in d.message for d in diags)


def test_group_missing_file(tmp_path: Path) -> None:
    write_files(tmp_path, k=100)
    region = "{type: categorical, values_file: regions.txt, group: {file: none.csv}}"
    with pytest.raises(DiagnosticError) as e:
        load_spec(write_spec(tmp_path, region))
    assert codes_of(e) == ["E121"]


def test_normalised_spec_needs_no_files(tmp_path: Path) -> None:
    write_files(tmp_path, k=200)
    spec = load_spec(write_spec(tmp_path, GROUPED))
    (tmp_path / "regions.txt").unlink()
    (tmp_path / "region_to_state.csv").unlink()
    again = load_normalised_spec(json.loads(normalised_spec_json(spec.model)), spec.path)
    assert again.spec_hash == spec.spec_hash
    assert again.domain == spec.domain


def test_workload_sees_the_coarse_level(tmp_path: Path) -> None:
    from dpql.plan.planner import build_plan

    write_files(tmp_path)
    spec = load_spec(write_spec(tmp_path, GROUPED, 'count(region == "S03")'))
    plan = build_plan(spec)
    assert plan.queries
    spec = load_spec(write_spec(tmp_path, GROUPED, "marginals(3)"))
    plan = build_plan(spec)
    cells = [
        spec.domain.cells(q.columns)
        for q in plan.queries
        if isinstance(q, Marginal) and "region" in q.columns
    ]
    # each column carries its null state under the default missing: keep
    assert cells and max(cells) == (N_GROUPS + 1) * (8 + 1) * (2 + 1)
    with pytest.raises(DiagnosticError) as e:  # fine values are not categories of the workload
        build_plan(load_spec(write_spec(tmp_path, GROUPED, 'count(region == "R00003")')))
    assert "E304" in codes_of(e)


def test_codec_maps_fine_to_group_and_back(tmp_path: Path) -> None:
    write_files(tmp_path, k=500)
    spec = load_spec(write_spec(tmp_path, GROUPED))
    df = write_data(tmp_path, rows=2_000, k=500)
    table = encode_frame(df, spec.domain).table
    expect = np.array([int(r[1:]) % N_GROUPS for r in df["region"]])
    assert np.array_equal(table.codes["region"], expect)
    out = decode_values(spec.domain, table.codes, table.scaled)
    assert [int(r[1:]) % N_GROUPS for r in out["region"]] == expect.tolist()
    assert out["region"].nunique() > 300  # spread over the fine values of each group
    again = decode_values(spec.domain, table.codes, table.scaled)
    assert again["region"].tolist() == out["region"].tolist()  # reproducible


def test_sql_engine_codes_groups_like_the_codec(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    from dpql.data.engines import open_engine

    write_files(tmp_path)
    spec = load_spec(write_spec(tmp_path, GROUPED))
    write_data(tmp_path, rows=5_000)
    queries = [Marginal(("region",)), Marginal(("region", "sex"))]
    duck = open_engine(tmp_path / "data.csv", spec.domain, engine="duckdb", threads=2)
    try:
        got = duck.sums(queries)
    finally:
        duck.close()
    mem = open_engine(tmp_path / "data.csv", spec.domain, engine="memory")
    try:
        want = mem.sums(queries)
    finally:
        mem.close()
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------------------------------------
# plan estimate and the acceptance compile


def test_plan_estimate_counts_a_large_column(tmp_path: Path) -> None:
    from dpql.plan.planner import build_plan

    write_files(tmp_path)
    flat = build_plan(
        load_spec(write_spec(tmp_path, "{type: categorical, values_file: regions.txt}"))
    )
    grouped = build_plan(load_spec(write_spec(tmp_path, GROUPED)))
    assert flat.resources.peak_bytes > 3 * grouped.resources.peak_bytes
    assert flat.resources.seconds > 3 * grouped.resources.seconds


@pytest.mark.slow
@pytest.mark.e2e
def test_acceptance_compile_10000_values_grouped(tmp_path: Path) -> None:
    """30,000 rows, a 10,000-value column from a values file grouped into 50 groups, compiled
    with all 3-way marginals: the model works on the coarse level
    (``test_workload_sees_the_coarse_level``) and the table keeps the fine values."""
    import dpql

    write_files(tmp_path)
    write_data(tmp_path)
    path = write_spec(tmp_path, GROUPED)
    release = dpql.compile(path, seed=0)
    out = pd.read_csv(release.table_path, dtype={"region": str})
    assert len(out) == ROWS
    allowed = set(fine_codes())
    assert set(out["region"]) <= allowed
    assert out["region"].nunique() > 1_000
    record = json.loads(Path(release.record_path).read_text())
    assert dpql.verify(release.record_path, synthetic=release.table_path) == []
    # the coarse level is in the marginals: every state's share is close to the real one
    real = pd.read_csv(tmp_path / "data.csv")
    share = lambda df: df["region"].str[1:].astype(int).mod(N_GROUPS).value_counts(normalize=True)  # noqa: E731
    assert (share(out) - share(real)).abs().max() < 0.02
    assert record


def test_other_and_fill_name_fine_values(tmp_path: Path) -> None:
    write_files(tmp_path, k=100)
    region = (
        "{type: categorical, values_file: regions.txt, group: {file: region_to_state.csv}, "
        "other: R00007, missing: fill, fill: R00012}"
    )
    spec = load_spec(write_spec(tmp_path, region))
    df = pd.DataFrame(
        {"region": ["R00051", "nowhere", None], "age": [20, 30, 40], "sex": ["F", "M", "F"]}
    ).assign(income="<=50K")
    table = encode_frame(df, spec.domain, {"region": Fill("R00012")}, {"region": "R00007"}).table
    assert table.codes["region"].tolist() == [1, 7, 12]


def test_files_too_large_for_the_record_are_refused(tmp_path: Path) -> None:
    write_files(tmp_path, k=40_000)
    with pytest.raises(DiagnosticError) as e:
        load_spec(write_spec(tmp_path, GROUPED))
    assert codes_of(e) == ["E120"] and "provenance record" in e.value.diagnostics[0].message
