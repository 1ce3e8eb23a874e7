"""Chapter 1: from tokens to vectors.

A token id selects one row of the embedding table. Written as matrix algebra,
the one-hot row of the id times the table is that same row:

    one_hot(ids) @ table == table[ids]

Frameworks (``nn.Embedding``) do the lookup; this module also gives the
product form, so the chapter can show that both agree.
"""
from __future__ import annotations

import torch

from ._validate import describe, ensure_float, ensure_positive_int, ensure_tensor, fail


def _check_ids(ids, vocab_size: int) -> torch.Tensor:
    ensure_tensor("ids", ids)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise fail("ids", "an integer tensor of token ids", describe(ids))
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)].flatten()[0].item()
        raise fail("ids", f"token ids in [0, {vocab_size - 1}] (vocab_size={vocab_size})",
                   f"id {bad}")
    return ids


def one_hot(ids: torch.Tensor, vocab_size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One-hot rows of token ids.

    ``one_hot(ids, vocab_size)[..., j] = 1`` if ``ids[...] == j`` else ``0``.

    Args:
        ids: integer tensor of token ids, shape ``(...)``, e.g. ``(T,)`` or ``(B, T)``,
            every id in ``[0, vocab_size)``.
        vocab_size: the number of tokens in the vocabulary.
        dtype: floating dtype of the result (float32 by default, ready for ``@``).

    Returns:
        Tensor of shape ``(..., vocab_size)`` on the device of ``ids``.

    Example:
        >>> one_hot(torch.tensor([2, 0]), 4)
        tensor([[0., 0., 1., 0.],
                [1., 0., 0., 0.]])
    """
    ensure_positive_int("vocab_size", vocab_size)
    _check_ids(ids, vocab_size)
    out = torch.zeros(*ids.shape, vocab_size, dtype=dtype, device=ids.device)  # (..., vocab_size)
    return out.scatter_(-1, ids.long().unsqueeze(-1), 1.0)  # put a 1 at column ids[...]


def embed(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Embed token ids by the product form: one-hot rows times the table.

    ``embed(ids, table) = one_hot(ids, vocab_size) @ table``, which equals ``table[ids]``.

    Args:
        ids: integer tensor of token ids, shape ``(...)``, every id in ``[0, vocab_size)``.
        table: the embedding table, shape ``(vocab_size, d_model)``: row ``j`` is token ``j``'s vector.

    Returns:
        Tensor of shape ``(..., d_model)``.

    Example:
        >>> table = torch.arange(6.0).reshape(3, 2)   # vocab_size = 3 tokens, d_model=2
        >>> embed(torch.tensor([2, 0, 2]), table)
        tensor([[4., 5.],
                [0., 1.],
                [4., 5.]])
    """
    ensure_float("table", table)
    if table.dim() != 2:
        raise fail("table", "a 2-D tensor of shape (vocab_size, d_model)", describe(table))
    oh = one_hot(ids, table.shape[0], dtype=table.dtype).to(table.device)  # (..., vocab_size)
    return oh @ table  # (..., vocab_size) @ (vocab_size, d_model) -> (..., d_model)
