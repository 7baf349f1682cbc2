"""``ks export`` and ``ks principals export``: a store's records and memberships, read back out.

The records are the ingest format (``Entity.to_record()``: fields, edges, ACL,
attributes, dates), one JSON object a line, read on one snapshot of the catalog
(:mod:`knowledge_store.engines.sql.export`): ``ks ingest`` of the file into an empty
store of any engine gives the same entities with the same content hashes — the same
content digest — and the same answers. FILTERS narrow what is exported; the export
stays closed under derivation (a code sample comes with its page, and the page with
its samples). Memberships are ``principals load``'s lines.
"""

from __future__ import annotations

import json
from typing import TextIO

from knowledge_store.engines.base import Engine
from knowledge_store.engines.sql.export import (
    entities_digest,
    exported_entities,
    memberships,
    selected_ids,
    store_digest,
)
from knowledge_store.model import ExportReport, Filters
from knowledge_store.model.declared import DeclaredFacet

__all__ = ["export_memberships", "export_records", "record_line", "store_digest_of"]


def record_line(record: dict[str, object]) -> str:
    """One JSON Lines line of a record (UTF-8 text as written, no trailing newline)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def export_records(engine: Engine, out: TextIO, filters: Filters) -> ExportReport:
    """Write the records FILTERS select (closed under derivation) to ``out``, one a line."""
    hashes: dict[str, str] = {}
    with engine.snapshot() as snap:
        if filters.pending:  # the store's declared facets, in this snapshot
            rows = snap.run("SELECT name, kind, attribute FROM facets", {})
            declared = {
                str(n): DeclaredFacet(str(n), str(k), None if a is None else str(a))  # type: ignore[arg-type]
                for n, k, a in rows
            }
            filters = filters.resolve(declared)
        ids, derived = selected_ids(snap, filters)
        for batch in exported_entities(snap, ids):
            for entity in batch:
                out.write(record_line(entity.to_record()) + "\n")
                hashes[entity.uid] = entity.content_hash
        root = snap.root
    return ExportReport(
        content_root=root, entities=len(hashes), derived=derived, digest=entities_digest(hashes)
    )


def export_memberships(engine: Engine, out: TextIO) -> int:
    """Write every membership as a ``{"group", "member"}`` line; how many."""
    with engine.snapshot() as snap:
        pairs = memberships(snap)
    for group, member in pairs:
        out.write(record_line({"group": group, "member": member}) + "\n")
    return len(pairs)


def store_digest_of(engine: Engine) -> tuple[str, str, int]:
    """``(content root, content digest, entities)`` of the whole store, on one snapshot."""
    with engine.snapshot() as snap:
        digest, count = store_digest(snap)
        return snap.root, digest, count
