"""The audit log's storage, written once for both engines (DESIGN §8).

Three tables, in the same SQL on SQLite and PostgreSQL (through the dialect's parameters):

* ``audit_log`` — one row per record: its ``seq`` (1, 2, 3 …), the canonical JSON that the
  chain hashes (``record``), its ``digest``, and copies of the fields a lookup filters on
  (time, operation, surface, identity, outcome). A trigger refuses ``UPDATE`` and
  ``DELETE`` (the log is append-only; ``ks gc`` lifts it in its own transaction) — a guard
  against accidents; the hash chain is what detects tampering.
* ``audit_names`` — ``(uid, seq)`` for every entity a record names: "who saw this document".
* ``audit_head`` — one row: the last record's seq and digest (updated by every append, in
  the same transaction: a tail cut from ``audit_log`` alone is seen), the base the kept
  chain starts from (after ``ks gc``: the last removed record) and the settings.

An append is one transaction: it locks the head (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL:
``SELECT … FOR UPDATE`` on the head row), numbers and chains the records, inserts them and
moves the head. Records are durable when it returns; the caller acknowledges nothing before.
Where the tables live is the engine's: the embedded engine keeps them in ``audit.sqlite``
beside the catalog (a read never waits for a publish's write transaction), PostgreSQL in the
store's schema.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.errors import StoreError
from knowledge_store.model.audit import GENESIS, canonical_json, chain_digest

__all__ = [
    "AuditStorage",
    "AuditTransactions",
    "Head",
    "RecordFilter",
    "StoredRecord",
    "audit_ddl",
    "creation_params",
    "names_of",
]

#: The columns a lookup filters on, copied from the record (``audit verify`` checks the copies).
INDEXED = ("at", "operation", "surface", "identity", "outcome")


def creation_params() -> dict[str, str]:
    """The parameters of :func:`audit_ddl`'s statements: the genesis digest and a new key
    (the one query texts are hashed with, made with the log)."""
    return {"genesis": GENESIS, "key": secrets.token_hex(32)}


def audit_ddl(d: SqlDialect) -> list[str]:
    """The statements that create the audit tables (idempotent; parameters:
    :func:`creation_params`). The engine adds the guard against changes (its
    ``append_only_ddl``)."""
    return [
        f"""CREATE TABLE IF NOT EXISTS audit_log (
            seq       {d.sequence_key},
            at        TEXT NOT NULL,
            operation TEXT NOT NULL,
            surface   TEXT NOT NULL,
            identity  TEXT,
            outcome   TEXT NOT NULL,
            record    TEXT NOT NULL,
            digest    TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS audit_log_by_at ON audit_log (at)",
        "CREATE INDEX IF NOT EXISTS audit_log_by_identity ON audit_log (identity, seq)",
        f"""CREATE TABLE IF NOT EXISTS audit_names (
            uid TEXT NOT NULL,
            seq {d.big_integer} NOT NULL,
            PRIMARY KEY (uid, seq)
        )""",
        "CREATE INDEX IF NOT EXISTS audit_names_by_seq ON audit_names (seq)",
        f"""CREATE TABLE IF NOT EXISTS audit_head (
            id          INTEGER PRIMARY KEY CHECK (id = 1),
            seq         {d.big_integer} NOT NULL,
            digest      TEXT NOT NULL,
            base_seq    {d.big_integer} NOT NULL,
            base_digest TEXT NOT NULL,
            settings    TEXT NOT NULL,
            key         TEXT NOT NULL
        )""",
        "INSERT INTO audit_head (id, seq, digest, base_seq, base_digest, settings, key)"
        f" VALUES (1, 0, {d.param('genesis')}, 0, {d.param('genesis')}, '{{}}', {d.param('key')})"
        " ON CONFLICT (id) DO NOTHING",
    ]


class AuditTransactions(Protocol):
    """What the log needs of an engine: transactions on the connection its tables are on."""

    @property
    def dialect(self) -> SqlDialect: ...

    def audit_reading(self) -> AbstractContextManager[Any]:
        """A connection in a read transaction (one snapshot)."""
        ...

    def audit_appending(self) -> AbstractContextManager[Any]:
        """A connection in a write transaction on the audit tables."""
        ...

    #: Flush every append to disk before it returns (where the engine decides; PostgreSQL
    #: follows the server's ``synchronous_commit``).
    fsync: bool

    def checkpoint(self) -> tuple[int, str] | None:
        """The checkpoint the catalog keeps: a recent record's (seq, digest)."""
        ...

    def set_checkpoint(self, seq: int, digest: str, *, wait: bool) -> bool:
        """Keep ``(seq, digest)`` as the checkpoint unless a later one is kept; without
        ``wait``, only if that takes no waiting (False: skipped)."""
        ...

    def close(self) -> None:
        """Close what the log opened of its own (the engine closes the rest)."""
        ...

    def disk_bytes(self) -> int:
        """What the audit tables and their indexes take on disk now."""
        ...

    def pruning(self, conn: Any) -> AbstractContextManager[None]:
        """The append-only guard lifted for the block, in ``conn``'s transaction (``ks gc``)."""
        ...


@dataclass(frozen=True)
class Head:
    """The chain's head, its base (where the kept records start) and the stored settings."""

    seq: int
    digest: str
    base_seq: int
    base_digest: str
    settings: dict[str, Any]
    #: The key query texts are hashed with (hex).
    key: str


@dataclass(frozen=True)
class StoredRecord:
    """A row of ``audit_log``: the indexed copies, the hashed text and the digest."""

    seq: int
    at: str
    operation: str
    surface: str
    identity: str | None
    outcome: str
    record: str
    digest: str

    def fields(self) -> dict[str, Any]:
        """The record's fields (the hashed JSON) with its digest."""
        found: dict[str, Any] = json.loads(self.record)
        found["digest"] = self.digest
        return found


@dataclass(frozen=True)
class RecordFilter:
    """Which records ``audit list`` and ``export`` want (each None: any)."""

    since: str | None = None
    until: str | None = None
    identity: str | None = None
    uid: str | None = None
    operation: str | None = None
    after: int = 0


def names_of(record: Mapping[str, Any]) -> list[str]:
    """The distinct uids a record names (returned, or changed)."""
    found = [n["uid"] for n in record.get("returned") or () if isinstance(n, dict)]
    changed = record.get("changed") or {}
    found += [u for u in changed.get("uids") or () if isinstance(u, str)]
    return list(dict.fromkeys(found))


_COLUMNS = "seq, at, operation, surface, identity, outcome, record, digest"


class AuditStorage:
    """The audit tables over an engine's transactions."""

    def __init__(self, tx: AuditTransactions) -> None:
        self._tx = tx
        self._d = tx.dialect

    @property
    def fsync(self) -> bool:
        return self._tx.fsync

    @fsync.setter
    def fsync(self, value: bool) -> None:
        self._tx.fsync = value

    def checkpoint(self) -> tuple[int, str] | None:
        return self._tx.checkpoint()

    def close(self) -> None:
        self._tx.close()

    def set_checkpoint(self, seq: int, digest: str, *, wait: bool) -> bool:
        return self._tx.set_checkpoint(seq, digest, wait=wait)

    # -- appending ---------------------------------------------------------------------------------
    def append(self, records: Sequence[dict[str, Any]]) -> list[tuple[int, str]]:
        """Number, chain and insert ``records`` (without ``seq``/``prev``) in one transaction;
        their ``(seq, digest)``, durable when this returns."""
        d = self._d
        p = d.param
        with self._tx.audit_appending() as conn:
            row = conn.execute(
                f"SELECT seq, digest FROM audit_head WHERE id = 1{d.for_update}"
            ).fetchone()
            if row is None:
                raise StoreError(
                    "the audit log has no head row: the store's audit tables are damaged"
                )
            seq, prev = int(row[0]), str(row[1])
            rows: list[dict[str, Any]] = []
            names: list[dict[str, Any]] = []
            out: list[tuple[int, str]] = []
            for fields in records:
                seq += 1
                record = {**fields, "seq": seq, "prev": prev}
                text = canonical_json(record)
                prev = chain_digest(prev, text)
                rows.append(
                    {
                        "seq": seq,
                        "at": record["at"],
                        "operation": record["operation"],
                        "surface": record["surface"],
                        "identity": record.get("identity"),
                        "outcome": record["outcome"],
                        "record": text,
                        "digest": prev,
                    }
                )
                names += [{"uid": uid, "seq": seq} for uid in names_of(record)]
                out.append((seq, prev))
            conn.cursor().executemany(
                "INSERT INTO audit_log (seq, at, operation, surface, identity, outcome, record,"
                f" digest) VALUES ({p('seq')}, {p('at')}, {p('operation')}, {p('surface')},"
                f" {p('identity')}, {p('outcome')}, {p('record')}, {p('digest')})",
                rows,
            )
            if names:
                conn.cursor().executemany(
                    f"INSERT INTO audit_names (uid, seq) VALUES ({p('uid')}, {p('seq')})"
                    " ON CONFLICT DO NOTHING",
                    names,
                )
            conn.execute(
                f"UPDATE audit_head SET seq = {p('seq')}, digest = {p('digest')} WHERE id = 1",
                {"seq": seq, "digest": prev},
            )
        return out

    # -- reading -------------------------------------------------------------------------------------
    def head(self) -> Head:
        with self._tx.audit_reading() as conn:
            return _head(conn)

    def record(self, seq: int) -> StoredRecord | None:
        with self._tx.audit_reading() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM audit_log WHERE seq = {self._d.param('seq')}",
                {"seq": seq},
            ).fetchone()
        return None if row is None else StoredRecord(*row)

    def find(
        self, where: RecordFilter, limit: int, *, newest_first: bool = True
    ) -> list[StoredRecord]:
        """Up to ``limit`` records matching ``where``."""
        d = self._d
        p = d.param
        conds = [f"l.seq > {p('after')}"]
        params: dict[str, Any] = {"after": where.after, "limit": limit}
        if where.since is not None:
            conds.append(f"l.at >= {p('since')}")
            params["since"] = where.since
        if where.until is not None:
            conds.append(f"l.at < {p('until')}")
            params["until"] = where.until
        if where.identity is not None:
            conds.append(f"l.identity = {p('identity')}")
            params["identity"] = where.identity
        if where.operation is not None:
            conds.append(f"l.operation = {p('operation')}")
            params["operation"] = where.operation
        source = "audit_log AS l"
        if where.uid is not None:
            source = f"audit_names AS n JOIN audit_log AS l ON l.seq = n.seq AND n.uid = {p('uid')}"
            params["uid"] = where.uid
        order = "DESC" if newest_first else "ASC"
        columns = ", ".join(f"l.{c.strip()}" for c in _COLUMNS.split(","))
        sql = (
            f"SELECT {columns} FROM {source} WHERE {' AND '.join(conds)}"
            f" ORDER BY l.seq {order} LIMIT {p('limit')}"
        )
        with self._tx.audit_reading() as conn:
            return [StoredRecord(*row) for row in conn.execute(sql, params).fetchall()]

    def scan(
        self, where: RecordFilter = RecordFilter(), batch: int = 1000
    ) -> Iterator[StoredRecord]:
        """Every record matching ``where`` in order, ``batch`` at a time (each batch its own
        snapshot: an export reads a log that grows meanwhile up to where it got)."""
        after = where.after
        while True:
            found = self.find(
                RecordFilter(
                    where.since, where.until, where.identity, where.uid, where.operation, after
                ),
                batch,
                newest_first=False,
            )
            yield from found
            if len(found) < batch:
                return
            after = found[-1].seq

    def names(self, first: int, last: int) -> dict[int, set[str]]:
        """The ``audit_names`` rows of records ``first``..``last``, by seq."""
        p = self._d.param
        out: dict[int, set[str]] = {}
        with self._tx.audit_reading() as conn:
            rows = conn.execute(
                f"SELECT seq, uid FROM audit_names WHERE seq >= {p('first')} AND seq <= {p('last')}",
                {"first": first, "last": last},
            ).fetchall()
        for seq, uid in rows:
            out.setdefault(int(seq), set()).add(str(uid))
        return out

    def disk_bytes(self) -> int:
        return self._tx.disk_bytes()

    def bytes_used(self) -> tuple[int, int]:
        """(records, bytes of their hashed text) — the log's size, for ``stats`` and benches."""
        with self._tx.audit_reading() as conn:
            row = conn.execute(
                "SELECT count(*), coalesce(sum(length(record)), 0) FROM audit_log"
            ).fetchone()
        return int(row[0]), int(row[1])

    # -- settings ------------------------------------------------------------------------------------
    def save_settings(self, settings: Mapping[str, Any]) -> None:
        with self._tx.audit_appending() as conn:
            conn.execute(
                f"UPDATE audit_head SET settings = {self._d.param('settings')} WHERE id = 1",
                {"settings": canonical_json(dict(settings))},
            )

    # -- gc --------------------------------------------------------------------------------------------
    def count_before(self, before: str) -> int:
        """How many records :meth:`prune` would remove."""
        with self._tx.audit_reading() as conn:
            return _cut(conn, self._d, before)[0]

    def prune(self, before: str) -> int:
        """Remove the records older than ``before`` (an ISO time) — the log's beginning up to
        the first record that is not (the chain stays one piece); the last one removed becomes
        the base the kept chain starts from. How many were removed."""
        d = self._d
        p = d.param
        with self._tx.audit_appending() as conn:
            count, last = _cut(conn, d, before)
            if not count:
                return 0
            (digest,) = conn.execute(
                f"SELECT digest FROM audit_log WHERE seq = {p('seq')}", {"seq": last}
            ).fetchone()
            with self._tx.pruning(conn):
                cur = conn.execute(f"DELETE FROM audit_log WHERE seq <= {p('seq')}", {"seq": last})
            removed = int(cur.rowcount)
            conn.execute(f"DELETE FROM audit_names WHERE seq <= {p('seq')}", {"seq": last})
            conn.execute(
                f"UPDATE audit_head SET base_seq = {p('seq')}, base_digest = {p('digest')}"
                " WHERE id = 1",
                {"seq": last, "digest": str(digest)},
            )
        return removed


def _cut(conn: Any, d: SqlDialect, before: str) -> tuple[int, int]:
    """(how many, the last seq) of the log's beginning older than ``before``."""
    row = conn.execute(
        f"SELECT min(seq) FROM audit_log WHERE at >= {d.param('before')}", {"before": before}
    ).fetchone()
    if row is not None and row[0] is not None:
        last = int(row[0]) - 1
    else:
        (top,) = conn.execute("SELECT coalesce(max(seq), 0) FROM audit_log").fetchone()
        last = int(top)
    (count,) = conn.execute(
        f"SELECT count(*) FROM audit_log WHERE seq <= {d.param('last')}", {"last": last}
    ).fetchone()
    return int(count), last


def _head(conn: Any) -> Head:
    row = conn.execute(
        "SELECT seq, digest, base_seq, base_digest, settings, key FROM audit_head WHERE id = 1"
    ).fetchone()
    if row is None:
        raise StoreError("the audit log has no head row: the store's audit tables are damaged")
    return Head(
        int(row[0]), str(row[1]), int(row[2]), str(row[3]), json.loads(row[4] or "{}"), str(row[5])
    )
