"""Chapter 5: softmax, from scores to attention weights.

    softmax(x)_j = exp(x_j) / sum_i exp(x_i)

turns a row of scores into weights that are positive and sum to 1.
Computed as written, ``exp(1000.0)`` overflows to ``inf`` and the result is
``inf / inf = nan``. Subtracting the row maximum first changes nothing
mathematically (the factor ``exp(-max)`` cancels) and keeps every exponent
``<= 0``:

    softmax(x)_j = exp(x_j - max(x)) / sum_i exp(x_i - max(x))

Masked scores are ``-inf`` and get weight ``exp(-inf) = 0``. A row in which
every score is masked has no valid key at all; this softmax returns zeros
for it (``torch.softmax`` returns ``nan``), which is also what
``F.scaled_dot_product_attention`` does in torch 2.13.0 on the CPU (math and
default backends, tested in tests/test_attention.py; older releases gave ``nan``).
"""

from __future__ import annotations

import torch

from ._validate import ensure_axis, ensure_float

__all__ = ["softmax"]


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``; a row that is all ``-inf`` gives zeros.

    ``softmax(x)_j = exp(x_j - m) / sum_i exp(x_i - m)`` with ``m = max_i x_i``
    (``m = 0`` for an all ``-inf`` row, whose result is all zeros).

    Args:
        x: floating-point tensor of any shape, e.g. scores ``(..., T_q, T_k)``;
            entries may be ``-inf`` (masked).
        dim: the dimension that sums to 1 (default the last, the keys).

    Returns:
        Tensor of the shape of ``x``: each slice along ``dim`` sums to 1, or is
        all zeros where every entry is ``-inf``.

    Example:
        >>> x = torch.tensor([[1000.0, 1000.0, float("-inf")],
        ...                   [float("-inf"), float("-inf"), float("-inf")]])
        >>> softmax(x)
        tensor([[0.5000, 0.5000, 0.0000],
                [0.0000, 0.0000, 0.0000]])
    """
    ensure_float("x", x)
    ensure_axis("dim", dim, x)
    if x.shape[dim] == 0:
        return x.clone()  # no entries to normalise (e.g. no keys, T_k = 0): nothing to return
    m = x.amax(dim=dim, keepdim=True)  # (..., 1, ...): the max along dim
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # an all -inf row: subtract 0
    e = (x - m).exp_()  # every exponent <= 0: no overflow; exp(-inf) = 0 (in place on the new x - m)
    total = e.sum(dim=dim, keepdim=True)  # (..., 1, ...)
    return e / torch.where(total > 0, total, torch.ones_like(total))  # 0 / 1 = 0 for all -inf rows
