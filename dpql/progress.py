"""Progress reporting shared by the commands (``update(phase, step, total)`` callbacks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def progress_bars(
    console: Any,
) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """Progress bars per phase on ``console`` (stderr): ``update(phase, step, total)`` and
    ``stop()``."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    tasks: dict[str, Any] = {}
    bar.start()

    def update(phase: str, step: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(phase, total=total)
        bar.update(tasks[phase], completed=step, total=total)

    return update, bar.stop
