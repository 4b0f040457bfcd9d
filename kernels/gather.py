"""Inner products of each query with its own candidates, without materializing the candidates'
vectors: ``r[b, i] = <q_b, X[ids[b, i]]>``.

Gathering all ``B P`` rows at once writes a ``[B, P, d]`` tensor (78 MB at B = 256, P = 200,
d = 384) and reads it back; tiles of a few queries keep the gathered rows in cache. Each
product is summed in float64 and rounded to the table's dtype: sums of float32 products in
float64 agree to ~1e-16 whatever their order, so the result does not depend on the tile size,
the batch a query comes in, or the kernel (the compiled CPU twin,
:func:`spectrag.kernels.compiled.gather.gathered_dot_compiled`, sums in another order).
"""

from __future__ import annotations

import torch

TILE = 16  # queries per tile: 16 x 200 x 384 float32 = 4.9 MB


def gathered_dot(table: torch.Tensor, ids: torch.Tensor, q: torch.Tensor, *, tile: int = TILE) -> torch.Tensor:
    """``<q_b, table[ids[b, i]]>`` for every query and candidate; ids < 0 give 0.

    Shapes: ``table [n, d]``, ``ids [B, P]`` (int64, -1 padded), ``q [B, d]`` -> ``[B, P]`` in
    ``table``'s dtype.
    """
    if table.dim() != 2 or q.dim() != 2 or ids.dim() != 2 or q.shape != (ids.shape[0], table.shape[1]):
        raise ValueError(f"need table [n, d], ids [B, P], q [B, d]; got {tuple(table.shape)}, "
                         f"{tuple(ids.shape)}, {tuple(q.shape)}")
    safe = ids.clamp(min=0)
    out = torch.empty(ids.shape, dtype=table.dtype, device=table.device)
    for lo in range(0, ids.shape[0], tile):
        rows = table[safe[lo : lo + tile]].double()  # (t, P, d)
        out[lo : lo + tile] = (rows * q[lo : lo + tile, None, :].double()).sum(dim=2).to(table.dtype)
    return out.masked_fill(ids < 0, 0.0)
