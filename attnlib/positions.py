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
from ._validate import describe, ensure_even, ensure_int, fail
from .rope_scaling import RopeScaling, attention_factor, scaled_frequencies

__all__ = ["sinusoidal_positions", "apply_rope", "RoPE", "NoPE"]


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
    angles = pos[..., :, None] * rope_frequencies(d_head, base, x.device, work)  # (..., T, 1) * (d_head/2,)
    return rotate_pairs(x, torch.cos(angles), torch.sin(angles))  # angles: (..., T, d_head/2)


def rope_frequencies(d_head: int, base: float, device=None, dtype=torch.float32) -> torch.Tensor:
    """RoPE's frequencies, ``theta_i = 1 / base^(2i / d_head)`` for ``i = 0 .. d_head/2 - 1``: ``(d_head/2,)``.

    Spelled as ``transformers`` spells it: ``base^(-2i/d_head)``, equal on paper, rounds to a
    neighbouring float32 for some ``i``, and the angle ``m * theta_i`` carries that step times ``m``.

    Example:
        >>> rope_frequencies(4, 100.0).tolist()      # 1 / 100^0, 1 / 100^(2/4)
        [1.0, 0.10000000149011612]
    """
    two_i = torch.arange(0, d_head, 2, device=device).to(dtype)  # (d_head/2,): 2i = 0, 2, 4, ...
    return 1.0 / (base ** (two_i / d_head))  # (d_head/2,)


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair ``(x[2i], x[2i + 1])`` of ``x`` ``(..., T, d_head)`` by its angle:
    ``cos``, ``sin`` ``(..., T, d_head/2)`` broadcast against ``x``'s leading axes. Computed in
    ``cos``'s dtype, returned in ``x``'s::

        out[2i]     = x[2i] cos_i - x[2i + 1] sin_i
        out[2i + 1] = x[2i] sin_i + x[2i + 1] cos_i
    """
    xw = x.to(cos.dtype)
    x_even, x_odd = xw[..., 0::2], xw[..., 1::2]  # (..., T, d_head/2) each
    out_even = x_even * cos - x_odd * sin  # broadcast over the leading axes
    out_odd = x_even * sin + x_odd * cos
    out = torch.stack((out_even, out_odd), dim=-1)  # (..., T, d_head/2, 2)
    return out.flatten(-2).to(x.dtype)  # (..., T, d_head/2, 2) -> (..., T, d_head)


class NoPE:
    """No positions inside the layer (``GPTConfig(positions="none")``, or positions added to the
    token vectors before the first layer, GPT-2's table): queries and keys stay as they are.

    Example:
        >>> q = torch.ones(1, 3, 2)
        >>> NoPE()(q, torch.arange(3)) is q
        True
    """

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def __repr__(self) -> str:
        return "NoPE()"


class RoPE:
    """Rotary positions for the queries and keys of one attention layer (chapters 9, 15 and 19).

    ``RoPE(d_head, base)(x, positions)`` is ``apply_rope(x, positions, base)``, to the bit:
    pair ``(2i, 2i + 1)`` of the row at position ``m`` turns by ``m theta_i``, with
    ``theta_i = 1 / base^(2i / d_head)`` (:meth:`frequencies`). The object computes ``cos(m theta_i)``
    and ``sin(m theta_i)`` for the positions ``0 .. T - 1`` once per length, device and dtype, and
    looks them up for each call's positions; fractional or negative positions, positions from
    ``TABLE_LIMIT`` on, and tensors on the ``meta`` device (no values to look up) are computed directly.

    Chapter 19's options, as Hugging Face ``transformers`` applies them (equal to the bit in float32,
    once its "rotate half" pairs are permuted to interleaved ones)::

        rotary_dim = r      only dimensions 0 .. r - 1 of each head turn, with theta_i = 1 / base^(2i / r);
                            dimensions r .. d_head - 1 pass unchanged (partial rotary: GPT-NeoX, Phi, GLM-4)
        scaling             theta_i from attnlib.rope_scaling.scaled_frequencies (linear, dynamic, yarn,
                            llama3, longrope), and cos, sin multiplied by its attention factor a
                            (yarn, longrope): every score q . k is multiplied by a^2, a temperature

    "dynamic" and "longrope" change their frequencies with the length ``L = max(positions) + 1`` of
    each call: past ``L0`` (dynamic: ``max_position_embeddings``; longrope:
    ``original_max_position_embeddings``) they are computed for that ``L``, up to it they are looked up
    in the table of the starting frequencies. This object keeps no state between calls;
    ``transformers`` keeps the largest ``L`` it has seen in a dynamic layer (until a call shorter
    than ``L0`` resets it), and its LongRoPE picks the long factors the same way. With positions that
    only grow, as in generation, the two agree.

    Where the keys of a KV cache get their rotation is the layer's call, not the object's
    state: by default each key is rotated once, at its position in the sequence, before it is
    cached (chapter 15: a cached key keeps its rotation); StreamingLLM (chapter 16) caches keys
    unrotated and rotates every held key by its index in the cache at each step,
    ``MultiHeadAttention.forward(..., positions="in_cache")``.

    Args:
        d_head: the width of each head's query and key, even.
        base: the base of the frequencies (10000; Llama 3: 500000, Qwen3: 1000000).
        scaling: a :class:`~attnlib.rope_scaling.RopeScaling`, or None (default RoPE).
        rotary_dim: how many leading dimensions of each head turn, even, at most ``d_head``
            (None: all of them; Phi-4-mini: ``int(128 * 0.75) = 96``).

    Attributes:
        attention_factor: ``a``, the factor on ``cos`` and ``sin`` (1.0 but for yarn and longrope).

    Example:
        >>> rope = RoPE(d_head=8, base=10000.0)
        >>> x = torch.randn(2, 4, 5, 8)                                     # (B, n_heads, T, d_head)
        >>> torch.equal(rope(x, torch.arange(3, 8)), apply_rope(x, torch.arange(3, 8)))
        True
        >>> rope
        RoPE(d_head=8, base=10000.0)
        >>> from attnlib.rope_scaling import RopeScaling
        >>> yarn = RoPE(8, 1e6, rotary_dim=4, scaling=RopeScaling("yarn", factor=4.0, original_max_position_embeddings=64))
        >>> round(yarn.attention_factor, 4), torch.equal(yarn(x, torch.arange(5))[..., 4:], x[..., 4:])
        (1.1386, True)
    """

    TABLE_LIMIT = 65536  # positions past this are computed directly, not kept in a table

    def __init__(
        self, d_head: int, base: float = 10000.0, *, scaling: RopeScaling | None = None, rotary_dim: int | None = None
    ):
        if scaling is not None and not isinstance(scaling, RopeScaling):
            raise fail("scaling", "None or an attnlib.RopeScaling", describe(scaling))
        if rotary_dim is not None:
            ensure_even("rotary_dim", ensure_int("rotary_dim", rotary_dim))
            if rotary_dim > d_head:
                raise fail("rotary_dim", f"at most d_head = {d_head} (the dimensions that turn)", f"{rotary_dim}")
        self.d_head, self.base = d_head, float(base)
        self.scaling, self.rotary_dim = scaling, d_head if rotary_dim is None else rotary_dim
        self.attention_factor = attention_factor(scaling)
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (device, dtype) -> cos, sin (T, r/2)

    def __repr__(self) -> str:
        extra = f", rotary_dim={self.rotary_dim}" if self.rotary_dim != self.d_head else ""
        extra += f", scaling={self.scaling!r}" if self.scaling is not None else ""
        return f"RoPE(d_head={self.d_head}, base={self.base}{extra})"

    def frequencies(self, seq_len=None, device=None, dtype=torch.float32) -> torch.Tensor:
        """``theta_i`` ``(rotary_dim/2,)``: ``1 / base^(2i / rotary_dim)``, or the scaling's for a sequence of
        ``seq_len`` tokens (None: its starting frequencies)."""
        if self.scaling is None:
            return rope_frequencies(self.rotary_dim, self.base, device, dtype)
        return scaled_frequencies(self.rotary_dim, self.base, self.scaling, seq_len, device, dtype)[0]

    def _cos_sin(self, angles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``a cos``, ``a sin`` of the angles, multiplied after, in the angles' dtype, as ``transformers`` does."""
        cos, sin = torch.cos(angles), torch.sin(angles)
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos, sin

    def cos_sin(self, T: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``a cos(m theta_i)`` and ``a sin(m theta_i)`` for ``m = 0 .. T - 1``, ``(T, rotary_dim/2)`` each, with
        the starting frequencies; computed once per device and dtype for the longest ``T`` asked so far
        (twice that, when it grows)."""
        key = (torch.device(device), dtype)
        cos, sin = self._tables.get(key, (None, None))
        if cos is None or cos.shape[0] < T:
            m = torch.arange(max(T, 2 * (0 if cos is None else cos.shape[0])), device=device, dtype=dtype)
            angles = m[:, None] * self.frequencies(None, device, dtype)  # (T, 1) * (r/2,) -> (T, r/2)
            cos, sin = self._tables[key] = self._cos_sin(angles)
        return cos[:T], sin[:T]

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Turn the first ``rotary_dim`` dimensions of ``x`` ``(..., T, d_head)``, pass the others."""
        r = self.rotary_dim
        if r == x.shape[-1]:
            return rotate_pairs(x, cos, sin)
        return torch.cat((rotate_pairs(x[..., :r], cos, sin), x[..., r:]), dim=-1)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` ``(..., T, d_head)`` by ``positions`` ``(T,)`` or ``(..., T)``; ``x``'s shape and dtype."""
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        meta = "meta" in (x.device.type, positions.device.type)
        direct = meta or positions.is_floating_point() or not positions.numel()
        if not direct:  # integer positions: rows of the table, unless negative or past its limit
            low, high = int(positions.min()), int(positions.max())
            direct = low < 0 or high >= self.TABLE_LIMIT
        seq_len = None  # dynamic, longrope: L = max(positions) + 1, as transformers computes it
        L0 = None if self.scaling is None else self.scaling.original_length
        if L0 is not None and not meta and positions.numel() and positions.max() + 1 > L0:
            seq_len, direct = positions.max() + 1, True  # past L0: frequencies of their own
        if not direct:
            positions = positions.to(x.device)
            cos, sin = self.cos_sin(high + 1, x.device, work)  # (high + 1, r/2) each, or longer
            return self._rotate(x, cos[positions], sin[positions])  # (..., T, r/2) each
        if self.scaling is None and self.rotary_dim == x.shape[-1]:
            return apply_rope(x, positions, self.base)
        check_rope(x[..., : self.rotary_dim], positions, self.base)
        pos = positions.to(device=x.device, dtype=work)  # (..., T)
        angles = pos[..., :, None] * self.frequencies(seq_len, x.device, work)  # (..., T, 1) * (r/2,)
        return self._rotate(x, *self._cos_sin(angles))
