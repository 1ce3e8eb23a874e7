"""Chapters 2 and 3: queries, keys, and their scaled dot products.

Every query is compared with every key by a dot product. For row vectors
stacked into matrices ``Q (T_q, d_k)`` and ``K (T_k, d_k)`` all the
comparisons are one matrix product, scaled by ``1/sqrt(d_k)`` (Vaswani et
al. 2017, eq. 1):

    scores = Q K^T / sqrt(d_k)          # (T_q, d_k) @ (d_k, T_k) -> (T_q, T_k)

Row ``i`` of ``scores`` holds how strongly query ``i`` matches each key.
The scale keeps the variance of a score near 1 whatever ``d_k`` is: for
entries with mean 0 and variance 1, ``q . k`` has variance ``d_k``.
"""

from __future__ import annotations

import math

import torch

from ._checks import check_qk, check_scale

__all__ = ["qk_scores"]


def qk_scores(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Scaled dot products of every query with every key.

    ``scores[..., i, j] = scale * (q[..., i, :] . k[..., j, :])``, that is
    ``scores = q @ k^T * scale`` with ``scale = 1/sqrt(d_k)`` by default.

    Args:
        q: queries, shape ``(..., T_q, d_k)``, floating point.
        k: keys, shape ``(..., T_k, d_k)``, same rank, dtype and device as ``q``;
            the batch dimensions ``...`` broadcast.
        scale: the factor applied to the dot products. ``None`` (default) means
            ``1/sqrt(d_k)``; ``1.0`` gives the raw dot products.

    Returns:
        Tensor of shape ``(..., T_q, T_k)``.

    Example:
        >>> q = torch.tensor([[1.0, 0.0], [1.0, 1.0]])   # T_q=2 queries, d_k=2
        >>> k = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])   # T_k=3 keys
        >>> qk_scores(q, k, scale=1.0)
        tensor([[2., 0., 1.],
                [2., 2., 2.]])
        >>> qk_scores(q, k).round(decimals=4)           # divided by sqrt(2)
        tensor([[1.4142, 0.0000, 0.7071],
                [1.4142, 1.4142, 1.4142]])
    """
    check_qk(q, k)
    check_scale(scale)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return (q @ k.transpose(-2, -1)) * scale  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
