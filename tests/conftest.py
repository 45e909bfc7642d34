"""Test configuration: hypothesis runs derandomized so CI is reproducible; ``perf`` tests
(timings, meaningful only on an idle machine) are skipped unless ``-m`` names them."""

from __future__ import annotations

import pytest
from hypothesis import settings

settings.register_profile("dpql", derandomize=True, print_blob=True)
settings.load_profile("dpql")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "perf" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="a timing test: run it on an idle machine with -m perf")
    for item in items:
        if "perf" in item.keywords:
            item.add_marker(skip)
