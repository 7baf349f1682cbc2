"""The PostgreSQL engine's cursor table: ``cursors``, unlogged, in the store's schema (see
:mod:`knowledge_store.engines.cursors`): a crash may lose the cursors, never the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from knowledge_store.engines.postgres.db import translate

if TYPE_CHECKING:
    from knowledge_store.engines.postgres.db import Database

__all__ = ["CURSORS_DDL", "CursorTable"]

CURSORS_DDL = (
    "CREATE UNLOGGED TABLE IF NOT EXISTS cursors (id text PRIMARY KEY,"
    " expires double precision NOT NULL, payload bytea NOT NULL)",
    "CREATE INDEX IF NOT EXISTS cursors_by_expiry ON cursors (expires)",
)


class CursorTable:
    """``cursors`` in the store's schema, written in short transactions of their own."""

    def __init__(self, db: Database, key: bytes) -> None:
        self._db = db
        self._key = key

    @property
    def key(self) -> bytes:
        return self._key

    def save(self, cursor: str, payload: bytes, expires: float) -> None:
        with self._db.write(lock=False) as conn, translate("saving a cursor"):
            conn.execute("DELETE FROM cursors WHERE expires < %s", (expires - 2 * 3600,))
            conn.execute(
                "INSERT INTO cursors VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE"
                " SET expires = excluded.expires, payload = excluded.payload",
                (cursor, expires, payload),
            )

    def load(self, cursor: str, now: float) -> bytes | None:
        with self._db.read() as conn, translate("reading a cursor"):
            row = conn.execute(
                "SELECT payload FROM cursors WHERE id = %s AND expires >= %s", (cursor, now)
            ).fetchone()
        return None if row is None else bytes(row[0])
