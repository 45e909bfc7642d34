"""Hang guards for tests that wait on a child process or on a long in-process call.

A guard turns a hang into a failure that names what hung. It is not a performance bound: the
limit is far above any run on a loaded machine, so a slow machine never trips it, and no test
asserts how long anything takes (work done is asserted instead: counts, memory, sizes).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

HANG_GUARD_S = 900


def _hung(what: str, seconds: int) -> str:
    return f"{what} did not finish within {seconds} s: it hangs (a hang guard, not a timing test)"


def wait_or_fail(proc: subprocess.Popen, what: str, seconds: int = HANG_GUARD_S) -> int:
    """``proc``'s exit status; a hung ``proc`` is killed and fails the test."""
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(_hung(what, seconds))


def run_or_fail(
    args: Sequence[str], what: str, seconds: int = HANG_GUARD_S, **kwargs: Any
) -> subprocess.CompletedProcess:
    """``subprocess.run(args, **kwargs)``; a hung child is killed and fails the test."""
    try:
        return subprocess.run(args, timeout=seconds, **kwargs)
    except subprocess.TimeoutExpired:
        pytest.fail(_hung(what, seconds))


@contextlib.contextmanager
def hang_guard(what: str, seconds: int = HANG_GUARD_S) -> Iterator[None]:
    """Fail the test if the block runs past ``seconds`` (SIGALRM: main thread, POSIX only).
    ``pytest.fail`` raises a BaseException, so a ``except Exception`` in the code under test
    cannot swallow it."""

    def _fail(signum: int, frame: object) -> None:
        pytest.fail(_hung(what, seconds))

    previous = signal.signal(signal.SIGALRM, _fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
