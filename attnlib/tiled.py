"""Chapter 13: attention in tiles, without the T_q x T_k matrix (the FlashAttention idea).

Chapter 5's ``attention`` builds the whole ``(..., T_q, T_k)`` score matrix, then the
whole weight matrix: memory that grows with ``T_q * T_k``. The output needs neither.
The **online softmax** (Milakov and Gimelshein 2018) walks along a row of scores block
by block and keeps only two numbers per row: the largest score seen so far, ``m``, and
the sum of ``exp(score - m)`` so far, ``l``. When a block brings a larger maximum, the
old sum is rescaled by ``exp(m_old - m_new)``:

    m_new = max(m, max_j x_j)                                  # over the block's entries x_j
    l_new = exp(m - m_new) * l + sum_j exp(x_j - m_new)

After the last block, ``l`` is the softmax's denominator ``sum_j exp(x_j - max(x))``.
``tiled_attention`` does the same with a running output ``o``, the weighted sum of the
value rows seen so far, rescaled by the same factor. Its loop order and its
unnormalised ``o``, divided by ``l`` once at the end, are those of FlashAttention-2
(Dao 2023, Algorithm 1): for each block of queries (the outer loop) and each block of
keys (the inner loop; a query block and a key block make a **tile**),

    S      = q_tile k_tile^T * scale                           # (b_q, b_k) scores, masked: -inf
    m_new  = max(m, rowmax(S))                                 # (b_q, 1)
    l_new  = exp(m - m_new) * l + rowsum(exp(S - m_new))       # (b_q, 1)
    o_new  = exp(m - m_new) * o + exp(S - m_new) @ v_tile      # (b_q, d_v)

and finally ``out = o / l``. FlashAttention (Dao et al. 2022, Algorithm 1) computes the
same output with the loops the other way round, key blocks outside and query blocks
inside, and keeps its ``O`` normalised after every step (``O = o / l`` at all times:
each update divides by the new ``l``), so it has no final division.
Only tiles of ``block_size x block_size`` scores exist at any time, never the full
matrix; with ``is_causal=True`` the tiles that lie entirely above the diagonal are not
computed at all, since every weight in them is 0.
"""

from __future__ import annotations

import math

import torch

from ._checks import batch_shape, check_qkv, check_scale
from ._validate import ensure_block_size, ensure_bool, ensure_float, ensure_int

__all__ = ["DEFAULT_BLOCK_SIZE", "online_softmax", "tiled_attention", "tile_plan"]

# Chosen with benchmarks/bench_tiled.py (one head, d_head 64, fp32, 2-core CPU): Python runs
# one loop step per tile, so small tiles are slow (block 64: about 3x the explicit attention's
# time at T = 4096; 256: under half of it), while the memory stays tiny next to the full
# matrix at any of these sizes. One tile of 256 x 256 float32 scores is 256 KiB.
DEFAULT_BLOCK_SIZE = 256


def _key_blocks(q_start: int, q_stop: int, T_k: int, block_size: int, is_causal: bool):
    """The key blocks that queries ``q_start .. q_stop - 1`` need: ``(k_start, k_stop, masked)``.

    Causal (top-left aligned, query ``i`` sees keys ``j <= i``): the last query of the
    block is ``q_stop - 1``, so key blocks that start after it are skipped; a block that
    reaches past the first query, ``k_stop - 1 > q_start``, crosses the diagonal and
    needs the mask. Every other block is computed whole, without a mask.
    """
    last_key = min(T_k, q_stop) if is_causal else T_k  # keys 0 .. last_key - 1 can be seen
    for k_start in range(0, last_key, block_size):
        k_stop = min(k_start + block_size, T_k)
        yield k_start, k_stop, is_causal and k_stop - 1 > q_start


def mask_future(s: torch.Tensor, q_start: int, k_start: int) -> torch.Tensor:
    """Set to ``-inf``, in place, a tile's scores ``(..., b_q, b_k)`` whose key comes after its
    query: key ``j > `` query ``i``, counting from ``k_start`` and ``q_start`` (the causal mask,
    top-left aligned, on one tile). Returns ``s``."""
    i = torch.arange(q_start, q_start + s.shape[-2], device=s.device)[:, None]  # (b_q, 1) query positions
    j = torch.arange(k_start, k_start + s.shape[-1], device=s.device)[None, :]  # (1, b_k) key positions
    return s.masked_fill_(j > i, float("-inf"))  # the future: weight 0


def tile_plan(T_q: int, T_k: int, block_size: int = DEFAULT_BLOCK_SIZE, is_causal: bool = False) -> torch.Tensor:
    """Which tiles ``tiled_attention`` computes: ``(ceil(T_q / b), ceil(T_k / b))`` integers.

    Entry ``[a, c]`` is for query block ``a`` and key block ``c`` (``b = block_size``):
    0 = skipped (with ``is_causal``, every key of the block is in every query's future),
    1 = computed whole, 2 = computed with the causal mask (the tile crosses the diagonal).

    Example:
        >>> tile_plan(8, 8, block_size=2, is_causal=True)
        tensor([[2, 0, 0, 0],
                [1, 2, 0, 0],
                [1, 1, 2, 0],
                [1, 1, 1, 2]])
    """
    ensure_int("T_q", T_q, min=0)
    ensure_int("T_k", T_k, min=0)
    b = ensure_block_size(block_size)
    ensure_bool("is_causal", is_causal)
    plan = torch.zeros(math.ceil(T_q / b), math.ceil(T_k / b), dtype=torch.int64)
    for a, q_start in enumerate(range(0, T_q, b)):
        for k_start, _, masked in _key_blocks(q_start, min(q_start + b, T_q), T_k, b, is_causal):
            plan[a, k_start // b] = 2 if masked else 1
    return plan


def online_softmax(x: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """Softmax over the last axis, its denominator computed block by block in one pass.

    Pass 1 walks over blocks of ``block_size`` entries and keeps, per row, the running
    maximum ``m`` and the running sum ``l`` of ``exp(x_j - m)``:
    ``m_new = max(m, max(block))``, ``l_new = exp(m - m_new) * l + sum(exp(block - m_new))``.
    Pass 2 returns ``exp(x - m) / l``. Equal to ``attnlib.softmax(x)`` and ``torch.softmax``;
    entries may be ``-inf`` (masked, weight 0), and a row that is all ``-inf`` gives zeros.
    A block that is all ``-inf`` while ``m`` is still ``-inf`` would give
    ``exp(-inf - (-inf)) = nan``: there ``m_new`` is replaced by 0 in the exponents.

    Args:
        x: floating-point tensor ``(..., n)``, e.g. one row of scores ``(T_k,)``.
        block_size: how many entries one step reads (a positive int).

    Returns:
        Tensor of the shape and dtype of ``x``; each row sums to 1, or is all zeros.

    Example:
        >>> x = torch.tensor([1.0, 3.0, 2.0, 5.0, 4.0])
        >>> online_softmax(x, block_size=2)
        tensor([0.0117, 0.0861, 0.0317, 0.6364, 0.2341])
        >>> torch.allclose(online_softmax(x, block_size=2), torch.softmax(x, dim=-1))
        True
    """
    ensure_float("x", x, min_dim=1, expected="a tensor with at least 1 dimension (..., n)")
    b = ensure_block_size(block_size)
    m = x.new_full(x.shape[:-1] + (1,), float("-inf"))  # (..., 1): the largest entry so far
    l = x.new_zeros(x.shape[:-1] + (1,))  # (..., 1): sum of exp(x_j - m) so far
    for start in range(0, x.shape[-1], b):
        block = x[..., start : start + b]  # (..., <= b)
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # nothing seen yet: no shift
        l = torch.exp(m - m_safe) * l + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)
        m = m_new
    m = m.masked_fill(m == float("-inf"), 0.0)  # an all -inf row: exp(-inf - 0) = 0
    return torch.exp(x - m) / l.masked_fill(l == 0, 1.0)  # 0 / 1 = 0 where every entry is -inf


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_size: int = DEFAULT_BLOCK_SIZE,
    is_causal: bool = False,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention computed tile by tile, with the online softmax.

    The same output as ``attention(q, k, v, is_causal=is_causal, scale=scale)[0]`` and
    ``F.scaled_dot_product_attention``, without ever holding the ``(..., T_q, T_k)``
    scores: only one tile of ``block_size x block_size`` scores at a time. For each block
    of queries (``b_q <= block_size`` rows), with ``m = -inf``, ``l = 0``, ``o = 0``, and
    for each block of keys and values (``b_k`` rows):

        S     = q_tile @ k_tile^T * scale        # (..., b_q, b_k); causal: -inf where j > i
        m_new = max(m, rowmax(S))                # (..., b_q, 1)
        l_new = e^(m - m_new) * l + rowsum(e^(S - m_new))
        o_new = e^(m - m_new) * o + e^(S - m_new) @ v_tile       # (..., b_q, d_v)

    then ``out = o / l`` (FlashAttention-2's order and its one division at the end). The factor ``e^(m - m_new)`` rescales what was summed against
    the old maximum to the new one (it is 1 when the maximum did not grow). With
    ``is_causal`` the key blocks entirely above the diagonal are skipped, and only the
    tiles that cross it are masked (``tile_plan`` shows which). Python loops over the
    blocks; each tile's work is batched over the leading dimensions ``...``.

    Args:
        q: queries ``(..., T_q, d_k)``, floating point.
        k: keys ``(..., T_k, d_k)``; same rank, dtype and device as ``q``.
        v: values ``(..., T_k, d_v)``; same rank, dtype and device. Batch dims broadcast.
        block_size: queries and keys per tile (default ``DEFAULT_BLOCK_SIZE`` = 256).
            Any positive int: 1 is the online softmax one key at a time; a block larger
            than ``T`` is one tile, the full computation.
        is_causal: query ``i`` attends to keys ``0 .. i`` only (top-left aligned, as
            ``causal_mask(T_q, T_k)`` and SDPA's ``is_causal``).
        scale: factor on the dot products; ``None`` means ``1/sqrt(d_k)``.
        return_lse: also return each row's log-sum-exp ``L = m + log(l)``, the one number
            per query that the backward pass needs to rebuild the weights of any tile,
            ``P = exp(S - L)`` (``attnlib.backward``, chapter 14).

    Returns:
        ``out`` of shape ``(..., T_q, d_v)`` in ``q``'s dtype, on ``q``'s device. A query
        that can attend to no key (``T_k = 0``, or every score ``-inf``) gets a zero row, as
        in ``attention`` and SDPA. (The causal mask never empties a row: key 0 is always allowed.)
        With ``return_lse``, ``(out, lse)``: ``lse`` of shape ``(..., T_q)`` equals
        ``torch.logsumexp`` of the scaled, masked scores over the keys (``-inf`` for a query
        with no key).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
        >>> out = tiled_attention(q, k, v, block_size=2, is_causal=True)
        >>> out.shape
        torch.Size([2, 5, 3])
        >>> from attnlib import attention
        >>> torch.allclose(out, attention(q, k, v, is_causal=True)[0], atol=1e-6)
        True
        >>> out, lse = tiled_attention(q, k, v, block_size=2, return_lse=True)
        >>> torch.allclose(lse, torch.logsumexp(q @ k.transpose(-2, -1) / 8**0.5, dim=-1))
        True
    """
    check_qkv(q, k, v)
    b = ensure_block_size(block_size)
    ensure_bool("is_causal", is_causal)
    check_scale(scale)
    ensure_bool("return_lse", return_lse)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch = batch_shape(("q", q), ("k", k), ("v", v))  # the broadcast leading dims ...
    T_q, T_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    out = q.new_empty(batch + (T_q, d_v))  # (..., T_q, d_v): the only large tensor
    lse = q.new_empty(batch + (T_q,))  # (..., T_q): log-sum-exp of each row of scores
    for q_start in range(0, T_q, b):
        q_stop = min(q_start + b, T_q)
        q_tile = q[..., q_start:q_stop, :] * scale  # (..., b_q, d_k), scaled once
        m = q.new_full(batch + (q_stop - q_start, 1), float("-inf"))  # (..., b_q, 1) running max
        l = q.new_zeros(batch + (q_stop - q_start, 1))  # (..., b_q, 1) running sum
        o = q.new_zeros(batch + (q_stop - q_start, d_v))  # (..., b_q, d_v) running output
        for k_start, k_stop, masked in _key_blocks(q_start, q_stop, T_k, b, is_causal):
            s = q_tile @ k[..., k_start:k_stop, :].transpose(
                -2, -1
            )  # (..., b_q, d_k) @ (..., d_k, b_k) -> (..., b_q, b_k)
            if masked:  # the tile crosses the diagonal
                mask_future(s, q_start, k_start)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., b_q, 1)
            m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # a row with no key yet: no NaN
            alpha = torch.exp(m - m_safe)  # e^(m - m_new): rescales the old sums
            p = torch.exp(s - m_safe)  # e^(S - m_new): (..., b_q, b_k)
            l = alpha * l + p.sum(dim=-1, keepdim=True)
            o = alpha * o + p @ v[..., k_start:k_stop, :]  # (..., b_q, b_k) @ (..., b_k, d_v) -> (..., b_q, d_v)
            m = m_new
        out[..., q_start:q_stop, :] = o / l.masked_fill(l == 0, 1.0)  # no key at all: 0 / 1 = 0
        lse[..., q_start:q_stop] = (m + torch.log(l)).squeeze(-1)  # log(sum_j e^(s_j)); no key: -inf
    return (out, lse) if return_lse else out
