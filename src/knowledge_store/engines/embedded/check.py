"""``ks check`` on the embedded engine: the catalog, then each derived index against it.

On one snapshot — a catalog read transaction at publish ``P`` and the derived indexes
pinned at ``P``, as a reader has (:meth:`.views.Views.open_snapshot`) — so that a
publish running meanwhile can't look like damage:

* SQLite's ``PRAGMA integrity_check`` (pages, b-trees, indexes);
* the shared catalog checks (:func:`knowledge_store.engines.sql.check.check_catalog`):
  every content hash recomputed, every chunk against its body, orphans. Text is read
  back leniently (bytes that are not UTF-8 are kept as surrogates), so a flipped byte
  is a finding, not a failure of the check;
* every chunk's stored vector (there, of the store's dimension, finite, not zero);
* the lexical index: its files' checksums, read again; its documents' chunk ids against
  the catalog's (missing, extra, twice); the uid stored with a sample of them;
* the dense index: its file's checksums; its live chunk ids against the catalog's, and
  a sample of its vectors against the catalog's (normalised, as it stores them).

A damaged index this process moved aside when it opened the store (see
``engine.py``) is reported too, as repaired.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_store.engines.embedded.db import connect
from knowledge_store.engines.embedded.generation import normalise
from knowledge_store.engines.embedded.quarantine import quarantined
from knowledge_store.engines.sql.check import Findings, Run, check_catalog
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.errors import StoreError
from knowledge_store.model import CheckReport, DamageKind

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.engine import EmbeddedEngine
    from knowledge_store.engines.embedded.views import View

__all__ = ["check_store"]

#: Chunks whose stored uid (lexical) or vector (dense) is compared with the catalog's.
SAMPLE = 1000
_VECTOR_BATCH = 2000


def _lenient(data: bytes) -> str:
    """Text as stored, bytes that are not UTF-8 kept as surrogates (they fail the hash)."""
    return data.decode("utf-8", "surrogateescape")


def check_store(engine: EmbeddedEngine) -> CheckReport:
    """Check the store of ``engine`` (see the module docstring)."""
    found = Findings()
    for what, reason in engine.moved_aside():
        kind: DamageKind = "lexical_files" if what == "lexical" else "dense_file"
        found.add(kind, count=1, details=[reason], repaired=True)
    for moved in quarantined(engine.path):
        found.notes.append(
            f"{moved.path}: a damaged index moved aside ({moved.reason}); delete it once inspected"
        )
    conn = connect(engine.catalog.path)
    conn.text_factory = _lenient
    try:
        _integrity(conn, found)
        _, root, view = engine.views.open_snapshot(conn)

        def run(sql: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"check: reading the catalog failed: {exc}") from exc

        check_catalog(run, SQLITE, found)
        ids = np.asarray([int(c) for (c,) in run("SELECT id FROM chunks ORDER BY id", {})])
        usable = _vectors(run, engine, found)
        _lexical(engine, view, run, ids, found)
        _dense(engine, view, run, ids, usable, found)
    finally:
        conn.close()
    return found.report(root, engine.name)


def _integrity(conn: sqlite3.Connection, found: Findings) -> None:
    """SQLite's own check of the catalog's pages, b-trees and indexes."""
    try:
        lines = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
    except sqlite3.Error as exc:  # so damaged that the check itself can't run
        lines = [f"PRAGMA integrity_check failed: {exc}"]
    if lines != ["ok"]:
        found.add("catalog_integrity", count=len(lines), details=lines)


def _owners(run: Run, chunk_ids: Sequence[int]) -> dict[int, str]:
    """The uid of the entity of each of ``chunk_ids`` (the first :data:`SAMPLE` asked)."""
    rows = run(
        "SELECT c.id, e.uid FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
        " WHERE c.id IN (SELECT value FROM json_each(:ids))",
        {"ids": json.dumps([int(c) for c in chunk_ids[:SAMPLE]])},
    )
    return {int(c): str(uid) for c, uid in rows}


def _vectors(run: Run, engine: EmbeddedEngine, found: Findings) -> np.ndarray:
    """Every chunk has a vector of the store's dimension, finite and not zero; the ids of
    those that have one (the dense index holds exactly those)."""
    model = engine.writer.model()
    if model is None:
        return np.zeros(0, dtype=np.int64)
    size = 4 * model[1]
    bad: set[str] = set()
    usable: list[int] = []
    count = checked = after = 0
    while True:
        rows = run(
            "SELECT c.id, e.uid, v.embedding FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
            " LEFT JOIN chunk_vectors AS v ON v.id = c.id WHERE c.id > :after ORDER BY c.id"
            f" LIMIT {_VECTOR_BATCH}",
            {"after": after},
        )
        if not rows:
            break
        after = int(rows[-1][0])
        for cid, uid, blob in rows:
            checked += 1
            if _usable(blob, size):
                usable.append(int(cid))
            else:
                bad.add(str(uid))
                count += 1
    found.checked["vectors"] = checked
    if bad:
        found.add("vectors", bad, count=count)
    return np.asarray(usable, dtype=np.int64)


def _usable(blob: object, size: int) -> bool:
    if not isinstance(blob, bytes) or len(blob) != size:
        return False
    vector = np.frombuffer(blob, dtype=np.float32)
    return bool(np.isfinite(vector).all() and np.abs(vector).sum() > 0)


def _compared(
    unique: np.ndarray, counts: np.ndarray, want: np.ndarray, known: np.ndarray, what: str
) -> tuple[list[str], list[int], int]:
    """What differs between an index's chunk ids (``unique``, each ``counts`` times) and the
    ones it must hold (``want``; ``known``: every chunk of the catalog): sentences, the
    chunks concerned, and how many things are wrong."""
    missing = np.setdiff1d(want, unique)
    extra = np.setdiff1d(unique, known)
    twice = unique[counts > 1]
    details = []
    if len(missing):
        details.append(f"{len(missing)} chunks of the catalog are not in the {what}")
    if len(extra):
        details.append(f"{len(extra)} entries of the {what} are of no chunk")
    if len(twice):
        details.append(f"{len(twice)} chunks are in the {what} more than once")
    concerned = [*missing.tolist(), *twice.tolist()]
    return details, concerned, len(missing) + len(extra) + len(twice)


def _lexical(
    engine: EmbeddedEngine, view: View, run: Run, ids: np.ndarray, found: Findings
) -> None:
    index = engine.lexical_index
    if damage := index.verify():
        found.add("lexical_files", count=len(damage), details=[str(d) for d in damage])
        return
    if view.lexical_details.get("rebuilding"):  # another process rebuilds it: not damage
        found.notes.append(f"the lexical index was not checked: {view.lexical_error}")
        return
    if view.lexical_error is not None:
        found.add("lexical_index", count=len(ids), details=[view.lexical_error])
        return
    indexed = np.asarray(index.chunk_ids(view.lexical), dtype=np.int64)
    found.checked["lexical_documents"] = len(indexed)
    unique, counts = np.unique(indexed, return_counts=True)
    details, concerned, bad = _compared(unique, counts, ids, ids, "lexical index")
    sample = _sample(np.intersect1d(ids, unique)).tolist()
    owners = _owners(run, sample)
    stored = index.uids_of(view.lexical, sample)
    wrong = [c for c in sample if stored.get(c) != owners.get(c)]
    if wrong:
        details.append(f"{len(wrong)} of {len(sample)} documents sampled name another entity")
    if details:
        owners |= _owners(run, concerned)
        uids = {owners[c] for c in [*concerned, *wrong] if c in owners}
        found.add("lexical_index", uids, count=bad + len(wrong), details=details)


def _dense(
    engine: EmbeddedEngine,
    view: View,
    run: Run,
    ids: np.ndarray,
    usable: np.ndarray,
    found: Findings,
) -> None:
    dense = engine.dense
    if dense is None:
        return
    if damage := dense.verify():
        found.add("dense_file", count=1, details=[damage])
    generation = view.dense
    if view.dense_error is not None or generation is None:
        details = [view.dense_error or "the dense index is not loaded"]
        found.add("dense_index", count=len(ids), details=details)
        return
    live = generation.row_ids[generation.live]
    found.checked["dense_vectors"] = len(live)
    unique, counts = np.unique(live, return_counts=True)
    details, concerned, bad = _compared(unique, counts, usable, ids, "dense index")
    sample = _sample(np.intersect1d(usable, unique))
    got_ids, got = dense.live_vectors(generation, sample)
    want = dict(zip(*_catalog_vectors(run, got_ids, dense.dimension), strict=True))
    differ = [
        int(c)
        for c, vector in zip(got_ids.tolist(), got, strict=True)
        if c not in want or not np.allclose(vector, normalise(want[c].reshape(1, -1))[0], atol=1e-4)
    ]
    found.checked["dense_vectors_compared"] = len(got_ids)
    if differ:
        details.append(f"{len(differ)} of {len(got_ids)} vectors sampled differ from the catalog's")
    if details:
        owners = _owners(run, [*concerned, *differ])
        uids = {owners[c] for c in [*concerned, *differ] if c in owners}
        found.add("dense_index", uids, count=bad + len(differ), details=details)


def _catalog_vectors(
    run: Run, ids: np.ndarray, dimension: int
) -> tuple[list[int], list[np.ndarray]]:
    """The usable stored vectors of ``ids``: their ids and vectors."""
    rows = run(
        "SELECT id, embedding FROM chunk_vectors WHERE id IN (SELECT value FROM json_each(:ids))",
        {"ids": json.dumps([int(c) for c in ids])},
    )
    keep = [(int(c), blob) for c, blob in rows if _usable(blob, 4 * dimension)]
    return [c for c, _ in keep], [np.frombuffer(b, dtype=np.float32) for _, b in keep]


def _sample(ids: np.ndarray) -> np.ndarray:
    """Up to :data:`SAMPLE` of ``ids``, spread evenly (the same ones every time)."""
    if len(ids) <= SAMPLE:
        return ids
    return ids[np.linspace(0, len(ids) - 1, SAMPLE).astype(np.int64)]
