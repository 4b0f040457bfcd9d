"""Exact top-``k`` inner-product search on the CPU from a bfloat16 (or float32) screen:
:class:`ScreenedSearch`, for tables that many batches search (the dense index's chunk vectors,
a knowledge graph's entity embeddings, the build's kNN over the chunks).

The screen is one matrix product of the queries with a copy of the table: bfloat16 on a CPU
whose matrix units multiply bfloat16 natively (AMX or AVX512-BF16: 5 ms instead of 26 ms for
256 queries x 18,160 entities x 384 dims), float32 elsewhere. Its error has a bound, and the
compiled pass (:func:`spectrag.kernels.compiled.screen.screened_topk`) scores exactly every row
that could reach the top ``k`` under it, so the answer is the exact float64 top ``k`` whichever
product screened it.

The bound, for unit roundoff ``u`` of the inputs' format (bfloat16: 2^-8, float32: 0), float32
accumulation over ``d`` terms (``g = d 2^-24 / (1 - d 2^-24)``) and ``v`` the output's (bfloat16:
2^-8, float32: 0)::

    |approx - <q, x>| <= |q| max|x| ((2u + u^2) + g (1 + u)^2 + v (1 + u)^2 (1 + g))
                         + 2^-126 (2 d + 1 + sqrt(d) (|q| + max|x|))

Rounding the inputs moves each product by at most ``(2u + u^2) |q_i x_i|``, the sum of ``d``
rounded terms in any order by at most ``g`` times the sum of their magnitudes, the output by
``v`` times its magnitude; ``sum |q_i x_i| <= |q| |x|`` (Cauchy-Schwarz). The last term covers
what is not relative: subnormal inputs, products and outputs flushed to zero (the matrix units
do) or rounded absolutely. A product that does not accumulate in float32 would break it:
:meth:`ScreenedSearch.__init__` measures the bfloat16 product's error on a probe and screens in
float32 when it comes near the bound; and a float32 product that torch runs in lower precision
(``torch.set_float32_matmul_precision("medium")`` does on CPUs with AMX: errors of 6e-4 on unit
vectors) is bounded as a bfloat16 one. Scores near float32's largest value are refused: there
the product overflows.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np
import torch

from spectrag.kernels.compiled.screen import BlockedScreen, screened_topk

BF16_U = 2.0 ** -8
TINY = 2.0 ** -126  # the least normal float32 (and bfloat16)
LARGEST = 3.0e38  # below bfloat16's and float32's largest finite values (3.39e38, 3.40e38)
MAX_SCREEN = 1 << 24  # approximate scores per product (32 MB of bfloat16): the batch is cut into row tiles
ONE_SHOT_ROWS = 1 << 15  # tables up to this many rows are screened whole for each tile of queries; larger
# ones block by block, so that a tile holds QUERY_TILE queries (whole, a table of 10^6 rows left tiles of
# 16 queries, each reading the whole table again: slower than the float32 scan)
QUERY_TILE = 256
BLOCK = 1 << 22  # screened values per block (8 MB of bfloat16), table rows per block = BLOCK / queries
GROUP_ROWS = 1024
SPARE = 4096  # candidates a query may carry from block to block beyond one block's


@lru_cache(maxsize=1)
def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (Linux's flags ``amx_bf16`` or ``avx512_bf16``):
    elsewhere a bfloat16 product is emulated, slower than float32."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"amx_bf16", "avx512_bf16"})
    except OSError:
        pass
    return False


def screen_bound_factor(d: int, bf16: bool) -> float:
    """The bound's factor of ``|q| max|x|`` (module docstring) for ``d`` dimensions, with 1%
    added for the float64 arithmetic that forms it."""
    u = BF16_U if bf16 else 0.0
    g = d * 2.0 ** -24 / (1.0 - d * 2.0 ** -24)
    return 1.01 * ((2 * u + u * u) + g * (1 + u) ** 2 + u * (1 + u) ** 2 * (1 + g))


class ScreenedSearch:
    """``topk(q [B, d], k)`` -> the exact float64 top-``k`` inner products of each query with
    the rows of ``table [n, d]`` (float32), ties to the smaller id: float64 scores and int64
    ids ``[B, min(k, n)]``. ``bf16``: screen in bfloat16 (default: where the CPU multiplies it
    natively and a probe finds its error within the bound)."""

    def __init__(self, table: np.ndarray, *, bf16: bool | None = None) -> None:
        self.table = np.ascontiguousarray(table, dtype=np.float32)
        self.dim = self.table.shape[1]
        with warnings.catch_warnings():  # a read-only memory map: only read
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            self._rows = torch.from_numpy(self.table)
        norms = np.sqrt(np.einsum("nd,nd->n", self.table, self.table, dtype=np.float64))
        self.max_norm = float(norms.max(initial=0.0))
        if not math.isfinite(self.max_norm):
            raise ValueError(f"table rows must be finite; row {int(np.flatnonzero(~np.isfinite(norms))[0])} is not")
        want = native_bf16() if bf16 is None else bf16
        self.bf16 = want and (bf16 is True or _bf16_within_bound(self.dim))
        self._screen_rows = self._rows.to(torch.bfloat16) if self.bf16 else self._rows

    def bound(self, q: np.ndarray, norm: np.ndarray | None = None) -> np.ndarray:
        """Each query's bound on its screened scores' error (module docstring); ``norm``: the
        queries' norms, when known. ``[B, d]`` -> float64 ``[B]``."""
        lowered = torch.get_float32_matmul_precision() != "highest"  # a float32 product in bfloat16 or TF32
        factor = screen_bound_factor(self.dim, self.bf16 or lowered)
        norm = np.sqrt(np.einsum("bd,bd->b", q, q, dtype=np.float64)) if norm is None else norm
        return norm * self.max_norm * factor + TINY * (2 * self.dim + 1 + math.sqrt(self.dim) * (norm + self.max_norm))

    @property
    def ntotal(self) -> int:
        """Rows searched (FAISS's name, for code that takes either)."""
        return self.table.shape[0]

    def exact_topk(self, xq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`topk` of a numpy ``xq [B, d]``: what :func:`spectrag.index.dense.exact_search` returns."""
        return self.topk(torch.from_numpy(np.require(xq, np.float32, ["C", "W"])), k)  # a read-only input is copied

    def search(self, xq: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's ``search``: the exact top-``m``, scores rounded to float32."""
        scores, ids = self.exact_topk(xq, m)
        return scores.astype(np.float32), ids

    def topk(self, q: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = q.detach().to("cpu", torch.float32).contiguous()
        if q.dim() != 2 or q.shape[1] != self.dim:
            raise ValueError(f"queries must be [B, {self.dim}], got {tuple(q.shape)}")
        norm = np.sqrt(np.einsum("bd,bd->b", q.numpy(), q.numpy(), dtype=np.float64))
        bound = self.bound(q.numpy(), norm)
        if not np.isfinite(bound).all():
            raise ValueError(f"query vectors must be finite; row {int(np.flatnonzero(~np.isfinite(bound))[0])} is not")
        reach = norm * self.max_norm + bound
        if (reach >= LARGEST).any():
            raise ValueError(f"query {int(np.flatnonzero(reach >= LARGEST)[0])}: its scores may reach {reach.max():.3g}, "
                             f"past what a float32 or bfloat16 product holds ({LARGEST:g}); scale the vectors down")
        n = self.table.shape[0]
        k = min(k, n)
        if k == 0 or q.shape[0] == 0:
            return np.empty((q.shape[0], k), np.float64), np.empty((q.shape[0], k), np.int64)
        one_shot = n <= ONE_SHOT_ROWS
        step = max(1, MAX_SCREEN // max(n, 1)) if one_shot else QUERY_TILE
        parts = []
        for lo in range(0, q.shape[0], step):  # row tiles of many queries: the screen's memory stays bounded
            rows = q[lo:lo + step]
            if one_shot:
                parts.append(screened_topk(self._screen(rows, 0, n), bound[lo:lo + step], self.table, rows.numpy(), k))
            else:
                parts.append(self._blocked(rows, bound[lo:lo + step], k))
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _screen(self, rows: torch.Tensor, start: int, stop: int) -> np.ndarray:
        """The screened scores of ``rows [b, d]`` with table rows ``start..stop``: ``[b, stop - start]``
        bfloat16 bits (uint16) or float32."""
        block = self._screen_rows[start:stop]
        if self.bf16:
            return (rows.to(torch.bfloat16) @ block.T).view(torch.int16).numpy().view(np.uint16)
        return (rows @ block.T).numpy()

    def _blocked(self, rows: torch.Tensor, bound: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`topk` of a tile of queries over a large table, block by block of table rows (each
        block's screen stays in cache for its pass, and the table is read once per tile)."""
        n = self.table.shape[0]
        width = max(GROUP_ROWS, BLOCK // rows.shape[0])
        state = BlockedScreen(self.table, rows.numpy(), bound, k, cap=width + SPARE)
        for start in range(0, n, width):
            state.add(self._screen(rows, start, min(n, start + width)))
        scores, ids, overflow = state.finish()
        over = np.flatnonzero(overflow)  # more rows within reach than the buffer holds: screened whole, no cap
        step = max(1, MAX_SCREEN // n)
        for lo in range(0, over.size, step):
            part = over[lo:lo + step]
            few = rows[torch.from_numpy(part)]
            scores[part], ids[part] = screened_topk(self._screen(few, 0, n), bound[part], self.table, few.numpy(), k)
        return scores, ids


@lru_cache(maxsize=None)
def _bf16_within_bound(d: int) -> bool:
    """Whether torch's bfloat16 product here errs by at most half the bound on a probe
    of unit vectors (a product that accumulated in bfloat16 would err by about ten times more)."""
    g = torch.Generator().manual_seed(0)
    a = torch.nn.functional.normalize(torch.randn(64, d, generator=g), dim=1)
    b = torch.nn.functional.normalize(torch.randn(256, d, generator=g), dim=1)
    b[0] = a[0]  # one score near 1, where the output's rounding is largest
    approx = (a.to(torch.bfloat16) @ b.to(torch.bfloat16).T).double()
    err = float((approx - a.double() @ b.double().T).abs().max())
    return math.isfinite(err) and err <= 0.5 * screen_bound_factor(d, True)
