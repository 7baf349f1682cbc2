"""A replica of an embedded store: a fresh store in a temporary directory, naming chunks
with the source's key and recording its model (see ``engines.base.Replica``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from knowledge_store.engines.sql.history import follow_source, replace_memberships

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.engine import EmbeddedEngine

__all__ = ["EmbeddedReplica"]


class EmbeddedReplica:
    def __init__(self, source: EmbeddedEngine) -> None:
        from knowledge_store.engines.embedded.engine import EmbeddedEngine

        self._dir = Path(tempfile.mkdtemp(prefix="ks-replica-"))
        engine = EmbeddedEngine(self._dir / "store")
        follow_source(engine, source)
        self._engine = engine

    @property
    def engine(self) -> EmbeddedEngine:
        return self._engine

    def set_memberships(self, pairs: Sequence[tuple[str, str]]) -> None:
        with self._engine.writing() as conn:
            replace_memberships(conn, self._engine.dialect, pairs)

    def discard(self) -> None:
        self._engine.close()
        shutil.rmtree(self._dir, ignore_errors=True)
