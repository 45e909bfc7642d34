"""Budget hygiene and crash safety of `dpql compile` (issues 18 and 20).

Every output and ledger location is validated before the private data is read; a second compile
to the same outputs needs ``--force``; every compile is recorded in a ledger (by default
``<data file>.ledger.jsonl`` beside the spec); ``--policy`` enforces lifetime caps before any
data is read and again, under the ledger's lock, when the release is recorded. The release is
written as one unit (docs/architecture.md, "Writing a release"): a SIGKILL at any moment leaves
nothing, or a complete release whose ledger line is committed once the next compile recovered it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from guards import wait_or_fail

from dpql.cli import main
from dpql.pipeline import remove_orphans
from dpql.release.lifetime import (
    ReleaseRecord,
    StagedOutput,
    locked_ledger,
    read_ledger,
    recover_ledger,
)
from dpql.release.policy import lifetime_budget, planned_spend
from dpql.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adult"
RELEASE_FILES = ("adult_synthetic.csv", "adult_synthetic.provenance.json")


SPEC = """dpql: 1
name: small-external
data:
  path: train.csv
  rows: {rows}
schema:
  age:    {{type: numeric, min: 17, max: 90, integer: true, bins: 8}}
  sex:    {{type: categorical, values: [Female, Male]}}
  income: {{type: categorical, values: ["<=50K", ">50K"]}}
privacy:
  epsilon: 1.0
  delta: 1e-9
workload:
  - marginals(2)
requirements:
  - count(income == ">50K") within 0.05
synthesizer:
  method: external
  path: external.csv
  budget: {{epsilon: 0.1, delta: 1e-10, neighbouring: replace_one}}
  rows: 300
postprocess:
  method: iproj
  share: 0.5
output:
  path: out/adult_synthetic.csv
  provenance: out/adult_synthetic.provenance.json
"""


def _spec(folder: Path, rows: int = 1000) -> Path:
    """A small, fast release (no JAX: an external table post-processed toward one requirement)
    of three columns of the Adult example."""
    folder.mkdir(parents=True, exist_ok=True)
    real = pd.read_csv(EXAMPLE / "adult_train.csv.gz", nrows=rows)[["age", "sex", "income"]]
    real.to_csv(folder / "train.csv", index=False)
    rng = random.Random(0)
    external = {
        "age": [rng.randint(17, 90) for _ in range(300)],
        "sex": [rng.choice(["Female", "Male"]) for _ in range(300)],
        "income": [rng.choice(["<=50K", ">50K"]) for _ in range(300)],
    }
    pd.DataFrame(external).to_csv(folder / "external.csv", index=False)
    spec = folder / "release.yaml"
    spec.write_text(SPEC.format(rows=rows), encoding="utf-8")
    return spec


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    return _spec(tmp_path / "rel")


@pytest.fixture
def no_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the private data is opened: refusals must come before it."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the private data was opened")

    monkeypatch.setattr("dpql.data.private.open_private", refuse)


def _compile(spec: Path, *extra: str) -> int:
    return main(["compile", str(spec), "--seed", "0", "--quiet", *extra])


def _released(spec: Path) -> list[str]:
    """The files (not folders) in the release's output folder."""
    out = spec.parent / "out"
    return sorted(p.name for p in out.iterdir() if not p.is_dir()) if out.is_dir() else []


def _default_ledger(spec: Path) -> Path:
    """With no policy or project file found: the data file's ledger, beside the spec."""
    return spec.parent / "train.csv.ledger.jsonl"


@pytest.mark.e2e
def test_second_compile_needs_force_and_every_compile_is_in_the_default_ledger(
    spec: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _compile(spec) == 0
    ledger = _default_ledger(spec)
    (line,) = read_ledger(ledger)
    assert line.status == "committed" and line.epsilon <= 1.0 + 1e-9
    assert _released(spec) == list(RELEASE_FILES)
    table = (spec.parent / "out" / RELEASE_FILES[0]).read_bytes()
    capsys.readouterr()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the private data was opened")

    with monkeypatch.context() as m:
        m.setattr("dpql.data.private.open_private", refuse)
        assert _compile(spec) == 1
    err = capsys.readouterr().err
    assert "error[E614]" in err and "--force" in err and "adult_synthetic.csv" in err
    assert len(read_ledger(ledger)) == 1  # nothing spent
    assert (spec.parent / "out" / RELEASE_FILES[0]).read_bytes() == table
    assert _compile(spec, "--force") == 0
    assert [r.status for r in read_ledger(ledger)] == ["committed", "committed"]
    assert _released(spec) == list(RELEASE_FILES)  # no staged or temp file left behind
    record = spec.parent / "out" / RELEASE_FILES[1]
    assert (
        main(["verify", str(record), "--synthetic", str(record.with_name(RELEASE_FILES[0]))]) == 0
    )


def _expect_refused(spec: Path, capsys: pytest.CaptureFixture[str], code: str, *extra: str) -> str:
    capsys.readouterr()
    assert _compile(spec, *extra) == 1
    err = capsys.readouterr().err
    assert f"error[{code}]" in err, err
    assert "Traceback" not in err
    assert _released(spec) == []
    assert not (spec.parent / "curator").exists() or not any((spec.parent / "curator").iterdir())
    return err


def test_bad_output_and_ledger_locations_are_refused_before_the_data_is_read(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_data: None
) -> None:
    text = spec.read_text(encoding="utf-8")
    assert "\noutput:\n" in text and "path: out/" in text
    # the table's path is a directory
    (spec.parent / "out" / RELEASE_FILES[0]).mkdir(parents=True)
    err = _expect_refused(spec, capsys, "E613")
    assert "is a directory" in err and "release.yaml" in err
    (spec.parent / "out" / RELEASE_FILES[0]).rmdir()
    (spec.parent / "out").rmdir()
    # the output folder cannot be created: a file is in the way
    (spec.parent / "blocked").write_text("")
    spec.write_text(text.replace("path: out/", "path: blocked/sub/"), encoding="utf-8")
    assert "not a directory" in _expect_refused(spec, capsys, "E613")
    spec.write_text(text, encoding="utf-8")
    # the table and record on one path
    spec.write_text(
        text.replace(
            "provenance: out/adult_synthetic.provenance.json", "provenance: out/x.csv"
        ).replace("path: out/adult_synthetic.csv", "path: out/x.csv"),
        encoding="utf-8",
    )
    assert "same file" in _expect_refused(spec, capsys, "E613")
    spec.write_text(text, encoding="utf-8")
    # --ledger that is a directory, BOM-prefixed, malformed
    (tmp_path / "ledger-dir").mkdir()
    _expect_refused(spec, capsys, "E615", "--ledger", str(tmp_path / "ledger-dir"))
    assert _default_ledger(spec).exists() is False
    bom = tmp_path / "bom.jsonl"
    line = json.dumps(
        {"name": "r", "spec_sha256": "0" * 64, "epsilon": 0.5, "delta": 1e-9, "time": "2024-01-01"}
    )
    bom.write_text("\ufeff" + line + "\n", encoding="utf-8")
    err = _expect_refused(spec, capsys, "E020", "--ledger", str(bom))
    assert f"{bom}:1:" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line + "\n{not json\n", encoding="utf-8")
    assert f"{bad}:2:" in _expect_refused(spec, capsys, "E020", "--ledger", str(bad))
    # output.ledger that is a directory
    spec.write_text(text.replace("\noutput:\n", "\noutput:\n  ledger: ledger-dir2\n"))
    (spec.parent / "ledger-dir2").mkdir()
    _expect_refused(spec, capsys, "E615")


def test_unwritable_output_folder_is_refused(
    spec: Path, capsys: pytest.CaptureFixture[str], no_data: None
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can write any folder")
    (spec.parent / "out").mkdir()
    (spec.parent / "out").chmod(0o500)
    try:
        assert "not writable" in _expect_refused(spec, capsys, "E613")
    finally:
        (spec.parent / "out").chmod(0o700)


POLICY = """dpql-policy: 1
max_epsilon: 2.0
max_delta: 1.0e-6
lifetime:
  epsilon: {cap}
  ledger: privacy-ledger.jsonl
forbidden_columns: [ssn]
allowed_methods: [rap, iproj, external]
require:
  public_bounds: true
  delta_below_inverse_rows: true
"""


def _policy(folder: Path, cap: float, create_ledger: bool = True) -> Path:
    policy = folder / "policy.yaml"
    policy.write_text(POLICY.format(cap=cap), encoding="utf-8")
    if create_ledger:
        (folder / "privacy-ledger.jsonl").touch()
    return policy


@pytest.mark.e2e
def test_policy_caps_are_enforced_by_compile_before_the_data_is_read(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    (tmp_path / "p0").mkdir()
    missing = _policy(tmp_path / "p0", 3.0, create_ledger=False)
    # the policy's ledger does not exist (a typo?) while a ledger beside it holds a release
    old = tmp_path / "p0" / "old-ledger.jsonl"
    old.write_text(
        ReleaseRecord(
            name="r", spec_sha256="0" * 64, epsilon=1.0, delta=1e-9, time="2026-01-01T00:00:00"
        ).model_dump_json()
        + "\n",
        encoding="utf-8",
    )
    with monkeypatch.context() as m:
        m.setattr("dpql.data.private.open_private", _refuse)
        err = _expect_refused(spec, capsys, "E616", "--policy", str(missing))
        assert str(old) in err and "cat " in err
        # dpql check reports it too
        assert main(["check", str(spec), "--policy", str(missing)]) == 1
        assert "error[E616]" in capsys.readouterr().err
    old.unlink()
    (tmp_path / "p").mkdir()
    policy = _policy(tmp_path / "p", 1.2)  # room for one release of epsilon 1, not two
    ledger = tmp_path / "p" / "privacy-ledger.jsonl"
    assert _compile(spec, "--policy", str(policy)) == 0
    assert len(read_ledger(ledger)) == 1 and not _default_ledger(spec).exists()
    with monkeypatch.context() as m:
        m.setattr("dpql.data.private.open_private", _refuse)
        capsys.readouterr()
        assert _compile(spec, "--policy", str(policy), "--force") == 1
        err = capsys.readouterr().err
        assert "error[P007]" in err and "of 1.2" in err
        # the policy's caps are kept in its ledger: recording elsewhere is refused
        other = tmp_path / "other.jsonl"
        assert _compile(spec, "--policy", str(policy), "--force", "--ledger", str(other)) == 1
        assert "error[E615]" in capsys.readouterr().err
    assert len(read_ledger(ledger)) == 1


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("the private data was opened")


# ---------------------------------------------------------------------------------------------
# crash safety and concurrency: real processes


# ``python -c KILLER k argv...``: dpql compile that SIGKILLs itself at the k-th ``os.replace`` (the
# pending ledger line, each of the three renames into place, the committed line)
KILLER = """
import os, signal, sys
k, calls, replace = int(sys.argv[1]), [0], os.replace
def killing_replace(*args, **kwargs):
    calls[0] += 1
    if calls[0] == k:
        os.kill(os.getpid(), signal.SIGKILL)
    return replace(*args, **kwargs)
os.replace = killing_replace
from dpql.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _popen(spec: Path, *extra: str, kill_at_replace: int | None = None) -> subprocess.Popen[bytes]:
    argv = ["compile", str(spec), "--seed", "0", "--quiet", *extra]
    if kill_at_replace is None:
        command = [sys.executable, "-m", "dpql.cli", *argv]
    else:
        command = [sys.executable, "-c", KILLER, str(kill_at_replace), *argv]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _recover(spec: Path, ledger: Path) -> list[str]:
    """What the next compile does first (under the ledger's lock)."""
    out = spec.parent / "out"
    targets = [out / name for name in RELEASE_FILES]
    targets.append(spec.parent / "curator" / "adult_synthetic.CURATOR-ONLY.json")
    with locked_ledger(ledger) as locked:
        notes = recover_ledger(locked)
        remove_orphans(targets)
    return notes


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _check_outcome(spec: Path) -> str:
    """After the next compile's recovery: nothing at all, or one complete, verifiable release
    with a committed ledger line."""
    ledger = _default_ledger(spec)
    before = read_ledger(ledger) if ledger.exists() else []
    assert all(r.status in ("pending", "committed") for r in before)
    _recover(spec, ledger)
    lines = read_ledger(ledger) if ledger.exists() else []
    out, curator = _files(spec.parent / "out"), _files(spec.parent / "curator")
    curator = [n for n in curator if n != "dpql-curator.key"]
    if not lines:
        assert out == [] and curator == [], (out, curator)
        return "nothing"
    (line,) = lines
    assert line.status == "committed"
    assert out == list(RELEASE_FILES) and curator == ["adult_synthetic.CURATOR-ONLY.json"]
    record = spec.parent / "out" / RELEASE_FILES[1]
    table = spec.parent / "out" / RELEASE_FILES[0]
    assert main(["verify", str(record), "--synthetic", str(table)]) == 0
    assert json.loads(record.read_text())["privacy"]["spent"]["epsilon"] == line.epsilon
    return "pending" if before and before[-1].status == "pending" else "committed"


@pytest.mark.e2e
def test_sigkill_at_random_moments_leaves_nothing_or_a_committed_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kill `dpql compile` with SIGKILL: at random moments (three processes in parallel, killed
    after 0.3 to 4 s), and at each ``os.replace`` of the write phase (instrumented: before the
    pending ledger line exists, after it with 0 or 2 outputs renamed, before the committed line).
    Each leaves nothing, or a release that the next compile's recovery completes and commits."""
    rng = random.Random(20)
    instrumented = {k: _spec(tmp_path / f"i{k}") for k in (1, 2, 4, 5)}
    randomly = {rng.uniform(0.3, 4.0): _spec(tmp_path / f"r{k}") for k in range(3)}
    procs = {k: _popen(s, kill_at_replace=k) for k, s in instrumented.items()}
    t = time.perf_counter()
    killed = {delay: _popen(s) for delay, s in randomly.items()}
    for delay in sorted(killed):
        time.sleep(max(0.0, delay - (time.perf_counter() - t)))
        killed[delay].send_signal(signal.SIGKILL)
    for proc in [*procs.values(), *killed.values()]:
        wait_or_fail(proc, "a dpql compile to be killed")
    assert all(p.returncode == -signal.SIGKILL for p in procs.values())
    outcomes = {k: _check_outcome(s) for k, s in instrumented.items()}
    # replace 1 writes the pending line, 2-4 rename the outputs into place, 5 commits
    assert outcomes == {1: "nothing", 2: "pending", 4: "pending", 5: "pending"}
    for s in randomly.values():
        assert _check_outcome(s) in ("nothing", "pending", "committed")
    capsys.readouterr()


@pytest.mark.e2e
def test_a_pending_line_is_rolled_forward_or_abandoned(spec: Path) -> None:
    """The recovery step on its own: a pending line whose staged files are all there is
    completed; one whose staged files are gone is marked abandoned (still counted as spent)."""
    assert _compile(spec) == 0
    ledger = _default_ledger(spec)
    (line,) = read_ledger(ledger)
    out = spec.parent / "out"
    table = out / RELEASE_FILES[0]
    staged = out / f".{table.name}.dpql-1-abc.staged"
    data = table.read_bytes()
    staged.write_bytes(data)
    table.write_text("old release\n")
    entry = StagedOutput(
        path=str(table), staged=str(staged), sha256=hashlib.sha256(data).hexdigest()
    )
    pending = line.model_copy(update={"status": "pending", "txid": "1-abc", "outputs": [entry]})
    with locked_ledger(ledger) as locked:
        locked.write([pending])
    (note,) = _recover(spec, ledger)
    assert "now committed" in note and table.read_bytes() == data and not staged.exists()
    assert [r.status for r in read_ledger(ledger)] == ["committed"]
    with locked_ledger(ledger) as locked:
        locked.write([pending])  # its staged file is gone now, and the table differs
    table.write_text("changed\n")
    (note,) = _recover(spec, ledger)
    assert "abandoned" in note and [r.status for r in read_ledger(ledger)] == ["abandoned"]


@pytest.mark.e2e
def test_concurrent_compiles_lose_nothing_and_cannot_pass_the_lifetime_cap(
    tmp_path: Path,
) -> None:
    """Three compiles on one ledger at once, under a cap with room for two: exactly two are
    recorded (none lost: lock, then check, then append, so the third sees both lines) and the
    third is refused with P007, whether at its pre-data check or at its commit."""
    (tmp_path / "p").mkdir()
    policy = _policy(tmp_path / "p", 8.0)
    ledger = tmp_path / "p" / "privacy-ledger.jsonl"
    specs = [_spec(tmp_path / f"a{k}") for k in range(3)]
    for s in specs[1:]:  # three specs of one data source (a lifetime cap is per data source)
        s.write_text(s.read_text().replace("path: train.csv", "path: ../a0/train.csv"))
    spend = planned_spend(load_spec(specs[0]))
    one = ReleaseRecord(
        name="small-external",
        spec_sha256="0" * 64,
        epsilon=spend.epsilon,
        delta=spend.delta,
        rdp=spend.rdp,
        time="2026-01-01T00:00:00+00:00",
    )
    two = lifetime_budget(math.inf, [one], spend).total_epsilon
    three = lifetime_budget(math.inf, [one, one], spend).total_epsilon
    cap = (two + three) / 2
    policy.write_text(POLICY.format(cap=cap), encoding="utf-8")
    procs = [_popen(s, "--policy", str(policy)) for s in specs]
    codes = sorted(wait_or_fail(p, "a concurrent dpql compile") for p in procs)
    errors = b"".join(p.stderr.read() for p in procs if p.stderr).decode()
    assert codes == [0, 0, 1], errors
    assert "error[P007]" in errors and "Traceback" not in errors
    lines = read_ledger(ledger)
    assert [r.status for r in lines] == ["committed", "committed"]
    assert lifetime_budget(math.inf, lines[:1], spend).total_epsilon <= cap
    released = [s for s in specs if _released(s) == list(RELEASE_FILES)]
    assert len(released) == 2  # the refused compile wrote nothing
    assert sorted(r.spec_sha256 for r in lines) == sorted(load_spec(s).spec_hash for s in released)


# ---------------------------------------------------------------------------------------------
# Ctrl-C, progress lines, the plan's accounting


@pytest.mark.e2e
def test_ctrl_c_says_what_was_written(
    spec: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted before the commit: nothing written or recorded, and it says so; interrupted
    after it: the message names the release that was written (never "no output was written")."""

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr("dpql.postprocess.run.run_postprocess", interrupt)
        assert _compile(spec) == 130
    err = capsys.readouterr().err
    assert "no output was written and nothing was recorded" in err
    assert _released(spec) == [] and not read_ledger(_default_ledger(spec))
    with monkeypatch.context() as m:
        m.setattr("dpql.cli.compile.print_compiled", interrupt)
        assert _compile(spec) == 130
    err = capsys.readouterr().err
    assert "the release was written and recorded" in err and "no output" not in err
    assert _released(spec) == list(RELEASE_FILES)
    assert [r.status for r in read_ledger(_default_ledger(spec))] == ["committed"]


@pytest.mark.e2e
def test_plain_progress_lines_when_stderr_is_not_a_terminal(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Progress lines carry no times by default (they scale with the real row count), and
    compile prints no stage timings; --verbose shows both on the curator's terminal."""
    assert main(["compile", str(spec), "--seed", "0"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    progress = [line for line in lines if line.startswith("compile: ")]
    assert progress and not any(re.search(r"\d s\b|left", line) for line in progress), lines
    assert any(line.startswith("compile: postprocess ") for line in progress)
    assert not re.search(r"^time:|\d\.\ds\b", captured.out, re.M), captured.out
    assert main(["compile", str(spec), "--seed", "0", "--force", "--verbose"]) == 0
    captured = capsys.readouterr()
    progress = [line for line in captured.err.splitlines() if line.startswith("compile: ")]
    assert progress and all(", " in line and " s" in line for line in progress), progress
    assert re.search(r"^time: plan \d+\.\ds, ", captured.out, re.M), captured.out


@pytest.mark.slow
def test_plan_shows_each_phase_in_its_own_accounting(capsys: pytest.CaptureFixture[str]) -> None:
    """No `rho 0` for DP-SGD phases or an external table, and a total in epsilon."""
    assert main(["plan", str(ROOT / "examples" / "adult-gan" / "adult-gan.release.yaml")]) == 0
    out = capsys.readouterr().out
    assert "eps 0.5 (RDP)" in out and "allocated rho 0 " not in out
    assert "planned spend: epsilon 1 at delta 1e-09 of the budget epsilon 1" in out
    external = ROOT / "examples" / "adult-external" / "adult-external.release.yaml"
    assert main(["plan", str(external)]) == 0
    out = capsys.readouterr().out
    assert "eps 0.5, delta 1e-10" in out and "external table eps 0.5" in out
    assert main(["plan", str(EXAMPLE / "adult.release.yaml")]) == 0
    assert "allocated rho 0.0149731 of 0.0149731 (zCDP)" in capsys.readouterr().out
