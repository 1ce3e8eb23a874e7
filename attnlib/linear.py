"""A linear layer whose one-token product reads its weights at the memory's speed (chapter 12).

A cached decoding step (chapter 12) feeds one token through every layer: each linear layer is a
matrix-vector product ``y = x W^T + b``, one multiply-add per weight, so its time is the time
to read ``W`` from memory. PyTorch hands that product to the CPU's BLAS as a matrix product
with one column, and on the course's machine (MKL, 2 cores) the BLAS runs it on one core and
more slowly than a plain read of the same bytes (``benchmarks/README.md``, issue 19).
``Linear`` computes the same product as ``nn.Linear``: for a single row it splits ``W``'s rows
into ``c`` blocks and multiplies them as one batched product (``torch.bmm``), which the BLAS
spreads over the cores and streams; for every other input it is ``nn.Linear`` itself.
"""

from __future__ import annotations

import functools

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = row_blocks(self.out_features)
        if x.numel() != self.in_features or c is None or not self.weight.is_contiguous():
            return super().forward(x)  # many rows, or a weight that does not split: nn.Linear's product
        W = self.weight.view(c, self.out_features // c, self.in_features)  # (d_out, d_in) -> (c, d_out/c, d_in)
        # (..., d_in) -> (d_in, 1) -> (c, d_in, 1): one column shared by the blocks (stride 0). Made with .T
        # (strides (1, d_in)), MKL runs SGEMM_BATCH(T,N), fast; from x.reshape(1, -1, 1) it runs
        # SGEMM_BATCH(N,N), several times slower (benchmarks/README.md).
        col = x.reshape(1, -1).T.expand(c, -1, 1)
        if self.bias is None:
            y = torch.bmm(W, col)  # (c, d_out/c, 1)
        else:  # b + W x in one call: (d_out,) -> (c, d_out/c, 1)
            y = torch.baddbmm(self.bias.view(c, -1, 1), W, col)
        return y.reshape(*x.shape[:-1], self.out_features)  # (c, d_out/c, 1) -> (..., d_out)
