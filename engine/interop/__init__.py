"""The engine's graphs in other libraries' types: :func:`to_pyg` (PyTorch Geometric)."""

from spectrag.interop.pyg import to_pyg

__all__ = ["to_pyg"]
