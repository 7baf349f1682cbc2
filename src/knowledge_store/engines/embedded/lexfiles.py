"""The files of the embedded engine's lexical index, beside Tantivy's own.

``ks-lexical.json``, the sidecar: the watermark (the publish the last commit
holds, repeated from the commit for a cheap look), the schema the index was
built with, its generation (new each time the files are replaced, so other
processes know to open them afresh) and, while one is under way, the rebuild
(why, by which process, how far) — what other processes tell their readers.

Also what a killed writer leaves behind, and emptying the directory: both only
by the holder of the store's write lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SIDECAR", "Rebuild", "read_sidecar", "remove_leftovers", "wipe", "write_sidecar"]

SIDECAR = "ks-lexical.json"

#: Files of a segment (``<uuid>.<component>``) and its deletes (``<uuid>.<opstamp>.del``).
_SEGMENT_FILE = re.compile(r"[0-9a-f]{32}\.(?:[a-z]+|[0-9]+\.del)")


@dataclass(frozen=True)
class Rebuild:
    """A rebuild of the index as its sidecar records it: why, by which process, how far."""

    reason: str
    pid: int
    started: float  # time.time() when it began
    indexed: int  # chunks staged so far
    total: int  # chunks to index

    @classmethod
    def read(cls, value: Any) -> Rebuild | None:
        """The sidecar's ``rebuild`` entry; None when there is none (or it is not one)."""
        if not isinstance(value, dict):
            return None
        try:
            return cls(
                reason=str(value["reason"]),
                pid=int(value["pid"]),
                started=float(value["started"]),
                indexed=int(value["indexed"]),
                total=int(value["total"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


def read_sidecar(path: Path) -> dict[str, Any]:
    """The sidecar in index directory ``path`` ({} when there is none, or it is unreadable)."""
    try:
        data = json.loads((path / SIDECAR).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_sidecar(path: Path, sidecar: Mapping[str, Any], *, durable: bool = True) -> None:
    """Replace the sidecar atomically (a temp file renamed over it); ``durable``: synced,
    the file and the directory (OSError as the system raises it)."""
    target = path / SIDECAR
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    with tmp.open("w") as fh:
        fh.write(json.dumps(sidecar))
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, target)
    if durable:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def wipe(path: Path) -> None:
    """Remove everything in index directory ``path``."""
    for entry in path.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def remove_leftovers(path: Path) -> list[str]:
    """Remove what killed writers left in index directory ``path``; the names removed.

    Call only while holding the store's write lock, no writer open: our sidecar's
    temp files, Tantivy's atomic-write temp files, and index files that no commit
    refers to — segments of an uncommitted write, and a delete file
    (``<segment>.<opstamp>.del``) written by a commit that never reached
    ``meta.json``, which the next commit of the same operations would collide with.
    """
    committed = _committed_files(path)
    if committed is None or not path.is_dir():
        return []
    segments, deletes = committed
    removed: list[str] = []
    for entry in path.iterdir():
        name = entry.name
        if _SEGMENT_FILE.fullmatch(name):
            leftover = (
                name not in deletes
                if name.endswith(".del")
                else name.partition(".")[0] not in segments
            )
        else:
            leftover = name.startswith((".tmp", Path(SIDECAR).stem + ".tmp"))
        if leftover and entry.is_file():
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
            removed.append(name)
    return removed


def _committed_files(path: Path) -> tuple[set[str], set[str]] | None:
    """The segment ids and delete-file names ``meta.json`` refers to (None: unreadable)."""
    meta = path / "meta.json"
    segments: set[str] = set()
    deletes: set[str] = set()
    if not meta.exists():
        return segments, deletes
    try:
        for segment in json.loads(meta.read_text())["segments"]:
            name = str(segment["segment_id"]).replace("-", "")
            segments.add(name)
            if segment.get("deletes"):
                deletes.add(f"{name}.{int(segment['deletes']['opstamp'])}.del")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return segments, deletes
