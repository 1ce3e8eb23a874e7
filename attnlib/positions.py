"""Chapter 9: order and position.

Attention without positions is permutation-equivariant: shuffle the tokens and
the outputs are shuffled the same way, nothing else changes. Two ways to give
the model the order of its tokens:

* **add** a vector per position to the token vectors, before the first layer:
  the paper's fixed sinusoids (:func:`sinusoidal_positions`), or a learned
  table (``attnlib.GPT``'s ``pos_emb``);
* **rotate** the queries and keys of every head by their positions, just
  before the scores: rotary position embeddings, RoPE (:func:`apply_rope`).
  Then a score ``q_m . k_n`` depends on the positions only through ``m - n``.

Both use the same angles ``pos * theta_i``, ``theta_i = base^(-2i/d)`` with
``base = 10000``, for ``i = 0 .. d/2 - 1``: column pair ``(2i, 2i + 1)`` of the
sinusoidal table holds ``(sin, cos)`` of the angle that RoPE rotates pair
``(2i, 2i + 1)`` by.
"""

from __future__ import annotations

import torch

from ._checks import check_rope
from ._validate import ensure_even, ensure_int

__all__ = ["sinusoidal_positions", "apply_rope"]


def sinusoidal_positions(T: int, d_model: int) -> torch.Tensor:
    """The sinusoidal position encodings of Vaswani et al. 2017, section 3.5.

    Row ``pos`` is the vector added to the token at position ``pos``; the
    sines fill the even columns and the cosines the odd ones, interleaved::

        PE[pos, 2i]     = sin(pos / 10000^(2i / d_model))
        PE[pos, 2i + 1] = cos(pos / 10000^(2i / d_model))      i = 0 .. d_model/2 - 1

    Column pair ``i`` turns at the angular frequency ``10000^(-2i/d_model)``: its
    wavelength grows geometrically from ``2 pi`` (pair 0) towards ``10000 * 2 pi``.
    Computed in float64 and returned as float32, on the CPU (move it with
    ``.to(device)``).

    Args:
        T: number of positions, ``pos = 0 .. T - 1`` (a positive int).
        d_model: the width of the token vectors (a positive even int).

    Returns:
        Float32 tensor of shape ``(T, d_model)``; every entry is in ``[-1, 1]``.

    Example:
        >>> P = sinusoidal_positions(3, 4)
        >>> P.shape
        torch.Size([3, 4])
        >>> P[0].tolist()                                  # sin 0 = 0, cos 0 = 1
        [0.0, 1.0, 0.0, 1.0]
        >>> [round(v, 4) for v in P[1].tolist()]           # sin 1, cos 1, sin 0.01, cos 0.01
        [0.8415, 0.5403, 0.01, 0.9999]
    """
    ensure_int("T", T)
    ensure_even("d_model", ensure_int("d_model", d_model))
    pos = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,): 2i = 0, 2, 4, ...
    angles = pos / 10000.0 ** (two_i / d_model)  # (T, 1) / (d_model/2,) -> (T, d_model/2)
    pe = torch.empty(T, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)  # even columns: sin
    pe[:, 1::2] = torch.cos(angles)  # odd columns: cos
    return pe.float()  # (T, d_model)


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (RoPE, Su et al. 2021): rotate ``x`` by its positions.

    Dimensions are paired as in the RoFormer paper, ``(2i, 2i + 1)``
    (interleaved), and pair ``i`` of the vector at position ``m`` is rotated by
    the angle ``m * theta_i``::

        theta_i = 1 / base^(2i / d_head)                       i = 0 .. d_head/2 - 1
        out[..., m, 2i]     = x[..., m, 2i] cos(m theta_i) - x[..., m, 2i + 1] sin(m theta_i)
        out[..., m, 2i + 1] = x[..., m, 2i] sin(m theta_i) + x[..., m, 2i + 1] cos(m theta_i)

    Read pair ``i`` as the complex number ``x[2i] + 1j * x[2i + 1]``: RoPE
    multiplies it by ``exp(1j * m * theta_i)``. Apply it to the queries and the
    keys of every head (not to the values), after the projections and before
    the scores: then ``apply_rope(q)[m] . apply_rope(k)[n]`` depends on the
    positions only through ``m - n``. Rotations keep every vector's norm, and
    position 0 leaves the vector as it is. (GPT-NeoX and Hugging Face's LLaMA
    pair dimension ``i`` with ``i + d_head/2`` instead, "rotate half": the same
    rotation after a fixed permutation of the dimensions.)

    Args:
        x: float tensor of shape ``(..., T, d_head)``, e.g. ``(B, n_heads, T, d_head)``
            or ``(T, d_head)``; ``d_head`` even.
        positions: the position of each of the ``T`` rows, a tensor of shape
            ``(T,)`` or ``(..., T)`` that broadcasts against ``x``'s leading axes (e.g.
            ``(B, 1, T)`` for ``x`` ``(B, n_heads, T, d_head)``: one row of positions per
            sequence), integers or floats; ``None`` (default) means ``0 .. T - 1``.
            Pass ``torch.arange(start, start + T)`` for tokens that come after
            ``start`` cached ones.
        base: the base of the frequencies, a positive number (default 10000).

    Returns:
        Tensor of ``x``'s shape, dtype and device. The angles are computed in
        float64 for float64 ``x``, in float32 otherwise, as ``1 / base^(2i/d_head)``
        exactly as Hugging Face ``transformers`` computes them, so that float32 results
        equal theirs to the bit at every position (``base^(-2i/d_head)``, the same
        number on paper, rounds to a neighbouring float32 for some ``i``, and the
        angle ``m * theta_i`` carries that step times ``m``: chapter 9).

    Example:
        >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])   # (T, d_head) = (3, 2); theta_0 = 1
        >>> [[round(v, 4) for v in row] for row in apply_rope(x).tolist()]   # (cos m, sin m), m = 0, 1, 2
        [[1.0, 0.0], [0.5403, 0.8415], [-0.4161, 0.9093]]
        >>> g = torch.Generator().manual_seed(0)
        >>> q, k = torch.randn(2, 8, generator=g), torch.randn(2, 8, generator=g)
        >>> def score(m, n):                                 # q placed at position m, k at n
        ...     return apply_rope(q, torch.tensor([m, n]))[0] @ apply_rope(k, torch.tensor([m, n]))[1]
        >>> torch.allclose(score(3, 1), score(10, 8), atol=1e-5)   # m - n = 2 both times
        True
    """
    check_rope(x, positions, base)
    T, d_head = x.shape[-2], x.shape[-1]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    if positions is None:
        pos = torch.arange(T, device=x.device, dtype=work)  # (T,): 0 .. T-1
    else:
        pos = positions.to(device=x.device, dtype=work)  # (..., T)
    two_i = torch.arange(0, d_head, 2, device=x.device).to(work)  # (d_head/2,): 2i = 0, 2, 4, ...
    # theta_i = 1 / base^(2i/d_head), spelled as transformers spells it: base^(-2i/d_head), equal on
    # paper, rounds to a neighbouring float32 for some i, and the angle m * theta_i carries that step times m
    theta = 1.0 / (base ** (two_i / d_head))  # (d_head/2,)
    angles = pos[..., :, None] * theta  # (..., T, 1) * (d_head/2,) -> (..., T, d_head/2)
    cos, sin = torch.cos(angles), torch.sin(angles)  # (..., T, d_head/2) each
    xw = x.to(work)
    x_even, x_odd = xw[..., 0::2], xw[..., 1::2]  # (..., T, d_head/2) each
    out_even = x_even * cos - x_odd * sin  # broadcast over the leading axes
    out_odd = x_even * sin + x_odd * cos
    out = torch.stack((out_even, out_odd), dim=-1)  # (..., T, d_head/2, 2)
    return out.flatten(-2).to(x.dtype)  # (..., T, d_head/2, 2) -> (..., T, d_head)
