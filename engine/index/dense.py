"""Stage 4a of the offline build: the exact inner-product (dense) index.

Stored as a FAISS ``IndexFlatIP`` file. On the CPU a search finds ``k + margin`` hits by a
tiled torch matrix product and scan (:func:`spectrag.kernels.tiled_topk_ip`; FAISS's flat
search with ``backend="faiss"``) and re-scores them exactly in float64 (a compiled kernel), so
the top-``k`` and its order (score, then smaller id) do not depend on the batch, the tiling or
the thread count. On a GPU it is faiss-gpu when installed, else the tiled torch scan, exact up
to the order of exactly tied scores.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import numpy as np
import torch

from spectrag.errors import ConfigError, IndexFormatError
from spectrag.kernels import tiled_topk_ip
from spectrag.kernels.compiled.gather import rescore_compiled
from spectrag.kernels.compiled.topk import allowed_topk
from spectrag.kernels.screen import ScreenedSearch, native_bf16, screen_bound_factor

BLAS_THRESHOLD = 20  # queries per search from which FAISS uses sgemm (FAISS's historical default)


def load_faiss():
    try:
        import faiss
    except ImportError:
        raise ConfigError("FAISS is not installed: pip install faiss-cpu (or faiss-gpu-cu12 on a GPU)") from None
    # Recent faiss-cpu builds only switch a flat search to the BLAS kernel from 128,000 queries
    # on; below that a batch of a few hundred queries runs many times slower.
    # The BLAS path's rounding is absorbed by the float64 re-scoring in ``search``.
    faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
    return faiss


# FAISS's serialization of an IndexFlatIP: fourcc, d (int32), ntotal (int64), two unused int64,
# is_trained (1 byte), metric (int32; 0 = inner product), the vector count (int64), the vectors
_FLAT = struct.Struct("<4siqqqbiq")


def check_flat_file(path: Path, n: int, d: int) -> None:
    """The FAISS file at ``path`` is an IndexFlatIP of ``n`` vectors of ``d`` floats: its header
    and its size are checked before FAISS reads it (a FAISS reader trusts the counts it reads)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(_FLAT.size)
        size = path.stat().st_size
    except OSError as exc:
        raise IndexFormatError(f"{path}: cannot read ({exc.strerror})") from None
    if len(head) < _FLAT.size:
        raise IndexFormatError(f"{path}: {len(head)} bytes, too short for a FAISS IndexFlatIP")
    fourcc, dim, ntotal, _, _, _, metric, count = _FLAT.unpack(head)
    if fourcc != b"IxFI" or metric != 0:
        raise IndexFormatError(f"{path}: not a FAISS IndexFlatIP (type {fourcc!r}, metric {metric})")
    if dim != d or ntotal != n or count not in (n * d, 4 * n * d) or size != _FLAT.size + 4 * n * d:
        raise IndexFormatError(
            f"{path}: holds {ntotal} x {dim} vectors in {size} bytes, expected {n} x {d} ({_FLAT.size + 4 * n * d} bytes)"
        )


def check_flat_vectors(path: Path, vectors: np.ndarray) -> None:
    """The vectors stored in the (header-checked) FAISS file at ``path`` are ``vectors`` (the
    format's "IndexFlatIP over the same vectors"): FAISS picks the candidates and ``vectors``
    scores them, so vectors that differ change rankings silently. Compared in blocks of rows."""
    n, d = vectors.shape
    stored = np.memmap(path, dtype=np.float32, mode="r", offset=_FLAT.size, shape=(n, d))
    step = max(RESCORE_BLOCK // max(d, 1), 1)
    for lo in range(0, n, step):
        got, want = np.asarray(stored[lo : lo + step]), np.asarray(vectors[lo : lo + step])
        if not np.array_equal(got.view(np.int32), want.view(np.int32)):  # bit for bit
            row = lo + int(np.flatnonzero((got != want).any(axis=1))[0])
            raise IndexFormatError(f"{path}: vector {row} differs from row {row} of the embeddings (the FAISS index "
                                   "holds the same vectors)")


RESCORE_BLOCK = 1 << 22  # float64 elements gathered per block of rows by :func:`rescore` (32 MiB)


def rescore(vectors: np.ndarray, xq: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact float64 inner products of queries ``xq [B, d]`` with their candidate rows ``ids
    [B, m]`` of ``vectors [n, d]`` (id -1: no candidate, score -inf), sorted by score, then by
    smaller id, cut to ``k``: the order does not depend on how the candidates were found
    (FAISS's BLAS kernel, its tiling or thread count). Rows are gathered in blocks of at most
    :data:`RESCORE_BLOCK` elements. Shapes: -> float64 scores, int64 ids ``[B, min(k, m)]``."""
    n_q, m = ids.shape
    d = xq.shape[1]
    exact = np.empty((n_q, m), dtype=np.float64)
    step = max(1, RESCORE_BLOCK // max(1, m * d))
    for lo in range(0, n_q, step):
        part = ids[lo : lo + step]
        safe = np.where(part >= 0, part, 0)
        vecs = np.asarray(vectors)[safe.ravel()].reshape(*safe.shape, d).astype(np.float64)  # (b, m, d)
        exact[lo : lo + step] = np.einsum("bmd,bd->bm", vecs, xq[lo : lo + step].astype(np.float64))
    exact[ids < 0] = -np.inf
    order = np.lexsort((ids, -exact), axis=1)[:, :k]
    return np.take_along_axis(exact, order, 1), np.take_along_axis(ids, order, 1)


#: a FAISS score this far below the k-th exact score cannot belong to a chunk that ties or beats it
#: (float32 inner products of unit vectors err by ~1e-6)
TIE_TOL = 1e-4


def exact_search(index, vectors: np.ndarray, xq: np.ndarray, k: int, margin: int = 16,
                 allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact top-``k`` of ``xq [B, d]`` among the rows of ``vectors`` that ``index`` (FAISS,
    or :class:`TorchScan`: anything with ``search(xq, m)`` and ``ntotal``) holds, by float64
    score, then smaller id, whatever the search's own rounding and tie order: ``k + margin``
    hits are re-scored (:func:`rescore`), and a row whose least hit scores within
    :data:`TIE_TOL` of its ``k``-th exact score (ties, e.g. duplicate chunks, may continue past
    the hits) is searched again with twice the hits until they do not. The hits need no order
    (the re-scoring sorts them): an index's ``search_unordered``, where it has one, finds them.
    ``allowed`` (bool ``[B, n]``, a metadata filter; ``index`` then a :class:`TorchScan`): the
    top-``k`` among each query's allowed rows, ids -1 and scores -inf past the last of them.
    Shapes: -> float64 scores, int64 ids ``[B, min(k, n)]``."""
    own = getattr(index, "exact_topk", None)  # an index that finds the exact top-k itself (ScreenedSearch)
    if own is not None and allowed is None:
        return own(xq, k)
    n = index.ntotal
    k = min(k, n)
    m = min(k + margin, n)

    find = getattr(index, "search_unordered", index.search)
    tol = getattr(index, "tie_tol", TIE_TOL)

    def search(rows: np.ndarray | None, m: int) -> tuple[np.ndarray, np.ndarray]:
        q = xq if rows is None else xq[rows]
        if allowed is None:
            return find(q, m)
        return find(q, m, allowed=allowed if rows is None else allowed[rows])

    def tied(found: np.ndarray, kth: np.ndarray) -> np.ndarray:  # a finite least hit near the k-th: search deeper
        least = found.min(axis=1)
        return (least >= kth - tol) & np.isfinite(least)

    found, ids = search(None, m)
    exact, top = rescore_compiled(vectors, xq, ids.astype(np.int64), k)
    todo = np.flatnonzero(tied(found, exact[:, -1])) if 0 < k and m < n else np.zeros(0, np.int64)
    while todo.size:
        m = min(2 * m, n)
        found, ids = search(todo, m)
        exact[todo], top[todo] = rescore_compiled(vectors, xq[todo], ids.astype(np.int64), k)
        todo = todo[tied(found, exact[todo, -1])] if m < n else todo[:0]
    return exact, top


ONE_PRODUCT_MAX = 1 << 24  # B * n up to which TorchScan makes one [B, n] score block (64 MB)


class TorchScan:
    """FAISS's flat-search interface (``search``, ``ntotal``) over a torch view of the vectors:
    an exact tiled matrix product and scan (:func:`spectrag.kernels.tiled_topk_ip`), several
    times faster than FAISS's flat search for batches of queries on the CPU
    (bench/results/dense_search_cpu.md). ``device``: where the vectors are kept and the scan
    runs (a GPU: the kNN graph of an index build there, :func:`spectrag.graph.signals.knn_index`);
    queries come from and results go back to the host."""

    def __init__(self, vectors: np.ndarray, device: str | torch.device = "cpu") -> None:
        with warnings.catch_warnings():  # a read-only memory map: the scan only reads it
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            self.xb = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).to(device)
        self.ntotal = int(self.xb.shape[0])

    def search(self, xq: np.ndarray, m: int, *, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``m`` best rows per query (``allowed [B, n]``: among those; ids -1 and scores
        -inf past the last allowed one). Shapes: ``xq [B, d]`` -> float32, int64 ``[B, min(m, n)]``."""
        q, mask = self._on_device(xq, allowed)
        if q.shape[0] * self.ntotal <= ONE_PRODUCT_MAX:  # small: one product, one top-k (ties are re-scored)
            s, i = torch.topk(self._scores(q, mask), min(m, self.ntotal), dim=1)
            if mask is not None:
                i = i.masked_fill(s == float("-inf"), -1)
        else:
            s, i = tiled_topk_ip(q, self.xb, m, allowed=mask)
        return s.cpu().numpy(), i.cpu().numpy()

    def search_unordered(self, xq: np.ndarray, m: int, *, allowed: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search`'s hits in no particular order within a row, for :func:`exact_search`
        (which re-scores and sorts them): on the CPU a selection by numpy's introselect, a third
        of ``torch.topk``'s time for 256 queries over 1,939 chunks; with a filter, the compiled
        top-``m`` of the allowed entries (introselect over rows of mostly -inf was 40x slower).
        Among rows tied at the ``m``-th score either search may keep any; ``exact_search`` then
        searches deeper."""
        m = min(m, self.ntotal)
        if self.xb.device.type != "cpu" or m >= self.ntotal or xq.shape[0] * self.ntotal > ONE_PRODUCT_MAX:
            return self.search(xq, m, allowed=allowed)
        q, mask = self._on_device(xq, allowed)
        scores = self._scores(q, None).numpy()
        if mask is not None:  # a filter: select among the allowed entries only
            return allowed_topk(scores, mask.numpy(), m)
        cut = self.ntotal - m
        ids = np.argpartition(scores, cut, axis=1)[:, cut:]
        return np.take_along_axis(scores, ids, axis=1), ids

    @property
    def tie_tol(self) -> float:
        """How far below the ``k``-th exact score a hit must score before :func:`exact_search`
        stops searching deeper: :data:`TIE_TOL`, or the bfloat16 screen's bound where torch runs
        float32 products in lower precision (``set_float32_matmul_precision`` other than
        "highest": bfloat16 on CPUs with AMX, TF32 on GPUs; unit vectors)."""
        if torch.get_float32_matmul_precision() == "highest":
            return TIE_TOL
        return max(TIE_TOL, screen_bound_factor(int(self.xb.shape[1]), True))

    def _on_device(self, xq: np.ndarray, allowed: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The queries and the filter as tensors where the vectors are."""
        q = torch.from_numpy(np.ascontiguousarray(xq, dtype=np.float32)).to(self.xb.device)
        mask = None if allowed is None else torch.from_numpy(np.ascontiguousarray(allowed, dtype=np.bool_)).to(
            self.xb.device)
        return q, mask

    def _scores(self, q: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """All inner products in one block, -inf where ``mask`` is False. ``[B, d]`` -> ``[B, n]``."""
        scores = q @ self.xb.T
        if mask is not None:
            scores.masked_fill_(~mask, float("-inf"))
        return scores


def merge_topk(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact top-``k`` over shards from each shard's own: ``parts`` are ``(float64 scores,
    global ids)`` ``[B, k_s]`` (:meth:`DenseIndex.candidates` of a shard, ids offset to the
    whole index), merged by score, then by smaller id, as :meth:`DenseIndex.search` orders one
    index. Equal to the unsharded search: a chunk in the global top-``k`` is in its shard's
    top-``k``, and its float64 score does not depend on the shard. Shapes: -> float32 scores,
    int64 ids ``[B, min(k, sum k_s)]``."""
    scores = np.concatenate([p[0] for p in parts], axis=1)
    ids = np.concatenate([p[1] for p in parts], axis=1)
    order = np.lexsort((ids, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, 1).astype(np.float32), np.take_along_axis(ids, order, 1)


class DenseIndex:
    """Exact maximum-inner-product search over L2-normalized chunk embeddings.

    ``backend``: ``scan`` (CPU: a tiled torch scan, then exact float64 re-scoring), ``screen``
    (CPU: a bfloat16 product and the exact float64 re-scoring of every row its error bound
    leaves in reach, :class:`~spectrag.kernels.screen.ScreenedSearch`; a bfloat16 copy of the
    vectors, half their size, is kept), ``faiss`` (CPU: FAISS's flat search, then the same
    re-scoring), ``faiss-gpu`` or ``torch`` (tiled matmul top-k on ``device``); ``auto`` picks
    screen on a CPU that multiplies bfloat16 natively, else scan, and faiss-gpu / torch on CUDA.
    The CPU backends give the same answer: the exact top-k by float64 score, then smaller id.
    """

    FILE = "dense.faiss"

    def __init__(self, vectors: np.ndarray, *, backend: str = "auto", device: str = "cpu") -> None:
        if vectors.ndim != 2:
            raise ValueError(f"vectors must be [n, d], got shape {vectors.shape}")
        self.vectors = vectors
        self.dim = int(vectors.shape[1])
        self.device = device
        self.backend = self._choose(backend, device)
        self._faiss_index = None
        self._scan: TorchScan | None = None
        self._screen: ScreenedSearch | None = None
        self._torch_db = None

    @staticmethod
    def _choose(backend: str, device: str) -> str:
        if backend not in ("auto", "scan", "screen", "faiss", "faiss-gpu", "torch"):
            raise ConfigError(f"dense backend must be auto, scan, screen, faiss, faiss-gpu or torch, got {backend!r}")
        if backend != "auto":
            return backend
        if not device.startswith("cuda"):
            return "screen" if native_bf16() else "scan"
        try:
            import faiss

            return "faiss-gpu" if faiss.get_num_gpus() > 0 else "torch"
        except ImportError:
            return "torch"

    def _index(self):
        """What finds the hits: the torch scan (backends ``scan`` and ``screen``) or the FAISS index."""
        if self.backend in ("scan", "screen"):
            if self._scan is None:
                self._scan = TorchScan(self.vectors)
            return self._scan
        if self._faiss_index is None:
            faiss = load_faiss()
            index = faiss.IndexFlatIP(self.dim)
            index.add(np.ascontiguousarray(self.vectors, dtype=np.float32))
            if self.backend == "faiss-gpu":
                index = faiss.index_cpu_to_all_gpus(index)
            self._faiss_index = index
        return self._faiss_index

    def search(self, xq: np.ndarray, k: int, *, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` chunks per query; ``allowed`` (bool ``[B, n]``, a metadata filter): among
        each query's allowed chunks, ids -1 and scores 0 past the last of them.
        Shapes: xq ``[B, d]`` -> scores, ids ``[B, min(k, n)]``."""
        xq = np.ascontiguousarray(xq, dtype=np.float32)
        if xq.ndim != 2 or xq.shape[1] != self.dim:
            raise ValueError(f"queries must be [B, {self.dim}], got shape {xq.shape}")
        if self.backend == "torch":
            mask = None if allowed is None else torch.as_tensor(allowed, device=self.device)
            s, i = self.search_tensors(torch.as_tensor(xq, device=self.device), k, allowed=mask)
            return s.cpu().numpy(), i.cpu().numpy()
        k = min(k, len(self.vectors))
        # a search's float32 products round by the shape of the batch and break ties their own
        # way; re-scoring extra hits in float64 and sorting by (score, id) (exact_search) makes
        # the result independent of the batch size, the tiling and the thread count
        exact, ids = self.candidates(xq, k, allowed=allowed)
        return np.where(ids >= 0, exact, 0).astype(np.float32), ids

    def search_tensors(self, xq: torch.Tensor, k: int, *,
                       allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`search` for a query tensor (``allowed [B, n]`` bool on any device), results on
        its device; the torch backend never leaves the device (the stored vectors are copied
        there once). Shapes: ``[B, d]`` -> scores (float32), ids (int64) ``[B, min(k, n)]``."""
        if xq.dim() != 2 or xq.shape[1] != self.dim:
            raise ValueError(f"queries must be [B, {self.dim}], got shape {tuple(xq.shape)}")
        k = min(k, len(self.vectors))
        if self.backend != "torch":
            mask = None if allowed is None else allowed.detach().cpu().numpy()
            s, i = self.search(xq.detach().cpu().numpy(), k, allowed=mask)
            return torch.from_numpy(s).to(xq.device), torch.from_numpy(i).to(xq.device)
        if self._torch_db is None or self._torch_db.device != xq.device:
            self._torch_db = torch.tensor(np.asarray(self.vectors), device=xq.device)  # copy off the read-only map
        mask = None if allowed is None else allowed.to(xq.device)
        s, i = tiled_topk_ip(xq.to(torch.float32), self._torch_db, k, allowed=mask)
        return (s, i) if mask is None else (s.masked_fill(i < 0, 0.0), i)

    def candidates(self, xq: np.ndarray, k: int, *, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` before its scores are rounded to float32: float64 scores and ids
        ``[B, min(k, n)]`` (-inf and -1 past the allowed), what a shard contributes to :func:`merge_topk`."""
        xq = np.ascontiguousarray(xq, dtype=np.float32)
        if self.backend == "torch":
            raise ConfigError("DenseIndex.candidates needs a CPU backend (the device scan has no float64 re-scoring)")
        if allowed is None:
            if self.backend == "screen":
                if self._screen is None:
                    self._screen = ScreenedSearch(self.vectors)
                return self._screen.exact_topk(xq, k)
            return exact_search(self._index(), self.vectors, xq, k)
        if allowed.shape != (xq.shape[0], len(self.vectors)):
            raise ValueError(f"allowed must be [B, n] = {(xq.shape[0], len(self.vectors))}, got {allowed.shape}")
        if self._scan is None:  # a filter is a masked scan, whichever backend searches the rest
            self._scan = TorchScan(self.vectors)
        return exact_search(self._scan, self.vectors, xq, k, allowed=allowed)

    def save(self, folder: Path) -> None:
        """The vectors as a FAISS ``IndexFlatIP`` file (the format's dense index, whatever backend searches)."""
        faiss = load_faiss()
        if self.backend.startswith("faiss"):
            index = self._index()
            if self.backend == "faiss-gpu":
                index = faiss.index_gpu_to_cpu(index)
        else:
            index = faiss.IndexFlatIP(self.dim)
            index.add(np.ascontiguousarray(self.vectors, dtype=np.float32))
        faiss.write_index(index, str(folder / self.FILE))

    @classmethod
    def load(cls, folder: Path, vectors: np.ndarray, *, backend: str = "auto", device: str = "cpu") -> "DenseIndex":
        index = cls(vectors, backend=backend, device=device)
        check_flat_file(folder / cls.FILE, len(vectors), index.dim)  # before FAISS parses it
        check_flat_vectors(folder / cls.FILE, vectors)
        if index.backend.startswith("faiss"):
            faiss = load_faiss()
            cpu_index = faiss.read_index(str(folder / cls.FILE), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
            if cpu_index.ntotal != len(vectors) or cpu_index.d != index.dim:
                raise IndexFormatError(
                    f"{folder / cls.FILE}: holds {cpu_index.ntotal} x {cpu_index.d} vectors, "
                    f"expected {len(vectors)} x {index.dim}"
                )
            index._faiss_index = (
                faiss.index_cpu_to_all_gpus(cpu_index) if index.backend == "faiss-gpu" else cpu_index
            )
        return index
