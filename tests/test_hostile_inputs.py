"""Hostile public input files, output paths that would destroy an input, tiny shares, terminal
control sequences, compile-time caps and a public input that is the data file. Each case exits 0 or with one located exit-1 diagnostic, quickly, without a traceback,
without changing any input and without writing anything."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dpql.cli import main
from dpql.terminal import printable

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adult"
# the example with one count requirement (the others depend on the default missing rule)
BASE = re.sub(
    r"requirements:\n(  - .*\n)+",
    'requirements:\n  - count(sex == "Female") within 0.05\n',
    (EXAMPLE / "adult.release.yaml").read_text(encoding="utf-8"),
)
RACE = (
    "race:           {type: categorical, values: [Amer-Indian-Eskimo, Asian-Pac-Islander, "
    "Black, Other, White]}"
)
RACES = "Amer-Indian-Eskimo\nAsian-Pac-Islander\nBlack\nOther\nWhite\n"
GROUPS = "race,group\nAmer-Indian-Eskimo,o\nAsian-Pac-Islander,o\nBlack,b\nOther,o\nWhite,w\n"


def _run(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out, got.err


def _located(err: str, code: str, name: str) -> bool:
    return re.search(rf"{re.escape(name)}:\d+:\d+: error\[{code}\]: ", err) is not None


def _race_spec(folder: Path, race: str, data: str = "data.csv") -> Path:
    """The example spec over ``data`` in ``folder`` (a small file: plan never opens it), with
    ``race`` as the race column."""
    (folder / "data.csv").write_text("age,race\n39,White\n")
    (folder / "races.txt").write_text(RACES)
    (folder / "groups.csv").write_text(GROUPS)
    text = BASE.replace("adult_train.csv.gz", data).replace(RACE, race)
    spec = folder / "release.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec


# ---- public input files (plan)


def _fifo(folder: Path) -> str:
    os.mkfifo(folder / "fifo")
    return "fifo"


def _link_to_fifo(folder: Path) -> str:
    os.mkfifo(folder / "fifo")
    (folder / "to-fifo").symlink_to("fifo")
    return "to-fifo"


def _loop(folder: Path) -> str:
    (folder / "loop").symlink_to("loop")
    return "loop"


def _huge_field(folder: Path) -> str:
    (folder / "wide.csv").write_text("race,group\n" + "x" * 140_000 + ",y\n")
    return "wide.csv"


@pytest.mark.parametrize("make", [_fifo, _link_to_fifo, _loop], ids=["fifo", "to-fifo", "loop"])
@pytest.mark.parametrize("key", ["values_file", "group"])
def test_an_unreadable_public_file_is_a_located_error_not_a_hang(
    make, key: str, tmp_path: Path
) -> None:
    """A FIFO (or a link to one) is refused before it is opened for reading, a symlink loop is
    reported; run in a child with a timeout, so a regression fails instead of hanging."""
    name = make(tmp_path)
    race = (
        f"race: {{type: categorical, values_file: {name}}}"
        if key == "values_file"
        else f"race: {{type: categorical, values_file: races.txt, group: {{file: {name}}}}}"
    )
    spec = _race_spec(tmp_path, race)
    done = subprocess.run(
        [sys.executable, "-m", "dpql.cli", "plan", str(spec)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    code = "E120" if key == "values_file" else "E121"
    assert _located(done.stderr, code, "release.yaml"), done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_a_nul_byte_in_a_public_path_is_a_located_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _race_spec(tmp_path, 'race: {type: categorical, values_file: "races\\0.txt"}')
    rc, _, err = _run("plan", str(spec), capsys=capsys)
    assert rc == 1 and _located(err, "E101", "release.yaml"), err
    assert "\x00" not in err


def test_a_group_field_over_the_csv_limit_is_a_located_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = _huge_field(tmp_path)
    race = f"race: {{type: categorical, values_file: races.txt, group: {{file: {name}}}}}"
    rc, _, err = _run("plan", str(_race_spec(tmp_path, race)), capsys=capsys)
    assert rc == 1 and _located(err, "E121", "release.yaml") and "131,072" in err, err
    assert "xxxxxxxx" not in err


def _same_path(folder: Path) -> str:
    return "data.csv"


def _dotted_path(folder: Path) -> str:
    (folder / "sub").mkdir()
    return "sub/../data.csv"


def _symlink(folder: Path) -> str:
    (folder / "public.csv").symlink_to("data.csv")
    return "public.csv"


def _hard_link(folder: Path) -> str:
    os.link(folder / "data.csv", folder / "public.csv")
    return "public.csv"


@pytest.mark.parametrize(
    "make", [_same_path, _dotted_path, _symlink, _hard_link],
    ids=["same", "dotted", "symlink", "hardlink"],
)  # fmt: skip
@pytest.mark.parametrize("key", ["values_file", "group", "external"])
def test_a_public_input_that_is_the_data_file_is_refused_unread(
    make, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "data.csv").write_text("age,race\n39,PRIVATE-CELL\n")
    name = make(tmp_path)
    race = {
        "values_file": f"race: {{type: categorical, values_file: {name}}}",
        "group": f"race: {{type: categorical, values_file: races.txt, group: {{file: {name}}}}}",
        "external": RACE,
    }[key]
    spec = _race_spec(tmp_path, race)
    (tmp_path / "data.csv").write_text("age,race\n39,PRIVATE-CELL\n")
    if key == "external":
        text = spec.read_text()
        start, end = text.index("synthesizer:\n"), text.index("\npostprocess:")
        synth = (
            f"synthesizer:\n  method: external\n  path: {name}\n"
            "  budget: {epsilon: 0.5, delta: 1e-12, neighbouring: replace_one}\n"
        )
        spec.write_text(text[:start] + synth + text[end:])
    rc, out, err = _run("plan", str(spec), capsys=capsys)
    assert rc == 1 and _located(err, "E122", "release.yaml"), err
    assert "PRIVATE-CELL" not in out + err


@pytest.mark.parametrize("key", ["values_sha256", "group"])
def test_a_pinned_hash_is_checked(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    races = hashlib.sha256(RACES.encode()).hexdigest()
    groups = hashlib.sha256(GROUPS.encode()).hexdigest()
    good = (
        f"race: {{type: categorical, values_file: races.txt, values_sha256: '{races}'}}"
        if key == "values_sha256"
        else f"race: {{type: categorical, values_file: races.txt, "
        f"group: {{file: groups.csv, sha256: '{groups}'}}}}"
    )
    rc, _, err = _run("plan", str(_race_spec(tmp_path, good)), capsys=capsys)
    assert rc == 0, err
    bad = good.replace(races if key == "values_sha256" else groups, "0" * 64)
    rc, _, err = _run("plan", str(_race_spec(tmp_path, bad)), capsys=capsys)
    assert rc == 1 and _located(err, "E123", "release.yaml"), err


# ---- tiny shares (plan)

SYNTH = "  method: rap            # rap | gan | external (post-process a table made elsewhere)\n"


@pytest.mark.parametrize(
    "synth",
    [
        "  method: aim\n  rows: 32561\n  options: {init_share: 1e-12}\n",
        "  method: aim\n  rows: 32561\n  options: {select_share: 1e-300}\n",
        "  method: rap\n  rows: 32561\n  options: {init_share: 1e-323}\n",
        "  method: rap\n  rows: 32561\n  options: {threshold_share: 0}\n",
        "  method: rap\n  rows: 32561\n  options: {init_share: 0.5, threshold_share: 0.4999}\n",
        "  method: gan\n  rows: 32561\n  options: {encoding: bins, marginal_share: 1e-300}\n",
    ],
    ids=["aim-init", "aim-select", "rap-init", "rap-threshold-0", "rap-sum", "gan-marginal"],
)
def test_a_tiny_share_is_a_located_range_error(
    synth: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE.replace(SYNTH + "  rows: 32561\n", synth)
    assert text != BASE
    spec = tmp_path / "share.release.yaml"
    spec.write_text(text)
    rc, _, err = _run("plan", str(spec), capsys=capsys)
    assert rc == 1 and _located(err, "E101", "share.release.yaml"), err


# ---- control characters (plan)


def test_terminal_control_sequences_are_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE.replace("name: adult-public", 'name: "adult\\e]0;title\\a\\e[2J\\u202e"')
    text = text.replace("values: [Female, Male]", 'values: ["Fe\\e[31mmale", Male]')
    text = text.replace('sex == "Female"', 'sex == "Male"')
    spec = tmp_path / "esc.release.yaml"
    spec.write_text(text)
    rc, out, err = _run("plan", str(spec), capsys=capsys)
    assert rc == 0, err
    assert "\x1b" not in out + err and "\u202e" not in out + err
    assert "adult\\x1b]0;title" in out and "\\x1b[2J\\u202e" in out
    # diagnostics too: a misspelt category's did-you-mean names the escaped one
    spec.write_text(text.replace('sex == "Male"', 'sex == "Femal"'))
    rc, _, err = _run("plan", str(spec), capsys=capsys)
    assert rc == 1 and "\x1b" not in err and "Fe\\x1b[31mmale" in err


def test_printable_keeps_text_and_escapes_controls() -> None:
    assert printable("a\tb\nc é 中") == "a\tb\nc é 中"
    assert printable("\x1b[2J\x07\x9b\r\u2066") == "\\x1b[2J\\x07\\x9b\\x0d\\u2066"


# ---- output paths (compile)

SMALL = """dpql: 1
name: small-external
data:
  path: train.csv
  rows: 300
schema:
  age:    {{type: numeric, min: 17, max: 90, integer: true, bins: 8}}
  sex:    {{type: categorical, values_file: sexes.txt}}
  income: {{type: categorical, values: ["<=50K", ">50K"]}}
privacy:
  epsilon: 1.0
  delta: 1e-9
workload:
  - marginals(2)
requirements: []
synthesizer:
  method: external
  path: external.csv
  budget: {{epsilon: 0.5, delta: 1e-10, neighbouring: replace_one}}
output:
  path: {table}
  provenance: {record}
{extra}"""


def _small(folder: Path, table: str = "out/t.csv", record: str = "out/t.json", **extra: str):
    real = pd.read_csv(EXAMPLE / "adult_train.csv.gz", nrows=300)[["age", "sex", "income"]]
    real.to_csv(folder / "train.csv", index=False)
    real.sample(frac=1.0, random_state=1).to_csv(folder / "external.csv", index=False)
    (folder / "sexes.txt").write_text("Female\nMale\n")
    lines = "".join(f"  {k}: {v}\n" for k, v in extra.items())
    spec = folder / "release.yaml"
    spec.write_text(SMALL.format(table=table, record=record, extra=lines))
    return spec


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize(
    ("outputs", "code"),
    [
        ({"curator": "train.csv"}, "E618"),
        ({"curator": "release.yaml"}, "E618"),
        ({"curator": "sexes.txt"}, "E618"),
        ({"ledger": "train.csv"}, "E618"),
        ({"ledger": "out/t.csv"}, "E613"),
        ({"table": "hard.csv"}, "E618"),
        ({"table": "external.csv"}, "E618"),
        ({"record": "./release.yaml"}, "E618"),
        ({"record": "out/t.csv/x.json"}, "E613"),
        ({"table": "out/" + "x" * 250 + ".csv"}, "E613"),
        ({"table": '"out/a\\0b.csv"'}, "E101"),
        ({"curator": "out/curator.json"}, "E619"),
        ({"curator": "out/private/curator.json"}, "E619"),
    ],
    ids=[
        "curator-is-data", "curator-is-spec", "curator-is-values-file", "ledger-is-data",
        "ledger-is-table", "table-is-hard-link-of-data", "table-is-external", "record-is-spec",
        "record-below-table", "name-too-long", "nul-byte", "curator-in-published-folder",
        "curator-below-published-folder",
    ],
)  # fmt: skip
def test_an_output_path_that_would_destroy_an_input_is_refused_before_reading(
    outputs: dict[str, str], code: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _small(tmp_path, **outputs)
    os.link(tmp_path / "train.csv", tmp_path / "hard.csv")
    before = _snapshot(tmp_path)
    rc, _, err = _run("compile", str(spec), "--quiet", capsys=capsys)
    assert rc == 1 and _located(err, code, "release.yaml"), err
    assert "Traceback" not in err and "internal error" not in err
    assert _snapshot(tmp_path) == before  # no input changed, nothing written, no ledger line


def test_the_curator_key_inside_the_published_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key goes beside the curator file: the curator file in the table's folder puts both
    there; with $DPQL_CURATOR_KEY no key file is written, the curator file is still refused."""
    monkeypatch.delenv("DPQL_CURATOR_KEY", raising=False)
    spec = _small(tmp_path, curator="out/c.json")
    rc, _, err = _run("compile", str(spec), "--quiet", capsys=capsys)
    assert rc == 1 and "curator HMAC key" in err and "E619" in err


def test_a_copy_of_the_data_as_the_external_table_is_refused_at_compile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy (another inode, the same bytes) passes plan, which never reads the data; compile
    hashes the data file when it opens it and refuses before anything is measured."""
    spec = _small(tmp_path)
    shutil.copy(tmp_path / "train.csv", tmp_path / "external.csv")
    rc, _, err = _run("plan", str(spec), capsys=capsys)
    assert rc == 0, err
    rc, _, err = _run("compile", str(spec), "--quiet", capsys=capsys)
    assert rc == 1 and _located(err, "E122", "release.yaml"), err
    assert not (tmp_path / "out").exists() and not (tmp_path / "curator").exists()


def test_a_small_release_compiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Sanity: the outputs the cases above refuse are refused for their path alone."""
    spec = _small(tmp_path)
    rc, _, err = _run("compile", str(spec), "--quiet", capsys=capsys)
    assert rc == 0, err
    assert (tmp_path / "out" / "t.csv").is_file()


def test_the_evaluate_report_folder_must_not_hold_an_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _small(tmp_path)
    before = _snapshot(tmp_path)
    rc, _, err = _run(
        "evaluate", str(spec), "--synthetic", str(tmp_path / "external.csv"),
        "--output", str(tmp_path), capsys=capsys,
    )  # fmt: skip
    assert rc == 1 and "E618" in err, err
    assert _snapshot(tmp_path) == before


# ---- policy: estimated time


def test_a_policy_caps_the_estimated_compile_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    text = "dpql-policy: 1\nmax_epsilon: 2.0\nmax_delta: 1.0e-6\nmax_minutes: {}\n"
    spec = tmp_path / "adult.release.yaml"
    spec.write_text(BASE.replace("adult_train.csv.gz", str(EXAMPLE / "adult_train.csv.gz")))
    policy.write_text(text.format(1000))
    rc, out, err = _run("check", str(spec), "--policy", str(policy), capsys=capsys)
    assert rc == 0, out + err
    policy.write_text(text.format(0.01))
    rc, _, err = _run("check", str(spec), "--policy", str(policy), capsys=capsys)
    assert rc == 1 and f"{policy}:4:" in err and "error[P009]" in err
    assert "max_minutes 0.01" in err



def test_the_public_csv_field_limit_does_not_follow_the_process_wide_setting() -> None:
    """The data reader raises csv's process-wide field limit while it reads; a public file's
    limit is its own, whatever that setting is when the spec loads."""
    import csv

    from dpql.spec.files import MAX_FIELD_CHARS, _csv_parse

    previous = csv.field_size_limit(8 * 2**20)
    try:
        assert _csv_parse("a," + "x" * (MAX_FIELD_CHARS + 1) + "\n") == (
            f"a field is longer than {MAX_FIELD_CHARS:,} characters"
        )
        assert csv.field_size_limit() == 8 * 2**20
    finally:
        csv.field_size_limit(previous)
