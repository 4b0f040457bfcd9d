"""Optional Triton kernels (``pip install -e '.[gpu]'``), chosen by ``backend="auto"`` on CUDA.

Importing this package never imports Triton; :func:`available` says whether it can be used.
Each kernel has a torch reference (the ``backend="torch"`` path of the same function) and is
tested against it on the CPU with Triton's interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import importlib.util
import os

__all__ = ["available", "interpreting", "require"]


def available() -> bool:
    """True when the ``triton`` package is importable (nothing is imported to find out)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True when ``TRITON_INTERPRET=1``: kernels run in Triton's NumPy interpreter on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def require(what: str) -> None:
    """Raise ImportError naming ``what`` and the install command when Triton is missing."""
    if not available():
        raise ImportError(
            f"{what} needs the 'triton' package, which is not installed; "
            "install it with `pip install -e '.[gpu]'` (or `pip install triton`), or use backend='torch'"
        )
