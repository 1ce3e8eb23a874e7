"""Chapters 6 and 12: splitting a projection into heads, merging them, sharing key/value heads.

Heads are only a reshape: head ``h`` of a ``(B, T, n_heads * d_head)`` projection is its ``h``-th
block of ``d_head`` columns (:func:`split_heads`, :func:`merge_heads`). Grouped-query attention
(chapter 12) shares each key/value head among ``n_heads / n_kv_heads`` query heads
(:func:`repeat_kv`). ``attnlib.multihead`` re-exports these functions.
"""

from __future__ import annotations

import torch

from ._validate import ensure_dim, ensure_divisible, ensure_heads, ensure_int

__all__ = ["split_heads", "merge_heads", "repeat_kv"]


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Split the last dimension into heads: ``(B, T, d_model) -> (B, n_heads, T, d_head)``.

    ``split_heads(x, n_heads)[b, h, t, i] = x[b, t, h * d_head + i]`` with ``d_head = d_model / n_heads``:
    head ``h`` gets the ``h``-th block of ``d_head`` columns.

    Args:
        x: tensor of shape ``(B, T, d_model)``, ``d_model`` a multiple of ``n_heads``.
        n_heads: number of heads.

    Returns:
        Tensor of shape ``(B, n_heads, T, d_head)`` (a view of ``x`` when possible).

    Example:
        >>> x = torch.arange(8.0).reshape(1, 2, 4)   # B=1, T=2, d_model=4
        >>> split_heads(x, 2)                        # head 0: columns 0-1, head 1: columns 2-3
        tensor([[[[0., 1.],
                  [4., 5.]],
        <BLANKLINE>
                 [[2., 3.],
                  [6., 7.]]]])
    """
    ensure_dim("x", x, 3, "a 3-D tensor of shape (B, T, d_model)")
    B, T, d_model = x.shape
    ensure_heads(d_model, n_heads)
    x = x.reshape(B, T, n_heads, d_model // n_heads)  # (B, T, d_model) -> (B, T, n_heads, d_head)
    return x.transpose(1, 2)  # (B, T, n_heads, d_head) -> (B, n_heads, T, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads again: ``(B, n_heads, T, d_head) -> (B, T, d_model)``.

    The inverse of :func:`split_heads`:
    ``merge_heads(x)[b, t, h * d_head + i] = x[b, h, t, i]``.

    Args:
        x: tensor of shape ``(B, n_heads, T, d_head)``.

    Returns:
        Tensor of shape ``(B, T, n_heads * d_head)``.

    Example:
        >>> x = torch.arange(8.0).reshape(1, 2, 4)
        >>> torch.equal(merge_heads(split_heads(x, 2)), x)
        True
    """
    ensure_dim("x", x, 4, "a 4-D tensor of shape (B, n_heads, T, d_head)")
    B, n_heads, T, d_head = x.shape
    x = x.transpose(1, 2)  # (B, n_heads, T, d_head) -> (B, T, n_heads, d_head)
    return x.reshape(B, T, n_heads * d_head)  # (B, T, n_heads, d_head) -> (B, T, d_model)


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Share key/value heads among query heads: ``(B, n_kv_heads, T, d_head) -> (B, n_heads, T, d_head)``.

    ``repeat_kv(x, n_heads)[:, h] = x[:, h // g]`` with ``g = n_heads / n_kv_heads``, the
    group size: each key/value head is repeated ``g`` times in a row
    (``repeat_interleave``), the grouping of ``F.scaled_dot_product_attention(...,
    enable_gqa=True)``. With ``n_kv_heads == n_heads`` it returns ``x`` itself.

    Args:
        x: keys or values, shape ``(B, n_kv_heads, T, d_head)``.
        n_heads: number of query heads, a multiple of ``n_kv_heads``.

    Returns:
        Tensor of shape ``(B, n_heads, T, d_head)``.

    Example:
        >>> kv = torch.tensor([10.0, 20.0]).reshape(1, 2, 1, 1)   # 2 key/value heads
        >>> repeat_kv(kv, 4).flatten().tolist()                  # 4 query heads: groups of 2
        [10.0, 10.0, 20.0, 20.0]
    """
    ensure_dim("x", x, 4, "a 4-D tensor of shape (B, n_kv_heads, T, d_head)")
    n_kv_heads = x.shape[1]
    ensure_int("n_heads", n_heads)
    ensure_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads, "x.shape[1]")
    if n_heads == n_kv_heads:
        return x
    return x.repeat_interleave(n_heads // n_kv_heads, dim=1)  # (B, n_kv_heads, T, d_head) -> (B, n_heads, T, d_head)


def flatten_batch(mask: torch.Tensor | None, lead: torch.Size) -> torch.Tensor | None:
    """A mask for scores ``(*lead, n_heads, T, T_k)`` with the leading axes made one: ``(B, n_heads, T, T_k)``.

    A mask of at most 3 dimensions broadcasts over the batch as it is and comes back unchanged.
    """
    if mask is None or mask.dim() <= 3:
        return mask
    mask = mask.reshape((1,) * (len(lead) + 3 - mask.dim()) + mask.shape)  # (..., h, T, T_k), lead axes padded
    return mask.expand(*lead, *mask.shape[-3:]).reshape(-1, *mask.shape[-3:])  # (*lead, ...) -> (B, ...)
