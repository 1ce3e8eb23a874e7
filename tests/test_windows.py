"""Chapter 16: sliding windows, rolling and StreamingLLM caches, learned sinks, masks as functions.

References: PyTorch's SDPA with the band mask and its flex_attention (uncompiled, on the CPU);
transformers' MistralForCausalLM (sliding window) and GptOssAttention (learned sinks), small
random configs, nothing downloaded; the masks' definitions written as loops.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import attnlib
from attnlib import GPT, AttnlibError, GPTConfig, KVCache, MultiHeadAttention, sliding_window_mask
from attnlib.generation import new_caches

flex = pytest.importorskip("torch.nn.attention.flex_attention")


def _flex(q, k, v, mask_mod=None, score_mod=None):
    """flex_attention, uncompiled (it warns that it materializes the scores: what the test wants)."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        block = None if mask_mod is None else flex.create_block_mask(mask_mod, None, None, T_q, T_k, device="cpu")
        return flex.flex_attention(q, k, v, score_mod=score_mod, block_mask=block)


# ------------------------------------------------------------------ the band mask


@pytest.mark.parametrize("T_q, T_k", [(1, 1), (5, 5), (3, 7), (7, 7), (2, 9)])
@pytest.mark.parametrize("window", [1, 2, 3, 20])
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_sliding_window_mask_is_its_definition(T_q, T_k, window, align):
    shift = 0 if align == "top_left" else T_k - T_q
    expected = torch.tensor(
        [[i + shift - window < j <= i + shift for j in range(T_k)] for i in range(T_q)], dtype=torch.bool
    )
    mask = sliding_window_mask(T_q, T_k, window=window, align=align)
    assert mask.dtype == torch.bool and torch.equal(mask, expected)
    assert int(mask.sum(-1).max()) <= window  # O(T window) keys in all
    if window >= T_k:
        assert torch.equal(mask, attnlib.causal_mask(T_q, T_k, align=align))


def test_sliding_window_mask_needs_a_window():
    with pytest.raises(AttnlibError, match="window"):
        sliding_window_mask(4, window=0)


# ------------------------------------------------------------------ the windowed layer


@pytest.mark.parametrize("n_kv_heads", [4, 2])
@pytest.mark.parametrize("window", [1, 3, 6])
@pytest.mark.parametrize("rope", [False, True])
def test_windowed_layer_equals_sdpa_and_flex_attention(n_kv_heads, window, rope):
    torch.manual_seed(window)
    T, d, H = 10, 16, 4
    layer = MultiHeadAttention(d, H, n_kv_heads=n_kv_heads, sliding_window=window, rope=rope).eval()
    layer.requires_grad_(False)  # flex_attention has no backward on the CPU
    x = torch.randn(2, T, d)
    out, weights = layer(x, is_causal=True)
    fast, _ = layer(x, is_causal=True, need_weights=False)
    assert torch.allclose(out, fast, atol=1e-5)
    assert torch.equal(weights[0, 0] > 0, sliding_window_mask(T, window=window))
    # the same projections by hand, then SDPA with the band mask and flex_attention with the rule
    q = layer.w_q(x).view(2, T, H, 4).transpose(1, 2)  # (B, T, d) -> (B, H, T, d_head)
    k = layer.w_k(x).view(2, T, n_kv_heads, 4).transpose(1, 2)
    v = layer.w_v(x).view(2, T, n_kv_heads, 4).transpose(1, 2)
    if rope:
        q, k = attnlib.apply_rope(q, torch.arange(T)), attnlib.apply_rope(k, torch.arange(T))
    k, v = attnlib.repeat_kv(k, H), attnlib.repeat_kv(v, H)
    y_sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(T, window=window))
    y_flex = _flex(q, k, v, mask_mod=attnlib.sliding_window_mod(window))
    for y in (y_sdpa, y_flex):
        assert torch.allclose(layer.w_o(y.transpose(1, 2).reshape(2, T, d)), out, atol=1e-5)


def test_sliding_window_needs_is_causal():
    layer = MultiHeadAttention(8, 2, sliding_window=3)
    with pytest.raises(AttnlibError, match="is_causal"):
        layer(torch.randn(1, 4, 8))


# ------------------------------------------------------------------ rolling caches


CHUNKINGS = [[1] * 11, [4, 4, 3], [7, 4], [2, 9], [11]]  # chunks shorter and longer than the windows


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("window", [1, 3, 5])
@pytest.mark.parametrize("need_weights", [True, False])
def test_rolling_cache_gives_the_windowed_layer_exactly(chunks, window, need_weights):
    """Feeding the tokens in chunks through KVCache(window) equals the whole sequence at once,
    also when a chunk (or the prompt) is longer than the window; the cache never holds more."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, n_kv_heads=2, sliding_window=window, rope=True).eval()
    x = torch.randn(2, sum(chunks), 16)
    full, _ = layer(x, is_causal=True)
    cache, outs, start = KVCache(window=window), [], 0
    for n in chunks:
        out, _ = layer(x[:, start : start + n], is_causal=True, kv_cache=cache, need_weights=need_weights)
        outs.append(out)
        start += n
        assert len(cache) == min(window - 1, start) and cache.seen == start  # what the next token needs
        assert cache.positions.tolist() == list(range(max(0, start - window + 1), start))
        assert cache.nbytes == 2 * 2 * 2 * len(cache) * 4 * 4  # k and v, B=2, 2 kv heads, d_head 4, float32
    assert torch.allclose(torch.cat(outs, dim=1), full, atol=1e-5)


def test_rolling_cache_keeps_the_sinks_and_the_window():
    cache = KVCache(window=3, sinks=2)
    for n in (1, 4, 1, 6):
        k = torch.randn(1, 1, n, 2)
        returned, _ = cache.update(k, k.clone())
        assert returned.shape[2] == min(cache.seen - n, 4) + n  # everything held before, and every new token
        assert len(cache) <= 4  # the 2 sinks and the last 2: with the next token, 2 + 3
    assert cache.seen == 12 and cache.positions.tolist() == [0, 1, 10, 11]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_tokens": 8, "window": 4}, "window"),
        ({"sinks": 2}, "sinks"),
        ({"window": 0}, "window"),
        ({"window": 4, "sinks": -1}, "sinks"),
    ],
)
def test_cache_options_are_checked(kwargs, match):
    with pytest.raises(AttnlibError, match=match):
        KVCache(**kwargs)


def test_a_rolling_cache_smaller_than_the_layers_window_is_an_error():
    layer = MultiHeadAttention(8, 2, sliding_window=4)
    with pytest.raises(AttnlibError, match="kv_cache"):
        layer(torch.randn(1, 2, 8), is_causal=True, kv_cache=KVCache(window=3))


# ------------------------------------------------------------------ windowed models


def _config(**kwargs) -> GPTConfig:
    base = dict(vocab_size=23, context_length=32, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2)
    return GPTConfig(**{**base, **kwargs})


def _randomized(model: GPT, seed: int) -> GPT:
    """Large random weights: greedy tokens that depend on the context (GPT-2's small init repeats one)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:  # embeddings N(0, 1), matrices std 2 / sqrt(fan_in); norms' gains stay 1
                p.normal_(0, 1.0 if "emb" in name else 2 / p.shape[-1] ** 0.5)
            elif name.endswith("sinks"):
                p.normal_(0, 1)
    return model.eval()


WINDOWED = {
    "all-sliding-rope": dict(positions="rope", sliding_window=4, norm="rmsnorm", mlp="swiglu"),
    "mixed-learned": dict(sliding_window=3, layer_types=("sliding", "full", "sliding")),
    "mixed-rope-sinks": dict(
        positions="rope", sliding_window=5, layer_types=["full", "sliding", "sliding"], learned_sinks=True
    ),
}


@pytest.mark.parametrize("name", WINDOWED)
@pytest.mark.parametrize("prompt", [2, 9])  # shorter and longer than every window
def test_windowed_generation_with_rolling_caches_equals_recomputing(name, prompt):
    model = _randomized(GPT(_config(**WINDOWED[name])), seed=prompt)
    ids = torch.randint(0, 23, (2, prompt), generator=torch.Generator().manual_seed(1))
    cached = model.generate(ids, 14, use_cache=True)
    assert torch.equal(cached, model.generate(ids, 14, use_cache=False))
    assert len(set(cached[:, prompt:].flatten().tolist())) > 3  # the tokens vary: a wrong cache would show


def test_windowed_model_logits_in_chunks_and_cache_memory_bounded():
    """GPT.forward through the caches GPT.generate makes, in chunks of 1 to 7 tokens: the same logits
    as the whole sequence; each sliding layer's KVCache.nbytes never passes its window, while a full
    layer's grows with the tokens (kv_cache_bytes gives both, tested below)."""
    config = _config(**WINDOWED["mixed-learned"])
    model = _randomized(GPT(config), seed=3)
    ids = torch.randint(0, 23, (1, 30), generator=torch.Generator().manual_seed(2))
    full = model(ids)
    caches = new_caches(model, 30)
    per_token = 2 * 2 * 4 * 4  # k and v, 2 kv heads, d_head 4, float32
    start, logits = 0, []
    for n in (1, 7, 2, 5, 1, 1, 6, 7):
        logits.append(model(ids[:, start : start + n], kv_cache=caches))
        start += n
        sliding = [c for c, w in zip(caches, map(config.layer_window, range(3))) if w is not None]
        assert all(c.nbytes <= 2 * per_token for c in sliding)  # window 3: 2 kept for the next token
        full_layers = [c for c, w in zip(caches, map(config.layer_window, range(3))) if w is None]
        assert all(c.nbytes == start * per_token for c in full_layers)
    assert torch.allclose(torch.cat(logits, dim=1), full, atol=1e-4)


@pytest.mark.parametrize("name", WINDOWED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kv_cache_bytes_is_what_the_rolling_caches_hold_between_steps(name, dtype):
    """One definition of a sliding layer's cache: after T tokens, KVCache(window=w) holds min(T, w - 1)
    of them until the next step, and kv_cache_bytes counts exactly that (a full layer: T). Measured on
    the caches GPT.generate gives, fed in chunks shorter and longer than the windows."""
    config = _config(**WINDOWED[name])
    model = _randomized(GPT(config), seed=4).to(dtype)
    ids = torch.randint(0, 23, (2, 30), generator=torch.Generator().manual_seed(5))
    caches, start = new_caches(model, 30), 0
    with torch.no_grad():
        for n in (1, 2, 7, 1, 1, 6, 12):
            model(ids[:, start : start + n], kv_cache=caches)
            start += n
            measured = sum(c.nbytes for c in caches)
            assert measured == attnlib.kv_cache_bytes(config, T=start, B=2, dtype=dtype), (name, start)
    # the count is not the window's min(T, w), which would say more than the caches hold
    windows = [config.layer_window(i) for i in range(config.n_layers)]
    per_token = 2 * 2 * 2 * 4 * dtype.itemsize  # k and v, B = 2, 2 kv heads, d_head 4
    assert measured == per_token * sum(30 if w is None else w - 1 for w in windows)


@pytest.mark.parametrize("window, sinks", [(3, 2), (5, 1), (1, 3)])
def test_a_streaming_cache_holds_its_sinks_and_window_minus_one(window, sinks):
    """kv_cache_bytes does not count StreamingLLM's sinks (an option of the cache, not of the config):
    KVCache(window=w, sinks=s) holds min(T, s + w - 1) tokens between steps, as its docstring says."""
    cache = KVCache(window=window, sinks=sinks)
    for T in range(1, 12):
        cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
        assert len(cache) == min(T, sinks + window - 1), (T, len(cache))
        assert cache.nbytes == 2 * 2 * len(cache) * 4 * 4  # k and v, 2 heads, d_head 4, float32


def test_streaming_cache_generates_past_the_context_in_bounded_memory():
    """StreamingLLM's cache (2 sinks + a window of 6) on a full-attention RoPE model with a context of
    16: 40 new tokens, every layer's cache bounded by 7 tokens (8 with the new one). For a one-layer
    model each step equals a fresh pass over the tokens it sees (their keys depend on no other
    token), at positions 0 .. 7."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=23, context_length=16, d_model=16, n_layers=1, n_heads=4, positions="rope")
    model = _randomized(GPT(config), seed=5)
    ids = torch.randint(0, 23, (1, 5), generator=torch.Generator().manual_seed(4))
    out = model.generate(ids, 40, cache_window=6, cache_sinks=2)
    assert out.shape == (1, 45)
    caches = [KVCache(window=6, sinks=2)]
    seq = ids
    for step in range(20):
        new = seq if step == 0 else seq[:, -1:]
        held = caches[0].positions
        logits = model(new, kv_cache=caches, positions="in_cache")[:, -1]
        assert caches[0].nbytes <= 7 * 2 * 4 * 4 * 4 and len(caches[0]) <= 7  # 2 sinks + 5: with the next, 8
        seen = torch.cat([held, torch.arange(seq.shape[1] - new.shape[1], seq.shape[1])])  # what the last token saw
        assert torch.allclose(logits, model(seq[:, seen])[:, -1], atol=1e-4), step
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(seq, out[:, : seq.shape[1]])
    # while nothing is evicted the cache is exact: the same tokens as the full model
    assert torch.equal(model.generate(ids, 3, cache_window=6, cache_sinks=2), model.generate(ids, 3))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"layer_types": ("sliding", "full")}, "layer_types"),
        ({"layer_types": ("sliding", "full", "local")}, "layer_types"),
        ({"layer_types": ("sliding", "full", "full")}, "sliding_window"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"learned_sinks": 1}, "learned_sinks"),
    ],
)
def test_window_config_is_checked(kwargs, match):
    with pytest.raises(AttnlibError, match=match):
        _config(**kwargs)


def test_streaming_generation_needs_rope_or_no_positions():
    model = GPT(_config())  # learned positions
    with pytest.raises(AttnlibError, match="cache_window"):
        model.generate(torch.tensor([[1, 2]]), 3, cache_window=4)


def test_config_counts_the_sinks_and_prints_as_before():
    config = _config(learned_sinks=True, sliding_window=4)
    assert attnlib.count_params(GPT(config)) == attnlib.gpt_params(config)
    assert attnlib.gpt_params(config) - attnlib.gpt_params(_config()) == 3 * 4  # a logit per head per layer
    assert "sliding_window=4" in repr(config) and "layer_types" not in repr(config)


# ------------------------------------------------------------------ learned sinks


def test_a_sink_takes_weight_and_adds_no_value():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, learned_sinks=True).eval()
    x = torch.randn(2, 6, 16)
    plain = MultiHeadAttention(16, 4).eval()
    plain.load_state_dict(layer.state_dict(), strict=False)
    with torch.no_grad():
        layer.sinks.fill_(float("-inf"))  # a sink that takes nothing: the plain layer
    assert torch.allclose(layer(x, is_causal=True)[0], plain(x, is_causal=True)[0], atol=1e-6)
    with torch.no_grad():
        layer.sinks.copy_(torch.tensor([-2.0, 0.0, 2.0, 30.0]))
    with torch.no_grad():
        out, weights = layer(x, is_causal=True)
    rows = weights.sum(-1)  # (B, H, T): what the real keys got
    assert bool((rows < 1).all()) and float(rows[:, 3].max()) < 1e-6  # head 3's sink takes everything
    # the sink's share: exp(s) / (exp(s) + sum exp(scores))
    scores = layer.w_q(x).view(2, 6, 4, 4).transpose(1, 2) @ layer.w_k(x).view(2, 6, 4, 4).transpose(1, 2).mT / 2
    scores = scores.masked_fill(~attnlib.causal_mask(6), float("-inf"))
    sinks = layer.sinks.detach()[:, None]  # (H, 1)
    share = torch.exp(sinks) / (torch.exp(sinks) + scores.detach().exp().sum(-1))
    assert torch.allclose(1 - rows, share, atol=1e-5)
    fast, _ = layer(x, is_causal=True, need_weights=False)
    assert torch.allclose(out, fast, atol=1e-5)
    for need in (True, False):  # the sinks learn, through either path
        layer.zero_grad()
        layer(x, is_causal=True, need_weights=need)[0].pow(2).sum().backward()
        assert layer.sinks.grad is not None and bool((layer.sinks.grad[:3] != 0).all())


@pytest.mark.parametrize("layer_type", ["full_attention", "sliding_attention"])
def test_learned_sinks_equal_transformers_gpt_oss_attention(layer_type):
    transformers = pytest.importorskip("transformers")
    from _transformers import rope
    from transformers.models.gpt_oss import modeling_gpt_oss as gpt_oss

    config = transformers.GptOssConfig(
        vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, sliding_window=3, layer_types=["sliding_attention", "full_attention"],
        **rope(), attention_bias=True,
        num_local_experts=2, num_experts_per_tok=1, intermediate_size=16,
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = gpt_oss.GptOssAttention(config, layer_idx=config.layer_types.index(layer_type)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3)
    T = 9
    x = torch.randn(2, T, 32)
    cos_sin = gpt_oss.GptOssRotaryEmbedding(config)(x, torch.arange(T)[None].expand(2, T))
    window = 3 if layer_type == "sliding_attention" else None
    allowed = sliding_window_mask(T, window=window) if window else attnlib.causal_mask(T)
    expected, hf_weights = hf(x, cos_sin, attnlib.float_mask(allowed)[None, None])

    mine = MultiHeadAttention(32, 4, n_kv_heads=2, d_head=8, rope=True, sliding_window=window, learned_sinks=True)
    from attnlib.hf import rotate_half_to_interleaved as to_interleaved

    with torch.no_grad():
        for name, heads in (("q", 4), ("k", 2)):
            getattr(mine, f"w_{name}").weight.copy_(to_interleaved(getattr(hf, f"{name}_proj").weight, heads))
            getattr(mine, f"w_{name}").bias.copy_(to_interleaved(getattr(hf, f"{name}_proj").bias, heads))
        mine.w_v.load_state_dict(hf.v_proj.state_dict())
        mine.w_o.load_state_dict(hf.o_proj.state_dict())
        mine.sinks.copy_(hf.sinks)
    out, weights = mine.eval()(x, is_causal=True)
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.allclose(weights, hf_weights, atol=1e-6)
    assert torch.allclose(mine(x, is_causal=True, need_weights=False)[0], expected, atol=1e-5)


# ------------------------------------------------------------------ Mistral's window, from transformers


def test_from_hf_mistral_with_a_window_shorter_than_the_sequence():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=4, max_position_embeddings=64,
    )  # fmt: skip
    config._attn_implementation = "eager"
    hf = transformers.MistralForCausalLM(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.4 if p.dim() > 1 else 0.1)
    gpt = attnlib.from_hf(hf)
    assert gpt.config.sliding_window == 4 and gpt.config.layer_types is None
    ids = torch.randint(0, 40, (2, 15), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf(ids).logits
        assert not torch.allclose(expected, attnlib.from_hf(_without_window(hf))(ids), atol=1e-3)  # the window matters
    assert torch.allclose(gpt(ids), expected, atol=1e-4)
    generated = gpt.generate(ids[:, :6], 12)
    assert torch.equal(generated, hf.generate(ids[:, :6], max_new_tokens=12, do_sample=False, min_new_tokens=12))


def _without_window(hf):
    import copy

    other = copy.deepcopy(hf)
    other.config.sliding_window = None
    return other


# ------------------------------------------------------------------ masks as functions


def _qkv(seed=0, B=2, H=4, T=9, D=8):
    torch.manual_seed(seed)
    return (torch.randn(B, H, T, D) for _ in range(3))


MASK_MODS = {
    "causal": (lambda T: attnlib.causal_mod, lambda T: attnlib.causal_mask(T)),
    "sliding window": (lambda T: attnlib.sliding_window_mod(3), lambda T: sliding_window_mask(T, window=3)),
    "prefix LM": (lambda T: attnlib.prefix_lm_mod(4), lambda T: attnlib.prefix_lm_mask(T, 4)),
    "documents": (
        lambda T: attnlib.document_mod(torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2]] * 2)),
        lambda T: attnlib.document_mask(torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2]] * 2)),
    ),
}


@pytest.mark.parametrize("name", MASK_MODS)
def test_mask_mod_equals_attnlibs_mask(name):
    make_mod, make_mask = MASK_MODS[name]
    T = 9
    mod, table = make_mod(T), make_mask(T)
    torch_table = flex.create_mask(mod, 2, 1, T, T, device="cpu")  # (B, 1, T, T)
    assert torch.equal(torch_table, torch.broadcast_to(table, (2, 1, T, T)))
    assert torch.equal(attnlib.mask_from_mod(mod, T, B=2, n_heads=1), torch_table)
    q, k, v = _qkv()
    out, _ = attnlib.attention(q, k, v, attn_mask=table)
    assert torch.allclose(_flex(q, k, v, mask_mod=mod), out, atol=1e-5)


def test_prefix_lm_and_documents_by_their_definition():
    p = attnlib.prefix_lm_mask(6, 2)
    assert p.tolist() == [[j < 2 or j <= i for j in range(6)] for i in range(6)]
    docs = torch.tensor([[0, 0, 1, 1, 1, 2]])
    d = attnlib.document_mask(docs)[0, 0]
    assert d.tolist() == [[bool(docs[0, i] == docs[0, j]) and j <= i for j in range(6)] for i in range(6)]


def test_alibi_as_score_mod_equals_the_float_mask():
    q, k, v = _qkv(1)
    slopes = attnlib.alibi_slopes(4)
    bias = attnlib.alibi_bias(4, 9) + attnlib.float_mask(attnlib.causal_mask(9))  # (H, T, T)
    out, _ = attnlib.attention(q, k, v, attn_mask=bias)
    mine = _flex(q, k, v, mask_mod=attnlib.causal_mod, score_mod=attnlib.alibi_mod(slopes))
    assert torch.allclose(mine, out, atol=1e-5)
    i, j = 7, 2  # a key 5 tokens back loses 5 slopes
    assert torch.allclose(attnlib.alibi_bias(4, 9)[:, i, j], -5 * slopes)


def test_alibi_slopes_are_the_papers():
    assert attnlib.alibi_slopes(8).tolist() == [2.0**-n for n in range(1, 9)]
    assert attnlib.alibi_slopes(4).tolist() == [2.0**-n for n in (2, 4, 6, 8)]
    # not a power of two: 8's slopes, then every other one of 16's (2^-0.5, 2^-1.5, ...)
    expected = [2.0**-n for n in range(1, 9)] + [2.0 ** -(n + 0.5) for n in range(4)]
    assert torch.allclose(attnlib.alibi_slopes(12), torch.tensor(expected))


def test_softcap_as_score_mod():
    q, k, v = _qkv(2)
    q = q * 6  # large scores, so that the cap changes them
    scores = attnlib.qk_scores(q, k)
    capped = 5.0 * torch.tanh(scores / 5.0)
    assert float(scores.abs().max()) > 5 and float(capped.abs().max()) < 5
    expected = attnlib.softmax(capped.masked_fill(~attnlib.causal_mask(9), float("-inf"))) @ v
    mine = _flex(q, k, v, mask_mod=attnlib.causal_mod, score_mod=attnlib.softcap_mod(5.0))
    assert torch.allclose(mine, expected, atol=1e-5)
