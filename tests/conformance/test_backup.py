"""``ks backup`` / ``ks restore``: one publish of a running store, verified, on both engines
(issue 31 item 1).

A backup restores to the store it copied — same publish, content root, digest and answers
— and the restored store takes writes. A damaged backup is refused before anything is
made; so is a restore over an existing store or into another engine. And a backup killed
at a random point while a writer publishes never yields a copy that restores to anything
but a publish that existed: either there is no backup at the destination, or it restores
to one of the writer's publishes, with that publish's digest.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.errors import InvalidRequest, NotFound, StoreError
from knowledge_store.store import KnowledgeStore
from tests.conftest import ESTATE, HASH_SPEC, EngineUnderTest


def _restore_location(engine: EngineUnderTest) -> Any:
    """A new store location a backup of ``engine`` can be restored into: PostgreSQL loads
    the dump under its own schema name first, so into a database that doesn't hold it."""
    if engine.kind == "postgres":
        from tests import postgres_support

        return postgres_support.store_url(postgres_support.fresh_database("restore"))
    return engine.location("restored")


def _answers(store: KnowledgeStore) -> list[Any]:
    return [
        [(r.uid, r.ranks) for r in store.search("vacuum replica", identity=who, k=10).results]
        + [h.uid for h in store.sql(identity=who, k=50).hits]
        for who in ("everyone", "user:sam")
    ]


def test_a_backup_restores_to_the_store_it_copied(
    engine: EngineUnderTest, embedder: Any, tmp_path: Path
) -> None:
    with engine.open(embedder) as store:
        store.ingest_records(ESTATE)
        store.add_member("group:sre", "user:sam")
        report = store.backup(tmp_path / "backup")
        digest, answers, root = store.digest(), _answers(store), store.content_root()
        store.ingest_records([{**ESTATE[0], "uid": "guide:later", "title": "Later"}])
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert (manifest["engine"], manifest["publish"], manifest["content_root"]) == (
        engine.kind,
        report.publish,
        root,
    )
    assert sorted(f["path"] for f in manifest["files"]) == sorted(f.path for f in report.files)
    where = _restore_location(engine)
    restored = KnowledgeStore.restore(tmp_path / "backup", where)
    assert (restored.content_root, restored.entities) == (root, len(ESTATE))
    with KnowledgeStore.open(where, embedder=embedder, create=False) as back:
        assert back.content_root() == root and back.digest() == digest
        assert _answers(back) == answers  # memberships came back too
        written = back.ingest_records([{**ESTATE[1], "uid": "guide:new", "title": "New"}])
        assert written.added == 1
        assert next(h.uid for h in back.lexical("Server Administration", k=3).hits) in {
            "guide:admin",
            "guide:new",
        }


def test_a_damaged_backup_is_never_restored(
    engine: EngineUnderTest, embedder: Any, tmp_path: Path
) -> None:
    with engine.open(embedder) as store:
        store.ingest_records(ESTATE)
        report = store.backup(tmp_path / "backup")
        with pytest.raises(InvalidRequest, match="already exists"):
            store.backup(tmp_path / "backup")
    biggest = max(report.files, key=lambda f: f.bytes)
    path = tmp_path / "backup" / biggest.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    where = _restore_location(engine)
    with pytest.raises(StoreError, match=f"damaged: {biggest.path} has"):
        KnowledgeStore.restore(tmp_path / "backup", where)
    with pytest.raises(NotFound):
        KnowledgeStore.open(where, embedder=embedder, create=False)
    (tmp_path / "backup" / "manifest.json").unlink()
    with pytest.raises(NotFound, match=r"holds no manifest\.json"):
        KnowledgeStore.restore(tmp_path / "backup", where)


@pytest.mark.embedded_only(reason="the refusals of a restore location are the engine's own")
def test_a_restore_makes_a_new_store_of_the_backups_engine(
    engine: EngineUnderTest, embedder: Any, tmp_path: Path
) -> None:
    where = engine.location()
    with KnowledgeStore.open(where, embedder=embedder) as store:
        store.ingest_records(ESTATE[:2])
        store.backup(tmp_path / "backup")
    with pytest.raises(InvalidRequest, match="already exists"):
        KnowledgeStore.restore(tmp_path / "backup", where)
    with pytest.raises(InvalidRequest, match="backup of a embedded store"):
        KnowledgeStore.restore(tmp_path / "backup", "pg:" + str(tmp_path / "pg"))
    assert not (tmp_path / "pg").exists()
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    (tmp_path / "backup" / "manifest.json").write_text(json.dumps({**manifest, "version": 99}))
    with pytest.raises(InvalidRequest, match="newer knowledge-store"):
        KnowledgeStore.restore(tmp_path / "backup", tmp_path / "new")
    assert not (tmp_path / "new").exists()


def _records(start: int, count: int) -> list[dict[str, Any]]:
    return [
        {
            "uid": f"doc:{i}",
            "type": "page",
            "title": f"Document {i}",
            "body": f"# Document {i}\n\n"
            + " ".join(f"word{(i * 7 + j) % 997}" for j in range(200)),
            "acl": ["everyone"],
        }
        for i in range(start, start + count)
    ]


def _backup_process(store: Path, dest: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "knowledge_store.surfaces.cli",
            "--store",
            str(store),
            "backup",
            str(dest),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "KS_EMBEDDER": HASH_SPEC},
    )


def _copying(process: subprocess.Popen[bytes], dest: Path) -> float:
    """When the backup ``process`` started writing (its partial directory appeared)."""
    partial = dest.with_name(f".{dest.name}.partial-{process.pid}")
    while not partial.exists() and not dest.exists() and process.poll() is None:
        time.sleep(0.001)
    return time.perf_counter()


@pytest.mark.slow
@pytest.mark.embedded_only(reason="kills a backup process; the PostgreSQL dump is one pg_dump")
def test_a_backup_killed_at_any_point_restores_to_a_publish_that_existed(
    engine: EngineUnderTest, tmp_path: Path
) -> None:
    where = Path(engine.location())
    published: dict[str, str] = {}
    with KnowledgeStore.open(where, embedder=HASH_SPEC) as store:
        store.ingest_records(_records(0, 1500))
        published[store.content_root()] = store.digest()
        done = threading.Event()
        failures: list[BaseException] = []

        def write() -> None:  # a publish every few milliseconds, its digest recorded
            i = 1500
            try:
                while not done.is_set():
                    store.ingest_records(
                        [*_records(i, 20), {**_records(i % 1500, 1)[0], "title": f"Rev {i}"}]
                    )
                    published[store.content_root()] = store.digest()
                    i += 20
            except BaseException as exc:
                failures.append(exc)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            whole = _backup_process(where, tmp_path / "whole")
            copying = _copying(whole, tmp_path / "whole")
            assert whole.wait(timeout=300) == 0
            took = time.perf_counter() - copying
            rng = random.Random(31)
            outcomes = []
            for n in range(10):
                dest = tmp_path / f"killed-{n}"
                process = _backup_process(where, dest)
                if n >= 2:  # the others die while Python starts: nothing was written yet
                    _copying(process, dest)
                    time.sleep(rng.uniform(0.0, took))
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=60)
                outcomes.append((n, dest))
        finally:
            done.set()
            writer.join(timeout=120)
        assert not failures, failures
    restored = 0
    for n, dest in [(-1, tmp_path / "whole"), *outcomes]:
        target = tmp_path / f"restored-{n}"
        if not dest.exists():  # killed before the rename: nothing at the destination
            with pytest.raises(NotFound):
                KnowledgeStore.restore(dest, target)
            continue
        report = KnowledgeStore.restore(dest, target)
        assert report.content_root in published, f"backup {n}: a root no publish made"
        with KnowledgeStore.open(target, embedder=HASH_SPEC, create=False) as back:
            assert back.digest() == published[report.content_root]
            assert back.stats().extra["indexes"]["lexical"] == report.publish
        restored += 1
    assert restored >= 1


@pytest.mark.embedded_only(reason="the derived indexes are the embedded engine's")
@pytest.mark.parametrize("catalog", ["ahead", "behind"])
def test_indexes_copied_at_another_publish_than_the_catalog_are_brought_to_it(
    engine: EngineUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: str
) -> None:
    """The derived indexes are copied first, the catalog last, with no lock: a publish may
    land between them (the catalog copy is ahead: the indexes catch up from its ops), or a
    publish's index commit may land before its catalog commit (the indexes are ahead: they
    are rebuilt). Either way the restored store is the catalog copy's publish, whole."""
    from knowledge_store.engines.embedded import backup as embedded_backup

    where = Path(engine.location())
    copy_catalog = embedded_backup._copy_catalog
    with KnowledgeStore.open(where, embedder=HASH_SPEC) as store:
        store.ingest_records(_records(0, 50))
        older = tmp_path / "older.sqlite"
        copy_catalog(where / "catalog.sqlite", older)
        if catalog == "ahead":
            expected = None  # the publish made while the indexes are copied

            def late_copy(path: Path, target: Path) -> Any:
                store.ingest_records(_records(50, 5))
                return copy_catalog(path, target)

            monkeypatch.setattr(embedded_backup, "_copy_catalog", late_copy)
        else:
            store.ingest_records(_records(50, 5))  # the indexes hold it; the catalog copy not
            monkeypatch.setattr(
                embedded_backup, "_copy_catalog", lambda path, target: copy_catalog(older, target)
            )
        report = store.backup(tmp_path / "backup")
        expected = store.digest() if catalog == "ahead" else None
    restored = KnowledgeStore.restore(tmp_path / "backup", tmp_path / "restored")
    how = "caught up" if catalog == "ahead" else "rebuilt"
    assert restored.caught_up == [
        f"lexical: {how} from publish {report.publish + (-1 if catalog == 'ahead' else 1)} to"
        f" {report.publish}",
        f"dense: {how} from publish {report.publish + (-1 if catalog == 'ahead' else 1)} to"
        f" {report.publish}",
    ]
    with KnowledgeStore.open(tmp_path / "restored", embedder=HASH_SPEC, create=False) as back:
        if expected is not None:
            assert back.digest() == expected
        hits = {h.uid for h in back.lexical("Document", k=100).hits}
        hits |= {h.uid for h in back.vector("Document 52", k=100).hits}
        assert ("doc:52" in hits) == (catalog == "ahead")
        assert back.stats().entities == (55 if catalog == "ahead" else 50)
        assert back.check().ok
