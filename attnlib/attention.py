"""Chapter 5: scaled dot-product attention, scores -> weights -> mix of values.

Vaswani et al. 2017, eq. 1, with an optional mask ``M`` (Chapter 4):

    weights = softmax(Q K^T / sqrt(d_k) + M)      # (T_q, T_k), each row sums to 1
    out     = weights V                           # (T_q, T_k) @ (T_k, d_v) -> (T_q, d_v)

Output row ``i`` is the average of the value rows, weighted by how well
query ``i`` matches each key. This module writes every step out; its result
equals ``F.scaled_dot_product_attention`` (which fuses the steps and never
returns the weights), including rows whose keys are all masked: their
weights and output are zeros, never ``nan``. (That SDPA gives zeros there too
was verified for torch 2.13.0 on the CPU, math and default backends, by
tests/test_attention.py; older releases returned ``nan``, and the CUDA kernels
are tested only where a GPU is present.)
"""

from __future__ import annotations

import torch

from ._checks import batch_shape, check_mask, check_qk, check_qkv
from .masks import causal_mask
from .scores import qk_scores
from .softmax import softmax

__all__ = ["attention", "attention_weights"]


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """The attention weights: softmax over the keys of the masked, scaled scores.

    ``weights = softmax(q k^T * scale + M)`` where ``M`` is 0 where a key may be
    attended and ``-inf`` where it may not. A row with every key masked is all zeros.

    Args:
        q: queries, shape ``(..., T_q, d_k)``.
        k: keys, shape ``(..., T_k, d_k)``, same rank as ``q``; batch dims broadcast.
        attn_mask: optional mask that broadcasts to ``(..., T_q, T_k)``: boolean
            (True = may attend) or floating point (added to the scores).
        is_causal: if True, use ``causal_mask(T_q, T_k)``; then ``attn_mask`` must be None.
        scale: factor on the dot products; ``None`` means ``1/sqrt(d_k)``.

    Returns:
        Tensor of shape ``(..., T_q, T_k)``; each row sums to 1 (or is all zeros).

    Example:
        >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])   # T_q=2, d_k=2
        >>> k = torch.tensor([[1.0, 0.0], [0.0, 1.0]])   # T_k=2
        >>> attention_weights(q, k, is_causal=True, scale=1.0).round(decimals=4)
        tensor([[1.0000, 0.0000],
                [0.2689, 0.7311]])
    """
    check_qk(q, k)
    T_q, T_k = q.shape[-2], k.shape[-2]
    check_mask(attn_mask, is_causal, batch_shape(("q", q), ("k", k)) + (T_q, T_k), q.device)
    return softmax(masked_scores(q, k, attn_mask, is_causal, scale), dim=-1)  # (..., T_q, T_k), over the keys


def masked_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """The scores before the softmax: ``q k^T * scale + M``, ``M`` 0 where a key may be attended and
    ``-inf`` where it may not (a float mask is added as it is). Arguments as :func:`attention_weights`,
    unchecked; returns ``(..., T_q, T_k)``. Chapter 19, Gemma 2: with a ``softcap`` ``c`` the scaled
    scores become ``c tanh(s / c)`` before the mask, so none passes ``c`` in size."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    scores = qk_scores(q, k, scale)  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)  # in (-c, c), about s where |s| << c
    if is_causal and T_q and T_k:  # an empty side needs no mask: T_k = 0 gives zeros, as in SDPA
        attn_mask = causal_mask(T_q, T_k, device=q.device)  # (T_q, T_k)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))  # blocked keys -> -inf
    elif attn_mask is not None:
        scores = scores + attn_mask.to(scores.dtype)  # float mask: added to the scores
    return scores


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, written out: returns the output and the weights.

    ``weights = softmax(q k^T * scale + M)``, ``out = weights v``, with ``M`` 0
    where a key may be attended and ``-inf`` where it may not. Same result as
    ``F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=is_causal, scale=scale)``.

    Args:
        q: queries, shape ``(..., T_q, d_k)``, floating point.
        k: keys, shape ``(..., T_k, d_k)``.
        v: values, shape ``(..., T_k, d_v)``. ``q``, ``k``, ``v`` have the same
            rank, dtype and device; their batch dims ``...`` broadcast.
        attn_mask: optional mask that broadcasts to ``(..., T_q, T_k)``: boolean
            (True = may attend) or floating point (added to the scores).
        is_causal: if True, query ``i`` attends to keys ``0 .. i`` only
            (``causal_mask(T_q, T_k)``); then ``attn_mask`` must be None.
        scale: factor on the dot products; ``None`` means ``1/sqrt(d_k)``.

    Returns:
        ``(out, weights)``: ``out`` of shape ``(..., T_q, d_v)`` and ``weights`` of
        shape ``(..., T_q, T_k)``. A query whose keys are all masked gets zero
        weights and a zero output.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
        >>> out, weights = attention(q, k, v)
        >>> out.shape, weights.shape
        (torch.Size([2, 5, 3]), torch.Size([2, 5, 7]))
        >>> weights.sum(dim=-1).round(decimals=4)
        tensor([[1., 1., 1., 1., 1.],
                [1., 1., 1., 1., 1.]])
    """
    check_qkv(q, k, v)
    batch_shape(("q", q), ("k", k), ("v", v))
    weights = attention_weights(q, k, attn_mask, is_causal, scale)  # (..., T_q, T_k)
    out = weights @ v  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return out, weights
