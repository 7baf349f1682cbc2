"""The PostgreSQL engine: the whole store in one database (DESIGN §4, docs/scaling.md).

============  ===============================================================
module        what
============  ===============================================================
``engine``    ``PostgresEngine``: opens readers; the writer and ACL administration
``schema``    the schema versions, the text functions, feature detection
``migrate``   opening a store: pgvector, the schema, migrations
``acl``       principals and memberships: expansion, chains, cycles, explain
``db``        per-thread connections, read snapshots, the write lock, errors
``publish``   the write path: one publish = one transaction, BM25 statistics
``lexical``   BM25 in SQL (default), ts_rank_cd, pg_search / pg_textsearch
``vector``    the visible-share planner and the vector statements
``reader``    the point-in-time reader (one REPEATABLE READ transaction)
``graph``     query_graph's statement, values bound as PostgreSQL reads them
``server``    ``pg:DIR``: a local PostgreSQL + pgvector via pgserver
============  ===============================================================
"""

import importlib.util

from knowledge_store.errors import StoreError

_MISSING = [m for m in ("psycopg", "pgvector") if importlib.util.find_spec(m) is None]
if _MISSING:  # pragma: no cover - the extra is part of the dev install
    raise StoreError(
        "the PostgreSQL engine needs its extra: pip install 'knowledge-store[postgres]'"
        f" ({', '.join(_MISSING)} missing)"
    )

__all__: list[str] = []
