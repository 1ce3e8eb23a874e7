"""Chapter 16: masks as functions, for ``torch.nn.attention.flex_attention``.

A boolean mask is a table: ``mask[i, j]`` says whether query ``i`` may attend to key ``j``.
FlexAttention (PyTorch 2.5+) takes the rule instead of the table: a ``mask_mod(b, h, q_idx,
kv_idx) -> bool`` says whether query ``q_idx`` of head ``h`` of sequence ``b`` may attend to key
``kv_idx``, and a ``score_mod(score, b, h, q_idx, kv_idx) -> score`` changes one score before
the softmax. Compiled (``torch.compile(flex_attention)``, on GPUs and, since PyTorch 2.6, on x86
CPUs), the rule becomes part of one fused kernel that skips the blocks a mask rules out;
uncompiled, as in the book (compiling takes time), it is evaluated on every (query, key) pair,
the table built and used as :func:`attnlib.attention` would, which is what this module's
:func:`mask_from_mod` shows.

Each function here returns a ``mask_mod`` or a ``score_mod``; :mod:`attnlib.masks` has the
same masks as tables (:func:`~attnlib.masks.causal_mask`,
:func:`~attnlib.masks.sliding_window_mask`, :func:`prefix_lm_mask`, :func:`document_mask`,
:func:`alibi_bias`), and the tests check each pair equal.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._validate import ensure_dim, ensure_int, ensure_int_tensor, ensure_number

__all__ = [
    "causal_mod",
    "sliding_window_mod",
    "prefix_lm_mod",
    "document_mod",
    "alibi_mod",
    "softcap_mod",
    "mask_from_mod",
    "prefix_lm_mask",
    "document_mask",
    "alibi_slopes",
    "alibi_bias",
]

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


# ------------------------------------------------------------------ mask_mods: which keys a query sees


def causal_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    """The causal mask as a rule: ``kv_idx <= q_idx`` (:func:`~attnlib.masks.causal_mask`)."""
    return kv_idx <= q_idx


def sliding_window_mod(window: int) -> MaskMod:
    """The sliding window as a rule: ``q_idx - window < kv_idx <= q_idx``
    (:func:`~attnlib.masks.sliding_window_mask`).

    Example:
        >>> mask_from_mod(sliding_window_mod(2), 4).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 1, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """
    ensure_int("window", window)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < window)

    return mask_mod


def prefix_lm_mod(prefix_length: int) -> MaskMod:
    """A prefix LM (T5's and UniLM's): every query sees the whole prefix, and the rest causally.

    ``kv_idx < prefix_length or kv_idx <= q_idx`` (:func:`prefix_lm_mask`).
    """
    ensure_int("prefix_length", prefix_length, min=0)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < prefix_length) | (kv_idx <= q_idx)

    return mask_mod


def document_mod(document_ids: torch.Tensor) -> MaskMod:
    """Several sequences packed into one row: a query sees the earlier keys of its own document.

    ``document_ids[b, q_idx] == document_ids[b, kv_idx] and kv_idx <= q_idx``
    (:func:`document_mask`), for ``document_ids`` ``(B, T)``: which document each token belongs to.
    """
    ensure_int_tensor("document_ids", document_ids, "an integer tensor (B, T) of document numbers", dim=2)

    def mask_mod(b, h, q_idx, kv_idx):
        return (document_ids[b, q_idx] == document_ids[b, kv_idx]) & (kv_idx <= q_idx)

    return mask_mod


# ------------------------------------------------------------------ score_mods: a score changed before the softmax


def alibi_mod(slopes: torch.Tensor) -> ScoreMod:
    """ALiBi (Press et al. 2022) as a rule: ``score + slopes[h] * (kv_idx - q_idx)``.

    A key ``q_idx - kv_idx`` tokens back loses ``slopes[h]`` per token of distance, one slope
    per head (:func:`alibi_slopes`); no position is added to the token vectors. The same bias as
    a table is :func:`alibi_bias`.
    """
    ensure_dim("slopes", slopes, 1, "a 1-D tensor (n_heads,) of slopes")

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def softcap_mod(cap: float) -> ScoreMod:
    """Soft-capping (Gemma 2, which uses ``cap = 50``): ``cap * tanh(score / cap)``.

    Scores stay within ``(-cap, cap)``; small ones pass almost unchanged (``tanh(x) ~ x``), so
    no single key's score can grow without bound.
    """
    ensure_number("cap", cap, "a positive number", lambda c: c > 0)

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return score_mod


def mask_from_mod(mask_mod: MaskMod, T_q: int, T_k: int | None = None, B: int = 1, n_heads: int = 1) -> torch.Tensor:
    """The table of a rule: ``mask[b, h, i, j] = mask_mod(b, h, i, j)``, shape ``(B, n_heads, T_q, T_k)``,
    squeezed to ``(T_q, T_k)`` when ``B == n_heads == 1``.

    Evaluated on index tensors that broadcast (``i`` as a column, ``j`` as a row), as
    ``torch.nn.attention.flex_attention.create_mask`` does.

    Example:
        >>> mask_from_mod(causal_mod, 3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
    """
    T_k = T_q if T_k is None else T_k
    b = torch.arange(B)[:, None, None, None]  # (B, 1, 1, 1)
    h = torch.arange(n_heads)[None, :, None, None]  # (1, n_heads, 1, 1)
    q_idx = torch.arange(T_q)[None, None, :, None]  # (1, 1, T_q, 1)
    kv_idx = torch.arange(T_k)[None, None, None, :]  # (1, 1, 1, T_k)
    mask = mask_mod(b, h, q_idx, kv_idx).expand(B, n_heads, T_q, T_k)  # (B, n_heads, T_q, T_k)
    return mask[0, 0] if B == n_heads == 1 else mask


# ------------------------------------------------------------------ the same masks as tables


def prefix_lm_mask(T: int, prefix_length: int, device=None) -> torch.Tensor:
    """The prefix-LM mask ``(T, T)``: ``mask[i, j] = j < prefix_length or j <= i``, True = may attend.

    Example:
        >>> prefix_lm_mask(4, 2).int()
        tensor([[1, 1, 0, 0],
                [1, 1, 0, 0],
                [1, 1, 1, 0],
                [1, 1, 1, 1]], dtype=torch.int32)
    """
    ensure_int("T", T)
    ensure_int("prefix_length", prefix_length, min=0)
    j = torch.arange(T, device=device)
    return (j[None, :] < prefix_length) | (j[None, :] <= j[:, None])  # (T, T)


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """The mask of packed documents ``(B, 1, T, T)``: same document and ``j <= i``, True = may attend.

    Args:
        document_ids: integer ``(B, T)``, the document each token belongs to (e.g. ``[0, 0, 0, 1, 1]``).

    Example:
        >>> document_mask(torch.tensor([[0, 0, 1, 1]]))[0, 0].int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 0, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """
    ensure_int_tensor("document_ids", document_ids, "an integer tensor (B, T) of document numbers", dim=2)
    T = document_ids.shape[1]
    same = document_ids[:, :, None] == document_ids[:, None, :]  # (B, T, 1) == (B, 1, T) -> (B, T, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=document_ids.device).tril()  # (T, T)
    return (same & causal)[:, None]  # (B, T, T) -> (B, 1, T, T): broadcasts over heads


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's slope of each head, ``(n_heads,)``: the geometric sequence ``2^(-8 h / n_heads)``,
    ``h = 1 .. n_heads``, for a power of two; otherwise the paper's interleaving of the
    nearest power of two's slopes with the next one's (Press et al. 2022, section 3).

    Example:
        >>> alibi_slopes(8).tolist()
        [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
    """
    ensure_int("n_heads", n_heads)

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = alibi_slopes(2 * closest).tolist()[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra)


def alibi_bias(n_heads: int, T_q: int, T_k: int | None = None) -> torch.Tensor:
    """ALiBi's bias as a float mask ``(n_heads, T_q, T_k)``: ``slopes[h] * (j - i)``, added to the scores.

    Keys after the query get a positive bias here; combine it with the causal mask (as ALiBi's
    decoder does) to block them: ``alibi_bias(...) + float_mask(causal_mask(T))``.
    """
    T_k = T_q if T_k is None else T_k
    ensure_int("T_q", T_q)
    ensure_int("T_k", T_k)
    distance = torch.arange(T_k)[None, :] - torch.arange(T_q)[:, None]  # (T_q, T_k): j - i
    return alibi_slopes(n_heads)[:, None, None] * distance  # (n_heads, 1, 1) * (T_q, T_k) -> (n_heads, T_q, T_k)
