"""What every engine's backup shares: the backup directory, its manifest and checksums.

A backup is a directory. It is written under a temporary name beside its destination
(``.NAME.partial-PID``) and renamed to the destination last, after every file and the
manifest are on disk (fsynced): a backup killed at any point leaves no destination at all
— only the partial directory, which ``ks backup`` names and a later backup never reads —
so whatever is at the destination is a whole backup. ``manifest.json`` names the engine,
the publish and content root the backup holds, and every file with its size and sha256;
a restore verifies each of them before it opens anything (:func:`verify`).

Each engine writes its own files (``engines/embedded/backup.py``: the catalog through
SQLite's backup API and the derived indexes; ``engines/postgres/backup.py``: ``pg_dump``)
and restores them; the engine registry names the module (``EngineEntry.backup``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from knowledge_store.errors import InvalidRequest, NotFound, StoreError
from knowledge_store.model import BackupFile

__all__ = [
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "Manifest",
    "checksum",
    "copy_verified",
    "fsync_tree",
    "read_manifest",
    "staged",
    "verify",
    "write_manifest",
]

MANIFEST = "manifest.json"
FORMAT = "knowledge-store-backup"
VERSION = 1
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Manifest:
    """What a backup holds: its engine, the publish and content root, its files."""

    engine: str
    publish: int
    content_root: str
    entities: int
    chunks: int
    files: tuple[BackupFile, ...]
    created_at: str = ""
    #: The engine's own notes (the derived indexes' watermarks, the server's version …).
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "engine": self.engine,
            "publish": self.publish,
            "content_root": self.content_root,
            "entities": self.entities,
            "chunks": self.chunks,
            "created_at": self.created_at,
            "files": [f.model_dump() for f in self.files],
            "details": dict(self.details),
        }


def checksum(handle: BinaryIO, out: BinaryIO | None = None) -> tuple[int, str]:
    """``(bytes, sha256)`` of what ``handle`` reads from where it is, copied to ``out``."""
    digest = hashlib.sha256()
    size = 0
    while block := handle.read(_CHUNK):
        digest.update(block)
        size += len(block)
        if out is not None:
            out.write(block)
    return size, digest.hexdigest()


def file_entry(root: Path, path: Path) -> BackupFile:
    """The manifest entry of ``path`` (inside the backup directory ``root``)."""
    with path.open("rb") as handle:
        size, digest = checksum(handle)
    return BackupFile(path=path.relative_to(root).as_posix(), bytes=size, sha256=digest)


def fsync_tree(root: Path) -> None:
    """Every file and directory under ``root`` (and ``root``) on disk."""
    for folder, _, names in os.walk(root):
        for name in names:
            fd = os.open(Path(folder) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(folder))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_destination(dest: Path, what: str) -> None:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InvalidRequest(
            f"{what} {dest} already exists; give a new path (nothing was written)",
            field="destination",
            path=str(dest),
        )


@contextmanager
def staged(dest: Path, what: str = "the backup destination") -> Iterator[Path]:
    """A new directory beside ``dest`` to fill, renamed to ``dest`` when the block ends
    without an error (and removed when it raises). ``dest`` must not exist, or be an empty
    directory."""
    dest = dest.expanduser().absolute()
    _check_destination(dest, what)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        yield partial
        fsync_tree(partial)
        _check_destination(dest, what)
        if dest.exists():
            dest.rmdir()
        partial.rename(dest)
        _fsync_dir(dest.parent)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def write_manifest(root: Path, manifest: Manifest) -> None:
    """``manifest.json`` in ``root``, written whole (its own file is not listed in it)."""
    text = json.dumps(manifest.to_dict(), indent=2, ensure_ascii=False) + "\n"
    (root / MANIFEST).write_text(text, encoding="utf-8")


def read_manifest(src: Path) -> Manifest:
    """The manifest of the backup ``src`` (NotFound: no backup there; InvalidRequest: not
    one this version reads)."""
    path = src / MANIFEST
    if not src.is_dir():
        raise NotFound(f"no backup at {src}: it is not a directory", path=str(src))
    if not path.is_file():
        raise NotFound(
            f"no backup at {src}: it holds no {MANIFEST} (an interrupted backup leaves"
            " none: its directory is never renamed into place)",
            path=str(src),
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r} is not {FORMAT!r}")
        if int(raw["version"]) > VERSION:
            raise ValueError(
                f"version {raw['version']} was written by a newer knowledge-store (this one"
                f" reads up to {VERSION}); upgrade to restore it"
            )
        files = tuple(BackupFile.model_validate(f) for f in raw["files"])
        return Manifest(
            engine=str(raw["engine"]),
            publish=int(raw["publish"]),
            content_root=str(raw["content_root"]),
            entities=int(raw["entities"]),
            chunks=int(raw["chunks"]),
            files=files,
            created_at=str(raw.get("created_at", "")),
            details=dict(raw.get("details") or {}),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidRequest(
            f"{path} is not a knowledge-store backup manifest: {exc}", path=str(path)
        ) from exc


def _inside(src: Path, name: str) -> Path:
    path = (src / name).resolve()
    if src.resolve() not in path.parents:
        raise InvalidRequest(
            f"the manifest of {src} names {name!r}, outside the backup; it is not restored",
            path=str(src),
        )
    return path


def verify(src: Path, manifest: Manifest) -> None:
    """Every file of the manifest is there with its size and sha256 (else StoreError naming
    the first that is not: a damaged backup is never restored)."""
    for entry in manifest.files:
        path = _inside(src, entry.path)
        if not path.is_file():
            raise StoreError(
                f"the backup {src} is damaged: {entry.path} is missing; nothing was restored",
                path=entry.path,
            )
        with path.open("rb") as handle:
            size, digest = checksum(handle)
        if (size, digest) != (entry.bytes, entry.sha256):
            raise StoreError(
                f"the backup {src} is damaged: {entry.path} has {size} bytes and sha256"
                f" {digest[:16]}…, its manifest says {entry.bytes} and {entry.sha256[:16]}…;"
                " nothing was restored",
                path=entry.path,
            )


def copy_verified(src: Path, manifest: Manifest, dest: Path) -> None:
    """Copy every file of the manifest into ``dest``, checking each one's size and sha256 as
    it is read (StoreError on the first that differs)."""
    for entry in manifest.files:
        source = _inside(src, entry.path)
        target = dest / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with source.open("rb") as handle, target.open("wb") as out:
                size, digest = checksum(handle, out)
        except FileNotFoundError as exc:
            raise StoreError(
                f"the backup {src} is damaged: {entry.path} is missing; nothing was restored",
                path=entry.path,
            ) from exc
        if (size, digest) != (entry.bytes, entry.sha256):
            raise StoreError(
                f"the backup {src} is damaged: {entry.path} has {size} bytes and sha256"
                f" {digest[:16]}…, its manifest says {entry.bytes} and {entry.sha256[:16]}…;"
                " nothing was restored",
                path=entry.path,
            )


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
