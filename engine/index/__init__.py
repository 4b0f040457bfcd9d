"""Offline index build, in the order data flows: load -> chunk -> embed -> dense / lexical -> store."""
