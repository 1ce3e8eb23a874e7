"""Chapter 6's checker: causal multi-head self-attention from plain tensors, against
nn.MultiheadAttention. The reference is right (checked against attnlib in float64), the
notebook's solution passes, and the classic mistakes fail."""

import math

import pytest
import torch
from _solutions import notebook_solution
from torch import nn

from attnlib import MultiHeadAttention, check
from attnlib.check import CHECKS

ENTRY = CHECKS["ch06-causal-mha"]


def _plain(x, w_q, w_k, w_v, w_o, n_heads, *, mask=True, transpose=True, output=True, cast=None):
    """Causal multi-head self-attention from plain tensors, with switches for the classic mistakes."""
    B, T, d_model = x.shape
    d_head = d_model // n_heads

    def split(t):  # (B, T, d_model) -> (B, n_heads, T, d_head)
        if transpose:
            return t.reshape(B, T, n_heads, d_head).transpose(1, 2)
        return t.reshape(B, n_heads, T, d_head)  # right shape, wrong numbers

    q, k, v = split(x @ w_q), split(x @ w_k), split(x @ w_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)  # (B, n_heads, T, T)
    if mask:
        allowed = torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend
        scores = scores.masked_fill(~allowed, float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v  # (B, n_heads, T, d_head)
    concat = heads.transpose(1, 2).reshape(B, T, d_model)  # (B, T, d_model)
    out = concat @ w_o if output else concat
    return out if cast is None else out.to(cast)


def _torch_mask_not_inverted(x, w_q, w_k, w_v, w_o, n_heads):
    """nn.MultiheadAttention given the course's mask as it is: its True means blocked."""
    d_model, T = x.shape[-1], x.shape[1]
    m = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True, dtype=x.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))
        m.out_proj.weight.copy_(w_o.T)
        allowed = torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend (not attnlib's: the checker forbids it)
        return m(x, x, x, attn_mask=allowed)[0]


def test_registered_under_its_exercise_and_the_restatements_are_gone():
    assert ENTRY is check.causal_self_attention
    assert ENTRY.function == "causal_self_attention"
    assert not {"ch06-split-heads", "ch06-merge-heads"} & set(CHECKS)
    assert not hasattr(check, "split_heads_by_hand") and not hasattr(check, "merge_heads_by_hand")


def test_reference_equals_attnlib_in_float64():
    """nn.MultiheadAttention, loaded and masked as the reference does, computes the course's
    causal multi-head attention (attnlib, True = may attend, float64) in every case."""
    for label, (x, w_q, w_k, w_v, w_o, n_heads) in ENTRY.cases():
        got = ENTRY.reference(x, w_q, w_k, w_v, w_o, n_heads)
        assert got.dtype == x.dtype and got.shape == x.shape, label
        layer = MultiHeadAttention(x.shape[-1], n_heads, bias=False).double()
        with torch.no_grad():
            for linear, w in zip((layer.w_q, layer.w_k, layer.w_v, layer.w_o), (w_q, w_k, w_v, w_o)):
                linear.weight.copy_(w.double().T)  # nn.Linear stores W transposed
            expected, _ = layer(x.double(), is_causal=True)
        # well inside the checker's tolerance: any correct float32 solution has room to pass
        torch.testing.assert_close(got.double(), expected, atol=ENTRY.atol / 10, rtol=ENTRY.rtol / 10, msg=label)


def test_cases_include_the_edge_cases():
    args = [a for _, a in ENTRY.cases()]
    assert any(x.shape == (4, 16, 768) and n == 12 for x, *_, n in args), "the chapter's worked sizes"
    assert any(x.shape[1] == 1 for x, *_ in args)
    assert any(n == 1 for *_, n in args)
    assert any(n == x.shape[-1] and n > 1 for x, *_, n in args)
    assert any(x.shape[0] > 1 for x, *_ in args)
    assert any(x.dtype == torch.float64 for x, *_ in args)
    assert any(x.abs().max() > 100 for x, *_ in args)


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    ENTRY.reference(*ENTRY.cases()[1][1])
    assert torch.equal(torch.random.get_rng_state(), before)


def _notebook_solution():
    """The function the chapter's solution cell defines."""
    return notebook_solution(
        "06_multihead.ipynb", "causal_self_attention", ("MultiHeadAttention", "MultiheadAttention", "attnlib")
    )


def test_the_solutions_pass(capsys):
    check.causal_self_attention(_notebook_solution())
    check.causal_self_attention(_plain)
    out = capsys.readouterr().out
    assert out.count(f"check.causal_self_attention: all {len(CHECKS['ch06-causal-mha'].cases())} cases passed") == 2


@pytest.mark.parametrize(
    "wrong, match",
    [
        # no causal mask: every query sees the future
        (lambda *a: _plain(*a, mask=False), r"wrong values.*case: the chapter's GPT-2 small sizes"),
        # split and merge by reshape alone: the right shape, heads cut across tokens
        (lambda *a: _plain(*a, transpose=False), r"wrong values.*case: the chapter's GPT-2 small sizes"),
        # W_O forgotten: the concatenation returned
        (lambda *a: _plain(*a, output=False), r"wrong values.*case: the chapter's GPT-2 small sizes"),
        # nn.MultiheadAttention given the mask un-inverted: each query sees only the future, the last none
        (_torch_mask_not_inverted, r"(wrong values|contains NaN).*case: the chapter's GPT-2 small sizes"),
        # the dtype lost
        (lambda *a: _plain(*a, cast=torch.float32), r"wrong dtype.*case: float64"),
    ],
)
def test_classic_mistakes_are_caught(wrong, match):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*hint:"):
        check.causal_self_attention(wrong)


def test_a_softmax_without_the_row_maximum_fails_on_large_values():
    def naive(x, w_q, w_k, w_v, w_o, n_heads):
        B, T, d_model = x.shape
        d_head = d_model // n_heads
        q, k, v = (t.reshape(B, T, n_heads, d_head).transpose(1, 2) for t in (x @ w_q, x @ w_k, x @ w_v))
        s = (q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(
            ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")
        )
        e = torch.exp(s)  # overflows to inf for large scores
        y = (e / e.sum(dim=-1, keepdim=True)) @ v
        return y.transpose(1, 2).reshape(B, T, d_model) @ w_o

    with pytest.raises(AssertionError, match=r"(?s)case: large values.*hint:"):
        check.causal_self_attention(naive)
