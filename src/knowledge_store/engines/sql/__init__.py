"""What both SQL engines share: the dialects, FILTERS as SQL, the statements, the graph walk,
aggregate shaping and the publish planner. Each engine keeps only what is its own
(Tantivy and faiss; tsvector and pgvector)."""
