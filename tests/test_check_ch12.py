"""Chapter 12's checker: one attention step for new tokens after cached ones, with shared
key/value heads, against PyTorch's causal_lower_right and enable_gqa. The reference is right
(checked against attnlib's cached MultiHeadAttention and a loop over heads and queries in
float64), the notebook's solution passes, and the classic mistakes fail."""

import math

import pytest
import torch
import torch.nn.functional as F
from _solutions import notebook_solution

from attnlib import check
from attnlib.check import CHECKS

ENTRY = CHECKS["ch12-attend-with-cache"]
F64 = torch.float64


def _loop(q_new, k_cache, v_cache):
    """The definition, one head and one query at a time: query i of the T_new new ones is token
    T_k - T_new + i and sees keys 0 .. T_k - T_new + i of key/value head h // group."""
    B, n_heads, T_new, d = q_new.shape
    n_kv, T_k = k_cache.shape[1], k_cache.shape[2]
    out = torch.zeros(B, n_heads, T_new, d, dtype=F64)
    for h in range(n_heads):
        g = h // (n_heads // n_kv)
        for i in range(T_new):
            last = T_k - T_new + i  # this query's own position
            s = q_new[:, h, i].double()[:, None, :] @ k_cache[:, g, : last + 1].double().transpose(-2, -1)
            w = torch.softmax(s / math.sqrt(d), dim=-1)  # (B, 1, last + 1)
            out[:, h, i] = (w @ v_cache[:, g, : last + 1].double())[:, 0]
    return out


def _plain(q_new, k_cache, v_cache, *, align="bottom_right", share="interleave", scale=True, cast=None):
    """The exercise's steps with switches for the classic mistakes."""
    n_heads, n_kv = q_new.shape[1], k_cache.shape[1]
    T_new, T_k, d = q_new.shape[-2], k_cache.shape[-2], q_new.shape[-1]
    if share == "interleave":
        k, v = (t.repeat_interleave(n_heads // n_kv, dim=1) for t in (k_cache, v_cache))
    elif share == "tile":  # head h gets kv head h % n_kv
        k, v = (t.repeat(1, n_heads // n_kv, 1, 1) for t in (k_cache, v_cache))
    else:  # not shared: shapes clash
        k, v = k_cache, v_cache
    s = q_new @ k.transpose(-2, -1) / (math.sqrt(d) if scale else 1.0)
    if align is not None:
        diagonal = T_k - T_new if align == "bottom_right" else 0
        allowed = torch.ones(T_new, T_k, dtype=torch.bool).tril(diagonal=diagonal)
        s = s.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(s, dim=-1) @ v
    return out if cast is None else out.to(cast)


def test_registered_under_its_exercise():
    assert ENTRY is check.attend_with_cache and ENTRY.function == "attend_with_cache"


def test_reference_equals_the_definition_in_float64():
    for label, (q, k, v) in ENTRY.cases():
        got = ENTRY.reference(q, k, v)
        assert got.dtype == q.dtype and got.shape == q.shape, label
        torch.testing.assert_close(got.double(), _loop(q, k, v), atol=ENTRY.atol / 10, rtol=ENTRY.rtol / 10, msg=label)


def test_reference_equals_attnlibs_cached_layer():
    """attnlib's MultiHeadAttention with a KVCache, fed the prompt and then new tokens, computes
    what the reference computes on its projected queries, keys and values."""
    from attnlib import KVCache, MultiHeadAttention

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 8, n_kv_heads=2).double().eval()
    x = torch.randn(2, 9, 16, dtype=F64, generator=torch.Generator().manual_seed(1))
    cache = KVCache()
    mha(x[:, :6], is_causal=True, kv_cache=cache)
    out, _ = mha(x[:, 6:], is_causal=True, kv_cache=cache)  # 3 new tokens after 6 cached
    q = mha.w_q(x[:, 6:]).view(2, 3, 8, 2).transpose(1, 2)  # (B, n_heads, T_new, d_head)
    y = ENTRY.reference(q, cache.k, cache.v)  # (B, n_heads, T_new, d_head)
    torch.testing.assert_close(out, mha.w_o(y.transpose(1, 2).reshape(2, 3, 16)))


def test_cases_include_the_edge_cases():
    args = [a for _, a in ENTRY.cases()]
    assert any(q.shape[2] == 1 and k.shape[2] > 100 and q.shape[1] == 12 for q, k, _ in args), "a decoding step"
    assert any(q.shape[2] == k.shape[2] > 1 for q, k, _ in args), "the prompt"
    assert any(1 < q.shape[2] < k.shape[2] and q.shape[1] == k.shape[1] for q, k, _ in args), "a chunk, plain heads"
    assert any(1 < k.shape[1] < q.shape[1] for q, k, _ in args), "grouped-query"
    assert any(k.shape[1] == 1 < q.shape[1] for q, k, _ in args), "multi-query"
    assert any(q.shape[0] > 1 for q, _, _ in args)
    assert any(q.dtype == F64 for q, _, _ in args)
    assert any(q.abs().max() * k.abs().max() > 1e3 for q, k, _ in args), "large scores"


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    ENTRY.reference(*ENTRY.cases()[2][1])
    assert torch.equal(torch.random.get_rng_state(), before)


def _notebook_solution():
    """The function the chapter's solution cell defines."""
    return notebook_solution("12_kv_cache.ipynb", "attend_with_cache", ("scaled_dot_product_attention", "attnlib"))


def test_the_solutions_pass(capsys):
    check.attend_with_cache(_notebook_solution())
    check.attend_with_cache(_plain)
    out = capsys.readouterr().out
    assert out.count(f"check.attend_with_cache: all {len(CHECKS['ch12-attend-with-cache'].cases())} cases passed") == 2


@pytest.mark.parametrize(
    "wrong, match",
    [
        # the mask aligned at the top left (tril() or is_causal=True): new queries lose cached keys
        (lambda *a: _plain(*a, align="top_left"), r"wrong values.*case: one decoding step"),
        # SDPA's is_causal=True is top-left aligned as well
        (
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
            r"wrong values.*case: one decoding step",
        ),
        # no mask: the prompt's queries see later tokens
        (lambda *a: _plain(*a, align=None), r"wrong values.*case: the prompt"),
        # key/value heads tiled (h % n_kv_heads) instead of grouped (h // group)
        (lambda *a: _plain(*a, share="tile"), r"wrong values.*case: grouped-query attention"),
        # no 1/sqrt(d_head)
        (lambda *a: _plain(*a, scale=False), r"wrong values.*case: one decoding step"),
        # the dtype lost
        (lambda *a: _plain(*a, cast=torch.float32), r"wrong dtype.*case: float64"),
        # the heads not shared at all: the shapes do not fit
        (lambda *a: _plain(*a, share=None), r"raised RuntimeError.*case: grouped-query attention"),
    ],
)
def test_classic_mistakes_are_caught(wrong, match):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*hint:"):
        check.attend_with_cache(wrong)


def test_a_softmax_without_the_row_maximum_fails_on_large_values():
    def naive(q_new, k_cache, v_cache):
        n_heads, n_kv = q_new.shape[1], k_cache.shape[1]
        T_new, T_k = q_new.shape[-2], k_cache.shape[-2]
        k, v = (t.repeat_interleave(n_heads // n_kv, dim=1) for t in (k_cache, v_cache))
        s = q_new @ k.transpose(-2, -1) / math.sqrt(q_new.shape[-1])
        e = torch.exp(s) * torch.ones(T_new, T_k).tril(diagonal=T_k - T_new)  # overflows to inf
        return (e / e.sum(-1, keepdim=True)) @ v

    with pytest.raises(AssertionError, match=r"(?s)case: large values.*hint:"):
        check.attend_with_cache(naive)
