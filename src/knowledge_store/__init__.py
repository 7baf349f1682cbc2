"""knowledge-store: a permission-aware retrieval layer for RAG and AI agents."""
