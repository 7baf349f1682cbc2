"""Retrieval: the store reader, the retrievers and fused search, fusion, the docs tools.

Importing the package registers the built-in retrievers, so that every list name a
request may use (``model.list_names``: ``--weights``, ``ranks``) is known to whoever parses one.
"""

from knowledge_store.retrieval import retrievers as _retrievers  # noqa: F401  (registers the lists)
