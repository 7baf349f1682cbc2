"""Which files a load may read: regular files inside the folder given, nothing else.

A folder may hold things that are not its own files: a link to ``/etc/passwd``
named ``passwd.md``, a link to a folder elsewhere (or to one of its own
ancestors, a loop), a FIFO that would block the reader forever, a device, a
socket. A load reads a path only when

- its resolved path (links followed) lies inside the resolved folder it was
  found in — for a file named on its own, the folder it sits in — and
- it is a regular file, checked on the descriptor that is then read (opened
  without following a last link, without blocking, and compared with what
  was checked, so that a path swapped in between is not read).

Anything else is :class:`Skipped` — reported with its path and the reason in
the ingest answer, never read. A link to a folder inside the folder is walked
once (the first path that reaches it wins), so a loop ends at once. Hidden
files and folders (``.name``) and files of other formats are left out without
a report, as before.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["Skipped", "inside", "open_regular", "read_at_most", "too_large", "walk_folder"]


@dataclass(frozen=True)
class Skipped:
    """A path a load did not read, and why (it leads out of the folder, or is no regular file)."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


def inside(path: str, folder: str) -> bool:
    """Whether the resolved ``path`` is ``folder`` or lies under it (both resolved)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def walk_folder(folder: Path) -> Iterator[Path | Skipped]:
    """The files under ``folder``, sorted, and the folders that were not walked.

    Hidden files and folders are left out. A linked folder is walked when it
    resolves inside ``folder`` and was not walked already; otherwise it is
    :class:`Skipped`. Files are only listed here — :func:`open_regular`
    decides whether each may be read.
    """
    top = os.path.realpath(folder)
    walked = {top}
    for current, folders, files in os.walk(folder, followlinks=True):
        keep: list[str] = []
        for name in sorted(name for name in folders if not name.startswith(".")):
            path = Path(current) / name
            real = os.path.realpath(path)
            if not inside(real, top):
                yield Skipped(str(path), f"a link to the folder {real}, outside {folder}")
            elif real in walked:
                yield Skipped(str(path), f"a link to a folder this load reads already ({real})")
            else:
                walked.add(real)
                keep.append(name)
        folders[:] = keep
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(current) / name


def open_regular(path: Path, folder: Path) -> BinaryIO | Skipped:
    """``path`` opened for reading if it is a regular file resolving inside ``folder``.

    Raises ``OSError`` when a regular file inside the folder can't be read
    (permissions …): that is a bad input to report, not a path to skip.
    """
    real = os.path.realpath(path)
    top = os.path.realpath(folder)
    if not inside(real, top):
        return Skipped(str(path), f"a link to {real}, outside {folder}")
    try:
        checked = os.stat(real)
    except FileNotFoundError:
        return Skipped(str(path), "a link to nothing (its target does not exist)")
    if not stat.S_ISREG(checked.st_mode):
        return Skipped(str(path), f"{_kind(checked.st_mode)}, not a regular file")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        return Skipped(str(path), "it became a link between the check and the read; not read")
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino) or not stat.S_ISREG(
        opened.st_mode
    ):
        os.close(fd)
        return Skipped(str(path), "it changed between the check and the read; not read")
    return os.fdopen(fd, "rb")


def too_large(size: int, limit: int, what: str) -> str:
    """The reason a file of ``size`` bytes is not read (``what``: "a Markdown file" …)."""
    return (
        f"too large: {size:,} bytes; the limit for {what} is {limit:,} bytes"
        ' (docs/sources.md, "Limits")'
    )


def read_at_most(opened: BinaryIO, limit: int) -> bytes | None:
    """The whole of ``opened``, or None when it holds more than ``limit`` bytes.

    Its size is checked before anything is read (a 2 GB sparse file costs nothing),
    and the read stops one byte past the limit whatever the size said (a file that
    grows while it is read, a size a file system gets wrong).
    """
    if os.fstat(opened.fileno()).st_size > limit:
        return None
    data = opened.read(limit + 1)
    return None if len(data) > limit else data
