"""Structural checks of the arrays an index stores, run on every load before anything uses them.

A manifest with rewritten checksums vouches for nothing: an out-of-range column index in a CSR
matrix makes scipy or torch read outside the array (a segfault or heap corruption, not an
exception). Every stored array is therefore checked against the counts it must agree with:
dtype, shape, CSR ``indptr`` (starts at 0, never decreases, ends at ``nnz``), indices within
``[0, n)``, and finite values where NaN would silently change scores. Each failure is an
:class:`IndexFormatError` naming the file and what is wrong.

The checks are linear passes over memory-mapped arrays in blocks of ``BLOCK`` elements (bounded
extra memory, no copy of the array); their cost at scale is measured in ``bench/bench_validate.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spectrag.errors import IndexFormatError

BLOCK = 1 << 22  # elements per reduction step: 32 MiB of int64
_WIDTHS = tuple(np.dtype(t) for t in ("int32", "int64", "float32", "float64"))


def load_npy(path: Path, name: str | None = None) -> np.ndarray:
    """The ``.npy`` file at ``path``, memory-mapped (never a pickle); a malformed header, a
    shape larger than the file or an object array is an :class:`IndexFormatError`."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError, TypeError) as exc:
        raise IndexFormatError(f"{name or path}: not a readable .npy array ({exc})") from None


def check_array(
    a: np.ndarray,
    name: str,
    *,
    kinds: str,
    shape: Sequence[int | None],
) -> np.ndarray:
    """``a`` unless its dtype kind is not one of ``kinds`` (numpy kind letters: ``i`` signed
    ints, ``u`` unsigned, ``f`` floats, ``b`` bool) or its shape differs from ``shape`` (None: any
    size on that axis)."""
    if not isinstance(a, np.ndarray):
        raise IndexFormatError(f"{name}: not an array")
    if a.dtype.kind not in kinds or a.dtype.hasobject or not a.dtype.isnative:
        raise IndexFormatError(f"{name}: dtype {a.dtype} is not one of the expected kinds {kinds!r}")
    if a.dtype not in _WIDTHS:  # what the writers store; a uint8 id array would index torch tensors as a mask
        raise IndexFormatError(f"{name}: dtype {a.dtype}, expected one of {', '.join(str(d) for d in _WIDTHS)}")
    if a.ndim != len(shape) or any(want is not None and got != want for got, want in zip(a.shape, shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise IndexFormatError(f"{name}: shape {list(a.shape)}, expected {want}")
    return a


def _blocks(a: np.ndarray):
    flat = a.reshape(-1)
    for lo in range(0, flat.shape[0], BLOCK):
        yield np.asarray(flat[lo : lo + BLOCK])


def check_range(a: np.ndarray, name: str, lo: int, hi: int) -> None:
    """Every entry of the integer array ``a`` lies in ``[lo, hi)``."""
    for block in _blocks(a):
        if block.size and (int(block.min()) < lo or int(block.max()) >= hi):
            bad = block[(block < lo) | (block >= hi)][0]
            raise IndexFormatError(f"{name}: entry {int(bad)} outside [{lo}, {hi})")


def check_finite(a: np.ndarray, name: str, *, lo: float | None = None, hi: float | None = None) -> None:
    """Every entry of the float array ``a`` is finite (and within ``[lo, hi]`` when given)."""
    for block in _blocks(a):
        if not block.size:
            continue
        if not np.isfinite(block).all():
            raise IndexFormatError(f"{name}: holds NaN or infinite values")
        if (lo is not None and float(block.min()) < lo) or (hi is not None and float(block.max()) > hi):
            raise IndexFormatError(f"{name}: values outside [{lo}, {hi}] (min {block.min()}, max {block.max()})")


def check_ints(a: np.ndarray, name: str, shape: Sequence[int | None], lo: int, hi: int) -> np.ndarray:
    """An integer array of ``shape`` with entries in ``[lo, hi)``."""
    check_array(a, name, kinds="iu", shape=shape)
    check_range(a, name, lo, hi)
    return a


def check_floats(a: np.ndarray, name: str, shape: Sequence[int | None], *, lo: float | None = None,
                 hi: float | None = None) -> np.ndarray:
    """A finite float array of ``shape`` (entries in ``[lo, hi]`` when given)."""
    check_array(a, name, kinds="f", shape=shape)
    check_finite(a, name, lo=lo, hi=hi)
    return a


def check_indptr(indptr: np.ndarray, name: str, rows: int, nnz: int) -> None:
    """A CSR row pointer ``[rows + 1]``: starts at 0, never decreases, ends at ``nnz``."""
    check_array(indptr, name, kinds="iu", shape=(rows + 1,))
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        raise IndexFormatError(f"{name}: runs from {int(indptr[0])} to {int(indptr[-1])}, expected 0 to {nnz}")
    prev = None
    for block in _blocks(indptr):
        if (block.size > 1 and bool((block[1:] < block[:-1]).any())) or (prev is not None and block[0] < prev):
            raise IndexFormatError(f"{name}: decreases (a row pointer never does)")
        prev = block[-1]


def check_csr(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray | None, name: str, shape: tuple[int, int],
              *, lo: float | None = None, hi: float | None = None) -> None:
    """The parts of a CSR matrix of ``shape``: ``indptr [rows + 1]``, ``indices [nnz]`` in
    ``[0, cols)``, ``data [nnz]`` finite (within ``[lo, hi]`` when given); ``data`` None for a
    pattern-only matrix."""
    rows, cols = shape
    check_array(indices, f"{name} indices", kinds="iu", shape=(None,))
    nnz = indices.shape[0]
    check_indptr(indptr, f"{name} indptr", rows, nnz)
    check_range(indices, f"{name} indices", 0, cols)
    if data is not None:
        check_floats(data, f"{name} data", (nnz,), lo=lo, hi=hi)


def check_strings(value: object, name: str, *, length: int | None = None) -> list[str]:
    """A JSON list of strings (of ``length`` entries when given)."""
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise IndexFormatError(f"{name}: expected a list of strings")
    if length is not None and len(value) != length:
        raise IndexFormatError(f"{name}: {len(value)} entries, expected {length}")
    return value
