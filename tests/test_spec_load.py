"""Loading release specs and policies: the example, the domain, hashing, warnings, robustness."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpql.diagnostics import DiagnosticError
from dpql.domain import CategoricalColumn, NumericColumn, numeric_edges
from dpql.spec import CODES, load_policy, load_spec, normalised_spec_json
from dpql.spec.fields import DEFAULT_BINS
from dpql.spec.load import load_normalised_spec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ADULT = EXAMPLES / "adult" / "adult.release.yaml"
POLICY = EXAMPLES / "policy.yaml"
TINY = (Path(__file__).parent / "specs" / "range_share.release.yaml").read_text()
TINY = TINY.replace("share: 1.5", "share: 0.2")  # the corpus' valid base spec


def _write(tmp_path: Path, text: str, name: str = "s.release.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_adult_example_loads_unchanged() -> None:
    spec = load_spec(ADULT)
    assert spec.model.name == "adult-public" and spec.rows == 32561
    assert spec.warnings == ()
    assert spec.data_path == (EXAMPLES / "adult" / "adult_train.csv.gz").resolve()
    assert spec.data_format == "csv"
    assert spec.model.privacy.epsilon == 1.0 and spec.model.privacy.delta == 1e-9
    assert len(spec.workload) == 4 and len(spec.requirements) == 3


def test_adult_domain_follows_the_schema() -> None:
    spec = load_spec(ADULT)
    assert spec.domain.names == tuple(spec.model.columns)
    for name, col in spec.model.columns.items():
        got = spec.domain[name]
        if col.type == "numeric":
            assert isinstance(got, NumericColumn)
            assert (got.lo, got.hi, got.integer) == (col.min, col.max, col.integer)
            want = col.edges or numeric_edges(col.min, col.max, col.integer, col.bins)
            assert got.edges == tuple(float(e) for e in want)
        else:
            assert isinstance(got, CategoricalColumn) and got.values == tuple(col.values)
    # 15 and 10 bins, and the null bin of missing: keep (the default)
    assert spec.domain["age"].card == 16 and spec.domain["capital_gain"].card == 11
    assert spec.domain["workclass"].values[0] == "?"  # quoted "?" stays a category


def test_dsl_strings_carry_the_position_of_their_content() -> None:
    spec = load_spec(ADULT)
    lines = spec.source.splitlines()
    for item in (*spec.workload, *spec.requirements):
        start = item.pos.col - 1
        assert lines[item.pos.line - 1][start : start + len(item.value)] == item.value
    mean = spec.requirements[2]
    assert mean.value.startswith("mean(hours_per_week |")
    at = mean.pos_at(mean.value.index('"Female"'))
    assert lines[at.line - 1][at.col - 1 :].startswith('"Female"')


def test_numeric_default_bins_and_hash_normalisation(tmp_path: Path) -> None:
    implicit = TINY.replace(", bins: 8}", "}")
    spec = load_spec(_write(tmp_path, implicit))
    assert spec.domain["age"].card == DEFAULT_BINS + 1  # and the null bin of the default keep
    explicit = implicit.replace("integer: true}", f"integer: true, bins: {DEFAULT_BINS}}}")
    restyled = (
        explicit.replace("delta: 1e-9", "delta: 1.0e-09   # same number")
        .replace("epsilon: 1.0", "epsilon: 1")
        .replace("  method: iproj\n  share: 0.2", "  share: 0.2\n  method: iproj")
    )
    assert load_spec(_write(tmp_path, restyled, "b.yaml")).spec_hash == spec.spec_hash
    changed = load_spec(
        _write(tmp_path, implicit.replace("epsilon: 1.0", "epsilon: 1.5"), "c.yaml")
    )
    assert changed.spec_hash != spec.spec_hash


def test_column_order_is_part_of_the_hash(tmp_path: Path) -> None:
    a = load_spec(_write(tmp_path, TINY))
    lines = TINY.splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if ln.startswith("  sex:"))
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    b = load_spec(_write(tmp_path, "".join(lines), "b.yaml"))
    assert a.domain.names != b.domain.names and a.spec_hash != b.spec_hash


def test_normalised_json_is_canonical() -> None:
    spec = load_spec(ADULT)
    text = normalised_spec_json(spec.model)
    data = json.loads(text)
    assert [c["name"] for c in data["schema"]] == list(spec.model.columns)
    assert json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False) == text
    assert data["data"]["path"] == "adult_train.csv.gz"  # as written, not resolved


def test_delta_not_below_inverse_rows_is_a_warning(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, TINY.replace("delta: 1e-9", "delta: 0.01")))
    (w,) = spec.warnings
    assert (w.code, w.severity, w.pos.line) == ("W101", "warning", 19)


def test_warnings_travel_with_errors(tmp_path: Path) -> None:
    text = TINY.replace("delta: 1e-9", "delta: 0.01").replace(
        "min: 17, max: 90", "min: 90, max: 17"
    )
    with pytest.raises(DiagnosticError) as info:
        load_spec(_write(tmp_path, text))
    assert sorted(info.value.codes) == ["E104", "W101"]


def test_rho_only_spec_reports_at_one_over_n_squared(tmp_path: Path) -> None:
    text = TINY.replace("  epsilon: 1.0\n  delta: 1e-9\n", "  rho: 0.05\n")
    spec = load_spec(_write(tmp_path, text))
    assert spec.model.privacy.rho == 0.05 and spec.target_delta == pytest.approx(1e-6)


def test_valid_variants_load(tmp_path: Path) -> None:
    variants = {
        "missing rules": TINY.replace(
            "values: [Female, Male]}", 'values: [Female, Male, "?"], other: "?", missing: other}'
        ).replace("bins: 8}", "bins: 8, missing: fill, fill: 40}"),
        # drop: the release describes the complete cases (W102)
        "global drop": TINY.replace("workload:\n", "missing: drop\n\nworkload:\n").replace(
            "corr(age, hours) within 0.05", 'mean(hours | sex == "Female") within 1'
        ),
        "rap split": TINY.replace(
            "  delta: 1e-9\n", "  delta: 1e-9\n  split: {selection: 0.25, measurement: 0.75}\n"
        ),
        "gan": TINY.replace("method: rap", "method: gan").replace(
            "{rounds: 5, queries_per_round: 10}", "{ae_steps: 3, critic_hidden: [8, 4]}"
        ),
        "external": TINY.replace(
            "  method: rap\n  rows: 1000\n  options: {rounds: 5, queries_per_round: 10}",
            "  method: external\n  path: ext.parquet\n"
            "  budget: {epsilon: 0.5, delta: 1e-10, neighbouring: add_remove}",
        ),
        "no requirements": re.sub(r"requirements:\n  - .*\n", "requirements:\n", TINY),
        "parquet": TINY.replace("path: data.csv", "path: data.PQ"),
        "coded categories": TINY.replace("values: [Female, Male]", "values: [1, 2]"),
    }
    for what, text in variants.items():
        spec = load_spec(_write(tmp_path, text, f"{len(what)}.yaml"))
        # the population it describes: an explicit drop, or the default rule under gan
        expected = ("W102",) if what in ("global drop", "gan") else ()
        assert tuple(d.code for d in spec.warnings) == expected, what
    assert load_spec(_write(tmp_path, variants["no requirements"])).requirements == ()
    assert load_spec(_write(tmp_path, variants["parquet"])).data_format == "parquet"
    assert load_spec(_write(tmp_path, variants["coded categories"])).domain["sex"].values == (
        "1",
        "2",
    )


def test_paths_resolve_against_the_spec_folder(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    spec = load_spec(_write(tmp_path / "sub", TINY))
    assert spec.data_path == tmp_path / "sub" / "data.csv"
    assert spec.resolve(spec.model.output.path) == tmp_path / "sub" / "out" / "tiny.csv"


def test_unreadable_file_is_a_diagnostic(tmp_path: Path) -> None:
    with pytest.raises(DiagnosticError) as info:
        load_spec(tmp_path / "nope.yaml")
    assert info.value.codes == ["E005"]
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(DiagnosticError) as info:
        load_spec(bad)
    assert info.value.codes == ["E005"]


def test_policy_example_loads_and_policy_errors_are_positioned(tmp_path: Path) -> None:
    policy = load_policy(POLICY)
    assert policy.model.max_epsilon == 2.0 and policy.model.lifetime.epsilon == 8.0
    # by name, not as a path: the ledger exists (git-ignored) once the quick start has run
    ledger = policy.ledger_path
    assert ledger.name == "privacy-ledger.jsonl" and ledger.parent == EXAMPLES.resolve()
    text = POLICY.read_text().replace("max_delta:", "max_delt:").replace("iproj,", "ipro,")
    with pytest.raises(DiagnosticError) as info:
        load_policy(_write(tmp_path, text, "policy.yaml"))
    by_code = {d.code: d for d in info.value.diagnostics}
    assert set(by_code) == {"E010", "E011", "E102"}
    assert "did you mean 'max_delta'?" in by_code["E010"].hint
    assert by_code["E102"].hint == "did you mean 'iproj'?"
    assert by_code["E102"].pos.line == by_code["E010"].pos.line + 5


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_small_edit_gives_diagnostics_never_a_crash(
    tmp_path: Path, data: st.DataObject
) -> None:
    """Delete a span or insert a YAML-significant character anywhere: load_spec either succeeds
    or raises DiagnosticError with documented codes and positions inside the file."""
    text = TINY
    i = data.draw(st.integers(0, len(text) - 1))
    if data.draw(st.booleans()):
        text = text[:i] + text[i + data.draw(st.integers(1, 12)) :]
    else:
        text = text[:i] + data.draw(st.sampled_from(list(":-[]{}'\"#\t ,&*!|>0"))) + text[i:]
    path = _write(tmp_path, text)
    try:
        load_spec(path)
    except DiagnosticError as e:
        assert e.diagnostics
        n_lines = len(text.splitlines()) + 1
        for d in e.diagnostics:
            assert d.code in CODES and d.pos is not None and 0 < d.pos.line <= n_lines


def test_declared_missing_values_reach_the_domain_and_the_hash(tmp_path: Path) -> None:
    text = TINY.replace("bins: 8}", "bins: 8, missing_values: [0, -9.5]}").replace(
        "values: [Female, Male]}", "values: [Female, Male], missing_values: [NA, 99]}"
    )
    spec = load_spec(_write(tmp_path, text))
    age, sex = spec.domain["age"], spec.domain["sex"]
    assert age.missing_values == (0.0, -9.5) and all(type(v) is float for v in age.missing_values)
    assert sex.missing_values == ("NA", "99")  # an integer names a coded value, as in values
    assert spec.domain["hours"].missing_values == ()
    plain = load_spec(_write(tmp_path, TINY, "plain.yaml"))
    assert spec.spec_hash != plain.spec_hash
    assert '"missing_values":[0.0,-9.5]' in normalised_spec_json(spec.model)
    # left out while unset: a spec without it keeps the hash (and public seed) it had
    assert "missing_values" not in normalised_spec_json(plain.model)
    # a provenance record's normalised spec loads back to the same spec
    again = load_normalised_spec(json.loads(normalised_spec_json(spec.model)), spec.path)
    assert again.spec_hash == spec.spec_hash and again.domain == spec.domain
