"""Offline stages 1-4 in the order data flows: ``load`` (documents) -> ``chunk`` (token windows)
-> ``embed`` (sentence-transformers) -> ``dense`` (FAISS) and ``lexical`` (BM25)."""
