"""The files of the embedded engine's lexical index, beside Tantivy's own.

``ks-lexical.json``, the sidecar: the watermark (the publish the last commit
holds, repeated from the commit for a cheap look), the schema the index was
built with, its generation (new each time the files are replaced, so other
processes know to open them afresh) and, while one is under way, the rebuild
(why, by which process, how far) — what other processes tell their readers.

Also what a killed writer leaves behind, and emptying the directory: both only
by the holder of the store's write lock.

**Damage** (:func:`damage`): every file Tantivy writes for a segment ends with a
footer — its version, a CRC32 of everything before it, the footer's length and a
magic number — which Tantivy's own ``validate_checksum`` checks and tantivy-py
does not expose. A flipped byte in a segment made Tantivy answer garbage, raise
an IO error or panic (a ``.term`` file: a Rust panic that a Python ``except
Exception`` doesn't catch) on the first search — and since every open reads the
watermark from the index, every command of the store failed. So the files are
checked here, before Tantivy opens them: ``meta.json`` must be the JSON of a
commit, and every file of each segment it lists must be there with its checksum
right (files already checked by this process are known by name, size and time:
segment files are never rewritten).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import shutil
import struct
import zlib
from collections.abc import Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SIDECAR",
    "Damage",
    "Rebuild",
    "Verified",
    "damage",
    "read_sidecar",
    "remove_leftovers",
    "trust",
    "wipe",
    "write_sidecar",
]

SIDECAR = "ks-lexical.json"

#: Files of a segment (``<uuid>.<component>``) and its deletes (``<uuid>.<opstamp>.del``).
_SEGMENT_FILE = re.compile(r"[0-9a-f]{32}\.(?:[a-z]+|[0-9]+\.del)")
#: The files every segment has (Tantivy 0.22 and later): postings, positions, terms, stored
#: documents, fast fields, field norms. A segment's deletes (``.del``) are named in meta.json.
_COMPONENTS = ("idx", "pos", "term", "store", "fast", "fieldnorm")
#: A Tantivy file's footer: ``JSON {"version", "crc"} | u32 LE length | u32 LE magic``.
_FOOTER_MAGIC = 1337
_FOOTER_TAIL = 8
_FOOTER_MAX = 4096
#: Above this many bytes in all, the files are checked on several threads (zlib releases the GIL).
_PARALLEL_BYTES = 8 << 20

#: What this process has checked: file name → (size, modification time in ns).
Verified = MutableMapping[str, tuple[int, int]]


@dataclass(frozen=True)
class Damage:
    """One damaged file of an index: its name and what is wrong with it."""

    file: str
    problem: str

    def __str__(self) -> str:
        return f"{self.file}: {self.problem}"


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


# -- damage -----------------------------------------------------------------------------------------
def damage(path: Path, verified: Verified | None = None) -> list[Damage]:
    """What is damaged in index directory ``path`` (empty: nothing found).

    ``meta.json`` must parse as a commit; each segment it lists must have all its files,
    each with its footer and a right checksum. ``verified``: files this process checked
    before (skipped while their size and time are the same; the good ones are added).

    Another process may commit meanwhile: a merge's commit removes the segments it merged,
    so a file of the ``meta.json`` read first can be gone by the time it is looked at. What
    is found counts only if ``meta.json`` is the same after the look as before it; else
    the look is made again (a few times; then nothing is reported — a real damage is met
    on first use).
    """
    for _ in range(_LOOKS):
        before = _meta_bytes(path)
        found = _damage(path, verified)
        if not found or _meta_bytes(path) == before:
            return found
    return []


_LOOKS = 5


def _meta_bytes(path: Path) -> bytes | None:
    try:
        return (path / "meta.json").read_bytes()
    except OSError:
        return None


def _damage(path: Path, verified: Verified | None) -> list[Damage]:
    files, problems = _segment_files(path)
    if problems:
        return problems
    todo: list[tuple[str, tuple[int, int]]] = []
    for name in files:
        try:
            st = (path / name).stat()
        except FileNotFoundError:
            problems.append(Damage(name, "missing"))
            continue
        except OSError as exc:
            problems.append(Damage(name, f"unreadable ({exc.strerror or exc})"))
            continue
        signature = (st.st_size, st.st_mtime_ns)
        if verified is None or verified.get(name) != signature:
            todo.append((name, signature))
    total = sum(size for _, (size, _) in todo)
    workers = min(len(todo), os.cpu_count() or 1) if total > _PARALLEL_BYTES else 1
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            found = list(pool.map(lambda item: _footer_problem(path / item[0]), todo))
    else:
        found = [_footer_problem(path / name) for name, _ in todo]
    for (name, signature), problem in zip(todo, found, strict=True):
        if problem is not None:
            problems.append(Damage(name, problem))
        elif verified is not None:
            verified[name] = signature
    return sorted(problems, key=lambda d: d.file)


def _segment_files(path: Path) -> tuple[list[str], list[Damage]]:
    """The files the commit in ``meta.json`` needs, or what is wrong with ``meta.json``."""
    try:
        meta = json.loads((path / "meta.json").read_bytes())
    except FileNotFoundError:
        return [], [Damage("meta.json", "missing")]
    except OSError as exc:
        return [], [Damage("meta.json", f"unreadable ({exc.strerror or exc})")]
    except ValueError:
        return [], [Damage("meta.json", "not valid JSON")]
    files: list[str] = []
    try:
        if not isinstance(meta["schema"], list) or not isinstance(meta["opstamp"], int):
            raise TypeError
        for segment in meta["segments"]:
            name = str(segment["segment_id"]).replace("-", "")
            max_doc, deletes = segment["max_doc"], segment.get("deletes")
            if not re.fullmatch(r"[0-9a-f]{32}", name) or not isinstance(max_doc, int):
                raise TypeError
            files += [f"{name}.{component}" for component in _COMPONENTS]
            if deletes is not None:
                if not 0 <= int(deletes["num_deleted_docs"]) <= max_doc:
                    raise ValueError
                files.append(f"{name}.{int(deletes['opstamp'])}.del")
    except (KeyError, TypeError, ValueError, AttributeError):
        return [], [Damage("meta.json", "not the JSON of a Tantivy commit")]
    return files, []


def _footer_problem(file: Path) -> str | None:
    """What is wrong with a Tantivy file's footer or checksum (None: nothing)."""
    try:
        with file.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < _FOOTER_TAIL:
                return "truncated (no footer)"
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                length, magic = struct.unpack_from("<II", data, size - _FOOTER_TAIL)
                body = size - _FOOTER_TAIL - length
                if magic != _FOOTER_MAGIC or length > _FOOTER_MAX or body < 0:
                    return "no valid footer"
                try:
                    footer = json.loads(data[body : size - _FOOTER_TAIL])
                    crc = int(footer["crc"])
                except (ValueError, KeyError, TypeError):
                    return "no valid footer"
                with memoryview(data) as view, view[:body] as content:
                    found = zlib.crc32(content)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return None if found == crc else "checksum mismatch"


def trust(path: Path, verified: Verified) -> None:
    """Record the files of the commit in index directory ``path`` as checked: this process
    wrote them (the write lock held), so their checksums are what it wrote."""
    files, problems = _segment_files(path)
    if problems:
        return
    for name in files:
        with contextlib.suppress(OSError):
            st = (path / name).stat()
            verified[name] = (st.st_size, st.st_mtime_ns)
