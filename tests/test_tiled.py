"""Chapter 13: tiled attention and the online softmax, against attnlib.attention and PyTorch.

References: ``F.scaled_dot_product_attention`` and ``torch.softmax`` (independent of attnlib),
and ``attnlib.attention`` (the explicit full-matrix path of chapter 5).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _tiles import SHAPES
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import AttnlibError, attention
from attnlib.cost import peak_memory
from attnlib.tiled import DEFAULT_BLOCK_SIZE, online_softmax, tile_plan, tiled_attention

TOL = {torch.float64: dict(atol=1e-12, rtol=1e-10), torch.float32: dict(atol=2e-6, rtol=1e-5)}


def _qkv(batch, T_q, T_k, d_k=8, d_v=5, dtype=torch.float64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q = scale * torch.randn(*batch, T_q, d_k, generator=g, dtype=dtype)
    k = scale * torch.randn(*batch, T_k, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, T_k, d_v, generator=g, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("batch, T_q, T_k, block", SHAPES)
def test_equals_attention_and_sdpa(batch, T_q, T_k, block, is_causal, dtype):
    q, k, v = _qkv(batch, T_q, T_k, dtype=dtype)
    out = tiled_attention(q, k, v, block_size=block, is_causal=is_causal)
    assert out.shape == (*batch, T_q, v.shape[-1]) and out.dtype == dtype
    torch.testing.assert_close(out, attention(q, k, v, is_causal=is_causal)[0], **TOL[dtype])
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), **TOL[dtype])


@pytest.mark.parametrize("scale", [1.0, 0.1, 2.5, -0.7])
@pytest.mark.parametrize("is_causal", [False, True])
def test_scale(scale, is_causal):
    q, k, v = _qkv((2,), 9, 7)
    out = tiled_attention(q, k, v, block_size=4, is_causal=is_causal, scale=scale)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale), **TOL[torch.float64]
    )


def test_default_block_size_is_used_and_gives_the_same_result():
    assert tiled_attention.__defaults__[0] == DEFAULT_BLOCK_SIZE
    q, k, v = _qkv((1,), DEFAULT_BLOCK_SIZE + 37, 2 * DEFAULT_BLOCK_SIZE + 5, d_k=16, d_v=16, dtype=torch.float32)
    for is_causal in (False, True):
        torch.testing.assert_close(
            tiled_attention(q, k, v, is_causal=is_causal),
            F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),
            atol=1e-5,
            rtol=1e-5,
        )


def test_broadcast_batch_dims():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 1, 6, 4, generator=g, dtype=torch.float64)  # broadcast over heads
    k = torch.randn(1, 3, 8, 4, generator=g, dtype=torch.float64)  # broadcast over the batch
    v = torch.randn(2, 3, 8, 5, generator=g, dtype=torch.float64)
    for is_causal in (False, True):
        out = tiled_attention(q, k, v, block_size=3, is_causal=is_causal)
        assert out.shape == (2, 3, 6, 5)
        torch.testing.assert_close(out, attention(q, k, v, is_causal=is_causal)[0], **TOL[torch.float64])


def test_large_scores_do_not_overflow():
    """Scores in the thousands: exp overflows unless every exponent is shifted by the running max,
    and the rescaling must work when the max grows by thousands from one block to the next."""
    q, k, v = _qkv((2,), 7, 12, dtype=torch.float32, scale=30.0)
    k[..., 8:, :] *= 3  # a much larger max in a later block
    for is_causal in (False, True):
        out = tiled_attention(q, k, v, block_size=4, is_causal=is_causal)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(
            out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), atol=1e-5, rtol=1e-5
        )


def test_no_keys_gives_zero_rows_like_sdpa():
    """T_k = 0: every query has all its keys masked (there are none). SDPA returns zeros;
    so does tiled_attention. (A causal mask never empties a row: key 0 is always allowed.)"""
    q, k, v = _qkv((2,), 4, 0)
    for is_causal in (False, True):
        out = tiled_attention(q, k, v, block_size=2, is_causal=is_causal)
        assert out.shape == (2, 4, 5) and not out.isnan().any()
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal))
        assert torch.equal(out, torch.zeros_like(out))


def test_a_row_of_minus_inf_scores_gives_zeros_like_sdpa():
    """A query whose scores are -inf for every key (here q = (-inf, 0, 0) and keys with a
    positive first coordinate): no key can be attended, as in a fully masked row. SDPA and
    attention return a zero row; the tiled path must not compute exp(-inf - (-inf)) = NaN."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (
        torch.randn(1, 5, 3, generator=g),
        torch.rand(1, 9, 3, generator=g) + 0.1,
        torch.randn(1, 9, 2, generator=g),
    )
    q[0, 1] = torch.tensor([float("-inf"), 0.0, 0.0])
    assert torch.isneginf(q @ k.transpose(-2, -1))[0, 1].all()
    for is_causal in (False, True):
        out = tiled_attention(q, k, v, block_size=2, is_causal=is_causal)
        assert torch.equal(out[0, 1], torch.zeros(2))
        for ref in (
            F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),
            F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=is_causal)[0],
            attention(q, k, v, is_causal=is_causal)[0],
        ):
            torch.testing.assert_close(out, ref)


def test_no_queries_gives_an_empty_output():
    q, k, v = _qkv((2,), 0, 5)
    out = tiled_attention(q, k, v, block_size=2, is_causal=True)
    assert out.shape == (2, 0, 5)


def test_causal_mask_is_top_left_aligned_and_no_row_is_empty():
    """T_q > T_k: queries T_k .. T_q - 1 see every key (top-left alignment, like SDPA's
    is_causal and attnlib.causal_mask); query 0 sees key 0 only."""
    q, k, v = _qkv((), 6, 3)
    out = tiled_attention(q, k, v, block_size=2, is_causal=True)
    full = tiled_attention(q, k, v, block_size=2)
    torch.testing.assert_close(out[3:], full[3:])
    torch.testing.assert_close(out[0], v[0])


def test_skipped_tiles_are_never_read():
    """Causal: the key blocks entirely in a query block's future are skipped. Poison those keys
    and values with NaN: if any of them were read, NaN would reach the output (0 * NaN = NaN)."""
    b, n = 4, 4
    q, k, v = _qkv((2,), b * n, b * n)
    expected = attention(q, k, v, is_causal=True)[0]
    for a in range(n):  # query block a: rows a*b .. a*b + b - 1
        k2, v2 = k.clone(), v.clone()
        k2[..., (a + 1) * b :, :] = float("nan")  # key blocks a+1 .. n-1: all in the future
        v2[..., (a + 1) * b :, :] = float("nan")
        out = tiled_attention(q, k2, v2, block_size=b, is_causal=True)
        rows = slice(a * b, (a + 1) * b)
        assert not out[..., rows, :].isnan().any(), f"query block {a} read a skipped tile"
        torch.testing.assert_close(out[..., rows, :], expected[..., rows, :])


@pytest.mark.parametrize("T_q, T_k, b", [(8, 8, 2), (10, 10, 4), (5, 9, 2), (9, 5, 2), (7, 7, 100), (6, 6, 1)])
def test_tile_plan_matches_the_mask(T_q, T_k, b):
    """A tile is skipped exactly when the causal mask blocks all of it, masked exactly when it
    blocks part of it; without is_causal every tile is computed whole."""
    allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril()
    plan = tile_plan(T_q, T_k, b, is_causal=True)
    assert plan.shape == (math.ceil(T_q / b), math.ceil(T_k / b))
    for a in range(plan.shape[0]):
        for c in range(plan.shape[1]):
            tile = allowed[a * b : (a + 1) * b, c * b : (c + 1) * b]
            assert plan[a, c] == (0 if not tile.any() else 1 if tile.all() else 2), (a, c)
    assert torch.equal(tile_plan(T_q, T_k, b), torch.ones_like(plan))


def test_tile_plan_counts():
    n = 16  # T = 4096, b = 256
    plan = tile_plan(4096, 4096, 256, is_causal=True)
    assert (plan > 0).sum() == n * (n + 1) // 2 and (plan == 2).sum() == n


def test_gradients_flow_like_attention():
    q, k, v = (t.requires_grad_() for t in _qkv((2,), 6, 7))
    for is_causal in (False, True):
        grads = torch.autograd.grad(
            tiled_attention(q, k, v, block_size=3, is_causal=is_causal).square().sum(), (q, k, v)
        )
        expected = torch.autograd.grad(attention(q, k, v, is_causal=is_causal)[0].square().sum(), (q, k, v))
        for got, want in zip(grads, expected):
            torch.testing.assert_close(got, want, **TOL[torch.float64])


def test_keeps_dtype_for_half_precision():
    q, k, v = _qkv((2,), 9, 9, dtype=torch.bfloat16)
    out = tiled_attention(q, k, v, block_size=4, is_causal=True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(
        out.double(), attention(q.double(), k.double(), v.double(), is_causal=True)[0], atol=3e-2, rtol=3e-2
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_stays_there_and_uses_less_memory():
    q, k, v = (t.cuda() for t in _qkv((1, 1), 2048, 2048, d_k=64, d_v=64, dtype=torch.float32))
    out, tiled_peak = peak_memory(lambda: tiled_attention(q, k, v, is_causal=True), device=q.device)
    full, full_peak = peak_memory(lambda: attention(q, k, v, is_causal=True)[0], device=q.device)
    assert out.device == q.device
    torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-4)
    assert tiled_peak * 8 <= full_peak


# --- the online softmax of one row (or many) ---------------------------------------------------


@pytest.mark.parametrize("n, b", [(1, 1), (5, 2), (8, 4), (7, 1), (6, 100), (33, 8)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_online_softmax_equals_torch_softmax(n, b, dtype):
    x = 3 * torch.randn(4, n, generator=torch.Generator().manual_seed(n), dtype=dtype)
    got = online_softmax(x, block_size=b)
    assert got.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got, torch.softmax(x, dim=-1), **TOL[dtype])


def test_online_softmax_masked_entries_and_rows():
    inf = float("inf")
    x = torch.tensor(
        [
            [-inf, -inf, 1.0, 2.0, -inf],  # the first block is all -inf: no NaN
            [-inf, -inf, -inf, -inf, -inf],  # a fully masked row: zeros, as attnlib.softmax
            [1000.0, -inf, 1003.0, 999.0, 2000.0],
        ]
    )  # large values, max grows by 997
    got = online_softmax(x, block_size=2)
    assert not got.isnan().any()
    torch.testing.assert_close(got[[0, 2]], torch.softmax(x[[0, 2]], dim=-1))
    assert torch.equal(got[1], torch.zeros(5))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(n=st.integers(1, 30), b=st.integers(1, 35), seed=st.integers(0, 2**16), masked=st.floats(0.0, 1.0))
def test_online_softmax_property(n, b, seed, masked):
    g = torch.Generator().manual_seed(seed)
    x = 5 * torch.randn(3, n, generator=g, dtype=torch.float64)
    x = x.masked_fill(torch.rand(3, n, generator=g, dtype=torch.float64) < masked, float("-inf"))
    got = online_softmax(x, block_size=b)
    empty = torch.isinf(x).all(dim=-1)  # rows with every entry masked: zeros
    assert torch.equal(got[empty], torch.zeros_like(got[empty]))
    torch.testing.assert_close(got[~empty], torch.softmax(x[~empty], dim=-1), **TOL[torch.float64])


# --- the property test: many shapes, block sizes and masks ---------------------------------------


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    T_q=st.integers(0, 20),
    T_k=st.integers(0, 20),
    d_k=st.integers(1, 6),
    d_v=st.integers(1, 6),
    block=st.integers(1, 24),
    is_causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_equals_sdpa_and_attention(batch, T_q, T_k, d_k, d_v, block, is_causal, seed):
    q, k, v = _qkv(tuple(batch), T_q, T_k, d_k=d_k, d_v=d_v, seed=seed)
    out = tiled_attention(q, k, v, block_size=block, is_causal=is_causal)
    assert out.shape == (*batch, T_q, d_v) and out.dtype == torch.float64
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), **TOL[torch.float64])
    if T_k > 0:  # attnlib.attention cannot take a softmax over 0 keys (SDPA returns zeros, as we do)
        torch.testing.assert_close(out, attention(q, k, v, is_causal=is_causal)[0], **TOL[torch.float64])


# --- peak memory -------------------------------------------------------------------------------


def test_peak_memory_measures_allocations():
    _, peak = peak_memory(lambda: torch.empty(512, 512))  # 1 MiB of float32
    assert peak == 2**20

    def two_at_once():
        a = torch.empty(256, 1024)
        b = torch.empty(256, 1024)
        return a.sum() + b.sum()

    def one_at_a_time():
        return torch.empty(256, 1024).sum() + torch.empty(256, 1024).sum()

    _, both = peak_memory(two_at_once)
    _, one = peak_memory(one_at_a_time)
    assert 2 * 2**20 <= both < 2 * 2**20 + 1024
    assert 2**20 <= one < 2**20 + 1024
    assert peak_memory(lambda: 7)[0] == 7


def test_tiled_uses_a_fraction_of_the_full_paths_memory():
    """The chapter's claim, measured: at T = 2048 (one head, d_head 64, fp32) the tiled path's
    peak extra memory is at most 1/8 of the explicit attention's, which holds the (T, T) matrix."""
    T = 2048
    q, k, v = _qkv((1, 1), T, T, d_k=64, d_v=64, dtype=torch.float32)
    with torch.no_grad():
        out, tiled_peak = peak_memory(lambda: tiled_attention(q, k, v))
        full, full_peak = peak_memory(lambda: attention(q, k, v)[0])
    torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-4)
    assert full_peak >= 2 * T * T * 4  # the scores and the weights, at least
    assert tiled_peak * 8 <= full_peak
    assert tiled_peak < 4 * (T * 64 * 4 + 3 * DEFAULT_BLOCK_SIZE * DEFAULT_BLOCK_SIZE * 4)


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [0, -2, 1.5, True, None, "64"])
def test_bad_block_size(block_size):
    q, k, v = _qkv((), 4, 4)
    with pytest.raises(AttnlibError, match="block_size: expected a positive int"):
        tiled_attention(q, k, v, block_size=block_size)
    with pytest.raises(AttnlibError, match="block_size: expected a positive int"):
        online_softmax(q, block_size=block_size)
    with pytest.raises(AttnlibError, match="block_size: expected a positive int"):
        tile_plan(4, 4, block_size)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda q, k, v: (q.long(), k, v), "q: expected a floating-point tensor"),
        (lambda q, k, v: (q, k[0], v), "k: expected a 3-D tensor"),
        (lambda q, k, v: (q, k[..., :3], v), "k: expected last dimension d_k = 8"),
        (lambda q, k, v: (q, k, v[:, :5]), "v: expected T_k = 6 rows"),
        (lambda q, k, v: (q, k, v[0]), "v: expected a 3-D tensor"),
        (lambda q, k, v: (q, k, v.float()), "v: expected dtype torch.float64"),
        (lambda q, k, v: (q, k.float(), v), "k: expected dtype torch.float64"),
        (lambda q, k, v: (q[:1].expand(3, -1, -1), k, v), "batch dimensions that broadcast"),
        (lambda q, k, v: (q[0, 0], k, v), "q: expected a tensor of shape"),
    ],
)
def test_bad_shapes_and_dtypes(change, match):
    q, k, v = change(*_qkv((2,), 5, 6))
    with pytest.raises(AttnlibError, match=match):
        tiled_attention(q, k, v, block_size=2)


def test_bad_flags():
    q, k, v = _qkv((), 4, 4)
    with pytest.raises(AttnlibError, match="is_causal: expected True or False"):
        tiled_attention(q, k, v, is_causal=1)
    with pytest.raises(AttnlibError, match="scale: expected None or a finite number"):
        tiled_attention(q, k, v, scale=float("nan"))
    with pytest.raises(AttnlibError, match="x: expected a floating-point tensor"):
        online_softmax(torch.arange(4))
    with pytest.raises(AttnlibError, match="x: expected a tensor with at least 1 dimension"):
        online_softmax(torch.tensor(1.0))
    with pytest.raises(AttnlibError, match="T_q: expected an int >= 0"):
        tile_plan(-1, 4, 2)
    with pytest.raises(AttnlibError, match="fn: expected a function"):
        peak_memory(torch.zeros(3))
    with pytest.raises(AttnlibError, match="device: expected"):
        peak_memory(lambda: None, device="meta")
