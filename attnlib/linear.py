"""A linear layer whose one-token product reads its weights at the memory's speed (chapter 12).

A cached decoding step (chapter 12) feeds one token through every layer: each linear layer is a
matrix-vector product ``y = x W^T + b``, one multiply-add per weight, so its time is the time
to read ``W`` from memory. PyTorch hands that product to the CPU's BLAS as a matrix product
with one column, and on the course's machine (MKL, 2 cores) the BLAS runs it on one core and
more slowly than a plain read of the same bytes (``benchmarks/README.md``, issue 19).
``Linear`` computes the same product as ``nn.Linear``: for a single row it splits ``W``'s rows
into ``c`` blocks and multiplies them as one batched product (``torch.bmm``), which the BLAS
spreads over the cores and streams; for every other input it is ``nn.Linear`` itself.
``hold_row_blocks(model)`` makes those block views once for a whole generation (``GPT.generate``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch
import torch.nn as nn


@functools.cache  # called by every one-token product: computed once per width
def row_blocks(d_out: int) -> int | None:
    """How many blocks of rows ``Linear`` splits a ``(d_out, d_in)`` weight into for one token.

    The smallest divisor of ``d_out`` from 8 to 64 (at least 8 blocks, to give every core work;
    at most 64, so that a block keeps many rows), or None: no such divisor, the plain product.

    Example:
        >>> row_blocks(768), row_blocks(50257), row_blocks(4), row_blocks(67)  # 50257 = 29 * 1733
        (8, 29, None, None)
    """
    return next((c for c in range(8, 65) if d_out % c == 0), None)


class Linear(nn.Linear):
    """``nn.Linear`` (same arguments, parameters, ``state_dict`` and results, to float rounding)
    whose product for a single row streams the weight on every core.

    ``y = x W^T + b``, ``x (..., d_in)``, ``W (d_out, d_in)``, ``y (..., d_out)``. When ``x``
    holds one row (a cached decoding step), ``W`` is viewed as ``c = row_blocks(d_out)``
    blocks of ``d_out / c`` rows and each block times ``x`` is one matrix of a batched product.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> layer, x = Linear(64, 256), torch.randn(1, 1, 64)         # one token: (B, T, d_in)
        >>> y = layer(x)                                              # 8 blocks of 32 rows
        >>> y.shape, torch.allclose(y, nn.functional.linear(x, layer.weight, layer.bias), atol=1e-6)
        (torch.Size([1, 1, 256]), True)
    """

    held: tuple[torch.Tensor, torch.Tensor | None] | None = None  # row_blocked(), while hold_row_blocks holds it

    def row_blocked(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """``W`` and ``b`` cut into ``c = row_blocks(d_out)`` blocks of rows, as views (no copy):
        ``W (c, d_out/c, d_in)``, ``b (c, d_out/c, 1)`` or None without a bias. None when ``W``
        does not split: no such ``c``, or a weight that is not contiguous."""
        c = row_blocks(self.out_features)
        if c is None or not self.weight.is_contiguous():
            return None
        W = self.weight.view(c, -1, self.in_features)  # (d_out, d_in) -> (c, d_out/c, d_in)
        return W, None if self.bias is None else self.bias.view(c, -1, 1)  # (d_out,) -> (c, d_out/c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        blocks = None if x.numel() != self.in_features else self.held or self.row_blocked()
        if blocks is None:
            return super().forward(x)  # many rows, or a weight that does not split: nn.Linear's product
        W, b = blocks
        # (..., d_in) -> (d_in, 1) -> (c, d_in, 1): one column shared by the blocks (stride 0). Made with .T
        # (strides (1, d_in)), MKL runs SGEMM_BATCH(T,N), fast; from x.reshape(1, -1, 1) it runs
        # SGEMM_BATCH(N,N), several times slower (benchmarks/README.md).
        col = x.reshape(1, -1).T.expand(W.shape[0], -1, 1)
        y = torch.bmm(W, col) if b is None else torch.baddbmm(b, W, col)  # b + W x in one call: (c, d_out/c, 1)
        return y.view(*x.shape[:-1], self.out_features)  # (c, d_out/c, 1) -> (..., d_out)


@contextlib.contextmanager
def hold_row_blocks(model: nn.Module) -> Iterator[None]:
    """Inside the ``with`` block, every :class:`Linear` of ``model`` keeps its row blocks
    (:meth:`Linear.row_blocked`), made once on entry and dropped on exit.

    ``GPT.generate`` holds them for a whole generation: its one-token steps then make the views
    once per call, not once per layer and step (chapter 12, issue 19: no work repeated per step).
    Nothing may replace a parameter inside the block: the held views would still show the old one.

    Example:
        >>> layer = Linear(64, 256)
        >>> with hold_row_blocks(layer):
        ...     tuple(layer.held[0].shape), layer.held[0].data_ptr() == layer.weight.data_ptr()
        ((8, 32, 64), True)
        >>> layer.held is None
        True
    """
    layers = [m for m in model.modules() if isinstance(m, Linear)]
    before = [m.held for m in layers]  # None, unless an outer block holds them
    for m in layers:
        m.held = m.row_blocked()
    try:
        yield
    finally:
        for m, held in zip(layers, before):
            m.held = held
