"""Where a paged read keeps the ranking its cursor pages through: the engine's cursor table.

A cursor (``retrieval/paging.py``) is a ranking of up to 1,000 results made once, at one
content root, and read a page at a time. The ranking is kept in the store — the embedded
engine's ``cursors.sqlite`` beside its catalog (a reader writes there without taking the
store's write lock or the catalog's), PostgreSQL's unlogged ``cursors`` table — so that any
process serving the store (a worker of ``ks serve``, a later ``ks search --cursor``) reads
the next page of the same ranking. Rows expire (:data:`CURSOR_TTL_S`); each save removes
the expired ones. ``key`` is the store's secret for cursors: a cursor is MAC'd with it.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Protocol

__all__ = ["CURSOR_TTL_S", "Cursors", "derive_key"]

#: How long a cursor's ranking is kept after its first page.
CURSOR_TTL_S = 3600.0


class Cursors(Protocol):
    """An engine's cursor table."""

    @property
    def key(self) -> bytes:
        """The store's secret for cursors (MAC key)."""
        ...

    def save(self, cursor: str, payload: bytes, expires: float) -> None:
        """Keep ``payload`` under ``cursor`` until ``expires`` (epoch seconds)."""
        ...

    def load(self, cursor: str, now: float) -> bytes | None:
        """The payload of ``cursor`` if it is there and not expired at ``now``."""
        ...


def derive_key(secret: bytes, purpose: str) -> bytes:
    """A key for ``purpose`` derived from a store's secret (HMAC-SHA256)."""
    return hmac.new(secret, purpose.encode(), hashlib.sha256).digest()
