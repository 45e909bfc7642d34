"""The code states reasons, not history: no comment or string in ``dpql/`` points at issue or
session numbers, at benchmark RESULTS files, or at reading notes ("digests", their "pitfalls")
the repository does not ship, and every markdown file it names exists in the repository.

Such pointers rot: the reader cannot follow them, and the reason they stand for belongs in the
text (papers are cited by author, year, section and equation; measured figures live in
``benchmarks/`` and commit messages).
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dpql"

FORBIDDEN = {
    "an issue number": re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE),
    "a session number": re.compile(r"\bsessions?\s*#?\d+", re.IGNORECASE),
    "a RESULTS file": re.compile(r"\bRESULTS\b"),
    "a pitfall of the reading notes": re.compile(r"\bpitfalls?\b", re.IGNORECASE),
    "the reading notes": re.compile(
        r"\bdigest\s+(?:[`'\"]+[\w./]+\.md|§|pitfall|sec\.?\s*\d)"
        r"|\b(?:rap_pp|dp_auto_gan|postprocessing|excess_risk)\.md\b",
        re.IGNORECASE,
    ),
}
MARKDOWN = re.compile(r"(?<![\w/.-])([\w./-]+\.md)\b")


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".lark"))


def _prose(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of the comments and string literals of a module (docstrings,
    messages), or of every line of a non-Python file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [
        (t.start[0], " ".join(t.string.split()))  # joined: a reference may wrap across lines
        for t in tokens
        if t.type in (tokenize.COMMENT, tokenize.STRING)
    ]


def _exists(name: str) -> bool:
    """A markdown file named relative to the repository root, or by a name found in it."""
    if (ROOT / name).is_file():
        return True
    return any(p.is_file() for p in ROOT.glob(f"**/{Path(name).name}") if ".git" not in p.parts)


def test_the_check_covers_the_package() -> None:
    sources = _sources()
    assert len(sources) > 50 and PACKAGE / "privacy" / "mechanisms.py" in sources
    assert FORBIDDEN["an issue number"].search("fixed in issue 16")
    assert FORBIDDEN["the reading notes"].search("see digest `rap_pp.md` §4.2")
    assert not FORBIDDEN["the reading notes"].search("the file's SHA-256 digest, as hex")


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_comments_and_docstrings_carry_no_history(path: Path) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}: ...{text[max(0, m.start() - 60) : m.end() + 60]}..."
        for line, text in _prose(path)
        for what, pattern in FORBIDDEN.items()
        for m in pattern.finditer(text)
    ]
    found += [
        f"{path.relative_to(ROOT)}:{line}: names {name}, which the repository lacks"
        for line, text in _prose(path)
        for name in MARKDOWN.findall(text)
        if not _exists(name)
    ]
    assert not found, "\n".join(found)
