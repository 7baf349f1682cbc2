"""``ks backup DEST`` and ``ks restore SRC --store NEW``: a consistent copy of a running store.

A backup is a directory holding one publish of the store — its files, and a
``manifest.json`` naming the engine, the publish, its content root and every file with
its size and sha256 — written beside ``DEST`` and renamed into place last, so a backup
interrupted at any point leaves nothing at ``DEST`` (``engines/backup.py``). The engine
writes its own files: the embedded engine copies its catalog with SQLite's online backup
API and its derived indexes at or behind that publish (``engines/embedded/backup.py``);
PostgreSQL dumps the store's schema with ``pg_dump`` from the snapshot it read the root
in (``engines/postgres/backup.py``). Readers and a writer keep running throughout.

A restore reads the manifest, verifies every file, and makes a new store of the backup's
engine at ``NEW``, which it opens and checks to be at the backup's publish and root.
"""

from __future__ import annotations

from pathlib import Path

from knowledge_store.engines.backup import read_manifest
from knowledge_store.engines.base import Engine
from knowledge_store.engines.registry import engine_for, engine_named
from knowledge_store.errors import InvalidRequest
from knowledge_store.model import BackupReport, RestoreReport

__all__ = ["backup", "restore"]


def backup(engine: Engine, dest: str | Path) -> BackupReport:
    """Write a backup of the store ``engine`` serves to the new directory ``dest``."""
    report: BackupReport = engine_named(engine.name).backups().backup_store(engine, Path(dest))
    return report


def restore(src: str | Path, location: str | Path) -> RestoreReport:
    """Restore the backup ``src`` as a new store at ``location`` (of the backup's engine)."""
    folder = Path(src).expanduser()
    manifest = read_manifest(folder)
    entry = engine_named(manifest.engine)
    target = engine_for(str(location))
    if target.name != entry.name:
        raise InvalidRequest(
            f"{src} is a backup of a {entry.name} store, and {location} names a {target.name}"
            f" store; restore it into a {entry.name} location (to move a store to another"
            " engine: ks export, then ks ingest)",
            field="store",
        )
    report: RestoreReport = entry.backups().restore_store(folder, manifest, str(location))
    return report
