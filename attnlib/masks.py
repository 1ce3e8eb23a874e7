"""Chapter 4: masking, which keys each query may attend to.

A boolean mask has ``True`` where query ``i`` **may attend** to key ``j``, as in
``F.scaled_dot_product_attention``. (``nn.MultiheadAttention`` uses the
opposite convention, ``True`` = blocked: pass it ``~mask``.)

Masking happens on the scores, **before** the softmax: blocked scores become
``-inf``, so their weights are exactly ``exp(-inf) = 0`` and each row still
sums to 1. The equivalent float mask is added to the scores:

    float_mask[i, j] = 0 if mask[i, j] else -inf
    softmax(scores + float_mask) == softmax(scores.masked_fill(~mask, -inf))

Two masks cover most uses: the causal mask (a token sees itself and the
tokens before it, never the future) and the padding mask (never attend to
the padding after a sequence's last real token). Chapter 16 adds the sliding
window: the causal mask cut to the last ``window`` keys.
"""

from __future__ import annotations

import torch

from ._checks import check_lengths
from ._validate import ensure_bool_tensor, ensure_choice, ensure_float_dtype, ensure_int

__all__ = ["causal_mask", "sliding_window_mask", "padding_mask", "float_mask"]


def causal_mask(T_q: int, T_k: int | None = None, device=None, align: str = "top_left") -> torch.Tensor:
    """The causal mask: query ``i`` may attend to keys ``0 .. i`` (shifted by ``T_k - T_q`` at the bottom right).

    ``align="top_left"`` (default): ``mask[i, j] = (j <= i)``, the lower triangle with the
    diagonal, like the ``is_causal=True`` of ``F.scaled_dot_product_attention``:
    ``torch.ones(T_q, T_k).tril(diagonal=0)``. Right for a whole sequence, ``T_q == T_k``.

    ``align="bottom_right"``: ``mask[i, j] = (j <= i + T_k - T_q)``, the triangle pushed to
    the bottom right corner: ``torch.ones(T_q, T_k).tril(diagonal=T_k - T_q)``, PyTorch's
    ``torch.nn.attention.bias.causal_lower_right(T_q, T_k)``. This is the mask of ``T_q``
    **new** tokens that come after ``T_k - T_q`` cached ones (a KV cache, chapter 12): the
    new query ``i`` is token ``T_k - T_q + i`` of the sequence, so it sees every cached key
    and the new keys up to itself; the last query sees every key. For ``T_q == T_k`` both
    alignments are the same mask. (For ``T_q > T_k`` the first ``T_q - T_k`` rows are all
    False: those queries have no key to attend to.)

    Args:
        T_q: number of queries (rows).
        T_k: number of keys (columns); ``None`` (default) means ``T_q``.
        device: device of the mask (``None``: the default device). Pass the
            device of the scores, e.g. ``q.device``.
        align: ``"top_left"`` (default) or ``"bottom_right"``: the corner the
            diagonal of the triangle starts from.

    Returns:
        Boolean tensor of shape ``(T_q, T_k)``, True = may attend.

    Example:
        >>> causal_mask(3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
        >>> causal_mask(2, 5, align="bottom_right").int()      # 2 new queries after 3 cached keys
        tensor([[1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1]], dtype=torch.int32)
    """
    ensure_int("T_q", T_q)
    T_k = T_q if T_k is None else ensure_int("T_k", T_k)
    ensure_choice("align", align, ("top_left", "bottom_right"))
    diagonal = 0 if align == "top_left" else T_k - T_q  # bottom right: query i is token T_k - T_q + i
    return torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril(diagonal=diagonal)  # (T_q, T_k)


def sliding_window_mask(
    T_q: int, T_k: int | None = None, *, window: int, align: str = "top_left", device=None
) -> torch.Tensor:
    """The sliding-window (band) mask: query ``i`` may attend to keys ``i - window + 1 .. i`` (chapter 16).

    ``mask[i, j] = (i - window < j <= i)`` with ``align="top_left"`` (default); with
    ``align="bottom_right"`` query ``i`` is token ``i + T_k - T_q`` (new tokens after cached
    ones, as in :func:`causal_mask`): ``mask[i, j] = (i + T_k - T_q - window < j <= i + T_k - T_q)``.
    It is the causal mask with only the last ``window`` keys of each row kept, each query's
    own key included (Longformer, Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023:
    ``window = 4096``): ``causal_mask(...) & ~causal_mask(..., diagonal moved by -window)``,
    ``torch.ones(T_q, T_k).tril(d) - torch.ones(T_q, T_k).tril(d - window)`` with
    ``d = 0`` or ``T_k - T_q``. A row holds at most ``window`` True values, whatever ``T_k``:
    attention costs ``O(T window)`` instead of ``O(T^2)``.

    Args:
        T_q: number of queries (rows).
        T_k: number of keys (columns); ``None`` (default) means ``T_q``.
        window: how many keys a query sees, itself included, ``>= 1``.
        align: ``"top_left"`` (default) or ``"bottom_right"``, as in :func:`causal_mask`.
        device: device of the mask (``None``: the default device).

    Returns:
        Boolean tensor of shape ``(T_q, T_k)``, True = may attend.

    Example:
        >>> sliding_window_mask(5, window=3).int()
        tensor([[1, 0, 0, 0, 0],
                [1, 1, 0, 0, 0],
                [1, 1, 1, 0, 0],
                [0, 1, 1, 1, 0],
                [0, 0, 1, 1, 1]], dtype=torch.int32)
        >>> sliding_window_mask(2, 6, window=3, align="bottom_right").int()   # 2 new after 4 cached
        tensor([[0, 0, 1, 1, 1, 0],
                [0, 0, 0, 1, 1, 1]], dtype=torch.int32)
    """
    ensure_int("window", window)
    causal = causal_mask(T_q, T_k, device=device, align=align)  # (T_q, T_k): j <= i + shift
    T_k = causal.shape[1]
    shift = 0 if align == "top_left" else T_k - T_q  # query i is token i + shift
    too_old = torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril(
        diagonal=shift - window
    )  # j <= i + shift - window
    return causal & ~too_old  # (T_q, T_k): i - window < j <= i


def padding_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """The padding mask of a batch of sequences padded at the end to length ``T``.

    ``mask[b, 0, 0, j] = (j < lengths[b])``: True on the real tokens, False on
    the padding. The two singleton dimensions let it broadcast over heads and
    queries against scores of shape ``(B, n_heads, T_q, T)``.

    Args:
        lengths: integer tensor of shape ``(B,)``, the number of real tokens of
            each sequence, each in ``[0, T]``.
        T: the padded length (number of keys).

    Returns:
        Boolean tensor of shape ``(B, 1, 1, T)`` on the device of ``lengths``.

    Example:
        >>> padding_mask(torch.tensor([3, 1]), 4).int()
        tensor([[[[1, 1, 1, 0]]],
        <BLANKLINE>
        <BLANKLINE>
                [[[1, 0, 0, 0]]]], dtype=torch.int32)
    """
    ensure_int("T", T)
    check_lengths(lengths, T)
    positions = torch.arange(T, device=lengths.device)  # (T,)
    mask = positions < lengths[:, None]  # (1, T) < (B, 1) -> (B, T)
    return mask[:, None, None, :]  # (B, T) -> (B, 1, 1, T)


def float_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive (float) form of a boolean mask: 0 where allowed, ``-inf`` where blocked.

    ``float_mask(mask)[...] = 0 if mask[...] else -inf``, so that
    ``scores + float_mask(mask)`` equals ``scores.masked_fill(~mask, -inf)``.

    Args:
        mask: boolean tensor of any shape, True = may attend.
        dtype: floating dtype of the result (match the scores).

    Returns:
        Tensor of the shape of ``mask`` with values ``0`` and ``-inf``.

    Example:
        >>> float_mask(causal_mask(3))
        tensor([[0., -inf, -inf],
                [0., 0., -inf],
                [0., 0., 0.]])
    """
    ensure_bool_tensor("mask", mask, "a boolean tensor (True = may attend)")
    ensure_float_dtype("dtype", dtype, "a floating-point dtype")
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~mask, float("-inf"))
