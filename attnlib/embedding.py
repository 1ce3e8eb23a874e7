"""Chapter 1: from tokens to vectors.

A token id selects one row of the embedding table. Written as matrix algebra,
the one-hot row of the id times the table is that same row:

    one_hot(ids) @ table == table[ids]

Frameworks (``nn.Embedding``) do the lookup; this module also gives the
product form, so the chapter can show that both agree.
"""

from __future__ import annotations

import torch

from ._checks import check_ids
from ._validate import ensure_dim, ensure_float


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
    check_ids(ids, vocab_size)
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
    ensure_dim("table", table, 2, "a 2-D tensor of shape (vocab_size, d_model)")
    oh = one_hot(ids, table.shape[0], dtype=table.dtype).to(table.device)  # (..., vocab_size)
    return oh @ table  # (..., vocab_size) @ (vocab_size, d_model) -> (..., d_model)
