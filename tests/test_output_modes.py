"""File modes: published outputs are readable by others (0666 less the umask, 0644 usually);
curator-only files stay 0600.

``mkstemp`` (behind every atomic write) creates files 0600, which is right for the curator-only
file and the evaluate report but wrong for the synthetic table and the provenance record, which
are written to be published.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from dpql.io import public_mode, write_json
from dpql.pipeline import write_table


@pytest.fixture(params=[0o022, 0o002, 0o077], ids=lambda m: f"umask{m:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_published_outputs_follow_the_umask(tmp_path: Path, umask: int) -> None:
    df = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    table, parquet, record = tmp_path / "t.csv", tmp_path / "t.parquet", tmp_path / "r.json"
    write_table(df, table)
    write_table(df, parquet)
    write_json({"x": 1}, record)
    assert public_mode() == 0o666 & ~umask
    assert [mode(p) for p in (table, parquet, record)] == [0o666 & ~umask] * 3
    if umask == 0o022:
        assert mode(table) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.csv", "t.parquet"]


def test_overwriting_a_0600_output_makes_it_public(tmp_path: Path, umask: int) -> None:
    """An output left 0600 by an earlier dpql is replaced by a publishable one."""
    table = tmp_path / "t.csv"
    table.write_text("old\n")
    table.chmod(0o600)
    write_table(pd.DataFrame({"a": [1]}), table)
    assert mode(table) == 0o666 & ~umask and table.read_text() == "a\n1\n"


def test_curator_only_files_stay_private(tmp_path: Path, umask: int) -> None:
    from dpql.evaluate.render import _atomic_write
    from dpql.release.curator import write_curator_json

    curator = tmp_path / "curator" / "t.CURATOR-ONLY.json"
    write_curator_json({"rows": 3}, curator)
    assert mode(curator) == 0o600
    report = tmp_path / "summary.json"
    _atomic_write(report, b"{}")
    assert mode(report) == 0o600
