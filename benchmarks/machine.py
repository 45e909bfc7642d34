"""What every results file records about its run: when, which commit, on what machine, under
what load. Shared by the harnesses (each puts ``benchmarks/`` on ``sys.path`` to import it)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str | None:
    """The checkout's short commit, with a mark when ``dpql/`` has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "dpql"], cwd=ROOT, capture_output=True,
            text=True,
        ).stdout.strip()  # fmt: skip
    except OSError:
        return None
    return f"{head}{' + uncommitted changes under dpql/' if dirty else ''}" if head else None


def describe() -> dict[str, Any]:
    """The run's date, commit, machine and 1/5/15-minute load averages (at the call)."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "cpus": os.cpu_count(),
        "memory_gb": round(pages / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_avg": [round(x, 1) for x in os.getloadavg()],
    }


def write_results(path: Path, results: dict[str, Any]) -> None:
    """``results`` as indented JSON at ``path``, replacing the file whole (never half-written)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str) + "\n")
    tmp.replace(path)
