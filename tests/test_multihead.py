"""Chapter 6: multi-head attention against an explicit per-head loop and nn.MultiheadAttention."""

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnlib._validate import AttnlibError
from attnlib.masks import causal_mask, padding_mask
from attnlib.multihead import MultiHeadAttention, merge_heads, split_heads

FAST = settings(max_examples=50, deadline=None, derandomize=True, database=None)  # deterministic CI
F64 = torch.float64


def raises(*fragments):
    """pytest.raises(AttnlibError) whose message contains every fragment, in order."""
    return pytest.raises(AttnlibError, match=".*".join(re.escape(f) for f in fragments))


def torch_mha(d_model=12, n_heads=3, seed=0, **kwargs):
    torch.manual_seed(seed)
    kwargs.setdefault("batch_first", True)
    return nn.MultiheadAttention(d_model, n_heads, dtype=F64, **kwargs).eval()


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


# ---------------------------------------------------------------- split / merge


@FAST
@given(B=st.integers(1, 3), T=st.integers(1, 5), n_heads=st.integers(1, 4), d_head=st.integers(1, 4))
def test_split_merge_round_trip_and_per_head_slices(B, T, n_heads, d_head):
    x = randn(B, T, n_heads * d_head)
    heads = split_heads(x, n_heads)
    assert heads.shape == (B, n_heads, T, d_head)
    for h in range(n_heads):  # head h is the h-th block of d_head columns
        assert torch.equal(heads[:, h], x[:, :, h * d_head : (h + 1) * d_head])
    assert torch.equal(merge_heads(heads), x)
    assert torch.equal(merge_heads(heads), torch.cat([heads[:, h] for h in range(n_heads)], dim=-1))


def test_split_heads_accepts_non_contiguous_input():
    x = randn(4, 3, 6).transpose(0, 1)  # (3, 4, 6), not contiguous
    assert torch.equal(merge_heads(split_heads(x, 2)), x)


# ---------------------------------------------------------------- against a per-head loop


def per_head_loop(mha, x, context, mask):
    """Vaswani et al. eq. (MultiHead), one head at a time with plain tensor algebra."""
    H, d = mha.n_heads, mha.d_head
    W_q, W_k, W_v, W_o = (lin.weight.T for lin in (mha.w_q, mha.w_k, mha.w_v, mha.w_o))  # row-vector form
    Q = x @ W_q + mha.w_q.bias
    K = context @ W_k + mha.w_k.bias
    V = context @ W_v + mha.w_v.bias
    heads = []
    for h in range(H):
        cols = slice(h * d, (h + 1) * d)
        scores = Q[..., cols] @ K[..., cols].transpose(-2, -1) / d**0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        heads.append(torch.softmax(scores, -1) @ V[..., cols])
    return torch.cat(heads, dim=-1) @ W_o + mha.w_o.bias


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("cross", [False, True])
def test_multihead_matches_per_head_loop(need_weights, cross):
    mha = MultiHeadAttention(12, 4).double()
    x = randn(2, 5, 12, seed=1)
    context = randn(2, 7, 12, seed=2) if cross else x
    mask = causal_mask(5, context.shape[1])
    out, weights = mha(x, context if cross else None, attn_mask=mask, need_weights=need_weights)
    torch.testing.assert_close(out, per_head_loop(mha, x, context, mask))
    assert (weights is None) == (not need_weights)


# ---------------------------------------------------------------- against nn.MultiheadAttention


def both(m):
    return MultiHeadAttention.from_torch(m), m


@pytest.mark.parametrize("need_weights", [True, False])
def test_from_torch_self_attention(need_weights):
    mine, theirs = both(torch_mha())
    x = randn(3, 6, 12)
    out, w = mine(x, need_weights=need_weights)
    ref, ref_w = theirs(x, x, x, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref)
    if need_weights:
        torch.testing.assert_close(w, ref_w)  # (B, n_heads, T, T), head by head
    with torch.no_grad():  # nn.MultiheadAttention's own fast path (eval, no grad, self-attention)
        torch.testing.assert_close(out, theirs(x, x, x, need_weights=False)[0])


@pytest.mark.parametrize("need_weights", [True, False])
def test_from_torch_cross_attention_with_masks(need_weights):
    mine, theirs = both(torch_mha(seed=1))
    x, ctx = randn(2, 4, 12, seed=3), randn(2, 7, 12, seed=4)  # T_q = 4, T_ctx = 7
    g = torch.Generator().manual_seed(5)
    mask = torch.rand(4, 7, generator=g) < 0.7
    mask[:, 0] = True  # no fully masked row: nn.MultiheadAttention would give nan there
    out, w = mine(x, ctx, attn_mask=mask, need_weights=need_weights)
    # nn.MultiheadAttention's boolean masks mean True = BLOCKED, the opposite of attnlib's: pass ~mask.
    ref, ref_w = theirs(x, ctx, ctx, attn_mask=~mask, average_attn_weights=False)
    torch.testing.assert_close(out, ref)
    if need_weights:
        torch.testing.assert_close(w, ref_w)

    float_mask = torch.randn(4, 7, generator=g, dtype=F64)  # float masks are added by both
    out, w = mine(x, ctx, attn_mask=float_mask, need_weights=need_weights)
    ref, ref_w = theirs(x, ctx, ctx, attn_mask=float_mask, average_attn_weights=False)
    torch.testing.assert_close(out, ref)
    if need_weights:
        torch.testing.assert_close(w, ref_w)


@pytest.mark.parametrize("need_weights", [True, False])
def test_from_torch_causal_and_padding(need_weights):
    mine, theirs = both(torch_mha(seed=2))
    x = randn(3, 5, 12, seed=6)
    out, w = mine(x, is_causal=True, need_weights=need_weights)
    # nn.MultiheadAttention's is_causal is only a hint: it still needs the (True = blocked) mask.
    ref, ref_w = theirs(x, x, x, attn_mask=~causal_mask(5), is_causal=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref)
    if need_weights:
        torch.testing.assert_close(w, ref_w)

    lengths = torch.tensor([5, 2, 3])
    out, w = mine(x, attn_mask=padding_mask(lengths, 5), need_weights=need_weights)
    key_padding_mask = torch.arange(5)[None, :] >= lengths[:, None]  # True = padding (ignored)
    ref, ref_w = theirs(x, x, x, key_padding_mask=key_padding_mask, average_attn_weights=False)
    torch.testing.assert_close(out, ref)
    if need_weights:
        torch.testing.assert_close(w, ref_w)


def test_from_torch_without_bias_and_not_batch_first():
    mine, theirs = both(torch_mha(seed=3, bias=False, batch_first=False))
    assert mine.w_q.bias is None and mine.w_o.bias is None
    x = randn(2, 5, 12, seed=7)  # attnlib is batch-first: (B, T, d_model)
    xt = x.transpose(0, 1)  # nn.MultiheadAttention(batch_first=False) takes (T, B, d_model)
    torch.testing.assert_close(mine(x)[0], theirs(xt, xt, xt)[0].transpose(0, 1))


def test_from_torch_copies_weights_device_dtype_and_mode():
    m = torch_mha(seed=4, dropout=0.25).train()
    mine = MultiHeadAttention.from_torch(m)
    assert mine.training and mine.dropout == 0.25 and mine.w_q.weight.dtype == F64
    W = torch.cat([mine.w_q.weight, mine.w_k.weight, mine.w_v.weight])
    assert torch.equal(W, m.in_proj_weight) and torch.equal(mine.w_o.weight, m.out_proj.weight)
    assert mine.w_q.weight.data_ptr() != m.in_proj_weight.data_ptr()  # a copy, not a view


def test_from_torch_rejects_what_it_cannot_represent():
    with raises("m:", "kdim == vdim == embed_dim", "kdim=5, vdim=12"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(12, 3, kdim=5, vdim=12))
    with raises("m:", "add_bias_kv=False", "add_bias_kv=True"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(12, 3, add_bias_kv=True))
    with raises("m:", "add_zero_attn=False", "add_zero_attn=True"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(12, 3, add_zero_attn=True))
    with raises("m:", "nn.MultiheadAttention", "Linear"):
        MultiHeadAttention.from_torch(nn.Linear(3, 3))


def test_fully_masked_row_gives_zero_weights_where_torch_gives_nan():
    mine, theirs = both(torch_mha(seed=5))
    x = randn(1, 4, 12, seed=8)
    mask = causal_mask(4)
    mask[2] = False  # query 2 may attend to nothing
    ref, _ = theirs(x, x, x, attn_mask=~mask)
    assert torch.isnan(ref[0, 2]).all()  # nn.MultiheadAttention: nan
    for need_weights in (True, False):
        out, w = mine(x, attn_mask=mask, need_weights=need_weights)
        assert not torch.isnan(out).any()
        torch.testing.assert_close(out[0, 2], mine.w_o.bias)  # zero heads, then W_O's bias
        torch.testing.assert_close(out[0, [0, 1, 3]], ref[0, [0, 1, 3]])
        if need_weights:
            assert (w[0, :, 2] == 0).all()


# ---------------------------------------------------------------- causality, dropout


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_is_causal(need_weights):
    mha = MultiHeadAttention(12, 3).double()
    x = randn(2, 6, 12, seed=9)
    out, _ = mha(x, is_causal=True, need_weights=need_weights)
    for t in range(5):
        x2 = x.clone()
        x2[:, t + 1 :] = randn(2, 5 - t, 12, seed=10 + t)
        out2, _ = mha(x2, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(out2[:, : t + 1], out[:, : t + 1], atol=1e-12, rtol=0)
        assert not torch.allclose(out2[:, t + 1 :], out[:, t + 1 :])


def test_dropout_on_weights_in_training_only():
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3, dropout=0.5).double()
    x = randn(2, 6, 12, seed=11)
    mha.eval()
    out_eval, w_eval = mha(x)
    torch.testing.assert_close(mha(x, need_weights=False)[0], out_eval)  # no dropout in eval mode
    mha.train()
    out_train, w_train = mha(x)
    dropped = w_train == 0
    assert dropped.any() and (~dropped).any()
    torch.testing.assert_close(w_train[~dropped], 2 * w_eval[~dropped])  # kept weights scaled by 1/(1-p)
    assert not torch.allclose(out_train, out_eval)
    assert not torch.allclose(mha(x, need_weights=False)[0], out_eval)  # fast path drops too


# ---------------------------------------------------------------- bad input


def test_multihead_bad_input():
    with raises("d_model:", "multiple of n_heads=5", "d_model=12"):
        MultiHeadAttention(12, 5)
    with raises("d_model:", "positive int", "0"):
        MultiHeadAttention(0, 1)
    with raises("n_heads:", "positive int", "-3"):
        MultiHeadAttention(12, -3)
    with raises("dropout:", "[0, 1)", "1.5"):
        MultiHeadAttention(12, 3, dropout=1.5)
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 4, 12)
    with raises("x:", "d_model=12", "(2, 4, 10)"):
        mha(torch.randn(2, 4, 10))
    with raises("x:", "d_model=12", "(12,)"):  # (..., T, d_model): at least 2-D; (T, d_model) is unbatched
        mha(torch.randn(12))
    with raises("context:", "batch size B = 2", "(3, 5, 12)"):
        mha(x, torch.randn(3, 5, 12))
    with raises("context:", "d_model=12", "(2, 5, 8)"):
        mha(x, torch.randn(2, 5, 8))
    with raises("x:", "dtype torch.float32", "torch.float64"):
        mha(x.double())
    for need_weights in (True, False):
        with raises("attn_mask:", "scores' shape (2, 3, 4, 4)", "(4, 5)"):
            mha(x, attn_mask=torch.ones(4, 5, dtype=torch.bool), need_weights=need_weights)
        with raises("attn_mask:", "bool", "torch.int32"):
            mha(x, attn_mask=torch.ones(4, 4, dtype=torch.int32), need_weights=need_weights)
        with raises("attn_mask:", "None when is_causal=True", "(4, 4)"):
            mha(x, attn_mask=causal_mask(4), is_causal=True, need_weights=need_weights)
    with raises("n_heads:", "positive int", "0"):
        split_heads(x, 0)
    with raises("d_model:", "multiple of n_heads=5", "d_model=12"):
        split_heads(x, 5)
    with raises("x:", "(B, T, d_model)", "(4, 12)"):
        split_heads(torch.randn(4, 12), 3)
    with raises("x:", "(B, n_heads, T, d_head)", "(2, 4, 12)"):
        merge_heads(x)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_multihead_on_cuda_matches_cpu():
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    lengths = torch.tensor([5, 0])
    expected = [mha(x, attn_mask=padding_mask(lengths, 5), need_weights=nw)[0] for nw in (True, False)]
    mha_cuda, x_cuda = mha.to("cuda"), x.to("cuda")
    for nw, exp in zip((True, False), expected):
        out, _ = mha_cuda(x_cuda, attn_mask=padding_mask(lengths.to("cuda"), 5), need_weights=nw)
        assert out.device.type == "cuda"
        torch.testing.assert_close(out.cpu(), exp, atol=1e-4, rtol=1e-4)
    out, _ = mha_cuda(x_cuda, is_causal=True)
    torch.testing.assert_close(out.cpu(), mha.cpu()(x, is_causal=True)[0], atol=1e-4, rtol=1e-4)


# --- the layer as a pipeline (issue 34) --------------------------------------------------------------


def test_forward_reads_as_its_steps_on_one_screen():
    """forward is the chapters' steps, one line each: at most about 25 lines of code below its docstring,
    and every step a method of its own, in the order of the chapters."""
    import ast
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(MultiHeadAttention.forward))
    body = ast.parse(source).body[0].body[1:]  # without the docstring
    lines = {n for stmt in body for node in ast.walk(stmt) if hasattr(node, "lineno") for n in [node.lineno]}
    assert len(lines) <= 25, len(lines)
    called = [
        node.func.attr
        for stmt in body
        for node in ast.walk(stmt)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    ]  # fmt: skip
    steps = ["project", "normalize", "place", "append", "build_mask", "place_in_cache", "attend", "gate", "mask_heads",
             "w_o"]  # fmt: skip
    assert [c for c in called if c in steps] == steps


def test_softmax_with_sink_is_the_formula():
    """exp(s_j) / (exp(b_h) + sum_k exp(s_k)), written out in float64, with masked (-inf) scores."""
    from attnlib.multihead import softmax_with_sink

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 4, 5, generator=g, dtype=F64)
    scores[..., 3:] = float("-inf")  # the last two keys masked
    sinks = torch.randn(3, generator=g, dtype=F64)
    e = scores.exp()
    want = e / (sinks.exp().view(1, 3, 1, 1) + e.sum(-1, keepdim=True))
    got = softmax_with_sink(scores, sinks)
    assert torch.allclose(got, want, atol=1e-12) and (got[..., 3:] == 0).all()
    assert (got.sum(-1) < 1).all()


@pytest.mark.parametrize("is_causal", [True, False])
def test_sinks_weights_path_equals_the_sdpa_path(is_causal):
    """The visible formula (need_weights=True) and the zero-key trick for SDPA give the same outputs."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, n_kv_heads=2, learned_sinks=True).double().eval()
    with torch.no_grad():
        layer.sinks.copy_(torch.randn(4, dtype=F64))
    x = randn(2, 6, 16)
    mask = None if is_causal else torch.rand(6, 6, generator=torch.Generator().manual_seed(1)) < 0.7
    slow, weights = layer(x, attn_mask=mask, is_causal=is_causal)
    fast, _ = layer(x, attn_mask=mask, is_causal=is_causal, need_weights=False)
    assert torch.allclose(slow, fast, atol=1e-12) and weights.shape == (2, 4, 6, 6)
    assert (weights.sum(-1) < 1).all()


def test_in_cache_positions_are_an_explicit_choice():
    """A rolling cache on a full-attention RoPE layer: by default keys are cached rotated at their own
    positions (the cache does not switch the mode); positions="in_cache" caches them unrotated and rotates
    every held key by its index in the cache (StreamingLLM). Both equal a fresh pass over what they see."""
    from attnlib import KVCache, apply_rope

    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, rope=True).double().eval()
    x = randn(1, 12, 16)
    for where in (None, "in_cache"):
        cache = KVCache(window=4, sinks=1)
        with torch.no_grad():
            for t in range(12):
                held = cache.positions
                out, _ = layer(x[:, t : t + 1], is_causal=True, kv_cache=cache, positions=where)
                seen = torch.cat([held, torch.tensor([t])])  # (T_k,): the tokens this query sees
                fresh_pos = torch.arange(len(seen)) if where else seen  # "in_cache": positions 0 .. T_k - 1
                want, _ = layer(x[:, seen], is_causal=True, positions=fresh_pos)
                assert torch.allclose(out[0, -1], want[0, -1], atol=1e-10), (where, t)
            k = split_heads(layer.w_k(x[:, cache.positions]), 4)  # the held tokens' unrotated keys
        rotated = apply_rope(k, cache.positions, layer.rope_base)
        assert torch.allclose(cache.k, k if where else rotated, atol=1e-12), where


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        (dict(positions="in_cache"), ['"in_cache" with a kv_cache', "'in_cache'"]),
        (dict(positions="streaming", kv_cache="cache"), ['"in_cache" with a kv_cache', "'streaming' with a kv_cache"]),
    ],
)
def test_in_cache_positions_reject_bad_use(kwargs, fragments):
    from attnlib import KVCache

    layer = MultiHeadAttention(16, 4, rope=True)
    kwargs = {k: KVCache() if v == "cache" else v for k, v in kwargs.items()}
    with raises("positions", *fragments):
        layer(torch.randn(1, 3, 16), is_causal=True, **kwargs)
    with raises("positions", "rope=True"):
        MultiHeadAttention(16, 4)(torch.randn(1, 3, 16), kv_cache=KVCache(), positions="in_cache")


# --- head ablation (chapter 18) ----------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [True, False])
def test_head_mask_equals_zeroing_that_heads_columns_of_w_o(need_weights):
    """head_mask[h] = 0 gives what zeroing head h's d_head input columns of W_O by hand gives (the bias
    stays); a factor of 0.5 halves them; the weights returned are unchanged."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(12, 3, n_kv_heads=1, rope=True).double().eval()
    x = randn(2, 5, 12)
    with torch.no_grad():
        before, w_before = layer(x, is_causal=True, need_weights=need_weights)
        layer.head_mask = torch.tensor([1.0, 0.0, 0.5], dtype=F64)
        ablated, w_after = layer(x, is_causal=True, need_weights=need_weights)
        layer.head_mask = None
        by_hand = MultiHeadAttention(12, 3, n_kv_heads=1, rope=True).double().eval()
        by_hand.load_state_dict(layer.state_dict())
        by_hand.w_o.weight[:, 4:8] = 0  # head 1's columns (d_head = 4)
        by_hand.w_o.weight[:, 8:12] *= 0.5  # head 2's, halved
        want, _ = by_hand(x, is_causal=True, need_weights=need_weights)
    assert torch.allclose(ablated, want, atol=1e-12) and not torch.allclose(ablated, before, atol=1e-3)
    assert need_weights is False or torch.equal(w_before, w_after)
    assert "head_mask" not in layer.state_dict()  # not a weight: a checkpoint loads as before


def test_head_mask_reaches_generation_and_is_checked():
    """GPT.generate honours a head mask (its GPT-2 fast step is not taken then); bad masks are refused."""
    from attnlib import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=30, context_length=16, d_model=16, n_layers=2, n_heads=4)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5, generator=torch.Generator().manual_seed(p.numel()))
    prompt = torch.tensor([[1, 2, 3]])
    model.blocks[1].attn.head_mask = torch.tensor([1.0, 0.0, 1.0, 1.0])
    masked = model.generate(prompt, 8)
    assert torch.equal(masked, model.generate(prompt, 8, use_cache=False))
    model.blocks[1].attn.head_mask = None
    with torch.no_grad():
        model.blocks[1].attn.w_o.weight[:, 4:8] = 0
    assert torch.equal(masked, model.generate(prompt, 8))
    for bad in (torch.ones(3), torch.ones(4, dtype=torch.long)):  # (a list: torch refuses it as a buffer)
        model.blocks[1].attn.head_mask = bad
        with raises("head_mask", "float tensor of shape (4,)"):
            model(prompt)
