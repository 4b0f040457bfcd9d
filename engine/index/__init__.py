"""Offline index build, in the order data flows: load -> chunk -> embed -> dense / lexical -> store;
:func:`add_documents` adds documents to a built index (``incremental``)."""

__all__ = ["add_documents"]


def __getattr__(name: str):  # imported on first use: the build's dependencies stay unloaded until then
    if name == "add_documents":
        from spectrag.index.incremental import add_documents

        return add_documents
    raise AttributeError(f"module 'spectrag.index' has no attribute {name!r}")
