"""Each chunk's entity uid, in memory: the vector list's fold without a statement per search.

The dense index answers chunk ids; the fused ranking needs their entities. Read
from the catalog, that lookup was 0.4 ms of a fused search at 100k chunks and
1.3 ms at 1M (~110 random rows of ``chunks`` and ``entities``). Two facts make an
in-memory map safe for every snapshot at once:

- a chunk belongs to one entity row for its whole life, and that row's uid never
  changes (an update keeps the row; a delete takes its chunks with it);
- chunk ids are never reused (``AUTOINCREMENT``), and a later publish only adds
  higher ones.

So the map only grows: ``(sorted chunk ids, uid of each)``. A reader whose snapshot
is newer than the map first reads the chunks above its highest id (a range of the
primary key: only what was published since). An id the map lacks — a chunk deleted
before the map was read, in an older reader's snapshot — is looked up in the catalog
as before. The reader's own final check has decided visibility already; the map only
names owners.

The first full read (0.55 s at 1M chunks, from the entity and ``chunks_by_entity``
indexes alone) runs on a background thread, and only once a process has asked twice:
a one-shot ``ks search`` never pays it; a server pays it once, off the request path.
Until it is there, the catalog answers.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from knowledge_store.engines.embedded.db import connect
from knowledge_store.engines.sql import statements
from knowledge_store.engines.sql.dialect import SQLITE

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.catalog import Catalog

__all__ = ["ChunkOwners"]

log = logging.getLogger(__name__)

#: Lookups a process makes before the map is read (the first is answered by the catalog).
_ASKS_BEFORE_LOADING = 2
_BATCH = 65_536


class _Map:
    """One state of the map: replaced whole, read without a lock. ``uids`` is shared by
    every state and only appended to (under the lock): a state never indexes past the
    entries it was made with."""

    __slots__ = ("ids", "owner", "publish", "uids")

    def __init__(self, ids: np.ndarray, owner: np.ndarray, uids: list[str], publish: int) -> None:
        self.ids = ids  # sorted chunk ids
        self.owner = owner  # index into uids, per id
        self.uids = uids
        self.publish = publish  # every chunk of this publish is in

    @property
    def upto(self) -> int:
        return int(self.ids[-1]) if len(self.ids) else 0


def _arrays(
    rows: Sequence[tuple[int, str]], uids: list[str], index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    ids = np.empty(len(rows), np.int64)
    owner = np.empty(len(rows), np.int32)
    for i, (cid, uid) in enumerate(rows):
        at = index.get(uid)
        if at is None:
            at = index[uid] = len(uids)
            uids.append(uid)
        ids[i] = cid
        owner[i] = at
    return ids, owner


class ChunkOwners:
    """The map of one engine (see the module docstring)."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._map: _Map | None = None
        self._index: dict[str, int] = {}  # uid → its place in the map's uids
        self._lock = threading.Lock()
        self._asks = 0
        self._loader: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def loaded(self) -> bool:
        return self._map is not None

    def owners(self, ids: Sequence[int], conn: sqlite3.Connection, publish: int) -> dict[int, str]:
        """The uid of each of ``ids`` the map knows (``conn``: the caller's snapshot, of
        ``publish``); the caller asks the catalog for the rest."""
        current = self._map
        if current is None:
            self._ask()
            return {}
        if publish > current.publish:
            current = self._catch_up(conn, publish)
        if not len(current.ids):
            return {}
        wanted = np.asarray(ids, dtype=np.int64)
        at = np.minimum(np.searchsorted(current.ids, wanted), len(current.ids) - 1)
        found = current.ids[at] == wanted
        uids = current.uids
        return {
            int(c): uids[o]
            for c, o, ok in zip(ids, current.owner[at].tolist(), found.tolist(), strict=True)
            if ok
        }

    def load(self) -> None:
        """Read the whole map now, on this thread (what the background loader runs)."""
        conn = connect(self._catalog.path)  # its own: a scan would leave a pooled one's cache cold
        try:
            conn.execute("BEGIN")
            publish = self._catalog.latest_publish(conn)[0]
            uids: list[str] = []
            index: dict[str, int] = {}
            parts: list[tuple[np.ndarray, np.ndarray]] = []
            cursor = conn.execute(*statements.chunk_owners(SQLITE))
            while rows := cursor.fetchmany(_BATCH):
                if self._stop.is_set():
                    return
                parts.append(_arrays(rows, uids, index))
        finally:
            conn.close()
        ids = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
        owner = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, np.int32)
        order = np.argsort(ids, kind="stable")
        with self._lock:
            if self._map is None:
                self._map = _Map(ids[order], owner[order], uids, publish)
                self._index = index

    def wait(self) -> None:
        """Wait for the background read, if one runs."""
        loader = self._loader
        if loader is not None and loader is not threading.current_thread():
            loader.join()

    def close(self) -> None:
        """Stop the background read (at its next batch) and wait for it."""
        self._stop.set()
        self.wait()

    def _ask(self) -> None:
        with self._lock:
            self._asks += 1
            if self._loader is not None or self._asks < _ASKS_BEFORE_LOADING:
                return
            self._loader = threading.Thread(target=self._load_quietly, name="ks-chunk-owners")
            self._loader.daemon = True
            self._loader.start()

    def _load_quietly(self) -> None:
        try:
            self.load()
        except (sqlite3.Error, MemoryError) as exc:  # the catalog keeps answering
            log.warning("chunk owners: not read (%s); the catalog answers instead", exc)

    def _catch_up(self, conn: sqlite3.Connection, publish: int) -> _Map:
        """The map with the chunks of ``conn``'s snapshot above its highest id."""
        with self._lock:
            current = self._map
            assert current is not None
            if current.publish >= publish:
                return current
            rows = conn.execute(*statements.chunk_owners(SQLITE, current.upto)).fetchall()
            ids, owner = _arrays(rows, current.uids, self._index)
            self._map = _Map(
                np.concatenate([current.ids, ids]),
                np.concatenate([current.owner, owner]),
                current.uids,
                publish,
            )
            return self._map
