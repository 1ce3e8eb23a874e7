"""Chapters 2-5: scores, scaling, masks and softmax, checked against PyTorch."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib._validate import AttnlibError
from attnlib.masks import causal_mask, float_mask, padding_mask
from attnlib.scores import qk_scores
from attnlib.softmax import softmax

FAST = settings(max_examples=50, deadline=None, derandomize=True, database=None)  # deterministic CI
NEG_INF = float("-inf")


def raises(*fragments):
    """pytest.raises(AttnlibError) whose message contains every fragment, in order."""
    return pytest.raises(AttnlibError, match=".*".join(re.escape(f) for f in fragments))


# ---------------------------------------------------------------- scores (chapters 2, 3)


@FAST
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    T_q=st.integers(1, 6),
    T_k=st.integers(1, 6),
    d_k=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_qk_scores_is_every_query_dot_every_key(batch, T_q, T_k, d_k, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, T_q, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(*batch, T_k, d_k, generator=g, dtype=torch.float64)
    raw = torch.einsum("...id,...jd->...ij", q, k)  # independent of attnlib's matmul
    torch.testing.assert_close(qk_scores(q, k, scale=1.0), raw)
    torch.testing.assert_close(qk_scores(q, k), raw / math.sqrt(d_k))
    torch.testing.assert_close(qk_scores(q, k, scale=0.5), raw * 0.5)


def test_qk_scores_one_entry_by_hand():
    q = torch.tensor([[1.0, 2.0, 3.0]])
    k = torch.tensor([[4.0, 5.0, 6.0], [0.0, 1.0, 0.0]])
    assert qk_scores(q, k, scale=1.0).tolist() == [[32.0, 2.0]]  # 1*4 + 2*5 + 3*6, 2
    assert qk_scores(q, k)[0, 0].item() == pytest.approx(32.0 / math.sqrt(3))


def test_scaling_keeps_score_variance_near_one():
    # Chapter 3: for unit-variance q and k, q.k has variance d_k; dividing by sqrt(d_k) gives ~1.
    g = torch.Generator().manual_seed(0)
    for d_k in (16, 256):
        q = torch.randn(2000, d_k, generator=g)
        k = torch.randn(2000, d_k, generator=g)
        raw = (q * k).sum(-1)  # 2000 independent dot products
        assert raw.var().item() == pytest.approx(d_k, rel=0.15)
        assert qk_scores(q[:, None], k[:, None]).var().item() == pytest.approx(1.0, rel=0.15)


def test_qk_scores_bad_input():
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    with raises("k:", "d_k = 4", "d_k = 6"):
        qk_scores(q, torch.randn(2, 5, 6))
    with raises("k:", "same rank", "(5, 4)"):
        qk_scores(q, torch.randn(5, 4))
    with raises("q:", "floating-point", "torch.int64"):
        qk_scores(torch.ones(3, 4, dtype=torch.long), k)
    with raises("q:", "torch.Tensor", "list"):
        qk_scores([[1.0]], k)
    with raises("k:", "torch.float32", "torch.float64"):
        qk_scores(q, k.double())
    with raises("k:", "broadcast", "(3, 5, 4)"):
        qk_scores(q, torch.randn(3, 5, 4))
    with raises("scale:", "finite number", "nan"):
        qk_scores(q, k, scale=float("nan"))
    with raises("scale:", "finite number", "True"):
        qk_scores(q, k, scale=True)


# ---------------------------------------------------------------- masks (chapter 4)


@pytest.mark.parametrize("T_q,T_k", [(1, 1), (4, 4), (3, 6), (6, 3)])
def test_causal_mask_matches_sdpa_is_causal(T_q, T_k):
    mask = causal_mask(T_q, T_k)
    assert mask.dtype == torch.bool and mask.shape == (T_q, T_k)
    assert torch.equal(mask, torch.ones(T_q, T_k).tril(diagonal=0).bool())
    for i in range(T_q):
        for j in range(T_k):
            assert mask[i, j].item() == (j <= i)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, T, 4, generator=g) for T in (T_q, T_k, T_k))
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask), F.scaled_dot_product_attention(q, k, v, is_causal=True)
    )


def test_causal_mask_default_square_and_device():
    assert torch.equal(causal_mask(5), causal_mask(5, 5))
    assert causal_mask(3, device="meta").device.type == "meta"


def test_padding_mask_marks_real_tokens():
    lengths = torch.tensor([3, 0, 5, 1])
    mask = padding_mask(lengths, 5)
    assert mask.shape == (4, 1, 1, 5) and mask.dtype == torch.bool
    for b, n in enumerate(lengths.tolist()):
        assert mask[b, 0, 0].tolist() == [True] * n + [False] * (5 - n)


def test_padding_mask_matches_nn_multihead_key_padding_mask():
    # nn.MultiheadAttention's key_padding_mask uses the opposite convention (True = ignore):
    # attnlib's padding mask must be its complement.
    lengths = torch.tensor([2, 4, 3])
    key_padding_mask = torch.arange(4)[None, :] >= lengths[:, None]  # (B, T), True = padding
    assert torch.equal(padding_mask(lengths, 4)[:, 0, 0], ~key_padding_mask)


def test_float_mask_is_the_additive_form():
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(2, 4, 4, generator=g)
    mask = torch.rand(2, 4, 4, generator=g) < 0.6
    mask[..., 0] = True  # keep one key per row so torch.softmax has no nan
    fm = float_mask(mask, dtype=torch.float64)
    assert fm.dtype == torch.float64
    assert set(fm.unique().tolist()) <= {0.0, NEG_INF}
    torch.testing.assert_close(
        torch.softmax(scores + float_mask(mask), -1), torch.softmax(scores.masked_fill(~mask, NEG_INF), -1)
    )


def test_mask_bad_input():
    with raises("T_q:", "positive int", "0"):
        causal_mask(0)
    with raises("T_k:", "positive int", "-2"):
        causal_mask(3, -2)
    with raises("T_q:", "positive int", "float 2.0"):
        causal_mask(2.0)
    with raises("lengths:", "[0, 4]", "length 5"):
        padding_mask(torch.tensor([2, 5]), 4)
    with raises("lengths:", "[0, 4]", "length -1"):
        padding_mask(torch.tensor([-1, 2]), 4)
    with raises("lengths:", "1-D integer", "torch.float32"):
        padding_mask(torch.tensor([1.0, 2.0]), 4)
    with raises("lengths:", "1-D integer", "(2, 1)"):
        padding_mask(torch.tensor([[1], [2]]), 4)
    with raises("T:", "positive int", "0"):
        padding_mask(torch.tensor([0]), 0)
    with raises("mask:", "boolean", "torch.float32"):
        float_mask(torch.zeros(2, 2))


# ---------------------------------------------------------------- softmax (chapter 5)


@FAST
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    data=st.data(),
    seed=st.integers(0, 2**16),
    spread=st.sampled_from([1.0, 30.0, 1e4]),
)
def test_softmax_matches_torch(shape, data, seed, spread):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * spread
    torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim))


def test_softmax_large_inputs_do_not_overflow():
    x = torch.tensor([[1e4, 1e4 - 1.0, 1e4 - 2.0], [-1e4, 0.0, 1e4]])
    naive = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)  # the formula as written
    assert torch.isnan(naive[0]).all()  # exp(1e4) = inf, inf / inf = nan: the problem is real
    out = softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(x, -1))
    torch.testing.assert_close(out[0], torch.softmax(torch.tensor([2.0, 1.0, 0.0]), -1))  # shift-invariant


def test_softmax_neg_inf_entries_get_zero_and_all_neg_inf_row_gets_zeros():
    x = torch.tensor([[0.0, NEG_INF, 1.0], [NEG_INF, NEG_INF, NEG_INF], [NEG_INF, 5.0, NEG_INF]])
    out = softmax(x)
    assert out[0, 1].item() == 0.0 and out[0].sum().item() == pytest.approx(1.0)
    torch.testing.assert_close(out[0], torch.softmax(x[0], -1))
    assert out[1].tolist() == [0.0, 0.0, 0.0]
    assert torch.isnan(torch.softmax(x[1], -1)).all()  # what attnlib avoids
    assert out[2].tolist() == [0.0, 1.0, 0.0]
    # also along another dim, and finite gradients through the all -inf row
    torch.testing.assert_close(softmax(x.T, dim=0), out.T)
    xg = x.clone().requires_grad_()
    softmax(xg).pow(2).sum().backward()
    assert torch.isfinite(xg.grad).all()


def test_softmax_gradient_matches_torch():
    x = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    w = torch.randn(3, 5, dtype=torch.float64)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    (softmax(a) * w).sum().backward()
    (torch.softmax(b, -1) * w).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_softmax_bad_input():
    with raises("x:", "floating-point", "torch.int64"):
        softmax(torch.tensor([1, 2]))
    with raises("dim:", "[-2, 1]", "int 2"):
        softmax(torch.zeros(2, 3), dim=2)
    with raises("x:", "torch.Tensor", "list"):
        softmax([1.0, 2.0])
