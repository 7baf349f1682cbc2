"""The answers of the everyday operations: export, backup, restore, declared facets (``ks
export``, ``ks backup``, ``ks restore``, ``ks facets``) — pydantic like every answer
(``model_dump()`` is the ``--json`` shape)."""

from __future__ import annotations

from pydantic import Field

from knowledge_store.model.answers import Answer

__all__ = [
    "BackupFile",
    "BackupReport",
    "DeclaredFacets",
    "ExportReport",
    "FacetInfo",
    "RestoreReport",
]


class ExportReport(Answer):
    """What an export wrote: the records (one a line, the ingest format) of ``entities``
    entities at one content root, and their content ``digest`` (sha256 over the sorted
    ``uid:content_hash`` lines: an ingest of the export gives a store of the same digest).
    ``derived``: the entities FILTERS did not select that came along as the parent or a
    derived entity of a selected one (an export is closed under derivation)."""

    content_root: str
    entities: int
    derived: int
    digest: str


class BackupFile(Answer):
    """One file of a backup: its path inside the backup, its size and its sha256."""

    path: str
    bytes: int
    sha256: str


class BackupReport(Answer):
    """A backup: where it is, the engine and the publish it holds, its files (the manifest
    lists them with their checksums), how long it took."""

    location: str
    engine: str
    publish: int
    content_root: str
    entities: int
    chunks: int
    files: list[BackupFile]
    bytes: int
    seconds: float


class RestoreReport(Answer):
    """A restore: the new store, the publish and content root it opened at (the backup's,
    checked), what was verified, what the derived indexes needed, how long it took."""

    store: str
    engine: str
    publish: int
    content_root: str
    entities: int
    chunks: int
    verified_files: int
    #: Each derived index that was not at the backup's publish, and what brought it there.
    caught_up: list[str] = Field(default_factory=list)
    seconds: float


class FacetInfo(Answer):
    """A declared facet: its name (the ``attributes`` key it is read from) and kind, the
    filters and dimensions it adds, and how many entities have a value (how many values)."""

    name: str
    kind: str
    #: The ``attributes`` key its values are read from.
    attribute: str
    filters: list[str]
    dimensions: list[str]
    entities: int
    values: int


class DeclaredFacets(Answer):
    """The store's declared facets (``ks facets list``); ``add`` and ``remove`` answer with
    the facets after the change."""

    facets: list[FacetInfo]
