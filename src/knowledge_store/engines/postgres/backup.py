"""``ks backup`` / ``ks restore`` of a PostgreSQL store: the server's own ``pg_dump`` and
``pg_restore``, wrapped.

**Backup.** One ``REPEATABLE READ`` transaction exports its snapshot
(``pg_export_snapshot()``) and reads the publish and content root there; ``pg_dump
--snapshot`` then dumps the store's schema (``--format=custom``) from that very snapshot,
so the manifest's root is exactly what the dump holds — while readers and writers go on
(MVCC: the dump blocks nobody). The dump is one file of the backup directory
(``engines/backup.py``: checksums, the manifest, the directory renamed into place last).

**Restore** into a store location (``pg:DIR``, a new directory; or a URL whose schema
holds no store): pgvector is created if missing, ``pg_restore --single-transaction
--exit-on-error`` loads the schema (all or nothing), a schema of another name is renamed
to the one the location names, and the store is opened — migrated if the backup is from
an older version — and checked to be at the backup's publish and root.

The tools: pgserver's own (its ``pginstall/bin``, PostgreSQL 16), else the ``pg_dump`` /
``pg_restore`` on ``PATH``. ``pg_dump`` must be at least the server's major version (it
refuses a newer server); the error says which versions it found.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from knowledge_store.engines.backup import Manifest, file_entry, now, staged, verify, write_manifest
from knowledge_store.engines.postgres.db import Database, _redacted, check_schema_name, translate
from knowledge_store.engines.sql.publish import EMPTY_ROOT
from knowledge_store.errors import InvalidRequest, StoreError
from knowledge_store.model import BackupReport, RestoreReport

if TYPE_CHECKING:
    from knowledge_store.engines.postgres.engine import PostgresEngine

__all__ = ["backup_store", "restore_store", "tool"]

DUMP = "catalog.dump"
#: How long pg_dump / pg_restore may run.
_TOOL_TIMEOUT_S = 6 * 3600


def tool(name: str) -> Path:
    """``pg_dump`` or ``pg_restore``: pgserver's own, else the one on ``PATH``."""
    try:
        import pgserver

        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / name
        if bundled.is_file():
            return bundled
    except ImportError:  # pragma: no cover - the postgres extra installs it
        pass
    found = shutil.which(name)
    if found is None:
        raise StoreError(
            f"{name} was not found: install PostgreSQL's client tools (or the postgres extra,"
            f" whose pgserver ships them) — the PostgreSQL engine backs up through {name}"
        )
    return Path(found)


def _major(text: str) -> int:
    found = re.search(r"(\d+)(?:\.\d+)?", text)
    return int(found.group(1)) if found else 0


@contextmanager
def _connection(url: str) -> Iterator[str]:
    """``url`` without its password (which a command line would show to every user of the
    machine): the password goes into a password file only this user can read (``passfile``,
    libpq's .pgpass format), removed when the tool is done."""
    params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    password = params.pop("password", None)
    if password is None:
        yield make_conninfo(**params)
        return
    escaped = password.replace("\\", "\\\\").replace(":", "\\:")
    with tempfile.TemporaryDirectory(prefix="ks-pgpass-") as folder:
        passfile = Path(folder) / "pgpass"
        fd = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f"*:*:*:*:{escaped}\n")
        yield make_conninfo(**params, passfile=str(passfile))


def _run(command: list[str], action: str) -> None:
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=_TOOL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StoreError(f"{action} failed: {exc}") from exc
    if done.returncode != 0:
        shown = _redacted(done.stderr.strip())[-2000:]
        raise StoreError(f"{action} failed ({Path(command[0]).name}): {shown}")


def backup_store(engine: PostgresEngine, dest: Path) -> BackupReport:
    """Dump ``engine``'s schema at one snapshot into the backup ``dest`` (module docstring)."""
    started = time.perf_counter()
    dump = tool("pg_dump")
    version = subprocess.run(
        [str(dump), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    conn = engine.db.connect()
    try:
        with translate("exporting a snapshot for the backup"):
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            snapshot = str(conn.execute("SELECT pg_export_snapshot()").fetchone()[0])  # type: ignore[index]
            server = int(conn.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
            row = conn.execute("SELECT id, root FROM publishes ORDER BY id DESC LIMIT 1").fetchone()
            publish, root = (0, EMPTY_ROOT) if row is None else (int(row[0]), str(row[1]))
            entities = int(conn.execute("SELECT count(*) FROM entities").fetchone()[0])  # type: ignore[index]
            chunks = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])  # type: ignore[index]
        if _major(version.rpartition(" ")[2]) < server // 10000:
            raise StoreError(
                f"{version} can't dump this server (PostgreSQL {server // 10000}): install"
                f" pg_dump {server // 10000} or newer on PATH"
            )
        with _connection(engine.url) as dbname, staged(dest) as folder:
            _run(
                [
                    str(dump),
                    "-Fc",  # the custom format: compressed, what pg_restore reads
                    f"--schema={engine.db.schema}",
                    f"--snapshot={snapshot}",
                    "--no-owner",
                    "--no-privileges",
                    f"--file={folder / DUMP}",
                    f"--dbname={dbname}",
                ],
                "pg_dump",
            )
            files = (file_entry(folder, folder / DUMP),)
            manifest = Manifest(
                engine=engine.name,
                publish=publish,
                content_root=root,
                entities=entities,
                chunks=chunks,
                files=files,
                created_at=now(),
                details={"schema": engine.db.schema, "server": server, "pg_dump": version},
            )
            write_manifest(folder, manifest)
    finally:
        with translate("ending the backup's snapshot"):
            conn.execute("ROLLBACK")
        conn.close()
    return BackupReport(
        location=str(dest),
        engine=engine.name,
        publish=publish,
        content_root=root,
        entities=entities,
        chunks=chunks,
        files=list(files),
        bytes=sum(f.bytes for f in files),
        seconds=round(time.perf_counter() - started, 3),
    )


def _target(location: str) -> tuple[str, str]:
    """The server URL and schema of a restore's ``location`` (``pg:DIR`` is started)."""
    from knowledge_store.engines.postgres.engine import DEFAULT_SCHEMA, split_location
    from knowledge_store.engines.postgres.server import local_server_url

    if location.startswith("pg:"):
        directory = Path(location[3:]).expanduser()
        if not location[3:]:
            raise InvalidRequest("pg: needs a directory, e.g. pg:./.ks-pg", store=location)
        if directory.exists() and any(directory.iterdir()):
            raise InvalidRequest(
                f"{directory} already exists; restore into a new directory (nothing was restored)",
                field="store",
            )
        return local_server_url(directory), DEFAULT_SCHEMA
    url, schema = split_location(location)
    return url, check_schema_name(schema or DEFAULT_SCHEMA)


def restore_store(src: Path, manifest: Manifest, location: str) -> RestoreReport:
    """Load the verified dump of ``src`` into the new store ``location`` (module docstring)."""
    from knowledge_store.engines.postgres.engine import PostgresEngine

    started = time.perf_counter()
    verify(src, manifest)
    dumped = check_schema_name(str(manifest.details.get("schema", "ks")))
    url, schema = _target(location)
    db = Database(url, schema)
    conn = db.connect(register=False)
    try:
        with translate("preparing the restore"):
            taken = {
                str(name)
                for (name,) in conn.execute(
                    "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", ([schema, dumped],)
                )
            }
            if schema in taken:
                raise InvalidRequest(
                    f"schema {schema!r} already exists in {_redacted(url)}; restore into a"
                    " schema that holds nothing (…?schema=NAME) — nothing was restored",
                    field="store",
                )
            if dumped in taken:
                raise InvalidRequest(
                    f"the backup's schema {dumped!r} exists in {_redacted(url)}, and the dump"
                    " can only be loaded under its own name before it is renamed; restore"
                    " into another database — nothing was restored",
                    field="store",
                )
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        with _connection(url) as dbname:
            _run(
                [
                    str(tool("pg_restore")),
                    "--single-transaction",
                    "--exit-on-error",
                    "--no-owner",
                    "--no-privileges",
                    f"--dbname={dbname}",
                    str(src / DUMP),
                ],
                "pg_restore",
            )
        if dumped != schema:
            with translate("renaming the restored schema"):
                conn.execute(
                    sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
                        sql.Identifier(dumped), sql.Identifier(schema)
                    )
                )
    finally:
        conn.close()
    engine = PostgresEngine.open(location, create=False)
    try:
        stats = engine.stats()
    finally:
        engine.close()
    if stats.content_root != manifest.content_root:
        raise StoreError(
            f"the store restored at {location} is at {stats.content_root}, not the backup's"
            f" {manifest.content_root}",
            store=location,
        )
    return RestoreReport(
        store=location,
        engine="postgres",
        publish=manifest.publish,
        content_root=stats.content_root,
        entities=stats.entities,
        chunks=stats.chunks,
        verified_files=len(manifest.files),
        seconds=round(time.perf_counter() - started, 3),
    )
