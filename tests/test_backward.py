"""Chapter 14: attention's backward pass, by hand and in tiles, against torch.autograd.

References: ``torch.autograd`` through ``torch.softmax``, through the explicit ``attention``
and through ``F.scaled_dot_product_attention``; ``torch.autograd.gradcheck`` (finite
differences, float64) for the ``FlashAttention2`` Function; ``torch.logsumexp`` for the
forward pass's log-sum-exp; ``torch.autograd.graph.saved_tensors_hooks`` for what each path
keeps for the backward pass; ``attnlib.cost.peak_memory`` for the memory it takes.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _tiles import SHAPES  # the shapes of chapter 13's tests: blocks that do and do not divide T, T_q != T_k, ...
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import AttnlibError, attention
from attnlib.backward import (
    FlashAttention2,
    attention_backward,
    flash_attention,
    softmax_backward,
    softmax_jacobian,
    tiled_attention_backward,
)
from attnlib.cost import peak_memory
from attnlib.tiled import tiled_attention

TOL = {torch.float64: dict(atol=1e-12, rtol=1e-10), torch.float32: dict(atol=1e-5, rtol=1e-4)}


def _qkv(batch, T_q, T_k, d_k=8, d_v=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, T_q, d_k, generator=g, dtype=dtype)
    k = torch.randn(*batch, T_k, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, T_k, d_v, generator=g, dtype=dtype)
    dout = torch.randn(*batch, T_q, d_v, generator=g, dtype=dtype)
    return q, k, v, dout


def _autograd(fn, q, k, v, dout):
    """Gradients of <fn(q, k, v), dout> by torch.autograd."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    fn(q, k, v).backward(dout)
    return q.grad, k.grad, v.grad


def _sdpa(is_causal, scale=None):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)


def _assert_grads(got, want, dtype=torch.float64):
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert a.shape == b.shape, name
        torch.testing.assert_close(a, b, **TOL[dtype], msg=lambda m, name=name: f"{name}: {m}")


# --- the softmax ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 7])
def test_softmax_jacobian_equals_autograds(n):
    x = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    want = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), x)
    J = softmax_jacobian(torch.softmax(x, dim=-1))
    torch.testing.assert_close(J, want, **TOL[torch.float64])
    torch.testing.assert_close(J, J.T)  # symmetric
    torch.testing.assert_close(J.sum(dim=0), torch.zeros(n, dtype=torch.float64), atol=1e-15, rtol=0)


def test_softmax_jacobian_batched():
    x = torch.randn(3, 4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    J = softmax_jacobian(torch.softmax(x, dim=-1))
    assert J.shape == (3, 4, 6, 6)
    want = torch.autograd.functional.jacobian(lambda r: torch.softmax(r, dim=-1), x[2, 1])
    torch.testing.assert_close(J[2, 1], want)


@pytest.mark.parametrize("shape", [(5,), (3, 9), (2, 3, 4)])
def test_softmax_backward_equals_autograd_and_the_jacobian(shape):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(shape, dtype=torch.float64, generator=g, requires_grad=True)
    dp = torch.randn(shape, dtype=torch.float64, generator=g)
    p = torch.softmax(x, dim=-1)
    p.backward(dp)
    got = softmax_backward(p.detach(), dp)
    torch.testing.assert_close(got, x.grad, **TOL[torch.float64])
    via_jacobian = (dp.unsqueeze(-2) @ softmax_jacobian(p.detach())).squeeze(-2)
    torch.testing.assert_close(got, via_jacobian, **TOL[torch.float64])
    torch.testing.assert_close(got.sum(-1), torch.zeros(shape[:-1], dtype=torch.float64), atol=1e-14, rtol=0)


def test_softmax_backward_with_masked_entries():
    """Entries of -inf get weight 0 and gradient 0."""
    x = torch.tensor([1.0, float("-inf"), 0.5, float("-inf")], dtype=torch.float64, requires_grad=True)
    dp = torch.tensor([0.3, 2.0, -1.0, 5.0], dtype=torch.float64)
    p = torch.softmax(x, dim=-1)
    p.backward(dp)
    got = softmax_backward(p.detach(), dp)
    torch.testing.assert_close(got, x.grad)
    assert got[1] == 0 and got[3] == 0


# --- one head, by hand ---------------------------------------------------------------------------


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("batch, T_q, T_k, block", SHAPES)
def test_attention_backward_equals_autograd_and_sdpa(batch, T_q, T_k, block, is_causal):
    q, k, v, dout = _qkv(batch, T_q, T_k)
    got = attention_backward(q, k, v, dout, is_causal=is_causal)
    _assert_grads(got, _autograd(lambda q, k, v: attention(q, k, v, is_causal=is_causal)[0], q, k, v, dout))
    _assert_grads(got, _autograd(_sdpa(is_causal), q, k, v, dout))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("batch, T_q, T_k, block", SHAPES)
def test_tiled_backward_equals_autograd_and_sdpa(batch, T_q, T_k, block, is_causal, dtype):
    q, k, v, dout = _qkv(batch, T_q, T_k, dtype=dtype)
    out, lse = tiled_attention(q, k, v, block_size=block, is_causal=is_causal, return_lse=True)
    got = tiled_attention_backward(q, k, v, out, lse, dout, block_size=block, is_causal=is_causal)
    _assert_grads(got, _autograd(_sdpa(is_causal), q, k, v, dout), dtype)
    _assert_grads(got, attention_backward(q, k, v, dout, is_causal=is_causal), dtype)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("batch, T_q, T_k, block", SHAPES)
def test_lse_is_the_logsumexp_of_each_row(batch, T_q, T_k, block, is_causal):
    q, k, v, _ = _qkv(batch, T_q, T_k)
    out, lse = tiled_attention(q, k, v, block_size=block, is_causal=is_causal, return_lse=True)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        s = s.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, dim=-1), **TOL[torch.float64])
    assert torch.equal(out, tiled_attention(q, k, v, block_size=block, is_causal=is_causal))
    # L is all the backward pass needs to rebuild the weights: exp(S - L) is the softmax
    torch.testing.assert_close(torch.exp(s - lse[..., None]), torch.softmax(s, dim=-1))


@pytest.mark.parametrize("scale", [0.1, 2.0])
@pytest.mark.parametrize("is_causal", [False, True])
def test_scale(scale, is_causal):
    q, k, v, dout = _qkv((2,), 7, 9)
    out, lse = tiled_attention(q, k, v, 3, is_causal, scale, return_lse=True)
    got = tiled_attention_backward(q, k, v, out, lse, dout, 3, is_causal, scale)
    _assert_grads(got, _autograd(_sdpa(is_causal, scale), q, k, v, dout))
    _assert_grads(attention_backward(q, k, v, dout, is_causal, scale), got)


def test_broadcast_batch_dims_sum_the_gradients():
    """k and v shared by every head (batch dim 1): their gradients are summed over the heads."""
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64)
    k = torch.randn(2, 1, 8, 4, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, 8, 5, generator=g, dtype=torch.float64)
    dout = torch.randn(2, 3, 6, 5, generator=g, dtype=torch.float64)
    want = _autograd(lambda q, k, v: attention(q, k, v, is_causal=True)[0], q, k, v, dout)
    _assert_grads(attention_backward(q, k, v, dout, is_causal=True), want)
    out, lse = tiled_attention(q, k, v, 3, True, return_lse=True)
    _assert_grads(tiled_attention_backward(q, k, v, out, lse, dout, 3, True), want)
    _assert_grads(_autograd(lambda q, k, v: flash_attention(q, k, v, 3, True), q, k, v, dout), want)


def test_large_scores_do_not_overflow():
    q, k, v, dout = _qkv((2,), 6, 6, dtype=torch.float32)
    q, k = 30 * q, 30 * k  # scores of several hundred: exp would overflow without the shift
    out, lse = tiled_attention(q, k, v, block_size=2, return_lse=True)
    got = tiled_attention_backward(q, k, v, out, lse, dout, block_size=2)
    assert all(torch.isfinite(t).all() for t in got)
    want = _autograd(_sdpa(False), q.double(), k.double(), v.double(), dout.double())
    for a, b in zip(got, want):  # float32 rounding of scores near 1,000 allows no tighter tolerance
        torch.testing.assert_close(a.double(), b, atol=2e-3, rtol=2e-3)


def test_a_query_with_no_key_gets_zero_gradients():
    """T_k = 0: zero output (as SDPA), lse = -inf, zero gradients (no NaN from exp(-inf - (-inf)))."""
    q, k, v, dout = _qkv((2,), 4, 0)
    out, lse = tiled_attention(q, k, v, block_size=2, return_lse=True)
    assert torch.isneginf(lse).all()
    for grad, t in zip(tiled_attention_backward(q, k, v, out, lse, dout, block_size=2), (q, k, v)):
        assert torch.equal(grad, torch.zeros_like(t))


@settings(max_examples=40, deadline=None)
@given(
    batch=st.sampled_from([(), (2,), (1, 3)]),
    T_q=st.integers(1, 12),
    T_k=st.integers(1, 12),
    block=st.integers(1, 13),
    is_causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_tiled_backward_equals_autograd(batch, T_q, T_k, block, is_causal, seed):
    q, k, v, dout = _qkv(batch, T_q, T_k, d_k=3, d_v=2, seed=seed)
    out, lse = tiled_attention(q, k, v, block, is_causal, return_lse=True)
    got = tiled_attention_backward(q, k, v, out, lse, dout, block, is_causal)
    _assert_grads(got, _autograd(lambda q, k, v: attention(q, k, v, is_causal=is_causal)[0], q, k, v, dout))


# --- the autograd Function -----------------------------------------------------------------------


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(
    "T_q, T_k, block",
    [(8, 8, 4), (8, 8, 3), (5, 9, 2), (9, 5, 4), (6, 6, 1), (4, 7, 16)],
)
def test_gradcheck(T_q, T_k, block, is_causal):
    q, k, v, _ = _qkv((2,), T_q, T_k, d_k=4, d_v=3)
    inputs = tuple(t.requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: flash_attention(q, k, v, block, is_causal), inputs)
    assert torch.autograd.gradcheck(lambda q, k, v: FlashAttention2.apply(q, k, v, block, is_causal, 0.7), inputs)


@pytest.mark.parametrize("is_causal", [False, True])
def test_loss_backward_through_the_function_equals_sdpa(is_causal):
    q, k, v, dout = _qkv((2, 2), 37, 37, d_k=16, d_v=16, dtype=torch.float32)
    got = _autograd(lambda q, k, v: flash_attention(q, k, v, 8, is_causal), q, k, v, dout)
    _assert_grads(got, _autograd(_sdpa(is_causal), q, k, v, dout), torch.float32)
    out = flash_attention(q, k, v, 8, is_causal)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), **TOL[torch.float32])


def _saved(fn, *inputs):
    """The shapes of every tensor autograd saves for the backward pass while fn(*inputs) runs."""
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return shapes


def test_the_function_saves_no_T_by_T_tensor():
    """Explicit attention saves the (T_q, T_k) weights (and more); the Function saves q, k, v,
    O and L only; autograd through the tile loop (no Function) saves every tile."""
    T_q, T_k, d = 96, 80, 8
    q, k, v, _ = _qkv((1, 2), T_q, T_k, d_k=d, d_v=d, dtype=torch.float32)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    explicit = _saved(lambda q, k, v: attention(q, k, v)[0], q, k, v)
    assert (1, 2, T_q, T_k) in explicit
    flash = _saved(lambda q, k, v: flash_attention(q, k, v, 16), q, k, v)
    assert sorted(flash) == sorted([(1, 2, T_q, d), (1, 2, T_k, d), (1, 2, T_k, d), (1, 2, T_q, d), (1, 2, T_q)])
    assert all(math.prod(s) < T_q * T_k for s in flash)
    tile_loop = _saved(lambda q, k, v: tiled_attention(q, k, v, 16), q, k, v)
    tiles = sum(math.prod(s) for s in tile_loop if s[-2:] == (16, 16))
    assert tiles >= 2 * T_q * T_k  # at least the scores and the weights of every tile
    assert sum(math.prod(s) for s in flash) * 4 < tiles


def test_training_memory_is_a_fraction_of_the_explicit_paths():
    """Forward and backward at T = 2048 (one head, d_head 64, fp32): the Function's peak extra
    memory is at most 1/16 of the explicit attention's, which keeps the (T, T) weights and
    builds dP and dS."""
    T, d = 2048, 64
    q, k, v, dout = _qkv((1, 1), T, T, d_k=d, d_v=d, dtype=torch.float32)

    def train_step(fn):
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        fn(qg, kg, vg).backward(dout)
        return qg.grad, kg.grad, vg.grad

    flash, flash_peak = peak_memory(lambda: train_step(lambda q, k, v: flash_attention(q, k, v)))
    full, full_peak = peak_memory(lambda: train_step(lambda q, k, v: attention(q, k, v)[0]))
    _assert_grads(flash, full, torch.float32)
    assert full_peak >= 3 * T * T * 4  # P kept, then dP and dS, at least
    assert flash_peak * 16 <= full_peak


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_equals_sdpa_and_stays_there():
    q, k, v, dout = (t.cuda() for t in _qkv((2, 2), 300, 300, d_k=32, d_v=32, dtype=torch.float32))
    for is_causal in (False, True):
        got = _autograd(lambda q, k, v: flash_attention(q, k, v, 64, is_causal), q, k, v, dout)
        assert all(g.device.type == "cuda" for g in got)
        _assert_grads(got, _autograd(_sdpa(is_causal), q, k, v, dout), torch.float32)


# --- errors --------------------------------------------------------------------------------------


def test_bad_arguments():
    q, k, v, dout = _qkv((2,), 4, 6)
    out, lse = tiled_attention(q, k, v, 2, return_lse=True)
    with pytest.raises(AttnlibError, match=r"lse.*shape \(2, 4\)"):
        tiled_attention_backward(q, k, v, out, lse[..., :3], dout)
    with pytest.raises(AttnlibError, match=r"out.*shape \(2, 4, 5\)"):
        tiled_attention_backward(q, k, v, out.transpose(-2, -1), lse, dout)
    with pytest.raises(AttnlibError, match=r"dout.*torch.float64"):
        tiled_attention_backward(q, k, v, out, lse, dout.float())
    with pytest.raises(AttnlibError, match="dout"):
        attention_backward(q, k, v, dout[..., :2])
    with pytest.raises(AttnlibError, match="dp"):
        softmax_backward(torch.rand(3), torch.rand(4))
    with pytest.raises(AttnlibError, match="p"):
        softmax_jacobian(torch.tensor(1.0))
    with pytest.raises(AttnlibError, match="block_size"):
        flash_attention(q, k, v, block_size=0)
    with pytest.raises(AttnlibError, match="return_lse"):
        tiled_attention(q, k, v, return_lse="yes")
    with pytest.raises(AttnlibError, match="k"):
        flash_attention(q, k[..., :3], v)
