"""``ks backup`` / ``ks restore`` of an embedded store, online: readers and a writer go on.

**What is copied, in this order, without the write lock:**

1. the derived indexes, each as one of its commits: the dense file (a descriptor opened
   on it: a writer's save replaces the file by a rename, never writes into it), then the
   Tantivy index — ``meta.json`` read, every file of the segments it lists opened, then
   copied (a merge that deletes one of them before it is opened makes the copy start
   again; an open descriptor keeps a deleted file readable). Each copy holds the
   watermark of its own commit;
2. the catalog, through SQLite's online backup API in one step: one read transaction,
   so one publish ``P`` — a writer keeps committing meanwhile (WAL), and readers are
   not blocked. The manifest records ``P`` and its content root, read from the copy.

Copied first, an index is at ``P`` or behind it; the catalog keeps every publish's ops
(``publish_ops``), so a restore opens the copy as the engine opens any store after a
crash: an index behind ``P`` catches up from the ops, one ahead (a publish whose index
commit landed between the two copies, and whose catalog commit did not make it into the
copy) is rebuilt from the catalog. Either way the restored store is exactly publish ``P``,
which a test checks by killing backups at random points while a writer publishes.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import tantivy

from knowledge_store.engines.backup import (
    Manifest,
    copy_verified,
    file_entry,
    now,
    staged,
    write_manifest,
)
from knowledge_store.engines.embedded.dense import file_watermark
from knowledge_store.engines.embedded.derived import DENSE_FILE
from knowledge_store.engines.embedded.lexfiles import SIDECAR
from knowledge_store.engines.embedded.lexical import WATERMARK_ID
from knowledge_store.engines.sql.publish import EMPTY_ROOT
from knowledge_store.errors import StoreError
from knowledge_store.model import BackupReport, RestoreReport

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.engine import EmbeddedEngine

__all__ = ["backup_store", "restore_store"]

CATALOG = "catalog.sqlite"
LEXICAL = "lexical"
#: How many times the lexical copy starts again when a merge removes a file under it.
_LEXICAL_TRIES = 20


def backup_store(engine: EmbeddedEngine, dest: Path) -> BackupReport:
    """Write a backup of ``engine``'s store to ``dest`` (module docstring)."""
    started = time.perf_counter()
    source = engine.path
    with staged(dest) as root:
        dense = _copy_dense(source / DENSE_FILE, root / DENSE_FILE)
        lexical = _copy_lexical(source / LEXICAL, root / LEXICAL)
        publish, content_root, entities, chunks = _copy_catalog(source / CATALOG, root / CATALOG)
        files = tuple(file_entry(root, path) for path in sorted(root.rglob("*")) if path.is_file())
        manifest = Manifest(
            engine=engine.name,
            publish=publish,
            content_root=content_root,
            entities=entities,
            chunks=chunks,
            files=files,
            created_at=now(),
            details={"lexical_watermark": lexical, "dense_watermark": dense},
        )
        write_manifest(root, manifest)
    return BackupReport(
        location=str(dest),
        engine=engine.name,
        publish=publish,
        content_root=content_root,
        entities=entities,
        chunks=chunks,
        files=list(files),
        bytes=sum(f.bytes for f in files),
        seconds=round(time.perf_counter() - started, 3),
    )


def _copy_dense(path: Path, target: Path) -> int | None:
    """The dense file as it is (one save); its watermark, None when there is none yet."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return None
    with handle, target.open("wb") as out:
        shutil.copyfileobj(handle, out, 1 << 20)
    found = file_watermark(target)
    return found if found >= 0 else None


def _segment_ids(meta: dict[str, Any]) -> set[str]:
    return {str(s["segment_id"]).replace("-", "") for s in meta.get("segments", ())}


def _copy_lexical(path: Path, target: Path) -> int | None:
    """One commit of the Tantivy index (module docstring); the watermark inside it."""
    if not (path / "meta.json").is_file():
        return None
    for _ in range(_LEXICAL_TRIES):
        with ExitStack() as stack:
            try:
                meta_bytes = (path / "meta.json").read_bytes()
                segments = _segment_ids(json.loads(meta_bytes))
                names = [n for n in os.listdir(path) if n.split(".", 1)[0] in segments]
                opened: dict[str, BinaryIO] = {
                    name: stack.enter_context((path / name).open("rb")) for name in names
                }
                sidecar = (path / SIDECAR).read_bytes() if (path / SIDECAR).is_file() else None
            except FileNotFoundError:
                continue  # a commit or a merge went by: read its meta.json instead
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            for name, handle in opened.items():
                with (target / name).open("wb") as out:
                    shutil.copyfileobj(handle, out, 1 << 20)
        (target / "meta.json").write_bytes(meta_bytes)
        # which files Tantivy manages: those of this commit (it never deletes others)
        managed = sorted([*opened, "meta.json"])
        (target / ".managed.json").write_text(json.dumps(managed), encoding="utf-8")
        if sidecar is not None:
            (target / SIDECAR).write_bytes(sidecar)
        found = _watermark(target)
        for lock in target.glob(".tantivy-*.lock"):  # opening it made them: not the backup's
            lock.unlink()
        return found
    raise StoreError(
        f"the lexical index of {path.parent} changed under every one of {_LEXICAL_TRIES}"
        " copies (merges in a row); try the backup again"
    )


def _watermark(path: Path) -> int:
    """The publish inside the Tantivy commit at ``path`` (0: none recorded)."""
    index = tantivy.Index.open(str(path))
    searcher = index.searcher()
    query = tantivy.Query.term_query(index.schema, "chunk_id", WATERMARK_ID)
    hits = searcher.search(query, 1).hits
    if not hits:
        return 0
    value = searcher.doc(hits[0][1]).get_first("uid")
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def _copy_catalog(path: Path, target: Path) -> tuple[int, str, int, int]:
    """The catalog at one publish (SQLite's backup API, one step); the publish, its root and
    the entity and chunk counts, read from the copy."""
    source = sqlite3.connect(path, timeout=30.0)
    copy = sqlite3.connect(target)
    try:
        source.execute("PRAGMA busy_timeout=30000")
        source.backup(copy)  # one step (pages=-1): one read transaction, one snapshot
        copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        row = copy.execute("SELECT id, root FROM publishes ORDER BY id DESC LIMIT 1").fetchone()
        entities = int(copy.execute("SELECT count(*) FROM entities").fetchone()[0])
        chunks = int(copy.execute("SELECT count(*) FROM chunks").fetchone()[0])
    except sqlite3.Error as exc:
        raise StoreError(f"backing up the catalog {path} failed: {exc}") from exc
    finally:
        copy.close()
        source.close()
    publish, root = (0, EMPTY_ROOT) if row is None else (int(row[0]), str(row[1]))
    return publish, root, entities, chunks


def restore_store(src: Path, manifest: Manifest, location: str) -> RestoreReport:
    """Copy the verified backup ``src`` to the new store directory ``location``, open it (the
    derived indexes caught up to the backup's publish) and check it is that publish."""
    from knowledge_store.engines.embedded.engine import EmbeddedEngine

    started = time.perf_counter()
    dest = Path(os.path.expanduser(location))
    with staged(dest, "the store to restore into") as root:
        copy_verified(src, manifest, root)
        _integrity(root / CATALOG)
        engine = EmbeddedEngine(root)
        try:
            stats = engine.stats()
        finally:
            engine.close()
        indexes = stats.extra.get("indexes", {})
        if (stats.content_root, indexes.get("publish")) != (
            manifest.content_root,
            manifest.publish,
        ):
            raise StoreError(
                f"the backup {src} opens at {stats.content_root}, not at its manifest's"
                f" {manifest.content_root}; nothing was restored",
                path=str(src),
            )
    caught_up = []
    for name in ("lexical", "dense"):
        before = manifest.details.get(f"{name}_watermark")
        if before is None and stats.chunks:
            caught_up.append(f"{name}: built from the catalog at publish {indexes.get(name)}")
        elif before is not None and before != manifest.publish:
            how = "rebuilt" if before > manifest.publish else "caught up"
            caught_up.append(f"{name}: {how} from publish {before} to {indexes.get(name)}")
    return RestoreReport(
        store=str(dest),
        engine="embedded",
        publish=manifest.publish,
        content_root=stats.content_root,
        entities=stats.entities,
        chunks=stats.chunks,
        verified_files=len(manifest.files),
        caught_up=caught_up,
        seconds=round(time.perf_counter() - started, 3),
    )


def _integrity(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        found = conn.execute("PRAGMA quick_check").fetchone()
    except sqlite3.Error as exc:
        raise StoreError(f"the restored catalog {path} can't be read: {exc}") from exc
    finally:
        conn.close()
    if found is None or found[0] != "ok":
        raise StoreError(f"the restored catalog fails SQLite's quick_check: {found}")
