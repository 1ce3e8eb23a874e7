"""Chapter 20: gated attention (Qiu et al. 2025), the output gate of Qwen3-Next's attention layers.

``MultiHeadAttention(output_gate=True)`` multiplies each head's output by ``sigmoid(x W_G)`` before ``W_O``.
Tested against the formula written out, and against transformers' ``Qwen3NextAttention`` given the same
weights (its q_proj stacks each head's query and gate rows; its norms store ``g - 1``; partial rotary 1/4).
"""

import pytest
import torch

import attnlib
from attnlib import GPT, GPTConfig, MultiHeadAttention
from attnlib.hf import rotate_half_to_interleaved

D, H, KV, DH = 32, 4, 2, 16


def test_the_gate_is_the_formula():
    torch.manual_seed(0)
    layer = MultiHeadAttention(D, H, KV, bias=False, d_head=DH, output_gate=True).double().eval()
    x = torch.randn(2, 7, D, dtype=torch.float64)
    out, weights = layer(x, is_causal=True)
    q = (x @ layer.w_q.weight.T).view(2, 7, H, DH).transpose(1, 2)  # (B, H, T, d_head)
    k = (x @ layer.w_k.weight.T).view(2, 7, KV, DH).transpose(1, 2).repeat_interleave(H // KV, dim=1)
    v = (x @ layer.w_v.weight.T).view(2, 7, KV, DH).transpose(1, 2).repeat_interleave(H // KV, dim=1)
    scores = (q @ k.mT / DH**0.5).masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v  # (B, H, T, d_head)
    gate = torch.sigmoid((x @ layer.w_g.weight.T).view(2, 7, H, DH).transpose(1, 2))
    expected = ((y * gate).transpose(1, 2).reshape(2, 7, H * DH)) @ layer.w_o.weight.T
    assert torch.allclose(out, expected, atol=1e-12)
    assert torch.allclose(layer(x, is_causal=True, need_weights=False)[0], expected, atol=1e-12)
    assert not torch.allclose(MultiHeadAttention(D, H, KV, bias=False, d_head=DH).double()(x)[0], out)


def test_the_gate_is_counted_and_skipped_when_absent():
    c = GPTConfig(100, 16, D, 2, H, n_kv_heads=KV, d_head=DH, positions="rope", bias=False, output_gate=True)
    assert attnlib.gpt_params(c) == attnlib.count_params(GPT(c))
    plain = GPTConfig(100, 16, D, 2, H, n_kv_heads=KV, d_head=DH, positions="rope", bias=False)
    assert attnlib.gpt_params(c) - attnlib.gpt_params(plain) == 2 * D * H * DH  # W_G in each of 2 layers
    assert GPT(plain).blocks[0].attn.w_g is None
    with pytest.raises(attnlib.AttnlibError, match="output_gate"):
        MultiHeadAttention(D, H, output_gate="yes")


def test_generation_with_the_gate_equals_recomputing():
    torch.manual_seed(0)
    model = GPT(GPTConfig(50, 32, D, 2, H, n_kv_heads=KV, d_head=DH, positions="rope", output_gate=True))
    prompt = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(model.generate(prompt, 12), model.generate(prompt, 12, use_cache=False))


def test_equals_qwen3_next_attention():
    """transformers' Qwen3NextAttention, given the same weights: q_proj's rows per head are [query | gate];
    RoPE turns the first quarter of each head, in rotate-half pairs; its RMSNorms multiply by 1 + w."""
    transformers = pytest.importorskip("transformers")
    qn = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    from _transformers import rope

    config = transformers.Qwen3NextConfig(
        vocab_size=50, hidden_size=D, num_attention_heads=H, num_key_value_heads=KV, head_dim=DH,
        num_hidden_layers=4, partial_rotary_factor=0.25, **rope(10000.0),
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = qn.Qwen3NextAttention(config, layer_idx=3).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.3)
    r = int(DH * 0.25)
    mine = MultiHeadAttention(D, H, KV, bias=False, d_head=DH, rope=True, rotary_dim=r, qk_norm=True,
                              norm_eps=config.rms_norm_eps, output_gate=True).eval()  # fmt: skip
    q_and_gate = theirs.q_proj.weight.view(H, 2, DH, D)  # (H, [query | gate], d_head, d_model)
    state = {
        "w_q.weight": rotate_half_to_interleaved(q_and_gate[:, 0].reshape(H * DH, D), H, r),
        "w_g.weight": q_and_gate[:, 1].reshape(H * DH, D),
        "w_k.weight": rotate_half_to_interleaved(theirs.k_proj.weight, KV, r),
        "w_v.weight": theirs.v_proj.weight,
        "w_o.weight": theirs.o_proj.weight,
        "q_norm.weight": rotate_half_to_interleaved(1 + theirs.q_norm.weight, 1, r),
        "k_norm.weight": rotate_half_to_interleaved(1 + theirs.k_norm.weight, 1, r),
    }
    mine.load_state_dict(state)
    x = torch.randn(2, 9, D)
    positions = torch.arange(9)[None].expand(2, 9)
    cos_sin = qn.Qwen3NextRotaryEmbedding(config)(x, positions)
    mask = attnlib.float_mask(attnlib.causal_mask(9))[None, None]
    with torch.no_grad():
        expected, _ = theirs(x, cos_sin, mask)
        out, _ = mine(x, is_causal=True)
    assert torch.allclose(out, expected, atol=1e-5), (out - expected).abs().max()
