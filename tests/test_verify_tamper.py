"""`dpql verify` against tampered and hostile records, and signed records.

One small RAP release is compiled (signed with a key from `dpql keygen`); every test edits a
copy of its record. Each tampering must make verify exit 1 naming what does not match; each
hostile file must fail cleanly (exit 1, no traceback); a signed record with any byte changed
must fail `verify --key`.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from releases import write_small_release

import dpql
from dpql.cli import main
from dpql.io import public_mode
from dpql.privacy.accountant import epsilon_from_events
from dpql.privacy.ledger import PrivacyEvent
from dpql.release.signing import SigningError, sign_record, verify_signature
from dpql.release.verify import verify_release

pytestmark = pytest.mark.e2e  # every test reads the one signed release the fixture compiles

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adult"


@dataclass(frozen=True)
class Release:
    folder: Path
    record: Path
    table: Path
    key: Path
    public_key: Path

    def load(self) -> dict:
        return json.loads(self.record.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The example spec on 2000 rows, two RAP rounds, signed with a fresh key."""
    folder = tmp_path_factory.mktemp("signed")
    spec = write_small_release(folder, rows=2000)
    key = folder / "keys" / "curator.key"
    key.parent.mkdir()
    assert main(["keygen", "--out", str(key)]) == 0
    args = ["compile", str(spec), "--seed", "0", "--quiet", "--sign-key", str(key)]
    assert main(args) == 0
    out = folder / "out"
    return Release(
        folder,
        out / "adult_synthetic.provenance.json",
        out / "adult_synthetic.csv",
        key,
        key.with_name("curator.key.pub"),
    )


def _verify(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _write(path: Path, record: dict) -> Path:
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def _unsigned(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "signature"}


# ---------------------------------------------------------------------------------------------
# keys and signatures


def test_keygen_writes_a_private_and_a_public_key_and_never_overwrites(
    release: Release, capsys
) -> None:
    assert stat.S_IMODE(release.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(release.public_key.stat().st_mode) == public_mode()
    assert "BEGIN PUBLIC KEY" in release.public_key.read_text()
    before = release.key.read_bytes()
    capsys.readouterr()
    assert main(["keygen", "--out", str(release.key)]) == 1
    assert "V045" in capsys.readouterr().err and release.key.read_bytes() == before
    assert main(["keygen", "--out", str(release.folder / "no-such-dir" / "k")]) == 1
    assert "V045" in capsys.readouterr().err


def test_signed_record_verifies_with_its_key(release: Release, capsys) -> None:
    record = release.load()
    assert record["signature"]["algorithm"] == "ed25519"
    code, out = _verify(
        capsys, str(release.record), "--synthetic", str(release.table), "--key",
        str(release.public_key),
    )  # fmt: skip
    assert code == 0, out
    assert "signature valid" in out and "match the plan of the embedded spec" in out
    assert dpql.verify(release.record, synthetic=release.table, key=release.public_key) == []
    # without --key: verified, with a note that the signature was not checked
    code, out = _verify(capsys, str(release.record))
    assert code == 0 and "signature was not checked" in out


def test_unsigned_record_verifies_with_a_notice_but_not_with_a_key(
    release: Release, tmp_path: Path, capsys
) -> None:
    path = _write(tmp_path / "unsigned.json", _unsigned(release.load()))
    code, out = _verify(capsys, str(path))
    assert code == 0 and "unsigned record" in out and " ok (" in out
    code, out = _verify(capsys, str(path), "--key", str(release.public_key))
    assert code == 1 and "V040" in out and "unsigned" in out


def test_sign_record_and_verify_signature(release: Release) -> None:
    record = _unsigned(release.load())
    signed = sign_record(record, release.key)
    fingerprint = release.load()["signature"]["public_key_sha256"]
    assert signed["signature"]["public_key_sha256"] == fingerprint
    assert verify_signature(signed, release.public_key) is None
    changed = copy.deepcopy(signed)
    changed["privacy"]["spent"]["epsilon"] = 0.5
    assert "changed after it was signed" in (verify_signature(changed, release.public_key) or "")
    assert "unsigned" in (verify_signature(record, release.public_key) or "")


def test_signature_by_another_key_fails(release: Release, tmp_path: Path, capsys) -> None:
    other = tmp_path / "other.key"
    assert main(["keygen", "--out", str(other)]) == 0
    code, out = _verify(capsys, str(release.record), "--key", str(tmp_path / "other.key.pub"))
    assert code == 1 and "V042" in out
    # a private key, a missing file or garbage is not a public key
    for bad in (release.key, tmp_path / "missing.pub", release.record):
        code, out = _verify(capsys, str(release.record), "--key", str(bad))
        assert code == 1 and "V043" in out and "Traceback" not in out


def test_private_key_readable_by_others_is_refused(release: Release, tmp_path: Path) -> None:
    key = tmp_path / "copy.key"
    shutil.copy(release.key, key)
    os.chmod(key, 0o644)
    with pytest.raises(SigningError, match="chmod 600"):
        sign_record(_unsigned(release.load()), key)
    os.chmod(key, 0o600)
    assert "signature" in sign_record(_unsigned(release.load()), key)


def test_compile_refuses_an_unusable_signing_key_before_reading_data(
    release: Release, tmp_path: Path, capsys
) -> None:
    spec = tmp_path / "release.yaml"
    text = (release.folder / "release.yaml").read_text(encoding="utf-8")
    spec.write_text(text.replace("train.csv", str(release.folder / "train.csv")), encoding="utf-8")
    loose = tmp_path / "loose.key"
    shutil.copy(release.key, loose)
    os.chmod(loose, 0o644)
    for key in (tmp_path / "missing.key", loose, release.public_key):
        capsys.readouterr()
        assert main(["compile", str(spec), "--quiet", "--sign-key", str(key)]) == 1
        assert "V045" in capsys.readouterr().err
        assert not (tmp_path / "out").exists()


def _mutations(raw: bytes) -> list[tuple[int, bytes]]:
    """Single-byte changes spread over the file, plus ones aimed at numbers, strings and
    whitespace."""
    text = raw.decode("utf-8")
    out = [(i, b"x" if raw[i : i + 1] != b"x" else b"y") for i in range(0, len(raw), 211)]
    for pattern in (r'"epsilon": (\d)', r'"rho": 0\.0(\d)', r'"count": (\d)', r'"rows": (\d)'):
        m = re.search(pattern, text)
        assert m is not None, pattern
        digit = m.group(1)
        out.append((m.start(1), b"7" if digit != "7" else b"8"))
    m = re.search(r'"label": "(r)ound', text)
    assert m is not None
    out.append((m.start(1), b"R"))
    newline = text.index("\n")
    out += [(newline + 1, b"\t"), (newline, b" "), (len(raw) - 1, b" ")]
    return out


def test_any_changed_byte_fails_verify_with_the_key(release: Release, tmp_path: Path) -> None:
    raw = release.record.read_bytes()
    target = tmp_path / "changed.json"
    mutations = _mutations(raw)
    assert len(mutations) > 100
    for i, byte in mutations:
        changed = raw[:i] + byte + raw[i + 1 :]
        assert changed != raw
        target.write_bytes(changed)
        result = verify_release(target, None, release.public_key)
        assert result.problems, f"byte {i} changed to {byte!r} still verifies"
    target.write_bytes(raw)
    assert verify_release(target, None, release.public_key).problems == []


# ---------------------------------------------------------------------------------------------
# tampered records: each fails, naming what does not match


def _recomputed(record: dict, keep: int) -> dict:
    """Only the first ``keep`` events, with spent, rho and the RDP curve recomputed to match."""
    r = copy.deepcopy(record)
    events = r["privacy"]["events"][:keep]
    r["privacy"]["events"] = events
    delta = r["privacy"]["spent"]["delta"]
    accounted = epsilon_from_events([PrivacyEvent.from_json(e) for e in events], delta)
    r["privacy"]["spent"].update(epsilon=accounted.epsilon, rho=accounted.rho)
    r["privacy"]["rdp"] = accounted.curve
    return r


def _set(path: tuple, value):
    def edit(r: dict) -> dict:
        r = copy.deepcopy(r)
        node = r
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        return r

    return edit


TAMPERINGS = {
    "budget epsilon NaN": (
        _set(("privacy", "budget", "epsilon"), float("nan")),
        "V004",
        "privacy/budget/epsilon",
    ),
    "budget epsilon 100": (
        _set(("privacy", "budget", "epsilon"), 100.0),
        "V015",
        "privacy.budget.epsilon is 100",
    ),
    "plan_sha256 zeroed": (_set(("plan_sha256",), "0" * 64), "V022", "plan_sha256 is 0000"),
    "events deleted, spent recomputed": (lambda r: _recomputed(r, 3), "V017", "missing: a"),
    "one event's noise scale": (
        _set(("privacy", "events", -1, "noise_scale"), 1.0),
        "V002",
        "recorded rho",
    ),
    "one event's rho and noise": (
        lambda r: _scaled_event(r, -2, 4.0),
        "V016",
        "rho",
    ),
}


def _scaled_event(record: dict, index: int, factor: float) -> dict:
    """Event ``index`` with its noise divided by ``factor`` and rho to match (a cheaper-looking
    release of the same sensitivity)."""
    r = copy.deepcopy(record)
    e = r["privacy"]["events"][index]
    e["noise_scale"] /= factor
    e["rho"] = (e["l2_sensitivity"] / e["noise_scale"]) ** 2 / 2
    return r


@pytest.mark.parametrize("name", sorted(TAMPERINGS))
def test_tampered_record_fails_naming_the_mismatch(
    release: Release, tmp_path: Path, capsys, name: str
) -> None:
    edit, code, text = TAMPERINGS[name]
    record = edit(_unsigned(release.load()))
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(record, indent=2), encoding="utf-8")  # NaN is written as NaN
    rc, out = _verify(capsys, str(path))
    assert rc == 1, out
    assert code in out and text in out, out
    assert " ok (" not in out and "Traceback" not in out


def test_deleted_events_name_each_missing_planned_event(
    release: Release, tmp_path: Path, capsys
) -> None:
    record = _recomputed(_unsigned(release.load()), 3)
    rc, out = _verify(capsys, str(_write(tmp_path / "r.json", record)))
    assert rc == 1
    line = next(x for x in out.splitlines() if "V017" in x)
    assert "phase iproj.measure" in line and "phase accept.test" in line
    assert "V010" not in out  # the accounting itself was made consistent: only the plan catches it


# ---------------------------------------------------------------------------------------------
# hostile input: exit 1, never a traceback


def _text_cases(record: dict) -> dict[str, str]:
    text = json.dumps(record, indent=2)
    at = text.index('"count": ', text.index('"gumbel_top_k"'))
    end = text.index(",", at)
    return {
        "gumbel count 1e400": text[:at] + '"count": 1e400' + text[end:],
        "integer of 5,001 digits": text.replace('"rows": 2000', '"rows": ' + "9" * 5001, 1),
        "float overflow in the spec": text.replace('"max": 90.0', '"max": 1e400', 1),
        "deeply nested": _nested(text, 100_000),
        "nested 200 levels": _nested(text, 200),
        "not JSON": text[: len(text) // 2],
    }


def _nested(text: str, depth: int) -> str:
    """The record with a list nested ``depth`` deep in its (open) synthesizer section."""
    deep = "[" * depth + "]" * depth
    return text.replace('"synthesizer": {', '"synthesizer": {"x": ' + deep + ",", 1)


CRASHES = {
    "gumbel count 1e400": "V004",
    "integer of 5,001 digits": "V004",
    "float overflow in the spec": "V004",
    "deeply nested": "V000",
    "nested 200 levels": "V004",
    "not JSON": "V000",
    "gaussian event without its sensitivity": "V002",
    "spent.delta 0": "V004",
    "spent.delta subnormal": "V004",
    "non-UTF-8": "V000",
    "missing table": "V031",
    "table is a directory": "V031",
    "missing record": "V000",
    "record is a directory": "V000",
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_hostile_input_fails_cleanly(release: Release, tmp_path: Path, capsys, name: str) -> None:
    record = _unsigned(release.load())
    path = tmp_path / "hostile.json"
    args: list[str] = []
    texts = _text_cases(record)
    if name in texts:
        path.write_text(texts[name], encoding="utf-8")
    elif name == "gaussian event without its sensitivity":
        record["privacy"]["events"][0].pop("l2_sensitivity")
        _write(path, record)
    elif name.startswith("spent.delta"):
        record["privacy"]["spent"]["delta"] = 0.0 if name.endswith("0") else 5e-324
        _write(path, record)
    elif name == "non-UTF-8":
        path.write_bytes(release.record.read_bytes().replace(b'"adult-public"', b'"adult-\xff"'))
    elif name == "missing table":
        path, args = release.record, ["--synthetic", str(tmp_path / "nope.csv")]
    elif name == "table is a directory":
        path, args = release.record, ["--synthetic", str(tmp_path)]
    elif name == "missing record":
        path = tmp_path / "nope.json"
    elif name == "record is a directory":
        path = tmp_path
    rc, out = _verify(capsys, str(path), *args)
    assert rc == 1, out
    assert CRASHES[name] in out, out
    assert "internal error" not in out and "Traceback" not in out
    assert len(out) < 5000  # one screen, whatever the input
    # the Python API reports the same problems instead of raising
    assert any(CRASHES[name] in p for p in dpql.verify(path, synthetic=_synthetic(args)))


def _synthetic(args: list[str]) -> str | None:
    return args[1] if args else None


# ---------------------------------------------------------------------------------------------
# fields an unsigned verify covers


@pytest.fixture(scope="module")
def aim_record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small release with AIM (two rounds of two picks) instead of RAP++, unsigned."""
    folder = tmp_path_factory.mktemp("aim")
    spec = write_small_release(folder, rows=2000)
    text = re.sub(
        r"  options: \{rounds: 2.*\}\n",
        "  options: {rounds: 2, per_round: 2, iters: 20, final_iters: 20}\n",
        spec.read_text(encoding="utf-8").replace("method: rap", "method: aim"),
    )
    assert "method: aim" in text and "per_round" in text
    spec.write_text(text, encoding="utf-8")
    assert main(["compile", str(spec), "--seed", "0", "--quiet"]) == 0
    return folder / "out" / "adult_synthetic.provenance.json"


def _count_tampering_escapes(record: dict, tmp_path: Path) -> list[str]:
    """Each Gaussian event's count moved by +1 and -1 in turn: the changes verify lets pass."""
    escapes = []
    for i, event in enumerate(record["privacy"]["events"]):
        if event["mechanism"] != "gaussian":
            continue
        for step in (1, -1):
            if event["count"] + step < 1:
                continue
            tampered = copy.deepcopy(record)
            tampered["privacy"]["events"][i]["count"] += step
            problems = dpql.verify(_write(tmp_path / f"count{i}{step}.json", tampered))
            want = f"count {event['count'] + step:,}, "
            if not any("V016" in p and want in p for p in problems):
                escapes.append(f"event {i} ({event['phase']}) count {step:+d}: {problems}")
    return escapes


def test_every_gaussian_count_is_checked_exactly_without_a_key(
    release: Release, aim_record: Path, tmp_path: Path
) -> None:
    """RAP++ and AIM: the untouched record verifies; a count one off, in any Gaussian event
    (adaptive rounds included, whose queries the record lists), does not."""
    for name, record in (("rap", _unsigned(release.load())), ("aim", json.loads(
        aim_record.read_text(encoding="utf-8")))):  # fmt: skip
        assert dpql.verify(_write(tmp_path / f"{name}.json", record)) == [], name
        phases = {e["phase"] for e in record["privacy"]["events"] if e["mechanism"] == "gaussian"}
        assert any(p.startswith(("rap.measure", "aim.round")) for p in phases), phases
        (tmp_path / name).mkdir()
        assert _count_tampering_escapes(record, tmp_path / name) == [], name


def test_adaptive_measurements_must_list_their_queries(
    release: Release, aim_record: Path, tmp_path: Path
) -> None:
    """Deleting or changing the selections a record lists fails: the counts follow from them."""
    rap = _unsigned(release.load())
    aim = json.loads(aim_record.read_text(encoding="utf-8"))
    assert rap["synthesizer"]["round_queries"] and aim["synthesizer"]["selected"]
    for name, record, key in (("rap", rap, "round_queries"), ("aim", aim, "selected")):
        gone = copy.deepcopy(record)
        del gone["synthesizer"][key]
        problems = dpql.verify(_write(tmp_path / f"{name}-gone.json", gone))
        assert any("V016" in p and f"synthesizer.{key}" in p for p in problems), problems
    fewer = copy.deepcopy(rap)
    fewer["synthesizer"]["round_queries"][0].pop()
    problems = dpql.verify(_write(tmp_path / "rap-fewer.json", fewer))
    assert any("V016" in p and "its listed queries' " in p for p in problems), problems
    beyond = copy.deepcopy(rap)
    beyond["synthesizer"]["round_queries"][0][0] = 10**6
    problems = dpql.verify(_write(tmp_path / "rap-beyond.json", beyond))
    assert any("V016" in p and "not among the plan's candidates" in p for p in problems), problems


def test_merged_cells_count_only_as_the_record_states_them(aim_record: Path, tmp_path: Path) -> None:
    """An AIM release that merged rare cells measured fewer values than the full cells of its
    picks: the record's ``merged_rare_cells`` accounts for them; changed or removed, the
    measured counts no longer match and verify fails."""
    aim = json.loads(aim_record.read_text(encoding="utf-8"))
    merged = aim["synthesizer"]["merged_rare_cells"]
    assert merged, "the fixture's release merged no rare cells"
    column = next(iter(merged))
    for name, value in (("gone", None), ("more", merged[column] + 1), ("text", "3")):
        tampered = copy.deepcopy(aim)
        if value is None:
            del tampered["synthesizer"]["merged_rare_cells"]
        else:
            tampered["synthesizer"]["merged_rare_cells"][column] = value
        problems = dpql.verify(_write(tmp_path / f"merged-{name}.json", tampered))
        assert any("V016" in p and "its listed queries" in p for p in problems), (name, problems)


@pytest.mark.parametrize("count", [2**63 - 1, 10**12])
def test_a_gaussian_event_count_beyond_the_plan_fails_without_a_key(
    release: Release, tmp_path: Path, capsys, count: int
) -> None:
    record = _unsigned(release.load())
    events = record["privacy"]["events"]
    i = next(k for k, e in enumerate(events) if e["mechanism"] == "gaussian")
    events[i]["count"] = count
    code, out = _verify(capsys, str(_write(tmp_path / "count.json", record)))
    assert code == 1 and "V016" in out and f"count {count:,}" in out, out


def test_a_record_with_a_key_twice_fails(release: Release, tmp_path: Path, capsys) -> None:
    """Python keeps the last value, other parsers the first: such a record is refused."""
    text = json.dumps(_unsigned(release.load()), indent=2)
    i = text.index('"epsilon"')
    path = tmp_path / "twice.json"
    path.write_text(text[:i] + '"epsilon": 1e-9, ' + text[i:], encoding="utf-8")
    code, out = _verify(capsys, str(path))
    assert code == 1 and "V000" in out and "'epsilon' twice" in out
