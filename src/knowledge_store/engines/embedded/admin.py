"""ACL administration of the embedded engine: the shared one (:mod:`..sql.acl`) over its catalog.

What is the embedded engine's own: a write transaction holds the store's write lock
(a file lock across processes) around SQLite's write transaction, and a grant or revoke
publishes through the engine (so the derived indexes re-point the entity's chunk
documents in the same publish).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from knowledge_store.engines.sql.acl import AclAdministration
from knowledge_store.engines.sql.dialect import SQLITE, SqlDialect
from knowledge_store.model import Entity

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.engine import EmbeddedEngine

__all__ = ["EmbeddedCatalog", "embedded_admin"]


class EmbeddedCatalog:
    """The embedded catalog as ACL administration needs it (``sql.acl.Catalog``)."""

    def __init__(self, engine: EmbeddedEngine) -> None:
        self._engine = engine

    @property
    def dialect(self) -> SqlDialect:
        return SQLITE

    def reading(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._engine.catalog.read()

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        with self._engine.write_lock(), self._engine.catalog.write() as conn:
            yield conn

    def publish_acl(self, change: str, decide: Callable[[sqlite3.Connection], list[Entity]]) -> str:
        engine = self._engine
        with engine.write_lock():  # what changes is decided and published under one lock
            with engine.catalog.read() as conn:
                changed = decide(conn)
            if not changed:
                return engine.content_root()
            return engine.publish([], [], kind=change, acl_only=changed).root


def embedded_admin(engine: EmbeddedEngine) -> AclAdministration:
    """The embedded engine's ``AclAdmin``."""
    return AclAdministration(EmbeddedCatalog(engine))
