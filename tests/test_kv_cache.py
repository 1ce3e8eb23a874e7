"""Chapter 12: the bottom-right causal mask, the KV cache, greedy generation with and without it,
grouped-query attention and its parameter and cache counts, against PyTorch and closed forms."""

import contextlib
import dataclasses
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from attnlib import (
    GPT,
    GPT2_SMALL,
    GPT2_XL,
    GPT3_175B,
    AttnlibError,
    GPTConfig,
    KVCache,
    MultiHeadAttention,
    attention_params,
    causal_mask,
    count_params,
    generation,
    gpt_params,
    kv_cache_bytes,
    padding_mask,
    param_breakdown,
    repeat_kv,
)

F64 = torch.float64
SMALL = GPTConfig(vocab_size=23, context_length=16, d_model=24, n_layers=3, n_heads=6)


def raises(*fragments):
    """pytest.raises(AttnlibError) whose message contains every fragment, in order."""
    return pytest.raises(AttnlibError, match=".*".join(re.escape(f) for f in fragments))


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def lively(model, seed=0):
    """Random weights of unit scale (1/sqrt(fan_in)): attention matters as much as the rest,
    so a wrong cache, mask or position changes the tokens (GPT-2's small initialisation
    mostly echoes the last token, which a broken cache could still reproduce)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) / math.sqrt(p.shape[1]))
            else:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.1 + (p == 1).to(p.dtype))
    return model.eval()


def model_for(config, seed=0, dtype=F64):
    torch.manual_seed(seed)
    return lively(GPT(config).to(dtype), seed)


# ---------------------------------------------------------------- the bottom-right causal mask

SIZES = [(1, 1), (1, 5), (3, 3), (3, 7), (4, 9), (5, 3), (6, 1)]


@pytest.mark.parametrize("T_q,T_k", SIZES)
def test_causal_mask_alignments_match_torch(T_q, T_k):
    # causal_lower_right / causal_upper_left are PyTorch's CausalBias; _materialize() is its
    # (private) dense boolean form, True = may attend, as attnlib's
    with pytest.warns(UserWarning) if T_q > T_k else contextlib.nullcontext():  # torch warns of NaN rows
        lower_right = causal_lower_right(T_q, T_k)._materialize()
    assert torch.equal(causal_mask(T_q, T_k, align="bottom_right"), lower_right)
    assert torch.equal(causal_mask(T_q, T_k, align="top_left"), causal_upper_left(T_q, T_k)._materialize())
    assert torch.equal(causal_mask(T_q, T_k), causal_mask(T_q, T_k, align="top_left"))  # default unchanged
    i, j = torch.arange(T_q)[:, None], torch.arange(T_k)[None, :]
    assert torch.equal(causal_mask(T_q, T_k, align="bottom_right"), j <= i + T_k - T_q)  # the formula


@pytest.mark.parametrize("T_q,T_k", [(1, 6), (3, 7), (4, 4)])
def test_bottom_right_mask_gives_sdpa_with_causal_lower_right(T_q, T_k):
    q, k, v = randn(2, 3, T_q, 4, seed=1), randn(2, 3, T_k, 4, seed=2), randn(2, 3, T_k, 4, seed=3)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T_q, T_k, align="bottom_right"))
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T_q, T_k))
    torch.testing.assert_close(ours, theirs)


def test_alignments_agree_on_square_masks_and_differ_otherwise():
    for T in (1, 2, 5):
        assert torch.equal(causal_mask(T, align="bottom_right"), causal_mask(T))
    assert not torch.equal(causal_mask(2, 5, align="bottom_right"), causal_mask(2, 5))
    assert causal_mask(1, 5, align="bottom_right").all()  # one new query sees every key
    assert causal_mask(1, 5).sum() == 1  # top left: only key 0, the KV-cache bug


def test_causal_mask_bad_align_and_device():
    with raises("align:", '"top_left" or "bottom_right"', "str 'lower_right'"):
        causal_mask(2, 3, align="lower_right")
    assert causal_mask(2, 3, device="meta", align="bottom_right").device.type == "meta"


# ---------------------------------------------------------------- the cache


def test_kv_cache_appends_along_tokens():
    cache = KVCache()
    assert len(cache) == 0 and cache.nbytes == 0 and "T_cached=0" in repr(cache)
    k1, v1 = randn(2, 3, 4, 5, seed=1), randn(2, 3, 4, 5, seed=2)
    k2, v2 = randn(2, 3, 1, 5, seed=3), randn(2, 3, 1, 5, seed=4)
    cache.update(k1, v1)
    k, v = cache.update(k2, v2)
    assert torch.equal(k, torch.cat([k1, k2], dim=2)) and torch.equal(v, torch.cat([v1, v2], dim=2))
    assert len(cache) == 5 and cache.nbytes == 2 * 2 * 3 * 5 * 5 * 8


@pytest.mark.parametrize("chunks", [(4, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1), (7,), (3, 4)])
def test_preallocated_cache_equals_the_growing_one_and_writes_in_place(chunks):
    """KVCache(max_tokens=...) returns what KVCache() returns, from one buffer allocated at the
    first update: later updates neither allocate nor copy what is cached."""
    grow, ahead = KVCache(), KVCache(max_tokens=sum(chunks) + 2)
    start, first_ptr = 0, None
    for n in chunks:
        k_new, v_new = randn(2, 3, n, 5, seed=start), randn(2, 3, n, 5, seed=100 + start)
        k_g, v_g = grow.update(k_new, v_new)
        k_a, v_a = ahead.update(k_new, v_new)
        assert torch.equal(k_a, k_g) and torch.equal(v_a, v_g) and len(ahead) == len(grow)
        first_ptr = first_ptr or k_a.data_ptr()
        assert k_a.data_ptr() == first_ptr  # the same memory at every step
        start += n
    assert ahead.nbytes == grow.nbytes  # the cached tokens' bytes


def test_preallocated_cache_says_when_it_is_full():
    cache = KVCache(max_tokens=4)
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with raises("k_new:", "at most 1 new tokens", "max_tokens=4", "holds 3", "T_new = 2"):
        cache.update(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))
    assert len(cache) == 3
    with raises("max_tokens:", "positive int", "0"):
        KVCache(max_tokens=0)


def test_generate_fills_one_buffer_per_layer(monkeypatch):
    """GPT.generate gives every layer a cache of T0 + max_new_tokens tokens, filled in place."""
    made = []
    original = KVCache.__init__

    def spy(self, max_tokens=None):
        original(self, max_tokens)
        made.append(self)

    monkeypatch.setattr(KVCache, "__init__", spy)
    model = GPT(SMALL)
    model.generate(torch.zeros(2, 3, dtype=torch.long), 5)
    assert len(made) == len(model.blocks) and all(c.max_tokens == 8 for c in made)
    assert all(len(c) == 7 for c in made)  # the last token generated is never read


def test_kv_cache_bad_input():
    cache = KVCache()
    with raises("k_new:", "4-D", "(2, 3)"):
        cache.update(torch.zeros(2, 3), torch.zeros(2, 3))
    with raises("v_new:", "shape of k_new"):
        cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4))  # values for 2 tokens, keys for 3
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with raises("v_new:", "(1, 2, T_new, 4)", "(1, 2, 1, 5)"):  # a width of its own (MLA) must stay its own
        cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 5))
    with raises("k_new:", "shape (1, 2, T_new, 4)", "3 tokens", "(2, 2, 1, 4)"):
        cache.update(torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 1, 4))
    with raises("k_new:", "dtype torch.float32"):
        cache.update(torch.zeros(1, 2, 1, 4, dtype=F64), torch.zeros(1, 2, 1, 4, dtype=F64))
    assert len(cache) == 3  # nothing appended by the failed calls


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("n_kv_heads", [None, 6, 3, 2, 1])
@pytest.mark.parametrize("chunks", [[5, 1, 1, 1], [1] * 8, [3, 4, 1], [8]])
def test_layer_with_cache_equals_full_causal_pass(need_weights, n_kv_heads, chunks):
    """Feeding a sequence chunk by chunk through a cache gives the full causal pass's outputs,
    and each chunk's weights are the full weights' rows for those queries."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 6, n_kv_heads=n_kv_heads).double().eval()
    x = randn(2, sum(chunks), 12, seed=5)
    full, full_w = mha(x, is_causal=True, need_weights=True)
    cache, start = KVCache(), 0
    for n in chunks:
        out, w = mha(x[:, start : start + n], is_causal=True, need_weights=need_weights, kv_cache=cache)
        torch.testing.assert_close(out, full[:, start : start + n])
        if need_weights:
            assert w.shape == (2, 6, n, start + n)
            torch.testing.assert_close(w, full_w[:, :, start : start + n, : start + n])
        start += n
        assert len(cache) == start
    assert cache.k.shape == (2, n_kv_heads or 6, start, 2)  # (B, n_kv_heads, T, d_head): the small cache


def test_top_left_mask_with_a_cache_is_wrong():
    """The test above could fail: with the mask at the top left, the new queries lose the keys
    after their own index, and the outputs change."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3).double().eval()
    x = randn(1, 7, 12, seed=6)
    full, _ = mha(x, is_causal=True)
    cache = KVCache()
    mha(x[:, :4], is_causal=True, kv_cache=cache)
    wrong, _ = mha(x[:, 4:], attn_mask=causal_mask(3, 7), kv_cache=cache)  # top left: query 0 sees key 0 only
    assert not torch.allclose(wrong, full[:, 4:], atol=1e-3)
    cache = KVCache()
    mha(x[:, :4], is_causal=True, kv_cache=cache)
    right, _ = mha(x[:, 4:], attn_mask=causal_mask(3, 7, align="bottom_right"), kv_cache=cache)
    torch.testing.assert_close(right, full[:, 4:])


def test_layer_cache_with_a_padding_mask():
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3).double().eval()
    x = randn(2, 6, 12, seed=7)
    keep = padding_mask(torch.tensor([6, 4]), 6)  # (B, 1, 1, T_k)
    full, _ = mha(x, attn_mask=keep)
    cache = KVCache()
    mha(x[:, :4], attn_mask=keep[..., :4], kv_cache=cache)
    out, _ = mha(x[:, 4:], attn_mask=keep, kv_cache=cache)  # the mask covers T_cached + T keys
    torch.testing.assert_close(out, full[:, 4:])


def test_layer_cache_bad_input():
    mha = MultiHeadAttention(12, 3)
    x = torch.zeros(1, 2, 12)
    with raises("kv_cache:", "KVCache", "list"):
        mha(x, kv_cache=[])
    with raises("context:", "None when a kv_cache is given"):
        mha(x, context=x, kv_cache=KVCache())
    cache = KVCache()
    mha(x, is_causal=True, kv_cache=cache)
    with raises("attn_mask:", "(1, 3, 2, 4)"):  # T_k = 2 cached + 2 new
        mha(x, attn_mask=torch.ones(2, 2, dtype=torch.bool), kv_cache=cache)
    assert len(cache) == 2  # a refused call appends nothing


# ---------------------------------------------------------------- grouped-query attention


def per_head_loop(mha, x, mask=None):
    """Grouped-query attention from its definition: query head h uses key/value head
    h // (n_heads / n_kv_heads), columns of W_K, W_V taken by hand."""
    H, G, d = mha.n_heads, mha.n_kv_heads, mha.d_head
    Q, K, V = mha.w_q(x), mha.w_k(x), mha.w_v(x)
    assert K.shape[-1] == G * d
    heads = []
    for h in range(H):
        g = h // (H // G)
        s = Q[..., h * d : (h + 1) * d] @ K[..., g * d : (g + 1) * d].transpose(-2, -1) / math.sqrt(d)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        heads.append(torch.softmax(s, -1) @ V[..., g * d : (g + 1) * d])
    return mha.w_o(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4, 8])
@pytest.mark.parametrize("need_weights", [True, False])
def test_gqa_matches_definition_and_sdpa_enable_gqa(n_kv_heads, need_weights):
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 8, n_kv_heads=n_kv_heads).double().eval()
    x = randn(2, 5, 16, seed=8)
    out, w = mha(x, is_causal=True, need_weights=need_weights)
    torch.testing.assert_close(out, per_head_loop(mha, x, causal_mask(5)))
    # PyTorch's own grouped-query attention on the module's projections
    q = mha.w_q(x).view(2, 5, 8, 2).transpose(1, 2)  # (B, T, d_model) -> (B, n_heads, T, d_head)
    k = mha.w_k(x).view(2, 5, n_kv_heads, 2).transpose(1, 2)  # (B, T, n_kv d_head) -> (B, n_kv_heads, T, d_head)
    v = mha.w_v(x).view(2, 5, n_kv_heads, 2).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, n_heads, T, d_head)
    torch.testing.assert_close(out, mha.w_o(y.transpose(1, 2).reshape(2, 5, 16)))
    if need_weights:
        assert w.shape == (2, 8, 5, 5)


def test_gqa_fast_and_explicit_paths_agree_with_masks():
    torch.manual_seed(2)
    mha = MultiHeadAttention(12, 6, n_kv_heads=2).double().eval()
    x = randn(3, 6, 12, seed=9)
    for mask in (padding_mask(torch.tensor([6, 1, 3]), 6), causal_mask(6), randn(6, 6, seed=10)):
        fast, _ = mha(x, attn_mask=mask, need_weights=False)
        slow, _ = mha(x, attn_mask=mask, need_weights=True)
        torch.testing.assert_close(fast, slow)


def test_gqa_cross_attention():
    torch.manual_seed(3)
    mha = MultiHeadAttention(12, 6, n_kv_heads=3).double().eval()
    x, ctx = randn(2, 3, 12, seed=11), randn(2, 7, 12, seed=12)
    fast, _ = mha(x, ctx, need_weights=False)
    slow, w = mha(x, ctx, need_weights=True)
    torch.testing.assert_close(fast, slow)
    assert w.shape == (2, 6, 3, 7)


def test_n_kv_heads_equal_to_n_heads_is_plain_multihead():
    torch.manual_seed(4)
    plain = MultiHeadAttention(12, 3).double()
    torch.manual_seed(4)
    same = MultiHeadAttention(12, 3, n_kv_heads=3).double()
    assert plain.n_kv_heads == 3 and same.n_kv_heads == 3
    x = randn(2, 4, 12, seed=13)
    torch.testing.assert_close(plain(x)[0], same(x)[0], rtol=0, atol=0)


def test_repeat_kv_is_sdpas_grouping():
    kv = randn(2, 3, 4, 5, seed=14)  # 3 key/value heads
    r = repeat_kv(kv, 6)
    assert r.shape == (2, 6, 4, 5)
    for h in range(6):
        assert torch.equal(r[:, h], kv[:, h // 2])
    assert repeat_kv(kv, 3) is kv
    q = randn(2, 6, 4, 5, seed=15)
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, r, r), F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    )
    with raises("n_heads:", "multiple of n_kv_heads=3", "n_heads=4"):
        repeat_kv(kv, 4)
    with raises("x:", "4-D"):
        repeat_kv(torch.zeros(3, 4), 6)


def test_gqa_bad_input_and_from_torch():
    with raises("n_kv_heads:", "divisor of n_heads=6", "n_kv_heads=4"):
        MultiHeadAttention(12, 6, n_kv_heads=4)
    with raises("n_kv_heads:", "positive int", "0"):
        MultiHeadAttention(12, 6, n_kv_heads=0)
    with raises("n_kv_heads:", "positive int", "bool"):
        MultiHeadAttention(12, 6, False)  # the old positional `bias` lands here: refused, not misread
    with raises("n_kv_heads:", "divisor of n_heads=4"):
        GPTConfig(10, 8, d_model=16, n_layers=1, n_heads=4, n_kv_heads=3)
    m = nn.MultiheadAttention(12, 3, batch_first=True)
    mine = MultiHeadAttention.from_torch(m)
    assert mine.n_kv_heads == 3 and mine.w_k.weight.shape == (12, 12)
    x = torch.randn(2, 4, 12)
    torch.testing.assert_close(mine(x)[0], m(x, x, x)[0])


# ---------------------------------------------------------------- parameters and cache size


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n_heads,n_kv_heads", [(12, None), (12, 12), (12, 4), (12, 3), (12, 1), (8, 2)])
def test_attention_params_with_grouped_heads(bias, n_heads, n_kv_heads):
    d = 96
    layer = MultiHeadAttention(d, n_heads, n_kv_heads=n_kv_heads, bias=bias)
    n = attention_params(d, bias, n_heads=n_heads, n_kv_heads=n_kv_heads)
    assert count_params(layer) == n
    d_kv = (n_kv_heads or n_heads) * (d // n_heads)
    assert n == 2 * d * d + 2 * d * d_kv + (2 * d + 2 * d_kv if bias else 0)
    assert tuple(layer.w_k.weight.shape) == tuple(layer.w_v.weight.shape) == (d_kv, d)  # nn.Linear: (out, in)
    if n_kv_heads in (None, n_heads):
        assert n == attention_params(d, bias)


def test_attention_params_bad_input():
    with raises("n_heads:", "number of query heads", "None"):
        attention_params(96, n_kv_heads=2)
    with raises("n_kv_heads:", "divisor of n_heads=12"):
        attention_params(96, n_heads=12, n_kv_heads=5)
    with raises("d_model:", "multiple of n_heads=7"):
        attention_params(96, n_heads=7, n_kv_heads=1)


@pytest.mark.parametrize("n_kv_heads", [None, 12, 4, 1])
def test_gpt_params_with_grouped_heads_on_meta(n_kv_heads):
    config = dataclasses.replace(GPT2_SMALL, n_kv_heads=n_kv_heads)
    with torch.device("meta"):
        model = GPT(config)
    assert gpt_params(config) == count_params(model)
    saved = 2 * config.n_layers * 768 * (768 - (n_kv_heads or 12) * 64) * (1 + 1 / 768)  # weights and biases
    assert gpt_params(GPT2_SMALL) - gpt_params(config) == pytest.approx(saved)
    assert param_breakdown(config)["attention"] == 12 * count_params(model.blocks[0].attn)


def test_config_repr_and_replace():
    assert "n_kv_heads" not in repr(GPT2_SMALL)  # printed as before chapter 12
    assert repr(GPT2_SMALL).startswith("GPTConfig(vocab_size=50257, context_length=1024, d_model=768")
    gqa = dataclasses.replace(GPT2_SMALL, n_kv_heads=4)
    assert repr(gqa).endswith("tie_embeddings=True, n_kv_heads=4)")
    assert GPT2_SMALL.n_kv_heads is None and gqa != GPT2_SMALL


@pytest.mark.parametrize(
    "config",
    [SMALL, dataclasses.replace(SMALL, n_kv_heads=2), dataclasses.replace(SMALL, n_kv_heads=1)],
    ids=["mha", "gqa", "mqa"],
)
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_kv_cache_bytes_equals_the_measured_cache(config, dtype):
    model = model_for(config, dtype=dtype)
    cache = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.randint(0, 23, (3, 9), generator=torch.Generator().manual_seed(0)), kv_cache=cache)
    measured = sum(c.nbytes for c in cache)
    assert measured == kv_cache_bytes(config, T=9, B=3, dtype=dtype)
    # grouped heads shrink the cache by n_heads / n_kv_heads
    assert kv_cache_bytes(SMALL, T=9, dtype=dtype) == kv_cache_bytes(config, T=9, dtype=dtype) * 6 // (
        config.n_kv_heads or 6
    )


def test_kv_cache_bytes_published_models():
    # 2 (K and V) x layers x tokens x d_model x bytes, per sequence at full context
    assert kv_cache_bytes(GPT2_SMALL, dtype=torch.float16) == 2 * 12 * 1024 * 768 * 2 == 37_748_736
    assert kv_cache_bytes(GPT2_XL, dtype=torch.float16) == 2 * 48 * 1024 * 1600 * 2
    assert kv_cache_bytes(GPT3_175B, dtype=torch.float16) == 2 * 96 * 2048 * 12288 * 2 == 9_663_676_416
    assert kv_cache_bytes(GPT3_175B) == 2 * kv_cache_bytes(GPT3_175B, dtype=torch.bfloat16)  # float32 default
    assert kv_cache_bytes(GPT2_SMALL, T=1) * 1024 == kv_cache_bytes(GPT2_SMALL)
    assert kv_cache_bytes(GPT2_SMALL, B=8) == 8 * kv_cache_bytes(GPT2_SMALL)


def test_kv_cache_bytes_bad_input():
    with raises("T:", "at most context_length = 1024", "T = 1025"):
        kv_cache_bytes(GPT2_SMALL, T=1025)
    with raises("T:", "positive int"):
        kv_cache_bytes(GPT2_SMALL, T=0)
    with raises("B:", "positive int"):
        kv_cache_bytes(GPT2_SMALL, B=0)
    with raises("dtype:", "floating-point"):
        kv_cache_bytes(GPT2_SMALL, dtype=torch.int8)
    with raises("config:", "GPTConfig"):
        kv_cache_bytes({"n_layers": 12})


# ---------------------------------------------------------------- the model with a cache


@pytest.mark.parametrize(
    "config",
    [SMALL, dataclasses.replace(SMALL, n_kv_heads=3, bias=False, tie_embeddings=False)],
    ids=["mha", "gqa-untied-nobias"],
)
def test_gpt_with_cache_equals_full_forward(config):
    model = model_for(config)
    ids = torch.randint(0, 23, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, full_w = model(ids, need_weights=True)
        cache, start = [KVCache() for _ in model.blocks], 0
        for n in (5, 1, 1, 4, 1, 4):  # up to the full context of 16
            logits, w = model(ids[:, start : start + n], need_weights=True, kv_cache=cache)
            torch.testing.assert_close(logits, full[:, start : start + n])
            for layer in range(3):
                torch.testing.assert_close(w[layer], full_w[layer][:, :, start : start + n, : start + n])
            start += n
    assert [len(c) for c in cache] == [16] * 3


def test_gpt_cache_positions_continue():
    """The cached tokens' positions continue the sequence: the same token ids fed with a
    cache and without give different logits (positions 3.. vs 0..)."""
    model = model_for(SMALL)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.no_grad():
        cache = [KVCache() for _ in model.blocks]
        model(ids[:, :3], kv_cache=cache)
        cached = model(ids[:, 3:], kv_cache=cache)
        alone = model(ids[:, 3:])
    torch.testing.assert_close(cached, model(ids)[:, 3:])
    assert not torch.allclose(cached, alone, atol=1e-3)


def test_gpt_cache_bad_input():
    model = GPT(SMALL)
    ids = torch.zeros(2, 3, dtype=torch.long)
    with raises("kv_cache:", "a list of 3 KVCache"):
        model(ids, kv_cache=[KVCache()])
    with raises("kv_cache:", "a list of 3 KVCache", "KVCache"):
        model(ids, kv_cache=KVCache())
    cache = [KVCache() for _ in model.blocks]
    model(torch.zeros(2, 10, dtype=torch.long), kv_cache=cache)
    with raises("ids:", "T in [1, 6] tokens", "context_length=16 minus 10 cached tokens", "(2, 7)"):
        model(torch.zeros(2, 7, dtype=torch.long), kv_cache=cache)
    with raises("ids:", "B = 2 sequences", "B = 1"):
        model(torch.zeros(1, 1, dtype=torch.long), kv_cache=cache)
    uneven = [KVCache() for _ in model.blocks]
    uneven[0].update(torch.zeros(2, 6, 1, 4), torch.zeros(2, 6, 1, 4))
    with raises("kv_cache:", "same number of tokens", "[1, 0, 0]"):
        model(ids, kv_cache=uneven)


# ---------------------------------------------------------------- generation


def greedy_reference(model, ids, n):
    """Greedy decoding written independently of GPT.generate: the full logits, every step."""
    for _ in range(n):
        with torch.no_grad():
            nxt = model(ids)[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        ids = torch.cat([ids, nxt], dim=1)
    return ids


CONFIGS = {
    "mha": SMALL,
    "gqa": dataclasses.replace(SMALL, n_kv_heads=2),
    "mqa": dataclasses.replace(SMALL, n_kv_heads=1),
    "untied-nobias": dataclasses.replace(SMALL, bias=False, tie_embeddings=False),
    "one-layer-one-head": GPTConfig(vocab_size=7, context_length=12, d_model=8, n_layers=1, n_heads=1),
}


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("B,T0", [(1, 1), (3, 2), (2, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_generate_with_and_without_cache_give_the_same_tokens(name, B, T0, dtype):
    config = CONFIGS[name]
    model = model_for(config, seed=T0, dtype=dtype)
    prompt = torch.randint(0, config.vocab_size, (B, T0), generator=torch.Generator().manual_seed(B))
    n = config.context_length - T0  # up to the last position
    cached = model.generate(prompt, n)
    recomputed = model.generate(prompt, n, use_cache=False)
    assert cached.shape == (B, T0 + n) and cached.dtype == prompt.dtype
    assert torch.equal(cached[:, :T0], prompt)
    assert torch.equal(cached, recomputed)
    assert torch.equal(cached, greedy_reference(model, prompt, n))


@pytest.mark.parametrize("name", CONFIGS)
def test_generation_tests_could_fail(name, monkeypatch):
    """A cache that forgets the earlier tokens (each new token sees only itself) changes the
    tokens of every configuration above: the equality there is a real test."""
    model = model_for(CONFIGS[name], seed=4)
    prompt = torch.randint(0, CONFIGS[name].vocab_size, (3, 4), generator=torch.Generator().manual_seed(3))
    right = model.generate(prompt, 8)
    monkeypatch.setattr(KVCache, "update", lambda self, k, v: (k, v))
    assert not torch.equal(model.generate(prompt, 8), right)


def test_generate_recomputes_without_a_cache(monkeypatch):
    calls = []
    original = GPT._hidden

    def spy(self, ids, need_weights=False, kv_cache=None, positions=None):
        calls.append((ids.shape[1], kv_cache is not None))
        return original(self, ids, need_weights, kv_cache, positions)

    def plain_spy(model, ids, caches):
        calls.append((ids.shape[1], "plain"))
        return original_plain(model, ids, caches)

    original_plain = generation.plain_step
    monkeypatch.setattr(GPT, "_hidden", spy)
    monkeypatch.setattr(generation, "plain_step", plain_spy)
    model = GPT(SMALL)
    model.generate(torch.zeros(2, 3, dtype=torch.long), 4)
    assert calls == [(3, True), (1, "plain"), (1, "plain"), (1, "plain")]  # prompt once, then one token per step
    calls.clear()
    GPT(dataclasses.replace(SMALL, positions="rope")).generate(torch.zeros(2, 3, dtype=torch.long), 4)  # RoPE: forward
    assert calls == [(3, True), (1, True), (1, True), (1, True)]
    calls.clear()
    model.generate(torch.zeros(2, 3, dtype=torch.long), 4, use_cache=False)
    assert calls == [(3, False), (4, False), (5, False), (6, False)]  # the whole sequence each step


def test_generate_mode_grad_and_edge_cases():
    model = GPT(SMALL).train()
    prompt = torch.tensor([[1, 2]], dtype=torch.int32)
    with torch.enable_grad():
        out = model.generate(prompt, 3)
    assert model.training, "the model's mode is restored"
    assert not out.requires_grad and out.dtype == torch.int32
    assert torch.equal(model.generate(prompt, 0), prompt)
    assert model.generate(torch.zeros(2, 16, dtype=torch.long), 0).shape == (2, 16)


def test_generate_bad_input():
    model = GPT(SMALL)
    with raises(
        "max_new_tokens:",
        "T0 + max_new_tokens <= context_length = 16",
        "T0 = 3 prompt tokens + max_new_tokens = 14 = 17",
    ):
        model.generate(torch.zeros(1, 3, dtype=torch.long), 14)
    with raises("max_new_tokens:", "int >= 0", "-1"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), -1)
    with raises("max_new_tokens:", "int >= 0", "float 2.0"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), 2.0)
    with raises("max_new_tokens:", "int >= 0", "bool"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), True)
    with raises("ids:", "2-D integer", "(3,)"):
        model.generate(torch.zeros(3, dtype=torch.long), 2)
    with raises("ids:", "2-D integer", "torch.float32"):
        model.generate(torch.zeros(1, 3), 2)
    with raises("ids:", "T in [1, 16]", "(1, 0)"):
        model.generate(torch.zeros(1, 0, dtype=torch.long), 2)
    with raises("ids:", "T in [1, 16]", "(1, 17)"):
        model.generate(torch.zeros(1, 17, dtype=torch.long), 0)
    with raises("ids:", "[0, 22]", "id 23"):
        model.generate(torch.tensor([[23]]), 2)
    with raises("use_cache:", "True or False"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), 2, use_cache="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_generate_on_cuda_matches_cpu():
    model = model_for(dataclasses.replace(SMALL, n_kv_heads=2), dtype=F64)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    cpu = model.generate(prompt, 8)
    gpu = model.cuda().generate(prompt.cuda(), 8)
    assert torch.equal(gpu.cpu(), cpu)
    assert torch.equal(model.generate(prompt.cuda(), 8, use_cache=False).cpu(), cpu)


PLAIN = {
    "mha": SMALL,
    "gqa": dataclasses.replace(SMALL, n_kv_heads=2),
    "untied-nobias": dataclasses.replace(SMALL, bias=False, tie_embeddings=False),
}


@pytest.mark.parametrize("name", PLAIN)
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_plain_step_is_forwards_step_to_the_bit(name, dtype):
    """generate's one-token step for GPT-2's layers computes what forward computes, the same operations
    on the same numbers: equal to the bit, the caches too, at every step."""
    model = model_for(PLAIN[name], dtype=dtype)
    prompt = torch.randint(0, SMALL.vocab_size, (2, 3), generator=torch.Generator().manual_seed(0))
    ours, theirs = ([KVCache(max_tokens=10) for _ in model.blocks] for _ in range(2))
    with torch.inference_mode():
        assert generation.plain_steps(model, ours)
        model._hidden(prompt, kv_cache=ours), model._hidden(prompt, kv_cache=theirs)
        ids = prompt[:, -1:]
        for _ in range(5):
            h, want = generation.plain_step(model, ids, ours), model._hidden(ids, kv_cache=theirs)[0]
            assert h.shape == (2, 1, SMALL.d_model) and torch.equal(h, want)
            assert all(torch.equal(a.k, b.k) and torch.equal(a.v, b.v) for a, b in zip(ours, theirs))
            ids = model.lm_head(h[:, -1]).argmax(-1, keepdim=True)


def test_plain_steps_only_for_gpt2s_layers_and_full_caches():
    full = [KVCache(max_tokens=10) for _ in range(SMALL.n_layers)]
    assert generation.plain_steps(GPT(SMALL), full)
    assert not generation.plain_steps(GPT(SMALL), [KVCache(window=4) for _ in range(SMALL.n_layers)])
    others = {
        "rope": dict(positions="rope"),
        "rmsnorm": dict(norm="rmsnorm"),
        "swiglu": dict(mlp="swiglu"),
        "qk_norm": dict(qk_norm=True),
        "window": dict(sliding_window=4),
        "sinks": dict(learned_sinks=True),
        "mla": dict(attention="mla", positions="rope", kv_rank=8, norm="rmsnorm"),
    }
    for name, options in others.items():
        model = GPT(dataclasses.replace(SMALL, **options))
        assert not generation.plain_steps(model, full), name
