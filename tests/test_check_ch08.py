"""Chapter 8's checker: multi-head cross-attention from plain tensors, against
nn.MultiheadAttention. The reference is right (checked against attnlib's
MultiHeadAttention(x, context=...) and the paper's formula in float64), the notebook's
solution passes, and the classic mistakes fail."""

import math

import pytest
import torch
from _solutions import notebook_solution

from attnlib import MultiHeadAttention, causal_mask, check
from attnlib.check import CHECKS

ENTRY = CHECKS["ch08-cross-attention"]


def _plain(
    x,
    context,
    w_q,
    w_k,
    w_v,
    w_o,
    n_heads,
    *,
    swap=False,
    keys_from_x=False,
    causal=False,
    transpose=True,
    output=True,
    scale_by_d_model=False,
    cast=None,
):
    """Cross-attention from plain tensors, with switches for the classic mistakes."""
    if swap:
        x, context = context, x  # the encoder asks, the decoder answers
    B, T_q, d_model = x.shape
    T_k = context.shape[1]
    d_head = d_model // n_heads

    def split(t, T):  # (B, T, d_model) -> (B, n_heads, T, d_head)
        if transpose:
            return t.reshape(B, T, n_heads, d_head).transpose(1, 2)
        return t.reshape(B, n_heads, T, d_head)  # right shape, wrong numbers

    q = split(x @ w_q, T_q)
    k = split(x @ w_k, T_q) if keys_from_x else split(context @ w_k, T_k)
    v = split(context @ w_v, T_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_model if scale_by_d_model else d_head)  # (B, n_heads, T_q, T_k)
    if causal:
        scores = scores.masked_fill(~causal_mask(T_q, scores.shape[-1]), float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v  # (B, n_heads, T_q, d_head)
    concat = heads.transpose(1, 2).reshape(B, T_q, d_model)  # (B, T_q, d_model)
    out = concat @ w_o if output else concat
    return out if cast is None else out.to(cast)


def test_registered_under_its_exercise():
    assert ENTRY is check.cross_attention
    assert ENTRY.function == "cross_attention"


def test_reference_equals_attnlib_and_the_formula_in_float64():
    """nn.MultiheadAttention(x, context, context), loaded as the reference does, computes
    attnlib's MultiHeadAttention(x, context=context) and the paper's formula, head by head."""
    for label, (x, context, w_q, w_k, w_v, w_o, n_heads) in ENTRY.cases():
        got = ENTRY.reference(x, context, w_q, w_k, w_v, w_o, n_heads)
        assert got.dtype == x.dtype and got.shape == x.shape, label
        layer = MultiHeadAttention(x.shape[-1], n_heads, bias=False).double()
        with torch.no_grad():
            for linear, w in zip((layer.w_q, layer.w_k, layer.w_v, layer.w_o), (w_q, w_k, w_v, w_o)):
                linear.weight.copy_(w.double().T)  # nn.Linear stores W transposed
            expected, _ = layer(x.double(), context=context.double())
        # well inside the checker's tolerance: any correct float32 solution has room to pass
        torch.testing.assert_close(got.double(), expected, atol=ENTRY.atol / 10, rtol=ENTRY.rtol / 10, msg=label)
        # the formula, one head at a time: head_h = softmax(x W_Q^h (c W_K^h)^T / sqrt(d_head)) c W_V^h
        d_head = x.shape[-1] // n_heads
        xd, cd = x.double(), context.double()
        heads = []
        for h in range(n_heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            s = (xd @ w_q.double()[:, cols]) @ (cd @ w_k.double()[:, cols]).transpose(-2, -1) / math.sqrt(d_head)
            heads.append(torch.softmax(s, dim=-1) @ (cd @ w_v.double()[:, cols]))
        formula = torch.cat(heads, dim=-1) @ w_o.double()
        torch.testing.assert_close(got.double(), formula, atol=ENTRY.atol / 10, rtol=ENTRY.rtol / 10, msg=label)


def test_cases_include_the_edge_cases():
    args = [a for _, a in ENTRY.cases()]
    assert args[0][0].shape[1] != args[0][1].shape[1], "the first case has T_q != T_k"
    assert any(x.shape[1] < c.shape[1] for x, c, *_ in args) and any(x.shape[1] > c.shape[1] for x, c, *_ in args)
    assert any(c.shape[1] == 1 for x, c, *_ in args), "T_k = 1"
    assert any(x.shape[1] == 1 for x, c, *_ in args), "T_q = 1"
    assert any(x.shape == c.shape and not torch.equal(x, c) for x, c, *_ in args), "same lengths, other sequence"
    assert any(torch.equal(x, c) for x, c, *_ in args), "context = x"
    assert any(x.shape[0] > 1 for x, *_ in args)
    assert any(n == 1 for *_, n in args) and any(n == x.shape[-1] and n > 1 for x, *_, n in args)
    assert any(x.dtype == torch.float64 for x, *_ in args)
    assert any(x.abs().max() > 100 for x, *_ in args)


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    ENTRY.reference(*ENTRY.cases()[0][1])
    assert torch.equal(torch.random.get_rng_state(), before)


def _notebook_solution():
    """The function the chapter's solution cell defines."""
    return notebook_solution(
        "08_cross_attention.ipynb", "cross_attention", ("MultiHeadAttention", "MultiheadAttention", "attnlib")
    )


def test_the_solutions_pass(capsys):
    n = len(ENTRY.cases())
    check.cross_attention(_notebook_solution())
    check.cross_attention(_plain)
    out = capsys.readouterr().out
    assert out.count(f"check.cross_attention: all {n} cases passed") == 2


@pytest.mark.parametrize(
    "wrong, match",
    [
        # the decoder and the encoder swapped: one row per key on the first case
        (lambda *a: _plain(*a, swap=True), r"wrong shape.*case: the chapter's sizes"),
        # keys from the decoder, values from the encoder: weights (T_q, T_q) cannot meet (T_k) values
        (lambda *a: _plain(*a, keys_from_x=True), r"raised RuntimeError.*case: the chapter's sizes"),
        # the decoder's causal mask reused on the cross-attention
        (lambda *a: _plain(*a, causal=True), r"wrong values.*case: the chapter's sizes"),
        # split and merge by reshape alone
        (lambda *a: _plain(*a, transpose=False), r"wrong values.*case: the chapter's sizes"),
        # W_O forgotten
        (lambda *a: _plain(*a, output=False), r"wrong values.*case: the chapter's sizes"),
        # scaled by the model's width instead of the head's
        (lambda *a: _plain(*a, scale_by_d_model=True), r"wrong values.*case: the chapter's sizes"),
        # the dtype lost
        (lambda *a: _plain(*a, cast=torch.float32), r"wrong dtype.*case: float64"),
    ],
)
def test_classic_mistakes_are_caught(wrong, match):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*hint:"):
        check.cross_attention(wrong)


def test_swapping_is_caught_by_values_when_the_lengths_agree():
    """With T_q = T_k the swap has the right shape: the case with two sequences of one length
    still fails it on the values, and only context = x lets it through."""
    cases = ENTRY.cases()
    same_length = [(label, a) for label, a in cases if a[0].shape == a[1].shape]
    assert same_length
    for label, args in same_length:
        swapped = _plain(*args, swap=True)
        assert swapped.shape == args[0].shape
        close = torch.allclose(swapped, ENTRY.reference(*args), atol=ENTRY.atol, rtol=ENTRY.rtol)
        assert close == torch.equal(args[0], args[1]), label


def test_a_softmax_without_the_row_maximum_fails_on_large_values():
    def naive(x, context, w_q, w_k, w_v, w_o, n_heads):
        B, T_q, d_model = x.shape
        T_k = context.shape[1]
        d_head = d_model // n_heads
        q = (x @ w_q).reshape(B, T_q, n_heads, d_head).transpose(1, 2)
        k, v = ((context @ w).reshape(B, T_k, n_heads, d_head).transpose(1, 2) for w in (w_k, w_v))
        e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(d_head))  # overflows to inf for large scores
        y = (e / e.sum(dim=-1, keepdim=True)) @ v
        return y.transpose(1, 2).reshape(B, T_q, d_model) @ w_o

    with pytest.raises(AssertionError, match=r"(?s)case: large values.*hint:"):
        check.cross_attention(naive)
