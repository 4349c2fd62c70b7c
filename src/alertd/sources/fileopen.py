"""How every file-reading source opens a data file: regular files only, never blocking, optionally confined.

`open_regular(path)` is the one way the sources open what they read (event files, `.wandb` files,
samples, CSV, text logs, MLflow metric files):

- The path is `stat`-ed first and anything but a regular file (a FIFO, a socket, a device, a
  directory) is refused with `NotRegularFile` before it is opened: opening a device can have effects,
  and opening a FIFO for reading blocks until a writer comes (a thread holding a source's lock forever).
- The file is then opened with `O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC` (the path may have been
  replaced since the `stat`: a FIFO opened so does not block) and the descriptor is `fstat`-ed; a
  non-regular file is closed and refused. `O_NONBLOCK` is then cleared (it means nothing for a regular
  file, but reads should not carry it) and a buffered binary file is returned.
- `confine(roots)` (the dry-run worker process calls it before it reads anything) restricts every later
  `open_regular` to files under those directories: the real path of the opened descriptor
  (`/proc/self/fd/N`, so a symbolic link or `..` resolved by the kernel, not by string handling) must be
  one of the roots or under one, or `OutsideRoots` is raised and the file closed unread. `confine(None)`
  or `confine(())` lifts it. The setting is process-wide.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Sequence
from typing import BinaryIO

from alertd.filekind import file_kind

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_roots: tuple[str, ...] = ()


class NotRegularFile(OSError):
    """The path is a FIFO, a socket, a device or a directory: never opened for reading."""

    def __str__(self) -> str:
        return str(self.strerror)


class OutsideRoots(OSError):
    """The opened file resolves outside the directories this process is confined to."""

    def __str__(self) -> str:
        return str(self.strerror)


def not_regular(path: str, mode: int) -> NotRegularFile:
    """The error for `path`, which is not a regular file (its `st_mode` says what it is)."""
    return NotRegularFile(errno.EINVAL, f"{path} is {file_kind(mode)}, not a regular file", path)


def confine(roots: Sequence[str] | None) -> None:
    """From now on, in this process, open only files under `roots` (resolved); None or () lifts it."""
    global _roots
    _roots = tuple(os.path.realpath(r) for r in roots or ())


def confined_to() -> tuple[str, ...]:
    """The roots set by `confine` (empty: not confined)."""
    return _roots


def _inside(real: str) -> bool:
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in _roots)


def open_regular(path: str) -> BinaryIO:
    """`path` opened for binary reading, if it is a regular file (and inside the roots, when confined).

    Raises `NotRegularFile`, `OutsideRoots`, or the `OSError` of `stat`/`open` (FileNotFoundError ...).
    """
    if _roots and not _inside(os.path.realpath(path)):
        raise OutsideRoots(errno.EACCES, f"{path} resolves outside the allowed roots", path)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    fd = os.open(path, _FLAGS)
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):
            raise not_regular(path, fst.st_mode)
        if _roots and not _inside(os.readlink(f"/proc/self/fd/{fd}")):  # what was opened, after any swap
            raise OutsideRoots(errno.EACCES, f"{path} resolves outside the allowed roots", path)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return open(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
