"""The malformed-spec corpus: every file in tests/specs/ names the diagnostics it must raise.

Each file starts with ``# expect: CODE LINE:COL[, CODE LINE:COL ...]``; loading it must raise
exactly those errors (warnings aside), each at that position. Files are small edits of one
valid spec, so each isolates one mistake. DSL cases can be added in the same format.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpql.diagnostics import DiagnosticError, render
from dpql.diagnostics_registry import lookup
from dpql.spec import load_spec
from dpql.spec.codes import CODES

CORPUS = Path(__file__).parent / "specs"
FILES = sorted(CORPUS.glob("*.release.yaml"))
_EXPECT = re.compile(r"^# expect: (.+)$")


def _expected(path: Path) -> set[tuple[str, int, int]]:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    m = _EXPECT.match(first)
    assert m, f"{path.name}: first line must be '# expect: CODE LINE:COL, ...'"
    out = set()
    for item in m.group(1).split(","):
        code, where = item.split()
        line, col = where.split(":")
        out.add((code, int(line), int(col)))
    return out


def test_corpus_is_large_and_covers_the_error_codes() -> None:
    assert len(FILES) >= 25
    seen = {code for f in FILES for code, _, _ in _expected(f)}
    # E031/E032: dpql init's own (its output file, its codebook), never a spec's
    spec_errors = {
        c
        for c in CODES
        if c[0] == "E" and c not in ("E005", "E020", "E031", "E032") and not lookup(c).reserved
    }
    assert spec_errors <= seen, f"codes without a corpus case: {sorted(spec_errors - seen)}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.removesuffix(".release.yaml"))
def test_malformed_spec_reports_expected_code_at_expected_position(path: Path) -> None:
    with pytest.raises(DiagnosticError) as info:
        load_spec(path)
    errors = [d for d in info.value.diagnostics if d.severity == "error"]
    got = {(d.code, d.pos.line, d.pos.col) for d in errors if d.pos is not None}
    rendered = "\n".join(render(d) for d in errors)
    assert got == _expected(path), rendered
    for d in errors:
        assert d.code in CODES
        assert d.pos is not None and d.pos.file == str(path)
        assert d.message and "\n" not in d.message
