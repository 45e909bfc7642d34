"""Test configuration and shared fixtures.

Hypothesis runs derandomized so CI is reproducible; ``perf`` tests (timings, meaningful only on
an idle machine) are skipped unless ``-m`` names them. Shared fixtures: the ``real`` / ``syn``
tables of the iproj, requirements and accept tests, and the small Adult release
(``small_release``; ``releases.write_small_release`` writes it elsewhere) of the end-to-end
tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from releases import write_small_release
from test_iproj_support import make_table

from dpql.domain import EncodedTable

settings.register_profile("dpql", derandomize=True, print_blob=True)
settings.load_profile("dpql")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "perf" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="a timing test: run it on an idle machine with -m perf")
    for item in items:
        if "perf" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def real() -> EncodedTable:
    """The shared "real" table of the iproj / requirements / accept tests: 8,000 correlated
    mixed-type rows (``test_iproj_support.make_table``), read-only so no test can change it
    for the next."""
    return _read_only(make_table(8000, seed=1))


@pytest.fixture(scope="session")
def syn() -> EncodedTable:
    """The shared "synthetic" table: 4,000 rows of the same generator with its joint
    distribution shifted, so it differs from ``real`` the way a synthesizer's output does."""
    return _read_only(make_table(4000, seed=2, shift=0.5))


def _read_only(table: EncodedTable) -> EncodedTable:
    for column in (*table.codes.values(), *table.scaled.values()):
        column.flags.writeable = False
    return table


@pytest.fixture
def small_release(tmp_path: Path) -> Path:
    """The small Adult release (3,000 rows) written to ``tmp_path``."""
    return write_small_release(tmp_path)


@pytest.fixture
def seeded_dp_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """End-to-end compiles in this test draw their DP noise from the seeded testing source
    (``NoiseSource.for_testing(0)``), so a statistical assertion sees the same noise on every
    machine; such a release is not private and exists only inside the test."""
    import dpql.pipeline
    from dpql.privacy.noise import NoiseSource

    monkeypatch.setattr(dpql.pipeline, "default_noise", lambda: NoiseSource.for_testing(0))
