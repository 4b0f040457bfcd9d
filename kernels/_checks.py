"""Input checks shared by the dense batched kernels (one message style everywhere)."""

from __future__ import annotations

import torch


def check_dense_blocks(blocks: torch.Tensor, X: torch.Tensor, name: str) -> tuple[int, int]:
    """Validate ``blocks [B, P, P]`` and ``X [B, P]`` / ``[B, P, C]``; returns ``(B, P)``."""
    if not isinstance(blocks, torch.Tensor) or blocks.layout != torch.strided:
        raise TypeError(f"{name} must be a dense [B, P, P] torch.Tensor")
    if not isinstance(X, torch.Tensor) or X.layout != torch.strided:
        raise TypeError("X must be a dense [B, P] or [B, P, C] torch.Tensor")
    if not X.is_floating_point():
        raise TypeError(f"X must have a floating dtype, got {X.dtype}")
    if blocks.dim() != 3 or blocks.shape[1] != blocks.shape[2]:
        raise ValueError(f"{name} must be [B, P, P], got shape {tuple(blocks.shape)}")
    batch, p = blocks.shape[0], blocks.shape[1]
    if X.dim() not in (2, 3) or X.shape[0] != batch or X.shape[1] != p:
        raise ValueError(
            f"shape mismatch: {name} is {tuple(blocks.shape)} so X must be [{batch}, {p}] or "
            f"[{batch}, {p}, C], got {tuple(X.shape)}"
        )
    if blocks.device != X.device:
        raise ValueError(f"{name} is on {blocks.device} but X is on {X.device}")
    return batch, p
