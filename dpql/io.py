"""Atomic file writes, the one helper every output of dpql goes through.

A file is written to a temp file beside its target and renamed over it only when complete, so a
reader (or a crash) sees either the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CURATOR_MODE = 0o600  # curator-only files: the owner alone may read them


def public_mode() -> int:
    """The mode of a file meant for publication: ``0666`` less the process umask (0644 under
    the usual umask 022), what ``open()`` would give a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_path(target: Path, mode: int | None = None, *, fsync: bool = False) -> Iterator[Path]:
    """Yield a temp path beside ``target``; rename it over ``target`` only on success, with
    ``mode`` (default :func:`public_mode`). ``fsync`` flushes the file to disk before the
    rename (for append-only records such as the lifetime ledger)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, public_mode() if mode is None else mode)
        if fsync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(obj: Any, path: Path, mode: int | None = None) -> None:
    """``obj`` as indented JSON, written atomically (mode as in :func:`atomic_path`)."""
    with atomic_path(path, mode) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


class UnreadableFile(Exception):
    """A file :func:`read_capped` would not read; the message says why, without its contents."""


def read_capped(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them. A missing file, a
    directory, a FIFO, socket or device (opened without blocking and refused before any read),
    a path with a NUL byte, a symlink loop, an OS error or a larger file raises
    :class:`UnreadableFile` with the reason ("no such file", "not a regular file", the OS's
    message, or "larger than N bytes"), never with the file's contents."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        try:
            raw = f.read(limit + 1)
        except OSError as exc:
            raise UnreadableFile(exc.strerror or str(exc)) from None
    if len(raw) > limit:
        raise UnreadableFile(f"larger than {limit:,} bytes")
    return raw


def open_regular(path: str | os.PathLike[str]) -> int:
    """A blocking read-only descriptor on the regular file ``path``, or :class:`UnreadableFile`.
    The file is opened with ``O_NONBLOCK`` (opening a FIFO for reading would otherwise wait for
    a writer forever) and its type is checked on the open descriptor, so a path swapped for a
    FIFO between a check and the open is still refused."""
    name = os.fspath(path)
    if "\x00" in name:
        raise UnreadableFile("the path contains a NUL byte")
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UnreadableFile("no such file") from None
    except IsADirectoryError:
        raise UnreadableFile("not a regular file (a directory)") from None
    except (OSError, ValueError) as exc:  # a symlink loop, a name too long, permissions
        raise UnreadableFile(getattr(exc, "strerror", None) or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile(
                "not a regular file (a directory)"
                if stat.S_ISDIR(st.st_mode)
                else "not a regular file (a pipe, socket or device)"
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
