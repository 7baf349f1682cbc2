"""The PostgreSQL engine: the whole store in one database (DESIGN §4, docs/scaling.md).

============  ===============================================================
module        what
============  ===============================================================
``engine``    ``PostgresEngine``: the Engine protocol, ACL administration
``schema``    versioned migrations, the text functions, feature detection
``db``        per-thread connections, read snapshots, the write lock, errors
``publish``   the write path: one publish = one transaction, BM25 statistics
``lexical``   BM25 in SQL (default), ts_rank_cd, pg_search / pg_textsearch
``vector``    the visible-share planner and the vector statements
``fields``    sql, aggregates, successors
``graph``     the graph primitive (one statement) and query_graph's dialect
``server``    ``pg:DIR``: a local PostgreSQL + pgvector via pgserver
============  ===============================================================
"""
