"""What both engines score text with: BM25's k1 and b, and the lexical field boosts.

Declared once (STYLE habit 15). The embedded engine's Tantivy query
(``engines/embedded/analysis.text_clauses``) and PostgreSQL's SQL BM25
(``engines/postgres/lexical``) read these at query time, so a bench that varies
one (``bench/eval_fields.py``, ``bench/tune_lexical.py``) sets it here, for both.

Every word of a query is matched on ``body`` (title + heading path + text) at
1, on ``title`` and ``heading`` at their boosts; identifiers (``pg_hba.conf``,
``err-1042``) on ``ident``. A boost of 0 leaves that field out of the query.
"""

from __future__ import annotations

__all__ = ["BM25_B", "BM25_K1", "HEADING_BOOST", "IDENTIFIER_BOOST", "TITLE_BOOST"]

#: Okapi BM25's saturation and length normalisation: Tantivy's fixed values, which the SQL
#: BM25 uses too. Other values help one shared set and lose on the other
#: (docs/relevance.md §8.2).
BM25_K1 = 1.2
BM25_B = 0.75
#: The identifier field (measured with bench/tune_lexical.py on postgres-docs: nDCG@10
#: 0.801 with it, 0.789 without, 0.796 with every token on it).
IDENTIFIER_BOOST = 1.0
#: The title field: a light touch; every chunk repeats its page title, so a heavy boost
#: drowns the body (title boost 1.0: 0.776; no title field: 0.790).
TITLE_BOOST = 0.25
#: The heading field — the chunk's innermost heading below the title —: a lighter touch
#: still; the body already holds the heading path. Measured on both shared sets
#: (docs/relevance.md §8, bench/eval_fields.py): fused nDCG@10 postgres-docs +0.0026
#: [+0.0003, +0.0049], sqlite-git-faq +0.0132 [+0.0000, +0.0395] (one query), macro +0.0079
#: [+0.0005, +0.0215]; boosts of 0.5 and above lose on postgres-docs.
HEADING_BOOST = 0.1
