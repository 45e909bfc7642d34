"""No timings in the public record, a fail-closed odometer, and a curator file
kept apart from the published outputs with a keyed HMAC instead of the data file's SHA-256."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import stat
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from releases import write_small_release

from dpql.cli import main
from dpql.diagnostics import DiagnosticError
from dpql.plan.planner import Budget
from dpql.privacy.accountant import eps_from_rho, rho_from_eps_delta
from dpql.privacy.budget import BudgetExceeded, split_rho
from dpql.privacy.ledger import EPSILON_RTOL, Ledger, PrivacyEvent
from dpql.privacy.mechanisms import gumbel_top_k
from dpql.release.curator import (
    CURATOR_KEY_ENV,
    KEY_FILE_NAME,
    curator_key,
    curator_path,
    curator_record,
    file_hmac,
    write_curator_json,
)
from dpql.release.provenance import record_schema, verify_record
from dpql.spec.load import load_spec, normalised_spec_json

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adult"
DELTA = 1e-9


def _nothing_written(spec: Path) -> bool:
    out, curator = spec.parent / "out", spec.parent / "curator"
    empty = [not p.exists() or not any(p.iterdir()) for p in (out, curator)]
    return all(empty) and not (spec.parent / "ledger.jsonl").exists()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One successful compile (default curator path, key file created on first use)."""
    folder = tmp_path_factory.mktemp("hygiene")
    spec = write_small_release(folder)
    saved = os.environ.pop(CURATOR_KEY_ENV, None)
    try:
        assert main(["compile", str(spec), "--seed", "2", "--quiet"]) == 0
    finally:
        if saved is not None:
            os.environ[CURATOR_KEY_ENV] = saved
    return spec


# ---------------------------------------------------------------------------------------------
# 1. timings: curator file only


@pytest.mark.e2e
def test_the_public_record_holds_no_timings(compiled: Path) -> None:
    out = compiled.parent / "out"
    record = json.loads((out / "adult_synthetic.provenance.json").read_text())
    assert "timings_s" not in record and "timings" not in json.dumps(record)
    assert "timings_s" not in record_schema()["properties"]
    assert verify_record(record, out / "adult_synthetic.csv") == []
    # the schema is closed: a record that carries timings does not verify
    leaky = {**record, "timings_s": {"load": 0.16}}
    assert {p.code for p in verify_record(leaky)} == {"V003"}
    curator = json.loads(
        (compiled.parent / "curator" / "adult_synthetic.CURATOR-ONLY.json").read_text()
    )
    assert {"plan", "load", "synthesize", "postprocess"} <= set(curator["timings_s"])


# ---------------------------------------------------------------------------------------------
# 3. the curator file: its own place, mode 0600, a keyed HMAC instead of the raw SHA-256


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.e2e
def test_curator_file_is_apart_private_and_holds_a_keyed_hmac(compiled: Path) -> None:
    folder = compiled.parent / "curator"
    path = folder / "adult_synthetic.CURATOR-ONLY.json"
    key_file = folder / KEY_FILE_NAME
    assert sorted(p.name for p in folder.iterdir()) == sorted([path.name, KEY_FILE_NAME])
    assert not list((compiled.parent / "out").glob("*curator*"))
    assert _mode(path) == 0o600 and _mode(key_file) == 0o600
    key = bytes.fromhex(key_file.read_text().strip())
    assert len(key) == 32

    text = path.read_text()
    data = json.loads(text)
    raw = hashlib.sha256((compiled.parent / "train.csv").read_bytes()).hexdigest()
    assert raw not in text and "sha256" not in data  # no confirmation oracle
    assert data["curator_only"] is True and data["rows_read"] == 3000
    assert data["data_hmac_sha256"] == file_hmac(compiled.parent / "train.csv", key)
    assert data["data_hmac_sha256"] == hmac.new(key, bytes.fromhex(raw), "sha256").hexdigest()
    assert KEY_FILE_NAME in data["data_hmac"] and key.hex() not in text


def _spec_with_output(tmp_path: Path, extra: str) -> Path:
    spec = write_small_release(tmp_path)
    text = spec.read_text()
    text = re.sub(r"(\noutput:\n(?:  .*\n)+)", lambda m: m.group(1) + extra, text)
    spec.write_text(text)
    return spec


def test_curator_path_is_configurable_and_not_published(tmp_path: Path) -> None:
    default = load_spec(write_small_release(tmp_path))
    assert curator_path(default) == tmp_path / "curator" / "adult_synthetic.CURATOR-ONLY.json"
    assert default.model.output.curator is None

    spec = load_spec(_spec_with_output(tmp_path, "  curator: ../secure/adult.json\n"))
    assert curator_path(spec) == (tmp_path.parent / "secure" / "adult.json").resolve()
    # where the curator keeps its file is not part of the published (normalised) spec
    assert "curator" not in json.loads(normalised_spec_json(spec.model))["output"]
    assert normalised_spec_json(spec.model) == normalised_spec_json(default.model)

    clash = load_spec(_spec_with_output(tmp_path, "  curator: out/adult_synthetic.csv\n"))
    with pytest.raises(DiagnosticError) as err:
        curator_path(clash)
    assert err.value.codes == ["E612"]


def test_curator_key_file_is_created_once_and_must_stay_private(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(CURATOR_KEY_ENV, raising=False)
    folder = tmp_path / "curator"
    key, source = curator_key(folder)
    assert len(key) == 32 and source == str(folder / KEY_FILE_NAME)
    assert _mode(folder / KEY_FILE_NAME) == 0o600 and _mode(folder) == 0o700
    assert curator_key(folder) == (key, source)  # reused: fingerprints of releases agree
    (folder / KEY_FILE_NAME).chmod(0o644)
    with pytest.raises(DiagnosticError) as err:
        curator_key(folder)
    assert err.value.codes == ["E612"]


def test_curator_key_from_the_environment(tmp_path, monkeypatch) -> None:
    secret = bytes(range(32))
    monkeypatch.setenv(CURATOR_KEY_ENV, secret.hex())
    assert curator_key(tmp_path / "c") == (secret, f"${CURATOR_KEY_ENV}")
    assert not (tmp_path / "c" / KEY_FILE_NAME).exists()
    monkeypatch.setenv(CURATOR_KEY_ENV, "abc")  # too short
    with pytest.raises(DiagnosticError) as err:
        curator_key(tmp_path / "c")
    assert err.value.codes == ["E612"]


def test_curator_record_drops_the_raw_hash_and_is_written_0600(tmp_path: Path) -> None:
    raw = hashlib.sha256(b"private rows").hexdigest()
    summary = {"curator_only": True, "sha256": raw, "rows_read": 7}
    rec = curator_record(summary, {"load": 0.1234}, b"k" * 32, "$X")
    assert "sha256" not in rec and raw not in json.dumps(rec)
    assert rec["timings_s"] == {"load": 0.123} and rec["rows_read"] == 7
    target = tmp_path / "c" / "x.CURATOR-ONLY.json"
    old = os.umask(0)
    try:
        write_curator_json(rec, target)
    finally:
        os.umask(old)
    assert _mode(target) == 0o600 and json.loads(target.read_text()) == rec
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temp file left


# ---------------------------------------------------------------------------------------------
# 2. the odometer


def _gaussian(rho: float, label: str = "q") -> PrivacyEvent:
    sigma = 1.0 / math.sqrt(2 * rho)
    return PrivacyEvent("p", "gaussian", label, l2_sensitivity=1.0, noise_scale=sigma, rho=rho)


def _odometer(epsilon: float = 1.0, delta: float = DELTA) -> Ledger:
    return Ledger.for_budget(epsilon=epsilon, delta=delta, rho=rho_from_eps_delta(epsilon, delta))


def test_the_planned_budget_fits_and_one_more_event_is_refused() -> None:
    ledger = _odometer()
    parts = split_rho(ledger.rho_budget, {f"phase{i}": Fraction(1, 3) for i in range(3)})
    for name, rho in parts.items():
        ledger.append(_gaussian(rho, name))
    assert ledger.epsilon(DELTA) <= 1.0 * (1 + EPSILON_RTOL)
    with pytest.raises(BudgetExceeded):
        ledger.append(_gaussian(1e-6, "one more"))
    assert len(ledger) == 3


def test_the_epsilon_cap_binds_even_when_the_rho_cap_would_not() -> None:
    # an inconsistent (too generous) rho budget cannot let the release exceed its epsilon
    ledger = Ledger(rho_budget=10.0, epsilon_budget=1.0, delta=DELTA)
    ledger.append(_gaussian(rho_from_eps_delta(0.9, DELTA)))
    with pytest.raises(BudgetExceeded, match=r"epsilon=.*over the budget epsilon=1") as err:
        ledger.append(_gaussian(rho_from_eps_delta(0.9, DELTA), "greedy"))
    assert err.value.unit == "epsilon" and err.value.what == "greedy"
    assert err.value.requested > 0 and 0 < err.value.remaining < 0.11
    assert len(ledger) == 1


def test_dpsgd_events_compose_through_the_accountant() -> None:
    sgd = PrivacyEvent.dpsgd(
        "gan.critic", "critic", sampling_rate=0.01, noise_multiplier=2.0, steps=500
    )
    fits = _gaussian(rho_from_eps_delta(0.6, DELTA), "fits")
    budget = Ledger([sgd, fits]).epsilon(DELTA)  # the accountant's RDP composition
    assert Ledger([sgd]).epsilon(DELTA) < budget < 2.0
    ledger = Ledger(rho_budget=1.0, epsilon_budget=budget, delta=DELTA)
    ledger.append(sgd)
    # within the rho cap and, alone, well within the epsilon budget, but not composed with DP-SGD
    big = _gaussian(rho_from_eps_delta(1.0, DELTA), "big")
    assert big.rho < 1.0 and eps_from_rho(big.rho, DELTA) < budget
    with pytest.raises(BudgetExceeded, match="over the budget"):
        ledger.append(big)
    ledger.append(fits)  # exactly the budget
    assert len(ledger) == 2
    # the composed check also guards DP-SGD appended after zCDP events
    late = Ledger(epsilon_budget=budget, delta=DELTA)
    late.append(big)
    with pytest.raises(BudgetExceeded):
        late.append(sgd)


def _external(epsilon: float, delta: float) -> PrivacyEvent:
    try:
        return PrivacyEvent.external(
            "external", "table", epsilon=epsilon, delta=delta, neighbouring="replace_one"
        )
    except TypeError:  # before external events carried their neighbouring relation
        return PrivacyEvent.external("external", "table", epsilon=epsilon, delta=delta)


def test_external_events_count_against_the_epsilon_and_delta() -> None:
    ledger = Ledger.for_budget(epsilon=2.0, delta=DELTA, rho=rho_from_eps_delta(1.5, DELTA / 2))
    ledger.append(_external(0.5, DELTA / 2))
    ledger.append(_gaussian(ledger.rho_budget))  # exactly what the external table leaves
    with pytest.raises(BudgetExceeded):
        ledger.append(_external(0.01, 0.0))
    with pytest.raises(BudgetExceeded, match="delta used up"):
        Ledger(epsilon_budget=5.0, delta=DELTA).append(_external(0.1, DELTA))


def test_the_budget_survives_json_and_a_restored_ledger_is_still_an_odometer() -> None:
    ledger = _odometer()
    ledger.append(_gaussian(ledger.rho_budget / 2))
    data = json.loads(json.dumps(ledger.to_json()))
    restored = Ledger.from_json(data)
    assert (restored.epsilon_budget, restored.delta, restored.rho_budget) == (
        1.0,
        DELTA,
        ledger.rho_budget,
    )
    with pytest.raises(BudgetExceeded):
        restored.append(_gaussian(ledger.rho_budget))
    data["events"].append(_gaussian(ledger.rho_budget).to_json())
    with pytest.raises(BudgetExceeded):
        Ledger.from_json(data)
    with pytest.raises(ValueError, match="needs its delta"):
        Ledger(epsilon_budget=1.0)


class _Spy:
    """A noise source that records every draw."""

    reproducible = True

    def __init__(self) -> None:
        self.draws: list[str] = []

    def __getattr__(self, name: str):
        def draw(*args, **kwargs):
            self.draws.append(name)
            return np.zeros(args[0] if args and isinstance(args[0], tuple) else 1)

        return draw


def test_a_refused_mechanism_draws_no_noise() -> None:
    ledger, spy = _odometer(epsilon=0.1), _Spy()
    with pytest.raises(BudgetExceeded):
        gumbel_top_k(
            np.arange(5.0),
            1e-3,
            1,
            10.0,
            noise=spy,
            ledger=ledger,
            phase="rap.select",
            label="too much",
        )  # type: ignore[arg-type]
    assert spy.draws == [] and len(ledger) == 0


# ---------------------------------------------------------------------------------------------
# 2. compile: an injected allocation bug is refused and nothing is written


@pytest.fixture()
def greedy_measurer(monkeypatch):
    """An allocation bug: every Gaussian measurement spends 1.3x the rho it was planned."""
    from dpql.data.measure import PrivateMeasurer

    honest = PrivateMeasurer.measure

    def greedy(self, queries, rho, *args, **kwargs):
        return honest(self, queries, 1.3 * rho, *args, **kwargs)

    monkeypatch.setattr(PrivateMeasurer, "measure", greedy)


def _compile_refused(spec: Path, capsys) -> str:
    capsys.readouterr()
    ledger = spec.parent / "ledger.jsonl"
    assert main(["compile", str(spec), "--seed", "1", "--quiet", "--ledger", str(ledger)]) == 1
    err = capsys.readouterr().err
    assert "error[E611]" in err and "privacy budget exceeded" in err
    assert "Traceback" not in err and "internal error" not in err
    assert _nothing_written(spec)
    return err


@pytest.mark.e2e
def test_compile_refuses_an_overspending_allocation_at_the_odometer(
    tmp_path, greedy_measurer, capsys
) -> None:
    err = _compile_refused(write_small_release(tmp_path), capsys)
    assert "privacy budget exceeded by '" in err  # refused by the ledger, at the event


@pytest.mark.e2e
def test_compile_rechecks_the_spend_before_writing(
    tmp_path, greedy_measurer, monkeypatch, capsys
) -> None:
    # with the odometer switched off, the final accountant check still refuses the release
    monkeypatch.setattr(Ledger, "append", lambda self, event: self._events.append(event))
    err = _compile_refused(write_small_release(tmp_path), capsys)
    assert "compose to epsilon=" in err


def test_check_spent_recomputes_from_the_events() -> None:
    from dpql.pipeline import check_spent

    rho = rho_from_eps_delta(1.0, DELTA)
    budget = Budget(epsilon=1.0, delta=DELTA, rho=rho)
    check_spent(Ledger([_gaussian(rho)]), budget)
    with pytest.raises(BudgetExceeded, match="compose to epsilon="):
        check_spent(Ledger([_gaussian(rho), _gaussian(rho / 10)]), budget)
    with pytest.raises(BudgetExceeded, match="rho="):  # epsilon fits, dpql's own rho does not
        check_spent(Ledger([_gaussian(rho)]), Budget(epsilon=2.0, delta=DELTA, rho=rho / 2))
