"""``ks check``'s answer: what was verified, and each kind of damage found, with its uids.

The kinds of damage are a closed vocabulary (:data:`DAMAGE_KINDS`): each says what it
means and what repairs it, once, and every engine reports in it. The catalog is the
source of truth, so damage *in* it — a stored value that no longer hashes to what its
publish recorded — is repaired by ingesting those entities again from their source;
damage in a derived index (Tantivy, faiss, tsvector, BM25 statistics) by ``ks rebuild``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from pydantic import Field

from knowledge_store.model.answers import Answer

__all__ = [
    "CHECK_UIDS_SHOWN",
    "DAMAGE_KINDS",
    "CheckFinding",
    "CheckReport",
    "DamageKind",
]

#: How many uids a finding lists (``count`` is always the exact number).
CHECK_UIDS_SHOWN = 100

DamageKind = Literal[
    "catalog_integrity",
    "unreadable",
    "content_hash",
    "chunk_text",
    "orphan_chunks",
    "orphan_edges",
    "vectors",
    "lexical_files",
    "lexical_index",
    "dense_file",
    "dense_index",
    "text_index",
    "bm25_statistics",
]

_REINGEST = (
    "delete these entities (`ks delete UID…`) and ingest them again from their source, or"
    " restore the store from a backup (ingested again as they are, they are skipped: their"
    " stored content hash is still the one their publish recorded)"
)
_REBUILD = "`ks rebuild` rebuilds it from the catalog"


@dataclass(frozen=True)
class _Kind:
    meaning: str
    repair: str


#: What each kind of damage means, and what repairs it.
DAMAGE_KINDS: dict[str, _Kind] = {
    "catalog_integrity": _Kind(
        "the catalog database's own check failed (pages, b-tree indexes)",
        "restore the catalog from a backup; `ks rebuild` cannot repair the source of truth",
    ),
    "unreadable": _Kind(
        "entities whose stored fields can't be read back (text that is not UTF-8, attributes"
        " that are not JSON, a missing body or ACL set)",
        _REINGEST,
    ),
    "content_hash": _Kind(
        "entities whose stored fields, edges or ACL no longer hash to the content hash their"
        " publish recorded: the catalog's copy is not what was published",
        _REINGEST,
    ),
    "chunk_text": _Kind(
        "chunks whose text is not the part of their entity's body they say they are",
        _REINGEST,
    ),
    "orphan_chunks": _Kind(
        "chunks of no entity", "restore the catalog from a backup, or ingest the store anew"
    ),
    "orphan_edges": _Kind(
        "edges from entities that do not exist (the uids listed)",
        "ingest those uids again, or delete them (`ks delete`)",
    ),
    "vectors": _Kind(
        "chunks whose stored vector is missing or unusable (wrong size, not finite, zero)",
        "`ks rebuild --reembed` embeds every chunk again",
    ),
    "lexical_files": _Kind("lexical index files that fail their checksums", _REBUILD),
    "lexical_index": _Kind(
        "the lexical index disagrees with the catalog (chunks missing, extra or twice)",
        _REBUILD,
    ),
    "dense_file": _Kind("the dense index file fails its checksums", _REBUILD),
    "dense_index": _Kind(
        "the dense index disagrees with the catalog (chunks missing or extra, vectors that"
        " differ from the catalog's)",
        _REBUILD,
    ),
    "text_index": _Kind(
        "chunks whose full-text vector (tsvector) is not what their text gives", _REBUILD
    ),
    "bm25_statistics": _Kind(
        "BM25 statistics that disagree with the chunks (postings of chunks gone, chunks"
        " without postings, wrong document or chunk counts)",
        _REBUILD,
    ),
}
assert set(DAMAGE_KINDS) == set(get_args(DamageKind))


class CheckFinding(Answer):
    """One kind of damage: how much, which entities, what it means and what repairs it."""

    kind: DamageKind
    count: int = Field(description="how many entities, chunks or files are damaged")
    uids: list[str] = Field(
        default_factory=list,
        description=f"the entities concerned (the first {CHECK_UIDS_SHOWN}, sorted)",
    )
    details: list[str] = Field(
        default_factory=list, description="what the check saw (files, database messages)"
    )
    message: str
    repair: str
    repaired: bool = Field(
        False, description="already repaired (a damaged index moved aside and rebuilt on open)"
    )


class CheckReport(Answer):
    """``check``: ``ok`` when nothing is damaged; else every kind of damage found."""

    content_root: str
    engine: str
    ok: bool
    checked: dict[str, int] = Field(description="what was verified: entities, chunks, …")
    damage: list[CheckFinding]
    notes: list[str] = Field(default_factory=list)

    @property
    def exit_status(self) -> int:
        """The CLI's exit status: 1 when damage was found (repaired on open or not)."""
        return 0 if self.ok else 1
