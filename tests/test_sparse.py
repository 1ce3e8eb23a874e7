"""Chapter 20: DeepSeek Sparse Attention against transformers' DeepseekV32Indexer and DeepseekV32Attention
(small random configs, nothing downloaded), and the top-k mask's properties."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlib import AttnlibError, attention
from attnlib.masks import causal_mask
from attnlib.multihead import merge_heads, split_heads
from attnlib.sparse import LightningIndexer, indexer_scores, sparse_attention, topk_mask

transformers = pytest.importorskip("transformers")
try:  # transformers 4.57 (Colab's line) has no DeepSeek-V3.2: the comparisons need 5.x
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as ds
except ImportError:
    ds = None
needs_v32 = pytest.mark.skipif(ds is None, reason=f"transformers {transformers.__version__} has no deepseek_v32")

D, H, Q_RANK, KV_RANK, ROPE, NOPE, V = 32, 4, 16, 16, 8, 12, 10
H_I, D_I, TOP_K, T = 16, 16, 4, 11  # 16 indexer heads: a score of exactly 0 (every head's ReLU off) is rare
TOL = dict(atol=1e-5, rtol=1e-5)  # float32; the two compute the same sums in another order


def _hf_layer(seed=0):
    """A DeepseekV32Attention with its indexer, random weights (matrices N(0, 0.3), norms around 1)."""
    config = transformers.DeepseekV32Config(
        vocab_size=50, hidden_size=D, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=H, num_key_value_heads=H, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, kv_lora_rank=KV_RANK, q_lora_rank=Q_RANK, qk_rope_head_dim=ROPE, qk_nope_head_dim=NOPE,
        v_head_dim=V, index_topk=TOP_K, index_head_dim=D_I, index_n_heads=H_I,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    layer = ds.DeepseekV32Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.3) if p.dim() > 1 else p.normal_(1, 0.1)
    return layer, config


def _hf_inputs(layer, config, x, start=0):
    """transformers' position embeddings and query latent for tokens ``start .. start + T - 1``."""
    positions = torch.arange(start, start + x.shape[1])[None]  # (1, T)
    cos_sin = ds.DeepseekV32RotaryEmbedding(config)(x, positions)
    return positions, cos_sin, layer.q_a_layernorm(layer.q_a_proj(x))


def _hf_scores(indexer, monkeypatch, *args, **kwargs):
    """Run transformers' indexer; return its top-k indices and the (masked) scores it picked them from."""
    seen, topk = [], torch.Tensor.topk

    def spy(self, *a, **kw):  # the indexer ends with index_scores.topk(...): record index_scores
        seen.append(self.clone())
        return topk(self, *a, **kw)

    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "topk", spy)
        indices = indexer(*args, **kwargs)
    return indices.long(), seen[-1]


def _assert_no_boundary_ties(scores, k, allowed):
    """The test's premise: where a row has more than k allowed keys, key k and key k + 1 differ in score."""
    s = scores.masked_fill(~allowed, float("-inf")).sort(dim=-1, descending=True).values  # (B, T_q, T_k)
    rows = allowed.sum(-1).expand(s.shape[:-1]) > k  # (B, T_q)
    assert ((s[..., k - 1] - s[..., k])[rows] > 1e-5).all(), "tied scores at the boundary: change the seed"


@needs_v32
@torch.no_grad()
def test_indexer_scores_and_selection_equal_transformers(monkeypatch):
    layer, config = _hf_layer()
    x = torch.randn(2, T, D)
    positions, cos_sin, q_latent = _hf_inputs(layer, config, x)
    causal = causal_mask(T)  # (T, T)
    indices, hf_scores = _hf_scores(layer.indexer, monkeypatch, x, q_latent, cos_sin, causal.expand(2, T, T),
                                    positions)  # fmt: skip
    ours, keys = LightningIndexer.from_hf(layer.indexer)(x, q_latent)
    assert ours.shape == (2, T, T) and keys.shape == (2, T, D_I)
    torch.testing.assert_close(ours.masked_fill(~causal, float("-inf")), hf_scores, **TOL)
    _assert_no_boundary_ties(ours, TOP_K, causal)
    hf_mask = torch.zeros(2, T, T, dtype=torch.bool).scatter(-1, indices, True) & causal  # its sets, causal keys
    assert torch.equal(topk_mask(ours, TOP_K), hf_mask)


@needs_v32
@torch.no_grad()
def test_indexer_with_a_cache_equals_transformers(monkeypatch):
    layer, config = _hf_layer(seed=1)
    ours = LightningIndexer.from_hf(layer.indexer)
    cache = transformers.DynamicCache(config=config)
    x = torch.randn(1, T + 1, D)
    prompt, new = x[:, :T], x[:, T:]  # T tokens, then one generated token at position T
    positions, cos_sin, prompt_latent = _hf_inputs(layer, config, prompt)
    _hf_scores(layer.indexer, monkeypatch, prompt, prompt_latent, cos_sin, causal_mask(T)[None], positions, cache=cache)
    positions, cos_sin, q_latent = _hf_inputs(layer, config, new, start=T)
    indices, hf_scores = _hf_scores(layer.indexer, monkeypatch, new, q_latent, cos_sin,
                                    torch.ones(1, 1, T + 1, dtype=torch.bool), positions, cache=cache)  # fmt: skip
    _, past = ours(prompt, prompt_latent)  # the prompt's keys, as transformers' cache holds them
    scores, keys = ours(new, q_latent, past_keys=past)  # position T by default
    assert keys.shape == (1, T + 1, D_I)
    torch.testing.assert_close(scores, hf_scores, **TOL)
    _assert_no_boundary_ties(scores, TOP_K, torch.ones(1, T + 1, dtype=torch.bool))
    assert set(topk_mask(scores, TOP_K)[0, 0].nonzero().flatten().tolist()) == set(indices[0, 0].tolist())


def _sparse_mla(mla, indexer, x, top_k):
    """attnlib's DeepSeek-V3.2 layer, causal: MLA's queries, keys and values (its expanded form, chapter 17)
    attending to the keys the indexer chose."""
    B, T_, _ = x.shape
    pos = torch.arange(T_)
    q_latent = mla.q_latent_norm(mla.w_dq(x))  # (B, T, q_rank): shared by MLA's queries and the indexer
    q = split_heads(mla.w_uq(q_latent), mla.n_heads)  # (B, T, H * d_qk) -> (B, H, T, d_qk)
    q_nope, q_rope = q.split([mla.d_head_nope, mla.d_head_rope], dim=-1)
    c = mla.kv_norm(mla.w_dkv(x))  # (B, T, kv_rank)
    k_rope = mla.pos_enc(mla.w_kr(x)[:, None], pos).expand(B, mla.n_heads, T_, -1)  # (B, H, T, d_head_rope)
    k = torch.cat([split_heads(mla.w_uk(c), mla.n_heads), k_rope], dim=-1)  # (B, H, T, d_qk)
    q = torch.cat([q_nope, mla.pos_enc(q_rope, pos)], dim=-1)  # (B, H, T, d_qk)
    v = split_heads(mla.w_uv(c), mla.n_heads)  # (B, T, H * d_v) -> (B, H, T, d_v)
    scores, _ = indexer(x, q_latent)
    out, _ = sparse_attention(q, k, v, scores, top_k, scale=mla.scale)  # (B, H, T, d_v)
    return mla.w_o(merge_heads(out)), scores  # (B, H, T, d_v) -> (B, T, d_model)


@needs_v32
@torch.no_grad()
def test_sparse_mla_equals_transformers_attention_layer():
    from attnlib.hf import _mla_from_hf  # the MLA weights; its own indexer removed: the helper selects below

    layer, config = _hf_layer(seed=2)
    mla, indexer = _mla_from_hf(layer), LightningIndexer.from_hf(layer.indexer)
    mla.indexer = None  # chapter 17's layer alone, every causal key (from_hf's selection: the next test)
    x = torch.randn(2, T, D)
    positions, cos_sin, _ = _hf_inputs(layer, config, x)
    blocked = torch.zeros(T, T).masked_fill(~causal_mask(T), torch.finfo(x.dtype).min)  # eager: an additive mask
    expected, _ = layer(x, cos_sin, blocked.expand(2, 1, T, T), position_ids=positions)
    dense, _ = _sparse_mla(mla, indexer, x, top_k=T)  # every causal key: the helper is chapter 17's layer
    torch.testing.assert_close(dense, mla(x, is_causal=True)[0], **TOL)
    ours, scores = _sparse_mla(mla, indexer, x, top_k=TOP_K)
    _assert_no_boundary_ties(scores, TOP_K, causal_mask(T))
    torch.testing.assert_close(ours, expected, **TOL)
    assert (ours - dense)[:, TOP_K:].abs().max() > 1e-3  # past TOP_K tokens the sparse layer differs from MLA


@pytest.mark.parametrize("k", [1, 3, 9, 20])
def test_topk_mask_keeps_min_k_allowed_keys_and_the_best_ones(k):
    torch.manual_seed(k)
    scores = torch.randn(2, 9, 9)
    mask, causal = topk_mask(scores, k), causal_mask(9)
    assert mask.dtype == torch.bool and mask.shape == (2, 9, 9)
    assert torch.equal(mask.sum(-1), torch.arange(1, 10).clamp(max=k).expand(2, 9))  # min(k, t + 1) keys
    assert not (mask & ~causal).any()  # never a future key
    kept = scores.masked_fill(~mask, float("inf")).amin(-1)  # the worst kept key of each row
    dropped = scores.masked_fill(mask | ~causal, float("-inf")).amax(-1)  # the best allowed key left out
    assert (kept > dropped).all()
    if k >= 9:
        assert torch.equal(mask, causal.expand(2, 9, 9))  # k >= T: the causal mask itself


def test_topk_mask_after_a_cache_and_not_causal():
    scores = torch.randn(3, 8)  # 3 new queries after 5 cached keys
    mask = topk_mask(scores, 7)
    assert not (mask & ~causal_mask(3, 8, align="bottom_right")).any()
    assert mask.sum(-1).tolist() == [6, 7, 7]  # query 0 sees keys 0 .. 5 only
    assert topk_mask(scores, 2, is_causal=False).sum(-1).tolist() == [2, 2, 2]
    assert torch.equal(topk_mask(scores, 2, is_causal=False), scores >= scores.topk(2, -1).values[:, -1:])


def test_sparse_attention_equals_attention_and_sdpa_with_the_mask():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 10, 8), torch.randn(2, 3, 10, 8), torch.randn(2, 3, 10, 5)
    scores = torch.randn(2, 10, 10)  # the indexer's, shared by the 3 heads
    out, weights = sparse_attention(q, k, v, scores, 4, scale=0.3)
    mask = topk_mask(scores, 4)[:, None]  # (B, 1, T, T)
    ref, ref_weights = attention(q, k, v, mask, scale=0.3)
    assert torch.equal(out, ref) and torch.equal(weights, ref_weights)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3), **TOL)


@pytest.mark.parametrize("T_", [2, 8, 32, 128])
def test_keys_per_token_is_min_k_t(T_):
    """The cost per token: the last query attends to min(k, T) keys, whatever T past k."""
    torch.manual_seed(T_)
    q, k, v = torch.randn(1, 2, T_, 4), torch.randn(1, 2, T_, 4), torch.randn(1, 2, T_, 4)
    _, weights = sparse_attention(q, k, v, torch.randn(1, T_, T_), top_k=8)
    assert (weights[..., -1, :] > 0).sum(-1).tolist() == [[min(8, T_)] * 2]


def test_indexer_scores_formula():
    torch.manual_seed(0)
    q, k, w = torch.randn(2, 3, 4, 6), torch.randn(2, 5, 6), torch.randn(2, 3, 4)
    loop = torch.zeros(2, 3, 5)
    for b in range(2):
        for t in range(3):
            for s in range(5):
                loop[b, t, s] = sum(w[b, t, h] * torch.relu(q[b, t, h] @ k[b, s]) for h in range(4)) / 6**0.5
    torch.testing.assert_close(indexer_scores(q, k, w), loop, **TOL)


def test_bad_inputs_raise():
    scores = torch.randn(4, 4)
    with pytest.raises(AttnlibError, match="k: expected a positive int"):
        topk_mask(scores, 0)
    with pytest.raises(AttnlibError, match="scores: expected a floating-point tensor"):
        topk_mask(scores > 0, 2)
    with pytest.raises(AttnlibError, match="head_weights"):
        indexer_scores(torch.randn(1, 3, 4, 6), torch.randn(1, 5, 6), torch.randn(1, 3, 5))
    with pytest.raises(AttnlibError, match="DeepseekV32Indexer"):
        LightningIndexer.from_hf(torch.nn.Linear(2, 2))


@needs_v32
@torch.no_grad()
def test_from_hf_loads_deepseek_v32_attention_with_its_indexer():
    """from_hf(DeepseekV32Attention): MultiHeadLatentAttention with its LightningIndexer and index_topk, equal to
    transformers' layer (both of attnlib's forms), and the same through a LatentCache, which keeps the indexer's
    keys beside the latents."""
    from attnlib import LatentCache, from_hf

    layer, config = _hf_layer(seed=2)
    mla = from_hf(layer)
    assert isinstance(mla.indexer, LightningIndexer) and mla.index_topk == TOP_K
    x = torch.randn(2, T, D)
    positions, cos_sin, _ = _hf_inputs(layer, config, x)
    blocked = torch.zeros(T, T).masked_fill(~causal_mask(T), torch.finfo(x.dtype).min)  # eager: an additive mask
    expected, _ = layer(x, cos_sin, blocked.expand(2, 1, T, T), position_ids=positions)
    for absorb in (False, True):
        mla.absorb = absorb
        torch.testing.assert_close(mla(x, is_causal=True)[0], expected, **TOL)
    mla.absorb = False
    torch.testing.assert_close(mla(x, is_causal=True, need_weights=False)[0], expected, **TOL)
    cache, start, parts = LatentCache(), 0, []
    for n in (6, 1, 4):  # the prompt, one token, then four
        parts.append(mla(x[:, start : start + n], is_causal=True, kv_cache=cache)[0])
        start += n
    torch.testing.assert_close(torch.cat(parts, dim=1), expected, **TOL)
    assert tuple(cache.index_keys.shape) == (2, T, D_I)
