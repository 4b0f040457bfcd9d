"""Batched tensor primitives for graph retrieval.

Every kernel takes queries as columns (``[n, B]`` blocks) or as padded ``[B, P]`` tensors,
runs on the device of its inputs, and has a plain reference implementation in the tests.
"""

from kernels.topk import tiled_topk_ip

__all__ = ["tiled_topk_ip"]
