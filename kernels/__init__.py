"""Batched tensor primitives for graph retrieval.

Every kernel takes queries as columns (``[n, B]`` blocks) or as padded ``[B, P]`` tensors,
runs on the device of its inputs, and is held to a plain reference in the tests (scipy, networkx,
or :mod:`spectrag.reference`). Pure math: no product defaults, no I/O, nothing from the engine.
"""

from spectrag.kernels.activation import ActivationResult, spreading_activation
from spectrag.kernels.heat import (
    chebyshev_heat,
    chebyshev_heat_dense_batched,
    heat_num_terms,
)
from spectrag.kernels.lanczos import LanczosNotConverged, LanczosResult, lanczos_eigsh
from spectrag.kernels.laplacian import degree_vector, normalized_laplacian
from spectrag.kernels.pagerank import (
    PageRankNotConverged,
    PageRankResult,
    personalized_pagerank,
    personalized_pagerank_dense_batched,
)
from spectrag.kernels.subspace import subspace_eigsh
from spectrag.kernels.topk import sort_by_score_then_id, tiled_topk_ip

__all__ = [
    "ActivationResult",
    "LanczosNotConverged",
    "LanczosResult",
    "PageRankNotConverged",
    "PageRankResult",
    "chebyshev_heat",
    "chebyshev_heat_dense_batched",
    "degree_vector",
    "heat_num_terms",
    "lanczos_eigsh",
    "normalized_laplacian",
    "personalized_pagerank",
    "personalized_pagerank_dense_batched",
    "sort_by_score_then_id",
    "spreading_activation",
    "subspace_eigsh",
    "tiled_topk_ip",
]
