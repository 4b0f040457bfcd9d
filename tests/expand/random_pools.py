"""Random graphs and seed lists shared by the expansion tests (tests/expand/), with an option
of dyadic weights, whose sums are exact in float32."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch


def random_graph(rng, n: int, density: float, dyadic: bool, symmetric: bool = True) -> sp.csr_matrix:
    m = sp.random(n, n, density=density, random_state=int(rng.integers(1 << 30)), format="csr", dtype=np.float32)
    if dyadic:  # multiples of 1/8: every sum below is exact in float32, so no summation-order effect
        m.data = (np.ceil(m.data * 8) / 8).astype(np.float32)
    m = (m + m.T).tocsr() if symmetric else m.tocsr()
    m.setdiag(0)
    m.eliminate_zeros()
    m.sort_indices()
    return m


def random_seeds(rng, batch: int, n: int, width: int, dyadic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.from_numpy(rng.integers(-1, n, size=(batch, width)))  # -1 = empty slot; repeats allowed
    w = rng.random((batch, width)).astype(np.float32)
    if dyadic:
        w = np.ceil(w * 8) / 8
    return ids, torch.from_numpy(w.astype(np.float32))
