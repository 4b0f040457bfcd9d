"""Offline index build, in the order data flows: load -> chunk -> embed -> dense / lexical -> store;
:func:`add_documents` adds documents to a built index (``incremental``)."""

from engine.index.incremental import add_documents

__all__ = ["add_documents"]
