"""Structural checks of the arrays an index stores, run on every load before anything uses them.

A manifest with rewritten checksums vouches for nothing: an out-of-range column index in a CSR
matrix makes scipy or torch read outside the array (a segfault or heap corruption, not an
exception). Every stored array is therefore checked against the counts it must agree with:
dtype, shape, CSR ``indptr`` (starts at 0, never decreases, ends at ``nnz``), indices within
``[0, n)``, and finite values where NaN would silently change scores. Values are checked against
what the format documents too, since a value that breaks it changes rankings without an error:
rows that must be L2-normalized (:func:`check_unit_rows`), ranges (BM25 scores >= 0, signal
weights in [0, 1]), symmetric graphs without self-loops (:func:`check_symmetric`). Each failure
is an :class:`IndexFormatError` naming the file, the first bad row (or entry) and its value.

The checks are linear passes over memory-mapped arrays in blocks of ``BLOCK`` elements (bounded
extra memory, no copy of the array); their cost at scale is measured in ``bench/bench_validate.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spectrag.errors import IndexFormatError

BLOCK = 1 << 22  # elements per reduction step: 32 MiB of int64
UNIT_TOL = 1e-2  # |norm - 1| allowed of a stored unit row: float16 rounding (a GPU build) stays under 1e-3
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
    """``(offset, block)`` over the flattened ``a``, ``BLOCK`` elements at a time."""
    flat = a.reshape(-1)
    for lo in range(0, flat.shape[0], BLOCK):
        yield lo, np.asarray(flat[lo : lo + BLOCK])


def _where(a: np.ndarray, pos: int, rows: np.ndarray | None = None) -> str:
    """The flat position ``pos`` of ``a`` in words: its row (of a matrix, or of the CSR matrix
    whose row pointer is ``rows``), else its entry."""
    if rows is not None:
        return f"row {int(np.searchsorted(rows, pos, side='right')) - 1} (entry {pos})"
    if a.ndim == 2:
        return f"row {pos // max(a.shape[1], 1)}"
    return f"entry {pos}"


def check_range(a: np.ndarray, name: str, lo: int, hi: int) -> None:
    """Every entry of the integer array ``a`` lies in ``[lo, hi)``."""
    for offset, block in _blocks(a):
        if block.size and (int(block.min()) < lo or int(block.max()) >= hi):
            pos = int(np.flatnonzero((block < lo) | (block >= hi))[0])
            raise IndexFormatError(f"{name}: {_where(a, offset + pos)} is {int(block[pos])}, outside [{lo}, {hi})")


def check_finite(a: np.ndarray, name: str, *, lo: float | None = None, hi: float | None = None,
                 rows: np.ndarray | None = None) -> None:
    """Every entry of the float array ``a`` is finite (and within ``[lo, hi]`` when given); the
    error names the first bad row (``rows``: the row pointer when ``a`` is a CSR matrix's data)."""
    for offset, block in _blocks(a):
        if not block.size:
            continue
        bad = ~np.isfinite(block)
        if (lo is not None and float(block.min()) < lo) or (hi is not None and float(block.max()) > hi):
            bad |= (block < (-np.inf if lo is None else lo)) | (block > (np.inf if hi is None else hi))
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            allowed = "finite" + (f" and in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else
                                  f" and >= {lo:g}" if lo is not None else f" and <= {hi:g}" if hi is not None else "")
            raise IndexFormatError(f"{name}: {_where(a, offset + pos, rows)} holds {float(block[pos])!r} "
                                   f"(values must be {allowed})")


def check_unit_rows(a: np.ndarray, name: str, *, tol: float = UNIT_TOL) -> None:
    """Every row of the float matrix ``a [n, d]`` has an L2 norm within ``tol`` of 1 (what the
    format stores: L2-normalized vectors). One pass: a NaN, an infinity or an overflowing value
    makes its row's norm fail too, so this is also the finiteness check."""
    step = max(BLOCK // max(a.shape[1], 1), 1)
    for lo in range(0, a.shape[0], step):
        block = np.asarray(a[lo : lo + step])
        with np.errstate(over="ignore", invalid="ignore"):
            sq = np.einsum("ij,ij->i", block, block)  # squared norms; 1e38 squared is inf
        bad = ~(np.abs(sq - 1.0) <= 2 * tol)  # |norm^2 - 1| ~ 2 |norm - 1|; NaN fails too
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            with np.errstate(over="ignore", invalid="ignore"):
                norm = float(np.linalg.norm(block[row].astype(np.float64)))
            raise IndexFormatError(f"{name}: row {lo + row} has L2 norm {norm:.6g}; the format stores L2-normalized "
                                   f"rows (norm 1 within {tol:g})")


def check_ints(a: np.ndarray, name: str, shape: Sequence[int | None], lo: int, hi: int) -> np.ndarray:
    """An integer array of ``shape`` with entries in ``[lo, hi)``."""
    check_array(a, name, kinds="iu", shape=shape)
    check_range(a, name, lo, hi)
    return a


def check_floats(a: np.ndarray, name: str, shape: Sequence[int | None], *, lo: float | None = None,
                 hi: float | None = None, unit_rows: bool = False) -> np.ndarray:
    """A finite float array of ``shape`` (entries in ``[lo, hi]`` when given; with ``unit_rows``
    a matrix of L2-normalized rows, :func:`check_unit_rows`)."""
    check_array(a, name, kinds="f", shape=shape)
    if unit_rows:
        check_unit_rows(a, name)
    else:
        check_finite(a, name, lo=lo, hi=hi)
    return a


def check_indptr(indptr: np.ndarray, name: str, rows: int, nnz: int) -> None:
    """A CSR row pointer ``[rows + 1]``: starts at 0, never decreases, ends at ``nnz``."""
    check_array(indptr, name, kinds="iu", shape=(rows + 1,))
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        raise IndexFormatError(f"{name}: runs from {int(indptr[0])} to {int(indptr[-1])}, expected 0 to {nnz}")
    prev = None
    for _, block in _blocks(indptr):
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
        check_array(data, f"{name} data", kinds="f", shape=(nnz,))
        check_finite(data, f"{name} data", lo=lo, hi=hi, rows=indptr)


def check_symmetric(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, name: str, n: int) -> None:
    """The (checked, non-negative) CSR matrix ``W [n, n]`` is symmetric and has no self-loops.
    For a random positive ``v``, ``W v`` and ``W^T v`` agree row by row up to float64 rounding when
    ``W`` is symmetric, and differ at both ends of an asymmetric entry: two sparse products over
    the stored arrays (scipy's CSR and CSC kernels) instead of sorting every entry into ``W^T``.
    Rows go in blocks of about ``BLOCK`` entries (a float64 copy of one block's values). The
    error names the first row where the products differ."""
    import scipy.sparse as sp

    v = np.random.default_rng(0x5E7).uniform(0.5, 1.5, n)
    w_v, wt_v = np.zeros(n), np.zeros(n)
    row = 0
    while row < n:  # blocks of whole rows holding about BLOCK entries
        lo = int(indptr[row])
        end = max(min(int(np.searchsorted(indptr, lo + BLOCK, side="right")) - 1, n), row + 1)
        hi = int(indptr[end])
        block = sp.csr_matrix((np.asarray(data[lo:hi], dtype=np.float64), np.asarray(indices[lo:hi]),
                               np.asarray(indptr[row : end + 1]) - lo), shape=(end - row, n))
        loops = block.diagonal(k=row)  # the entries (r, r) of these rows
        if loops.any():
            raise IndexFormatError(f"{name}: row {row + int(np.flatnonzero(loops)[0])} has a self-loop (the graph has none)")
        w_v[row:end] = block @ v
        wt_v += block.T @ v[row:end]
        row = end
    bad = np.abs(w_v - wt_v) > 1e-9 * np.maximum(w_v, wt_v) + 1e-300
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise IndexFormatError(f"{name}: not symmetric at row {first} (row {first} and column {first} hold different "
                               f"weights: {w_v[first]:.9g} against {wt_v[first]:.9g} for one test vector); the graph "
                               "is undirected")


def check_strings(value: object, name: str, *, length: int | None = None) -> list[str]:
    """A JSON list of strings (of ``length`` entries when given)."""
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise IndexFormatError(f"{name}: expected a list of strings")
    if length is not None and len(value) != length:
        raise IndexFormatError(f"{name}: {len(value)} entries, expected {length}")
    return value
