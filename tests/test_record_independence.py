"""No single record decides whether a release happens (design invariant 6).

Two neighbouring tables (replace-one: the same rows but one) compile to the same exit status and
the same diagnostic codes, whatever the odd row holds: an undeclared category, an empty cell, a
malformed row, a numeric cell of 4,400 digits (NaN once parsed), bytes that are not UTF-8. The
clean table releases. ``dpql validate`` is where the curator sees that row.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpql.cli import main

ROWS = 30
ODD_ROW = 7  # data row of the odd record
SECRET = "Zq9Secret"

SPEC = """\
dpql: 1
name: neighbours
data:
  path: data.csv
  rows: 30
  engine: {engine}
schema:
  age: {{type: numeric, min: 17, max: 90, integer: true, bins: 4}}
  country: {{type: categorical, values: [France, Peru]}}
privacy: {{epsilon: 1.0, delta: 1e-9}}
workload:
  - marginals(2)
synthesizer:
  method: rap
  rows: 30
  options: {{rounds: 1, relaxed_rows: 10, iterations: 5, warm_iterations: 5}}
output:
  path: out/synthetic.csv
  provenance: out/synthetic.provenance.json
"""

# the odd row of each neighbour (the clean table has "40,Peru" there)
ODD = {
    "undeclared category": f"40,{SECRET}Land".encode(),
    "empty cell": b"40,",
    "unparsable number": f"{SECRET},Peru".encode(),
    "NaN digits": b"9" * 4400 + b",Peru",
    "too few fields": b"40",
    "too many fields": f"40,Peru,{SECRET}".encode(),
    "not UTF-8": b"40,Per\xff",
}
MEMORY_VARIANTS = ["undeclared category", "empty cell", "too many fields", "not UTF-8"]
CODE = re.compile(r"\b(?:error|warning)\[([A-Z]\d{3})\]")


def _release(folder: Path, engine: str, odd: bytes) -> Path:
    folder.mkdir()
    lines = [b"age,country"]
    for row in range(1, ROWS + 1):
        lines.append(odd if row == ODD_ROW else f"{20 + row},France".encode())
    (folder / "data.csv").write_bytes(b"\n".join(lines) + b"\n")
    spec = folder / "release.yaml"
    spec.write_text(SPEC.format(engine=engine), encoding="utf-8")
    return spec


def _compile(spec: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    code = main(["compile", str(spec), "--seed", "0", "--quiet"])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text and "internal error" not in text, text
    return code, sorted(CODE.findall(text)), text


@pytest.mark.e2e
@pytest.mark.parametrize("engine", ["memory", "duckdb"])
def test_neighbouring_tables_compile_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    clean = _release(tmp_path / "clean", engine, b"40,Peru")
    code, codes, _ = _compile(clean, capsys)
    assert code == 0 and (tmp_path / "clean" / "out" / "synthetic.csv").exists()
    # each variant on one engine (tests/test_data_contract.py shows that the engines agree)
    kinds = MEMORY_VARIANTS if engine == "memory" else [k for k in ODD if k not in MEMORY_VARIANTS]
    odd = {k: ODD[k] for k in kinds}
    for i, (what, row) in enumerate(odd.items()):
        spec = _release(tmp_path / f"odd{i}", engine, row)
        got, got_codes, text = _compile(spec, capsys)
        assert (got, got_codes) == (code, codes), what
        assert SECRET not in text and f"row {ODD_ROW}" not in text, what
        assert (tmp_path / f"odd{i}" / "out" / "synthetic.csv").exists(), what


def test_validate_is_where_the_curator_sees_the_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _release(tmp_path / "d", "memory", ODD["undeclared category"])
    assert main(["validate", str(spec)]) == 1  # something needed a rule
    out = capsys.readouterr().out
    assert "CURATOR-ONLY" in out and f"rows {ODD_ROW} -> missing: keep" in out
    assert "country: 1 value(s) not among its declared values" in out and SECRET not in out
    assert main(["validate", str(spec), "--show-values"]) == 1
    assert f"'{SECRET}Land' (1 row(s), first at row {ODD_ROW})" in capsys.readouterr().out
    assert main(["validate", str(spec), "--format", "json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["curator_only"] and found["columns"]["country"]["unreadable"] == {
        "count": 1,
        "rows": [ODD_ROW],
    }
    assert main(["validate", str(spec), "--format", "json", "--show-values"]) == 1
    values = json.loads(capsys.readouterr().out)["columns"]["country"]["unreadable"]["values"]
    assert values == [{"value": f"{SECRET}Land", "rows": 1, "first_row": ODD_ROW}]


def test_validate_lists_malformed_rows_and_says_when_the_data_is_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _release(tmp_path / "bad", "memory", ODD["too many fields"])
    assert main(["validate", str(spec), "--format", "json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["malformed"] == {"count": 1, "rows": [ODD_ROW]} and SECRET not in str(found)
    spec = _release(tmp_path / "clean", "memory", b"40,Peru")
    assert main(["validate", str(spec)]) == 0
    assert "every cell is a declared value" in capsys.readouterr().out


def test_missing_error_is_a_located_spec_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _release(tmp_path / "d", "memory", b"40,Peru")
    text = spec.read_text().replace("Peru]}", "Peru], missing: error}")
    spec.write_text(text.replace("privacy:", "missing: error\nprivacy:"))
    assert main(["compile", str(spec), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:9:" in err and f"{spec}:10:" in err and err.count("error[E109]") == 2
    assert all(w in err for w in ("keep", "drop", "fill", "other", "dpql validate"))
    assert not (tmp_path / "d" / "out").exists()
