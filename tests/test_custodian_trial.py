"""What a custodian new to dpql met on a table it had never seen (R's ``car::Chile``): each
message says where the fix goes, and ``dpql check`` refuses what ``dpql compile`` would refuse
before reading data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpql.cli import main

SPEC = """\
dpql: 1
name: pets
data: {path: pets.csv, rows: 300}
schema:
  age: {type: numeric, min: 0, max: 100, integer: true, bins: 10}
  pet: {type: categorical, values: [cat, dog, yak]}
privacy: {epsilon: 1.0, delta: 1.0e-6}
workload: [marginals(2)]
synthesizer: {method: aim, rows: 300}
output:
  path: out/pets.csv
  provenance: out/pets.provenance.json
"""

POLICY = """\
dpql-policy: 1
max_epsilon: 2.0
max_delta: 1.0e-6
lifetime:
  epsilon: 0.5
  ledger: ledger.jsonl
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


def test_check_refuses_an_output_that_is_an_input(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = (spec.parent / "pets.csv").read_bytes()
    spec.write_text(SPEC.replace("path: out/pets.csv", "path: pets.csv"), encoding="utf-8")
    assert main(["check", str(spec)]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:11:9: error[E618]" in err, err  # at output.path, as compile says it
    assert (spec.parent / "pets.csv").read_bytes() == data
    assert not (spec.parent / "ledger.jsonl").exists()


def test_check_puts_a_policy_violation_at_the_key_to_change(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = spec.parent / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    assert main(["check", str(spec)]) == 1
    err = capsys.readouterr().err
    assert f"{policy}:5:3: error[P007]" in err and "  = hint: lower privacy.epsilon" in err
    policy.write_text(POLICY.replace("max_epsilon: 2.0", "max_epsilon: 0.5"), encoding="utf-8")
    assert main(["check", str(spec)]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:7:" in err and "error[P001]" in err  # privacy.epsilon in the spec
    assert main(["check", str(spec), "--format", "json"]) == 1
    first = json.loads(capsys.readouterr().out)["violations"][0]
    assert (first["code"], first["file"], first["line"]) == ("P001", str(spec), 7)


@pytest.mark.parametrize(
    "argv",
    [
        ["init", "chlie.csv"],
        ["evaluate", "pets.release.yaml", "--synthetic", "out/nothere.csv"],
        ["evaluate", "pets.release.yaml", "--synthetic", "pets.csv", "--holdout", "nohold.csv"],
    ],
)
def test_a_missing_file_named_on_the_command_line_is_relative_to_the_current_folder(
    spec: Path, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(spec.parent)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "error[E401]" in err and f"relative to the current folder {spec.parent}" in err
    assert "data.path" not in err  # not the spec's key: the path was typed on the command line
    assert sorted(p.name for p in spec.parent.iterdir()) == ["pets.csv", "pets.release.yaml"]


def test_dimension_wise_probability_names_the_null_category() -> None:
    from dpql.domain import CategoricalColumn, Domain, EncodedTable
    from dpql.evaluate.metrics import dimension_wise_probability

    domain = Domain(
        (CategoricalColumn("sex", ("F", "M"), nullable=True), CategoricalColumn("vote", ("N", "Y")))
    )
    real = EncodedTable(
        domain, {"sex": np.array([0, 1, 2, 2]), "vote": np.array([0, 0, 1, 1])}, {}
    )
    d = dimension_wise_probability(real, real)
    assert d.features == ("sex=F", "sex=M", "sex=(missing)", "vote=N", "vote=Y")
    assert d.real == pytest.approx((0.25, 0.25, 0.5, 0.5, 0.5))  # one name per share


def test_every_argument_of_every_command_says_what_it_is() -> None:
    import argparse

    from dpql.cli.parser import build_parser

    sub = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    bare = [
        f"{name} {a.dest}"
        for name, parser in sub.choices.items()
        for a in parser._actions
        if not a.help and not isinstance(a, argparse._HelpAction)
    ]
    assert bare == []


def test_a_draft_from_a_full_codebook_does_not_ask_for_types(spec: Path) -> None:
    book = spec.parent / "pets.codebook.yaml"
    book.write_text(
        "rows: 300\ncolumns:\n  age: {type: numeric, min: 0, max: 100}\n"
        "  pet: {type: categorical, values: [cat, dog, yak]}\n",
        encoding="utf-8",
    )
    draft = spec.parent / "draft.yaml"
    assert main(["init", str(spec.parent / "pets.csv"), "--output", str(draft),
                 "--codebook", str(book)]) == 0  # fmt: skip
    head = draft.read_text(encoding="utf-8").splitlines()[1]
    assert head == "# the CSV header (names only) and the codebook pets.codebook.yaml; no cell of " \
        "the data file was read."


@pytest.mark.parametrize(
    "argv",
    [
        ["compile", "pets.release.yaml", "--quiet"],
        ["validate", "pets.release.yaml"],
        ["evaluate", "pets.release.yaml", "--synthetic", "synthetic.csv"],
    ],
)
def test_a_missing_data_file_is_reported_at_data_path(
    spec: Path, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(spec.parent)
    (spec.parent / "pets.csv").rename(spec.parent / "synthetic.csv")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{spec.name}:3:14: error[E401]" in err, err
    assert f"data.path is relative to the spec's folder {spec.parent}" in err
    assert sorted(p.name for p in spec.parent.iterdir()) == ["pets.release.yaml", "synthetic.csv"]


def test_verify_reports_a_problem_like_every_other_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "nothere.provenance.json"
    assert main(["verify", str(record)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"{record}: error[V000]: cannot read")


def test_an_output_name_of_no_known_format_is_refused_at_plan(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec.write_text(SPEC.replace("out/pets.csv", "out/pets.cvs"), encoding="utf-8")
    assert main(["plan", str(spec)]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:11:9: error[E110]" in err and "*.csv, *.csv.gz or *.parquet" in err


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz", "t.parquet", "t.pq"])
def test_the_table_is_written_in_the_format_its_name_implies(tmp_path: Path, name: str) -> None:
    from dpql.data.load import data_format, read_frame
    from dpql.release.table_file import write_frame

    df = pd.DataFrame({"a": ["1", "2"], "b": ["x", ""]})
    staged = tmp_path / f".{name}.staged"
    write_frame(df, staged, name)
    target = staged.rename(tmp_path / name)
    back = read_frame(target, data_format(target)).fillna("")
    assert back.astype(str).values.tolist() == [["1", "x"], ["2", ""]]
    if name.endswith(".gz"):  # no time stamp: the same table gives the same bytes
        again = tmp_path / "again.csv.gz"
        write_frame(df, again, name)
        assert again.read_bytes() == target.read_bytes()


@pytest.mark.parametrize(
    ("requirement", "hint"),
    [
        ("mean(pet) within 0.1", 'the share of one of its categories is count(pet == "cat"); '
         "numeric columns: age"),
        ("logistic(pet ~ age) within 0.05", "no categorical column of the schema has 2 values"),
    ],
)
def test_a_column_of_the_wrong_kind_gets_a_hint_from_the_schema(
    spec: Path, requirement: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec.write_text(SPEC.replace("workload:", f"requirements: [{requirement}]\nworkload:"))
    assert main(["plan", str(spec)]) == 1
    assert f"  = hint: {hint}" in capsys.readouterr().err


def test_plan_says_none_for_a_room_it_could_not_buy(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec.write_text(SPEC.replace("workload:", "requirements: [mean(age) within 0.5]\nworkload:"))
    assert main(["plan", str(spec)]) == 0
    out = capsys.readouterr().out.replace("\n", " ")
    assert "room for the table t - 2 sd = none (2 sd >= t)" in out, out


def test_validate_says_how_rows_are_numbered_and_counts_malformed_rows_as_empty(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = spec.parent / "pets.csv"
    lines = data.read_text(encoding="utf-8").splitlines()
    lines[3] += ",extra"  # data row 3: one field too many
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["validate", str(spec)]) == 1
    out = capsys.readouterr().out
    assert "rows are numbered from 1 after the header" in out
    assert "1 malformed row(s) (wrong number of fields or not UTF-8), rows 3:" in out
    assert "  pet: 1 empty cell(s) (malformed rows included), rows 3 -> missing: keep" in out


@pytest.mark.parametrize("command", ["plan", "validate"])  # rich's console, and plain print
def test_a_reader_that_goes_away_is_no_internal_error(spec: Path, command: str) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    p = subprocess.Popen(
        [sys.executable, "-m", "dpql", command, str(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root,
    )  # fmt: skip
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # `dpql plan S | head` once head has what it wants
    err = p.stderr.read().decode()
    assert p.wait() == 141 and "internal error" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("target", ["pets.csv", "pets.release.yaml", "out/pets.csv"])
def test_plan_output_never_replaces_a_release_file(
    spec: Path, target: str, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(spec.parent)
    before = {p.name: p.read_bytes() for p in spec.parent.iterdir()}
    assert main(["plan", spec.name, "--output", target]) == 1
    assert f"{target}: error[E618]: the plan file {target} is the " in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in spec.parent.iterdir()} == before


@pytest.mark.parametrize("folder", ["out", "out/report"])
def test_evaluate_never_writes_its_report_into_the_published_folder(
    spec: Path, folder: str, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(spec.parent)
    (spec.parent / "out").mkdir()
    argv = ["evaluate", spec.name, "--synthetic", "pets.csv", "--output", folder]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{folder}: error[E619]: the report folder {folder} is inside the published" in err
    assert "CONFIDENTIAL" not in err and not any((spec.parent / "out").iterdir())


def test_check_leaves_the_folders_of_this_machine_to_compile(spec: Path) -> None:
    (spec.parent / "out").write_text("a file where compile makes a folder", encoding="utf-8")
    assert main(["check", str(spec)]) == 0  # CI checks the spec, not the curator's disk
    assert main(["compile", str(spec), "--quiet"]) == 1  # E613, before any data is read
