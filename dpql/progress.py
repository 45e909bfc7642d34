"""Progress reporting shared by the commands (``update(phase, step, total)`` callbacks)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

#: ``progress(phase, step, total)``: a long stage reports ``step`` of ``total`` in ``phase``
Progress = Callable[[str, int, int], None]


def progress_bars(
    console: Any, timings: bool = True
) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """Progress bars per phase on ``console`` (stderr): ``update(phase, step, total)`` and
    ``stop()``; each bar shows its elapsed time only with ``timings``."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns: list[Any] = [
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
    ]
    if timings:
        columns.append(TimeElapsedColumn())
    bar = Progress(*columns, console=console, transient=False)
    tasks: dict[str, Any] = {}
    bar.start()

    def update(phase: str, step: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(phase, total=total)
        bar.update(tasks[phase], completed=step, total=total)

    return update, bar.stop


def plain_progress(
    prefix: str, stream: TextIO | None = None, every: float = 5.0, timings: bool = True
) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """Progress as plain lines, for a stderr that is not a terminal (logs, CI), e.g.
    ``compile: rap.rounds 12/30`` (with ``timings``: ``compile: rap.rounds 12/30, 2.1 s, about
    3.2 s left``): a line when a phase starts, at most one every ``every`` seconds while it
    runs, and one when it ends. Each line is printed whole (never wrapped). Phases run one after
    another: a phase's clock starts at the previous update of any phase. Returns
    ``update(phase, step, total)`` and ``stop()``."""
    start: dict[str, float] = {}
    last: dict[str, float] = {}
    ended: set[str] = set()
    previous = [time.perf_counter()]

    def update(phase: str, done: int, total: int) -> None:
        now = time.perf_counter()
        begin = phase not in start
        start.setdefault(phase, previous[0])
        previous[0] = now
        finished = done >= total
        if phase in ended or not (begin or finished or now - last[phase] >= every):
            return
        last[phase] = now
        elapsed = now - start[phase]
        line = f"{prefix}: {phase} {done}/{total}"
        if timings:
            line += f", {elapsed:.1f} s"
        if timings and 0 < done < total:
            line += f", about {elapsed / done * (total - done):.1f} s left"
        if finished:
            ended.add(phase)
        print(line, file=stream or sys.stderr, flush=True)

    return update, lambda: None
