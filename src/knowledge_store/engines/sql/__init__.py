"""What both SQL engines share: the dialects, FILTERS as SQL, the statements, the graph walk,
aggregate shaping, the publish planner and its catalog writes, the writer and ACL
administration. Each engine keeps only what is its own
(Tantivy and faiss; tsvector and pgvector)."""
