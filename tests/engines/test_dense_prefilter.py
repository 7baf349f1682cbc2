"""The dense pre-filter of the embedded engine: skipped when every chunk is in, and never
skipped for an entity the caller can't read or a filter a NULL column fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_store.model import Filters, Identity
from knowledge_store.store import KnowledgeStore
from tests.conftest import HASH_SPEC


def _record(uid: str, acl: list[str], **extra: Any) -> dict[str, Any]:
    return {"uid": uid, "type": "page", "title": uid, "body": f"kiwi {uid}", "acl": acl, **extra}


@pytest.fixture()
def store(tmp_path: Path) -> Any:
    with KnowledgeStore.open(tmp_path / "s", embedder=HASH_SPEC) as opened:
        opened.ingest_records(
            [
                _record("open:1", ["everyone"], created_at="2024-01-01"),
                _record("open:2", ["everyone"], created_at="2024-06-01"),
                _record("undated", ["everyone"]),  # created_at is NULL
            ]
        )
        yield opened


def _allowed(store: Any, who: str, filters: Filters) -> np.ndarray | None:
    with store.engine.reader(Identity(who)) as reader:
        return store.engine.views.visible_chunks(reader, filters)  # type: ignore[no-any-return]


def test_everything_visible_needs_no_prefilter(store: Any) -> None:
    assert _allowed(store, "everyone", Filters()) is None


def test_a_null_date_fails_a_date_filter_and_keeps_the_prefilter(store: Any) -> None:
    allowed = _allowed(store, "everyone", Filters.build(created_from="2024-01-01"))
    assert allowed is not None and len(allowed) == 2
    hits = store.vector("kiwi undated", k=10, filters=Filters.build(created_from="2024-01-01"))
    assert {h.uid for h in hits.hits} == {"open:1", "open:2"}


def test_an_unreadable_entity_keeps_the_prefilter(store: Any) -> None:
    store.ingest_records([_record("secret", ["group:x"])])
    allowed = _allowed(store, "everyone", Filters())
    assert allowed is not None and len(allowed) == 3
    assert list(allowed) == sorted(allowed)
    assert "secret" not in {h.uid for h in store.vector("kiwi secret", k=10).hits}
