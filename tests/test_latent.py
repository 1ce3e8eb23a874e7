"""Chapter 17: multi-head latent attention against transformers' DeepseekV3Attention (small random
configs, nothing downloaded), its absorbed form against the naive one, its cache against the closed form."""

from __future__ import annotations

import math

import pytest
import torch

import attnlib
from attnlib import GPT, AttnlibError, GPTConfig, KVCache, MultiHeadLatentAttention
from attnlib.generation import new_caches
from attnlib.latent import LatentCache

transformers = pytest.importorskip("transformers")
from _transformers import rope  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds  # noqa: E402

D, H, RANK, ROPE, NOPE, V = 32, 4, 16, 8, 12, 10


def _hf_layer(q_rank, **overrides):
    sizes = dict(
        vocab_size=50, hidden_size=D, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=H, num_key_value_heads=H, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, kv_lora_rank=RANK, q_lora_rank=q_rank, qk_rope_head_dim=ROPE, qk_nope_head_dim=NOPE,
        v_head_dim=V, **rope(), first_k_dense_replace=1,
    )  # fmt: skip
    config = transformers.DeepseekV3Config(**{**sizes, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    layer = ds.DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for p in layer.parameters():  # matrices N(0, 0.3), the RMSNorms' gains around 1
            p.normal_(0, 0.3) if p.dim() > 1 else p.normal_(1, 0.1)
    return layer, config


def _hf_run(layer, config, x, start=0, cache=None):
    """transformers' layer on x, whose tokens are start .. start + T - 1, causal (after a cache's tokens)."""
    B, T, _ = x.shape
    positions = torch.arange(start, start + T)[None].expand(B, T)
    cos_sin = ds.DeepseekV3RotaryEmbedding(config)(x, positions)
    allowed = attnlib.causal_mask(T, start + T, align="bottom_right")
    return layer(x, cos_sin, attnlib.float_mask(allowed)[None, None], cache)  # cache: 4.x past_key_values


@pytest.mark.parametrize("q_rank", [None, 24], ids=["uncompressed-q", "compressed-q"])
@pytest.mark.parametrize("absorb", [False, True], ids=["naive", "absorbed"])
def test_from_hf_equals_deepseek_v3_attention(q_rank, absorb):
    layer, config = _hf_layer(q_rank)
    mine = attnlib.from_hf(layer)
    assert isinstance(mine, MultiHeadLatentAttention) and (mine.kv_rank, mine.q_rank) == (RANK, q_rank)
    assert attnlib.count_params(mine) == sum(p.numel() for p in layer.parameters())
    mine.absorb = absorb
    x = torch.randn(2, 9, D)
    expected, hf_weights = _hf_run(layer, config, x)
    out, weights = mine(x, is_causal=True)
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.allclose(weights, hf_weights, atol=1e-6)
    if not absorb:
        assert torch.allclose(mine(x, is_causal=True, need_weights=False)[0], expected, atol=1e-5)


@pytest.mark.parametrize("absorb", [False, True], ids=["naive", "absorbed"])
def test_deepseek_v3s_yarn_equals_transformers(absorb):
    """Chapter 19: DeepSeek-V3 ships YaRN (factor 40, mscale = mscale_all_dim = 1): the rotated part's
    frequencies rescaled by band, and the scores' scale times mscale(40, 1)^2 = 1.3689^2. Equal to
    transformers' layer with the same weights, and not to the same layer with default RoPE."""
    yarn = dict(factor=40.0, original_max_position_embeddings=4, mscale=1.0, mscale_all_dim=1.0)
    layer, config = _hf_layer(24, **rope(10000.0, "yarn", **yarn))
    mine = attnlib.from_hf(layer)
    mine.absorb = absorb
    assert mine.scale == pytest.approx((NOPE + ROPE) ** -0.5 * (0.1 * math.log(40.0) + 1) ** 2)
    x = torch.randn(2, 9, D)
    expected, hf_weights = _hf_run(layer, config, x)
    out, weights = mine(x, is_causal=True)
    assert torch.allclose(out, expected, atol=1e-5) and torch.allclose(weights, hf_weights, atol=1e-6)
    default, _ = _hf_run(*_hf_layer(24), x)  # the same weights (seeded), default RoPE
    assert not torch.allclose(out, default, atol=1e-3)


@pytest.mark.parametrize("absorb", [False, True], ids=["naive", "absorbed"])
def test_through_the_cache_equals_transformers_cache(absorb):
    """Chunks of 3, 1, 1 and 4 tokens: attnlib's LatentCache (the latent and the rotated key) and
    transformers' DynamicCache give the same outputs as each other and as the whole sequence, and
    hold the same numbers."""
    layer, config = _hf_layer(24)
    mine = attnlib.from_hf(layer)
    mine.absorb = absorb
    x = torch.randn(2, 9, D)
    whole, _ = _hf_run(layer, config, x)
    hf_cache, cache, start = transformers.DynamicCache(config=config), LatentCache(), 0
    for n in (3, 1, 1, 4):
        expected, _ = _hf_run(layer, config, x[:, start : start + n], start, hf_cache)
        out, _ = mine(x[:, start : start + n], is_causal=True, kv_cache=cache)
        assert torch.allclose(out, expected, atol=1e-5) and torch.allclose(out, whole[:, start : start + n], atol=1e-5)
        start += n
        assert tuple(cache.c.shape) == (2, 1, start, RANK) and tuple(cache.k_rope.shape) == (2, 1, start, ROPE)
    assert len(cache) == cache.seen == 9
    assert cache.nbytes == 2 * 9 * (RANK + ROPE) * 4  # B * T * (kv_rank + d_head_rope) float32 numbers
    # the same numbers as transformers' cache. DeepSeek's rotated pairs are (2i, 2i + 1), as attnlib's;
    # transformers stores the rotated key with the pairs' first halves first: [even dims, odd dims]
    theirs_k, theirs_v = hf_cache.layers[0].keys, hf_cache.layers[0].values
    halves = torch.cat([torch.arange(0, ROPE, 2), torch.arange(1, ROPE, 2)])
    if theirs_k.shape[-1] == RANK:  # transformers 5: the latent and the rotated key, (B, 1, T, ...)
        torch.testing.assert_close(cache.c, theirs_k)
        torch.testing.assert_close(cache.k_rope[..., halves], theirs_v)
    else:  # transformers 4: every head's key [k_nope, k_rope] and value, expanded from the latent
        k_nope = attnlib.split_heads(mine.w_uk(cache.c[:, 0]), H)  # (B, H, T, NOPE)
        torch.testing.assert_close(k_nope, theirs_k[..., :NOPE])
        torch.testing.assert_close(cache.k_rope[..., halves].expand(-1, H, -1, -1), theirs_k[..., NOPE:])
        torch.testing.assert_close(attnlib.split_heads(mine.w_uv(cache.c[:, 0]), H), theirs_v)


def test_latent_cache_holds_the_recomputed_latents_and_rotated_keys():
    """A LatentCache after a prompt and one step holds c = RMSNorm(x W_DKV) and RoPE(x W_KR) of every
    token, recomputed here from the layer's weights (torch's functions, no attnlib layer); allocated
    ahead (max_tokens) it holds the same, and nbytes counts B T (kv_rank + d_head_rope) numbers."""
    torch.manual_seed(4)
    mla = MultiHeadLatentAttention(32, 4, kv_rank=8, d_head_rope=4).eval()
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        h = x @ mla.w_dkv.weight.T  # (B, T, kv_rank)
        c = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + mla.kv_norm.eps) * mla.kv_norm.weight
        k = x @ mla.w_kr.weight.T  # (B, T, 4): rotate the pairs (2i, 2i + 1) by position t * base^(-2i/4)
        angle = torch.arange(7)[:, None] * 10000.0 ** (-torch.arange(0, 4, 2) / 4)  # (T, 2)
        cos, sin = angle.cos(), angle.sin()
        k_rope = torch.stack([k[..., 0::2] * cos - k[..., 1::2] * sin, k[..., 1::2] * cos + k[..., 0::2] * sin], -1)
        k_rope = k_rope.flatten(-2)  # (B, T, 2, 2) -> (B, T, 4): pairs back in place
        for cache in (LatentCache(), LatentCache(max_tokens=10)):
            mla(x[:, :6], is_causal=True, kv_cache=cache)
            mla(x[:, 6:], is_causal=True, kv_cache=cache)
            torch.testing.assert_close(cache.c, c[:, None])  # (B, 1, T, kv_rank)
            torch.testing.assert_close(cache.k_rope, k_rope[:, None])  # (B, 1, T, d_head_rope)
            assert len(cache) == 7 and cache.nbytes == 2 * 7 * (8 + 4) * 4
    assert repr(cache) == "LatentCache(T_cached=7, c of shape (2, 1, 7, 8), k_rope of shape (2, 1, 7, 4))"


def test_latent_cache_bad_input():
    cache = LatentCache(max_tokens=4)
    with pytest.raises(AttnlibError, match=r"c_new: expected .*\(B, 1, T_new, kv_rank\)"):
        cache.update(torch.zeros(2, 4, 3, 8), torch.zeros(2, 1, 3, 4))  # one latent per head: not MLA's
    with pytest.raises(AttnlibError, match=r"k_rope_new: expected the B and T_new of c_new, \(2, 1, 3\)"):
        cache.update(torch.zeros(2, 1, 3, 8), torch.zeros(2, 1, 2, 4))
    cache.update(torch.zeros(2, 1, 3, 8), torch.zeros(2, 1, 3, 4))
    with pytest.raises(AttnlibError, match="c_new: expected B = 2, width 8"):
        cache.update(torch.zeros(2, 1, 1, 6), torch.zeros(2, 1, 1, 4))
    with pytest.raises(AttnlibError, match=r"at most 1 new tokens .*max_tokens=4.*T_new = 2"):
        cache.update(torch.zeros(2, 1, 2, 8), torch.zeros(2, 1, 2, 4))
    with pytest.raises(AttnlibError, match="max_tokens: expected a positive int"):
        LatentCache(max_tokens=0)


def test_absorbed_equals_naive_and_expands_no_key():
    torch.manual_seed(1)
    naive = MultiHeadLatentAttention(48, 6, kv_rank=12, q_rank=20, d_head_nope=8, d_head_rope=6, d_head_v=5)
    absorbed = MultiHeadLatentAttention(48, 6, kv_rank=12, q_rank=20, d_head_nope=8, d_head_rope=6, d_head_v=5,
                                        absorb=True)  # fmt: skip
    absorbed.load_state_dict(naive.state_dict())
    x = torch.randn(3, 7, 48)
    out, weights = naive(x, is_causal=True)
    out_a, weights_a = absorbed(x, is_causal=True)
    assert torch.allclose(out, out_a, atol=1e-5) and torch.allclose(weights, weights_a, atol=1e-6)
    calls = []
    hooks = [m.register_forward_hook(lambda *a, name=name: calls.append(name)) for name, m in absorbed.named_modules()]
    absorbed(x, is_causal=True)
    for hook in hooks:
        hook.remove()
    assert "w_uk" not in calls and "w_uv" not in calls  # their weights are used, the layers never run
    # the absorbed score of head h is q_nope,h W_UK,h^T . c: the same number as q_nope,h . (c W_UK,h)
    c, q_nope = torch.randn(5, 12), torch.randn(8)
    W_uk = naive.w_uk.weight.view(6, 8, 12)[2]  # head 2: (d_head_nope, kv_rank)
    assert torch.allclose((q_nope @ W_uk) @ c.T, q_nope @ (c @ W_uk.T).T, atol=1e-5)


def test_the_compressed_querys_norm_is_q_latent_norm():
    """With q_rank, the compressed query passes through an RMSNorm over q_rank named q_latent_norm (DeepSeek's
    q_a_layernorm), not q_norm (QK-norm's name in MultiHeadAttention); its gains act on the outputs."""
    torch.manual_seed(2)
    mla = MultiHeadLatentAttention(32, 4, kv_rank=8, q_rank=12, d_head_rope=4).eval()
    assert not hasattr(mla, "q_norm") and tuple(mla.q_latent_norm.weight.shape) == (12,)
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        out, _ = mla(x, is_causal=True)
        c_q = mla.w_dq(x)  # (B, T, q_rank)
        q = mla.w_uq(c_q / c_q.pow(2).mean(-1, keepdim=True).add(mla.q_latent_norm.eps).sqrt())  # gains 1
        assert torch.allclose(mla.w_uq(mla.q_latent_norm(c_q)), q, atol=1e-6)
        mla.q_latent_norm.weight.mul_(3.0)
        assert not torch.allclose(mla(x, is_causal=True)[0], out, atol=1e-3)


@pytest.mark.parametrize("q_rank", [None, 12])
def test_mla_model_generates_the_same_with_and_without_cache(q_rank):
    config = GPTConfig(
        vocab_size=31, context_length=40, d_model=32, n_layers=2, n_heads=4, bias=False, positions="rope",
        norm="rmsnorm", mlp="swiglu", attention="mla", kv_rank=8, q_rank=q_rank, d_head_rope=4,
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0, 1.0 if "emb" in name else 2 / p.shape[-1] ** 0.5)
    assert attnlib.count_params(model) == attnlib.gpt_params(config)
    ids = torch.randint(0, 31, (2, 5), generator=torch.Generator().manual_seed(3))
    out = model.generate(ids, 25)
    assert torch.equal(out, model.generate(ids, 25, use_cache=False))
    assert len(set(out[:, 5:].flatten().tolist())) > 3
    caches = new_caches(model, 30)
    assert all(type(c) is LatentCache for c in caches)  # one per MLA block
    model(out[:, :30], kv_cache=caches)
    measured = sum(c.nbytes for c in caches)
    assert measured == attnlib.kv_cache_bytes(config, T=30, B=2) == 2 * 30 * 2 * (8 + 4) * 4  # layers B T (r+rope) 4


def test_cache_bytes_at_published_sizes_follow_table_1():
    """DeepSeek-V2's Table 1: MLA caches (kv_rank + d_head_rope) * n_layers elements per token, MHA
    2 n_heads d_head n_layers; checked on layers built small (the same formula) and at V3's sizes."""
    v3 = dict(vocab_size=129280, context_length=4096, d_model=7168, n_layers=61, n_heads=128, positions="rope",
              norm="rmsnorm", mlp="swiglu", bias=False)  # fmt: skip
    mla = GPTConfig(**v3, attention="mla", kv_rank=512, q_rank=1536, d_head_rope=64, d_head_v=128, d_head_nope=128)
    mha = GPTConfig(**v3, d_head=128)
    per_token = attnlib.kv_cache_bytes(mla, T=1, dtype=torch.bfloat16)
    assert per_token == (512 + 64) * 61 * 2
    assert attnlib.kv_cache_bytes(mha, T=1, dtype=torch.bfloat16) == 2 * 128 * 128 * 61 * 2
    with torch.device("meta"):
        layer = attnlib.model.make_attention(mla)
    assert attnlib.count_params(layer) == attnlib.mla_params(7168, 128, 512, 1536, 128, 64, 128)


@pytest.mark.parametrize(
    "overrides, match",
    [({"rope_interleave": False}, "rope_interleave"), ({"num_key_value_heads": 2}, "num_key_value_heads")],
)
def test_from_hf_names_what_it_does_not_build(overrides, match):
    layer, _ = _hf_layer(None, **overrides)
    with pytest.raises(AttnlibError, match=match):
        attnlib.from_hf(layer)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"attention": "mla"}, "kv_rank"),
        ({"attention": "mla", "kv_rank": 8, "positions": "learned"}, "rope"),
        ({"attention": "mla", "kv_rank": 8, "n_kv_heads": 2}, "n_kv_heads"),
        ({"kv_rank": 8}, "mla"),
        ({"attention": "gqa"}, "attention"),
        ({"attention": "mla", "kv_rank": 8, "d_head_rope": 3}, "d_head_rope"),
        (
            {"attention": "mla", "kv_rank": 8, "d_head": 16},
            r"d_head: expected None with attention='mla'.*d_head_nope=16",
        ),
        ({"d_head_nope": 16}, "'mla' when an MLA size"),
    ],
)
def test_mla_config_is_checked(kwargs, match):
    base = dict(vocab_size=31, context_length=16, d_model=32, n_layers=1, n_heads=4, positions="rope")
    with pytest.raises(AttnlibError, match=match):
        GPTConfig(**{**base, **kwargs})


def test_mla_takes_a_latent_cache_not_a_kv_cache():
    """MLA caches a latent and a rotated key: a KVCache (rolling or not) is refused with what was expected
    and what was received, in the layer and in a GPT; LatentCache has no window to roll."""
    layer = MultiHeadLatentAttention(16, 2, kv_rank=4)
    for cache in (KVCache(), KVCache(window=2)):
        with pytest.raises(
            AttnlibError, match=r"kv_cache: expected None or an attnlib LatentCache .*received KVCache\("
        ):
            layer(torch.randn(1, 3, 16), is_causal=True, kv_cache=cache)
    with pytest.raises(AttnlibError, match="received tensor of shape"):
        layer(torch.randn(1, 3, 16), is_causal=True, kv_cache=torch.zeros(1))
    with pytest.raises(TypeError, match="window"):
        LatentCache(window=2)
    config = GPTConfig(31, 16, 32, 2, 4, positions="rope", attention="mla", kv_rank=8)
    with pytest.raises(AttnlibError, match="expected None or an attnlib LatentCache"):
        GPT(config)(torch.zeros(1, 3, dtype=torch.long), kv_cache=[KVCache(), KVCache()])
    with pytest.raises(AttnlibError, match="ids: expected B = 2 sequences"):  # the batch read from the latents
        caches = [LatentCache(), LatentCache()]
        GPT(config)(torch.zeros(2, 3, dtype=torch.long), kv_cache=caches)
        GPT(config)(torch.zeros(1, 1, dtype=torch.long), kv_cache=caches)


def test_mla_config_d_head_nope_is_its_own_field():
    """d_head_nope sets the unrotated key width (and, by default, d_head_rope = d_head_nope / 2 and
    d_head_v = d_head_nope), with d_model / n_heads as its default; d_head is multi-head attention's."""
    base = dict(vocab_size=31, context_length=16, d_model=32, n_layers=1, n_heads=4, positions="rope")
    layer = attnlib.model.make_attention(GPTConfig(**base, attention="mla", kv_rank=8, d_head_nope=12))
    assert (layer.d_head_nope, layer.d_head_rope, layer.d_head_v) == (12, 6, 12)
    layer = attnlib.model.make_attention(GPTConfig(**base, attention="mla", kv_rank=8))
    assert (layer.d_head_nope, layer.d_head_rope, layer.d_head_v) == (8, 4, 8)
    assert "d_head_nope=12" in repr(GPTConfig(**base, attention="mla", kv_rank=8, d_head_nope=12))


def test_an_mla_config_takes_rope_scaling_to_every_layer():
    """GPTConfig(attention="mla", rope_scaling=...) builds every layer with that scaling and its score scale;
    the other chapter 19 options, which MLA does not use, are refused."""
    from attnlib.latent import yarn_score_scale
    from attnlib.rope_scaling import RopeScaling

    yarn = RopeScaling("yarn", factor=40.0, original_max_position_embeddings=8, mscale=1.0, mscale_all_dim=1.0)
    base = dict(vocab_size=31, context_length=16, d_model=32, n_layers=2, n_heads=4, positions="rope")
    model = attnlib.GPT(GPTConfig(**base, attention="mla", kv_rank=8, rope_scaling=yarn))
    for block in model.blocks:
        assert block.attn.pos_enc.scaling is yarn
        assert block.attn.scale == yarn_score_scale(8 + 4, yarn) != 1 / math.sqrt(8 + 4)
    assert model(torch.tensor([[1, 2, 3]])).shape == (1, 3, 31)
    with pytest.raises(AttnlibError, match="'mla' without chapter 19's"):
        GPTConfig(**base, attention="mla", kv_rank=8, attn_scale=0.1)
