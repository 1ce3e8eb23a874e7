"""Chapter 15's options in attnlib: RoPE inside attention (through the cache), QK-norm, d_head,
RMSNorm, SwiGLU, leading batch axes; every configuration builds, counts and generates."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlib
from attnlib import AttnlibError, GPTConfig, MultiHeadAttention, apply_rope


def _mha(**kw):
    torch.manual_seed(0)
    return MultiHeadAttention(32, 4, **kw).eval()


def test_rope_layer_equals_its_formula():
    """Q, K projected, QK-normed, rotated by position, then scaled dot products: written out by hand."""
    mha = _mha(n_kv_heads=2, d_head=16, rope=True, rope_base=1e6, qk_norm=True, norm_eps=1e-6)
    with torch.no_grad():
        mha.q_norm.weight.uniform_(0.5, 1.5)
        mha.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 7, 32)
    q = (x @ mha.w_q.weight.T + mha.w_q.bias).unflatten(-1, (4, 16)).transpose(1, 2)  # (B, 4, T, 16)
    k = (x @ mha.w_k.weight.T + mha.w_k.bias).unflatten(-1, (2, 16)).transpose(1, 2)  # (B, 2, T, 16)
    v = (x @ mha.w_v.weight.T + mha.w_v.bias).unflatten(-1, (2, 16)).transpose(1, 2)
    rms = lambda t, g: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * g
    q, k = apply_rope(rms(q, mha.q_norm.weight), base=1e6), apply_rope(rms(k, mha.k_norm.weight), base=1e6)
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # head h uses key/value head h // 2
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, 4, T, 16)
    want = y.transpose(1, 2).flatten(-2) @ mha.w_o.weight.T + mha.w_o.bias  # (B, T, 64) @ (64, 32)
    with torch.no_grad():
        out, w = mha(x, is_causal=True)
        fast, _ = mha(x, is_causal=True, need_weights=False)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast, want, rtol=1e-5, atol=1e-5)
    assert w.shape == (2, 4, 7, 7)
    assert tuple(mha.w_q.weight.shape) == (64, 32) and tuple(mha.w_o.weight.shape) == (32, 64)


@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 1, 3], [5, 4], [2, 2, 2, 2, 1]])
def test_rope_through_the_cache_equals_rope_over_the_whole_sequence(chunks):
    """A cached token keeps its rotation; new tokens get positions T_cached + i."""
    mha = _mha(n_kv_heads=2, rope=True, qk_norm=True)
    x = torch.randn(2, sum(chunks), 32)
    with torch.no_grad():
        full, _ = mha(x, is_causal=True)
        cache, outs, start = attnlib.KVCache(), [], 0
        for n in chunks:
            outs.append(mha(x[:, start : start + n], is_causal=True, kv_cache=cache, need_weights=n % 2 == 0)[0])
            start += n
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-5, atol=1e-5)
    # the cache holds rotated keys: the key of token 0 is its projection rotated by angle 0, token 1's is not
    k0 = mha.k_norm(mha.w_k(x[:, :2]).unflatten(-1, (2, 8)).transpose(1, 2))
    torch.testing.assert_close(cache.k[:, :, :1], k0[:, :, :1])
    assert not torch.allclose(cache.k[:, :, 1:2], k0[:, :, 1:2])


def test_rope_positions_per_sequence_and_relative():
    mha = _mha(rope=True)
    x = torch.randn(2, 5, 32)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])  # (B, T): the second sequence shifted by 7
    with torch.no_grad():
        out, w = mha(x, is_causal=True, positions=pos)
        first, _ = mha(x[:1], is_causal=True)
        second, w2 = mha(x[1:], is_causal=True, positions=torch.arange(7, 12))
    torch.testing.assert_close(out, torch.cat([first, second]), rtol=1e-5, atol=1e-5)
    # RoPE's scores depend on m - n only: a shift of every position changes nothing
    torch.testing.assert_close(w2, mha(x[1:], is_causal=True)[1], rtol=1e-4, atol=1e-5)


def test_leading_batch_axes_as_nn_linear():
    mha = _mha(n_kv_heads=2, rope=True)
    x, ctx = torch.randn(3, 2, 5, 32), torch.randn(3, 2, 6, 32)
    mask = torch.rand(3, 2, 1, 5, 5) > 0.3  # (..., n_heads=1 broadcast, T, T_k)
    mask |= torch.eye(5, dtype=torch.bool)
    with torch.no_grad():
        out, w = mha(x, attn_mask=mask)
        flat, w_flat = mha(x.reshape(6, 5, 32), attn_mask=mask.reshape(6, 1, 5, 5))
        alone, w_alone = mha(x[1, 0], attn_mask=mask[1, 0, 0])  # (T, d_model): no batch axis at all
    assert out.shape == (3, 2, 5, 32) and w.shape == (3, 2, 4, 5, 5)
    torch.testing.assert_close(out.reshape(6, 5, 32), flat)
    torch.testing.assert_close(w.reshape(6, 4, 5, 5), w_flat)
    assert alone.shape == (5, 32) and w_alone.shape == (4, 5, 5)
    torch.testing.assert_close(alone, out[1, 0], rtol=1e-5, atol=1e-6)
    cross = _mha()  # cross-attention with leading axes (no RoPE)
    with torch.no_grad():
        y, _ = cross(x, ctx)
        y_flat, _ = cross(x.reshape(6, 5, 32), ctx.reshape(6, 6, 32))
    torch.testing.assert_close(y.reshape(6, 5, 32), y_flat)


def test_option_errors():
    with pytest.raises(AttnlibError, match="d_head: expected an even number with rope=True"):
        MultiHeadAttention(30, 2, d_head=15, rope=True)
    with pytest.raises(AttnlibError, match="d_model: expected .*divisible|d_head = d_model / n_heads"):
        MultiHeadAttention(30, 4)  # no d_head: n_heads must divide d_model
    assert MultiHeadAttention(30, 4, d_head=8).w_q.weight.shape == (32, 30)  # d_head of its own: fine
    with pytest.raises(AttnlibError, match="qk_norm: expected"):
        MultiHeadAttention(32, 4, qk_norm="yes")
    rope = _mha(rope=True)
    with pytest.raises(AttnlibError, match=r"context: expected None with rope=True"):
        rope(torch.randn(1, 3, 32), torch.randn(1, 4, 32))
    with pytest.raises(AttnlibError, match=r"positions: expected None unless the layer has rope=True"):
        _mha()(torch.randn(1, 3, 32), positions=torch.arange(3))
    with pytest.raises(AttnlibError, match=r"positions: expected a tensor of shape \(3,\)"):
        rope(torch.randn(1, 3, 32), positions=torch.arange(4))
    with pytest.raises(AttnlibError, match="positions: expected one of 'learned', 'rope', 'none'"):
        GPTConfig(10, 8, 16, 1, 2, positions="alibi")
    with pytest.raises(AttnlibError, match="norm: expected one of 'layernorm', 'rmsnorm'"):
        GPTConfig(10, 8, 16, 1, 2, norm="batchnorm")
    with pytest.raises(AttnlibError, match="mlp: expected one of 'gelu', 'swiglu'"):
        GPTConfig(10, 8, 16, 1, 2, mlp="relu")
    with pytest.raises(AttnlibError, match="norm_eps: expected a positive number"):
        GPTConfig(10, 8, 16, 1, 2, norm_eps=0.0)
    with pytest.raises(AttnlibError, match="d_head: expected an even head width"):
        GPTConfig(10, 8, 16, 1, 2, positions="rope", d_head=5)


def test_rmsnorm_block_and_swiglu():
    cfg = GPTConfig(50, 16, 32, 1, 4, norm="rmsnorm", mlp="swiglu", d_ff=48, bias=False, norm_eps=1e-6)
    block = attnlib.TransformerBlock(cfg)
    assert isinstance(block.ln1, nn.RMSNorm) and block.ln1.eps == 1e-6
    mlp = block.mlp
    x = torch.randn(2, 3, 32)
    want = (F.silu(x @ mlp.gate.weight.T) * (x @ mlp.up.weight.T)) @ mlp.down.weight.T
    torch.testing.assert_close(mlp(x), want)
    assert attnlib.count_params(mlp) == attnlib.mlp_params(32, 48, bias=False, gated=True) == 3 * 32 * 48


def test_the_config_printed_as_before_for_earlier_models():
    assert repr(attnlib.GPT2_SMALL) == (
        "GPTConfig(vocab_size=50257, context_length=1024, d_model=768, n_layers=12, n_heads=12, d_ff=3072, "
        "bias=True, tie_embeddings=True)"
    )
    assert "qk_norm=True" in repr(attnlib.QWEN3_8B) and "rope_base=500000.0" in repr(attnlib.LLAMA3_8B)


CONFIGS = [
    dict(positions=p, norm=n, mlp=m, qk_norm=q, d_head=d, n_kv_heads=kv, bias=b, tie_embeddings=t)
    for (p, n, m, q, d, kv, b, t) in itertools.product(
        ["learned", "rope", "none"],
        ["layernorm", "rmsnorm"],
        ["gelu", "swiglu"],
        [False, True],
        [None, 6],
        [None, 1],
        [True, False],
        [True, False],
    )
][::7]  # a spread of the 384 combinations: 55 of them, every value of every option


@pytest.mark.parametrize("options", CONFIGS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_every_configuration_counts_and_generates_with_and_without_the_cache(options):
    cfg = GPTConfig(vocab_size=61, context_length=24, d_model=16, n_layers=2, n_heads=2, **options)
    torch.manual_seed(0)
    model = attnlib.GPT(cfg)
    with torch.no_grad():
        for p in model.parameters():  # large weights: greedy tokens that vary
            p.normal_(0, 1.5 / p.shape[-1] ** 0.5 if p.dim() > 1 else 0.5).add_(1.0 if p.dim() == 1 else 0)
    assert attnlib.count_params(model) == attnlib.gpt_params(cfg) == sum(attnlib.param_breakdown(cfg).values())
    assert (model.pos_emb is None) == (cfg.positions != "learned")
    prompt = torch.randint(0, 61, (2, 4), generator=torch.Generator().manual_seed(0))
    cached = model.generate(prompt, 14)
    assert torch.equal(cached, model.generate(prompt, 14, use_cache=False))
    cache = [attnlib.KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(cached[:, :10], kv_cache=cache)
        assert attnlib.kv_cache_bytes(cfg, T=10, B=2) == sum(c.nbytes for c in cache)


def test_no_positions_the_last_token_is_blind_to_the_order_of_what_it_sees():
    """positions="none", one layer: attention sums over the keys it sees, in any order. The last
    token of [1, 2, 3] and of [2, 1, 3] gets the same output; the first tokens, whose causal
    prefixes differ, do not (and from the second layer on, neither does the last)."""
    cfg = GPTConfig(vocab_size=20, context_length=8, d_model=16, n_layers=1, n_heads=2, positions="none")
    torch.manual_seed(0)
    model = attnlib.GPT(cfg).eval()
    a, b = torch.tensor([[1, 2, 3]]), torch.tensor([[2, 1, 3]])
    with torch.no_grad():
        la, lb = model(a)[0], model(b)[0]
    torch.testing.assert_close(la[-1], lb[-1], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(la[0], lb[0], atol=1e-3)
    learned = attnlib.GPT(GPTConfig(20, 8, 16, 1, 2)).eval()  # with positions, the order shows
    with torch.no_grad():
        assert not torch.allclose(learned(a)[0, -1], learned(b)[0, -1], atol=1e-4)
