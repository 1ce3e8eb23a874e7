"""Chapter 19's options of the attention layer, the block and the model (issue 36), each compared with its
formula written out here in plain torch (float64), never with attnlib itself: the score scale and soft cap,
the QK-norm kinds, biases per projection, partial rotary, RoPE scaling, positions per layer, where the norms
sit, the gated and external MLPs, the embedding and logit scales; that GPT.generate keeps its tokens with
every option; that gpt_params counts them; and that every bad value is refused with a clear error."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlib import GPT, AttnlibError, GPTConfig, MultiHeadAttention, RopeScaling
from attnlib.attention import masked_scores
from attnlib.blocks import ExternalMLP, TransformerBlock
from attnlib.params import count_params, gpt_params, param_breakdown
from attnlib.positions import NoPE, RoPE

D, H = 32, 4  # d_model and n_heads of the small layers below
F64 = torch.float64


# ------------------------------------------------------------------ references, in plain torch


def heads(t, n):
    """(B, T, n * d) -> (B, n, T, d)."""
    return t.unflatten(-1, (n, -1)).transpose(1, 2)


def merge(t):
    """(B, n, T, d) -> (B, T, n * d)."""
    return t.transpose(1, 2).flatten(-2)


def linear(x, lin):
    """``x W^T (+ b)``, from the module's tensors."""
    return x @ lin.weight.T + (0 if lin.bias is None else lin.bias)


def rms(t, gain=None, eps=1e-5):
    """RMSNorm over the last axis: ``t / sqrt(mean(t^2) + eps) * g``."""
    out = t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps)
    return out if gain is None else out * gain


def rope(x, base, rotary_dim=None, stretch=1.0):
    """RoPE on interleaved pairs of the first ``rotary_dim`` dimensions of ``x`` ``(..., T, d)`` at positions
    ``m / stretch``, ``theta_i = base^(-2i / rotary_dim)``; the other dimensions unchanged."""
    r = rotary_dim or x.shape[-1]
    theta = base ** (-torch.arange(0, r, 2, dtype=F64) / r)  # (r/2,)
    angles = (torch.arange(x.shape[-2], dtype=F64) / stretch)[:, None] * theta  # (T, r/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    even, odd = x[..., 0:r:2], x[..., 1:r:2]
    out = x.clone()
    out[..., 0:r:2], out[..., 1:r:2] = even * cos - odd * sin, even * sin + odd * cos
    return out


def attention_ref(q, k, v, scale, softcap=None, allowed=None):
    """softmax(cap(q k^T * scale) masked) v with key/value head h // group; returns (y, weights)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = q @ k.transpose(-1, -2) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    T, T_k = s.shape[-2:]
    allowed = torch.ones(T, T_k, dtype=torch.bool).tril() if allowed is None else allowed
    w = torch.softmax(s.masked_fill(~allowed, -math.inf), dim=-1)
    return w @ v, w


def mha_ref(layer, x, *, scale=None, softcap=None, norm=None, base=None, rotary_dim=None, stretch=1.0, eps=1e-5):
    """A whole MultiHeadAttention layer from its weights, causal. ``norm``: None, "head" (gains), "unweighted",
    "projection" (one norm over n_heads * d_head, gains), "after_rope" (unweighted, after RoPE)."""
    n, n_kv = layer.n_heads, layer.n_kv_heads
    q, k, v = linear(x, layer.w_q), linear(x, layer.w_k), linear(x, layer.w_v)  # (B, T, n * d_head) ...
    if norm == "projection":
        q, k = rms(q, layer.q_norm.weight, eps), rms(k, layer.k_norm.weight, eps)
    q, k, v = heads(q, n), heads(k, n_kv), heads(v, n_kv)  # (B, heads, T, d_head)
    if norm == "head":
        q, k = rms(q, layer.q_norm.weight, eps), rms(k, layer.k_norm.weight, eps)
    if norm == "unweighted":
        q, k = rms(q, eps=eps), rms(k, eps=eps)
    if base is not None:
        q, k = rope(q, base, rotary_dim, stretch), rope(k, base, rotary_dim, stretch)
    if norm == "after_rope":
        q, k = rms(q, eps=eps), rms(k, eps=eps)
    d_head = q.shape[-1]
    y, w = attention_ref(q, k, v, d_head**-0.5 if scale is None else scale, softcap)
    return linear(merge(y), layer.w_o), w


def layer(**kw):
    torch.manual_seed(0)
    return MultiHeadAttention(D, H, **kw).to(F64).eval()


def x_in(T=7, B=2, seed=1, std=1.0):
    torch.manual_seed(seed)
    return torch.randn(B, T, D, dtype=F64) * std


def both_paths(mha, x, **kw):
    """The layer's output on the weights path and on the fast path, and its weights."""
    with torch.no_grad():
        out, w = mha(x, is_causal=True, **kw)
        fast, none = mha(x, is_causal=True, need_weights=False, **kw)
    assert none is None
    return out, fast, w


def close(a, b, tol=1e-10):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


# ------------------------------------------------------------------ 1. MultiHeadAttention


@pytest.mark.parametrize("scale", [0.3, 1.7])
def test_scale_multiplies_the_scores_on_both_paths(scale):
    """softmax(q k^T * scale + M) v: the weights path by hand, the fast path as SDPA(scale=...)."""
    mha = layer(n_kv_heads=2, scale=scale)
    x = x_in()
    out, fast, w = both_paths(mha, x)
    want, w_want = mha_ref(mha, x, scale=scale)
    close(out, want)
    close(w, w_want)
    close(fast, want)
    q, k, v = heads(linear(x, mha.w_q), H), heads(linear(x, mha.w_k), 2), heads(linear(x, mha.w_v), 2)
    y = F.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True, scale=scale
    )
    close(fast, linear(merge(y), mha.w_o))
    assert not torch.allclose(out, mha_ref(mha, x)[0])  # the default 1/sqrt(d_head) gives another output


@pytest.mark.parametrize("sinks", [False, True])
def test_softcap_caps_the_scores_before_the_mask(sinks):
    """c tanh(s / c) on the scaled scores, before the mask: masked keys keep weight 0; fast path == weights path."""
    c = 2.0
    mha = layer(softcap=c, learned_sinks=sinks)
    if sinks:
        with torch.no_grad():
            mha.sinks.copy_(torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=F64))
    x = x_in(std=4.0)  # large scores, so that the cap bites
    out, fast, w = both_paths(mha, x)
    close(fast, out)
    assert torch.all(w.triu(1) == 0)  # the causal mask still zeroes the later keys
    if not sinks:
        want, w_want = mha_ref(mha, x, softcap=c)
        close(out, want)
        close(w, w_want)
        assert not torch.allclose(out, mha_ref(mha, x)[0], atol=1e-3)  # uncapped: another output


def test_masked_scores_softcap_formula_and_bound():
    """masked_scores(..., softcap=c) == c tanh(q k^T * scale / c) + M, never above c in size."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 6, 8, dtype=F64) * 5, torch.randn(2, 3, 6, 8, dtype=F64) * 5
    c, scale = 3.0, 0.5
    allowed = torch.rand(6, 6) > 0.3
    allowed[:, 0] = True
    got = masked_scores(q, k, allowed, False, scale, c)
    s = q @ k.transpose(-1, -2) * scale
    assert s.abs().max() > 10 * c  # the raw scores pass the cap by far
    close(got, (c * torch.tanh(s / c)).masked_fill(~allowed, -math.inf))
    assert got[..., allowed].abs().max() <= c  # tanh rounds to 1 in the far tails
    float_mask = torch.randn(6, 6, dtype=F64)  # a float mask is added after the cap
    close(masked_scores(q, k, float_mask, False, scale, c), c * torch.tanh(s / c) + float_mask)


@pytest.mark.parametrize("rope", [False, True])
def test_qk_norm_projection_is_one_rmsnorm_over_all_heads(rope):
    """OLMo 2/3: q / rms(q) * g over n_heads * d_head before the heads are split (and before RoPE)."""
    mha = layer(n_kv_heads=2, d_head=12, qk_norm="projection", rope=rope, rope_base=500.0)
    assert tuple(mha.q_norm.weight.shape) == (4 * 12,) and tuple(mha.k_norm.weight.shape) == (2 * 12,)
    with torch.no_grad():
        mha.q_norm.weight.uniform_(0.5, 1.5)
        mha.k_norm.weight.uniform_(0.5, 1.5)
    x = x_in()
    out, fast, _ = both_paths(mha, x)
    want, _ = mha_ref(mha, x, norm="projection", base=500.0 if rope else None)
    close(out, want)
    close(fast, want)
    assert not torch.allclose(out, mha_ref(mha, x, base=500.0 if rope else None)[0])


def test_qk_norm_unweighted_has_no_parameters_and_commutes_with_rope():
    """Llama 4: per-head RMS normalisation without gains; a rotation keeps each head's RMS, so normalising after
    RoPE (as Llama 4 does) gives the same output up to rounding."""
    mha = layer(n_kv_heads=2, qk_norm="unweighted", rope=True, rope_base=1e4)
    plain = layer(n_kv_heads=2, rope=True, rope_base=1e4)
    assert count_params(mha) == count_params(plain)  # no gains
    assert mha.q_norm.weight is None and mha.k_norm.weight is None
    x = x_in()
    out, fast, _ = both_paths(mha, x)
    close(out, mha_ref(mha, x, norm="unweighted", base=1e4)[0])
    close(fast, out)
    close(out, mha_ref(mha, x, norm="after_rope", base=1e4)[0])


def test_qk_norm_true_is_head():
    """qk_norm=True and qk_norm="head" build the same layer: per-head gains over d_head."""
    a, b = layer(qk_norm=True, rope=True), layer(qk_norm="head", rope=True)
    assert a.qk_norm == b.qk_norm == "head"
    assert a.state_dict().keys() == b.state_dict().keys() and tuple(a.q_norm.weight.shape) == (D // H,)
    with torch.no_grad():
        for m in (a, b):
            torch.manual_seed(3)
            m.q_norm.weight.uniform_(0.5, 1.5)
            m.k_norm.weight.uniform_(0.5, 1.5)
    x = x_in()
    close(a(x, is_causal=True)[0], b(x, is_causal=True)[0], tol=0)
    close(a(x, is_causal=True)[0], mha_ref(a, x, norm="head", base=10000.0)[0])


@pytest.mark.parametrize(
    "bias, qkv_bias, out_bias", list(itertools.product([True, False], [None, True, False], [None, True, False]))
)
def test_biases_per_projection(bias, qkv_bias, out_bias):
    """qkv_bias and out_bias choose each Linear's bias (None: ``bias``); the count follows."""
    mha = layer(n_kv_heads=2, d_head=12, bias=bias, qkv_bias=qkv_bias, out_bias=out_bias)
    want_qkv, want_out = bias if qkv_bias is None else qkv_bias, bias if out_bias is None else out_bias
    assert [m.bias is not None for m in (mha.w_q, mha.w_k, mha.w_v)] == [want_qkv] * 3
    assert (mha.w_o.bias is not None) == want_out
    d_q, d_kv = 4 * 12, 2 * 12
    assert count_params(mha) == D * (d_q + 2 * d_kv) + d_q * D + want_qkv * (d_q + 2 * d_kv) + want_out * D
    with torch.no_grad():
        for m in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
            if m.bias is not None:
                m.bias.normal_()
    x = x_in()
    close(mha(x, is_causal=True)[0], mha_ref(mha, x)[0])


@pytest.mark.parametrize("rotary_dim", [2, 6, 12])
def test_rotary_dim_turns_the_first_dimensions_only(rotary_dim):
    """Partial rotary: theta_i = base^(-2i / rotary_dim) on the first rotary_dim dimensions, the rest unrotated."""
    mha = layer(n_kv_heads=2, d_head=12, rope=True, rope_base=100.0, rotary_dim=rotary_dim)
    x = x_in()
    out, fast, _ = both_paths(mha, x)
    close(out, mha_ref(mha, x, base=100.0, rotary_dim=rotary_dim)[0])
    close(fast, out)
    t = torch.randn(2, 4, 9, 12, dtype=F64)
    turned = mha.pos_enc(t, torch.arange(9))
    assert torch.equal(turned[..., rotary_dim:], t[..., rotary_dim:])
    close(turned, rope(t, 100.0, rotary_dim))


def test_rope_scaling_reaches_the_layers_rope():
    """The layer's RoPE holds the scaling; linear scaling s reads position m as m / s."""
    s = RopeScaling("linear", factor=4.0)
    mha = layer(rope=True, rope_base=1e4, rope_scaling=s, rotary_dim=4)
    assert isinstance(mha.pos_enc, RoPE) and mha.pos_enc.scaling is s and mha.pos_enc.rotary_dim == 4
    x = x_in()
    out, fast, _ = both_paths(mha, x)
    close(out, mha_ref(mha, x, base=1e4, rotary_dim=4, stretch=4.0)[0], tol=1e-6)
    close(fast, out)


# ------------------------------------------------------------------ 2. GPTConfig and GPT

SMALL = dict(vocab_size=61, context_length=16, d_model=D, n_layers=2, n_heads=H)


def test_layer_rope_per_layer():
    """NoPE layers, the sliding layers' own unscaled base, the scaling for the full layers."""
    s = RopeScaling("linear", factor=2.0)
    kw = dict(SMALL, n_layers=4, positions="rope", rope_base=1e6, rope_scaling=s, sliding_window=4)
    c = GPTConfig(**kw, layer_types=("sliding", "full", "sliding", "full"), rope_base_sliding=1e4, nope_layers=(3,))
    assert [c.layer_rope(i) for i in range(4)] == [(1e4, None), (1e6, s), (1e4, None), None]
    same = GPTConfig(**kw, layer_types=("sliding", "full", "sliding", "full"))  # no base of their own
    assert [same.layer_rope(i) for i in range(4)] == [(1e6, s)] * 4
    assert [GPTConfig(**dict(SMALL, n_layers=4), nope_layers=(0,)).layer_rope(i) for i in range(4)] == [None] * 4

    torch.manual_seed(0)
    model = GPT(c).to(F64)
    encs = [b.attn.pos_enc for b in model.blocks]
    assert isinstance(encs[3], NoPE) and all(isinstance(e, RoPE) for e in encs[:3])
    assert [(e.base, e.scaling) for e in encs[:3]] == [(1e4, None), (1e6, s), (1e4, None)]
    t, pos = torch.randn(1, 2, 8, D // H, dtype=F64), torch.arange(8)
    close(encs[0](t, pos), rope(t, 1e4))
    close(encs[1](t, pos), rope(t, 1e6, stretch=2.0), tol=1e-6)
    assert encs[3](t, pos) is t


def randomize_norms(module, seed=5):
    """Gains (and LayerNorm biases) away from 1 and 0, so that a norm left out or misplaced shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.LayerNorm, nn.RMSNorm)) and m.weight is not None:
                m.weight.uniform_(0.5, 1.5)
                if getattr(m, "bias", None) is not None:
                    m.bias.normal_(0, 0.3)


def block_ref(b, kind, x, s=1.0):
    """Where the norms sit, written out with the block's own modules (the module docstring's table)."""
    attn = lambda h: b.attn(h, is_causal=True, need_weights=False)[0]
    if kind == "pre_norm":
        x = x + s * attn(b.ln1(x))
        return x + s * b.mlp(b.ln2(x))
    if kind == "sandwich":
        x = x + s * b.ln1_out(attn(b.ln1(x)))
        return x + s * b.ln2_out(b.mlp(b.ln2(x)))
    if kind == "post_norm":
        x = x + s * b.ln1_out(attn(x))
        return x + s * b.ln2_out(b.mlp(x))
    h = b.ln1(x)  # parallel
    return x + s * attn(h) + s * b.mlp(h)


KINDS = ["pre_norm", "sandwich", "post_norm", "parallel"]


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("kind, residual_scale", [(k, s) for k in KINDS for s in (1.0, 0.25)])
def test_block_kinds_equal_their_formula(kind, norm, residual_scale):
    """Each block kind, with its norms' gains away from 1, equals the module docstring's formula."""
    c = GPTConfig(**SMALL, positions="rope", norm=norm, mlp="swiglu", block=kind, residual_scale=residual_scale)
    torch.manual_seed(0)
    b = TransformerBlock(c).to(F64).eval()
    randomize_norms(b)
    has_out = kind in ("sandwich", "post_norm")
    assert (b.ln1_out is not None, b.ln2_out is not None) == (has_out, has_out)
    n_norms = sum(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in b.modules())
    assert n_norms == {"pre_norm": 2, "sandwich": 4, "post_norm": 2, "parallel": 1}[kind]
    x = x_in()
    with torch.no_grad():
        got, (got_w, w) = b(x), b(x, need_weights=True)
        close(got, block_ref(b, kind, x, residual_scale))
        close(got_w, got)
        assert w.shape == (2, H, 7, 7)
        if kind != "pre_norm":  # the placement matters: a pre-norm block with the same modules differs
            assert not torch.allclose(got, block_ref(b, "pre_norm", x, residual_scale))


def test_parallel_block_applies_residual_scale():
    """residual_scale: 'each sublayer's output times this before it is added' (config docstring), parallel too."""
    c = GPTConfig(**SMALL, block="parallel", residual_scale=0.25)
    torch.manual_seed(0)
    b = TransformerBlock(c).to(F64).eval()
    x = x_in()
    with torch.no_grad():
        close(b(x), block_ref(b, "parallel", x, 0.25))


def test_geglu_is_gated_tanh_gelu():
    """mlp="geglu": down(gelu_tanh(gate x) * up x), tanh-GELU written out."""
    c = GPTConfig(**SMALL, positions="rope", norm="rmsnorm", mlp="geglu", d_ff=48)
    torch.manual_seed(0)
    mlp = TransformerBlock(c).mlp.to(F64)
    x = x_in()
    gelu = lambda z: 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    want = linear(gelu(linear(x, mlp.gate)) * linear(x, mlp.up), mlp.down)
    close(mlp(x), want)
    assert count_params(mlp) == 3 * D * 48 + 2 * 48 + D  # three matrices, with bias=True


class Experts(nn.Module):
    """A stand-in for a mixture of experts that returns (hidden states, router logits)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D, dtype=F64)

    def forward(self, x):
        return torch.tanh(self.lin(x)), torch.zeros(x.shape[:-1])


def test_external_mlp_without_and_with_a_module():
    """mlp="external": a clear error until a module is given; then the block adds the module's output (a tuple's
    first element), and the model counts its parameters."""
    c = GPTConfig(**SMALL, positions="rope", norm="rmsnorm", mlp="external")
    torch.manual_seed(0)
    model = GPT(c).to(F64)
    ids = torch.tensor([[1, 2, 3, 4]])
    with pytest.raises(AttnlibError, match=r"mlp.*external.*no module"):
        model(ids)
    lin, experts = nn.Linear(D, D, dtype=F64), Experts()
    model.blocks[0].mlp.module = lin  # set after construction, as from_hf may
    model.blocks[1].mlp = ExternalMLP(experts)
    assert count_params(model) == count_params(GPT(c)) + count_params(lin) + count_params(experts)
    x = x_in(T=4, B=1)
    b0, b1 = model.blocks
    with torch.no_grad():
        y = x + b0.attn(b0.ln1(x), is_causal=True)[0]
        close(b0(x), y + linear(b0.ln2(y), lin))
        y = x + b1.attn(b1.ln1(x), is_causal=True)[0]
        close(b1(x), y + torch.tanh(linear(b1.ln2(y), experts.lin)))  # the tuple's first element
        assert model(ids).shape == (1, 4, 61)


def scramble(model, seed=0):
    """Weights of a trained model's size (not GPT-2's std 0.02), so that caps and scales bite."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, p.shape[-1] ** -0.5 if p.shape[0] != 61 else 1.0)
    return model


def hidden_by_hand(model, ids, embed_scale):
    """tok_emb[ids] * s (+ pos_emb), every block, ln_f."""
    x = model.tok_emb.weight[ids] * embed_scale
    if model.pos_emb is not None:
        x = x + model.pos_emb.weight[: ids.shape[1]]
    for b in model.blocks:
        x = b(x)
    return model.ln_f(x)


@pytest.mark.parametrize("embed_scale, logit_scale, logit_softcap", [(1.0, 1.0, None), (4.0, 1.0, None),
                                                                     (1.0, 0.5, None), (5.6, 2.0, 3.0)])  # fmt: skip
@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_embed_scale_and_logits(embed_scale, logit_scale, logit_softcap, positions):
    """logits = c tanh(ln_f(blocks(tok_emb[ids] * s (+ pos_emb))) W^T * scale / c), by hand."""
    c = GPTConfig(**SMALL, positions=positions, embed_scale=embed_scale, logit_scale=logit_scale,
                  logit_softcap=logit_softcap, tie_embeddings=positions == "rope")  # fmt: skip
    model = scramble(GPT(c).to(F64)).eval()
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [5, 3, 5, 8, 9, 7, 9, 3]])
    with torch.no_grad():
        z = hidden_by_hand(model, ids, embed_scale) @ model.lm_head.weight.T * logit_scale
        want = z if logit_softcap is None else logit_softcap * torch.tanh(z / logit_softcap)
        got = model(ids)
        close(got, want)
        close(model.head(hidden_by_hand(model, ids, embed_scale)), want)
        if logit_softcap is not None:
            assert z.abs().max() > 10 * logit_softcap and got.abs().max() <= logit_softcap
        if embed_scale != 1.0:  # the option acts
            assert not torch.allclose(got, GPT.head(model, hidden_by_hand(model, ids, 1.0)))


SCALING = RopeScaling("yarn", factor=4.0, original_max_position_embeddings=8)
FAMILIES = {  # each a mix of chapter 19's options, as a family sets them
    "gemma2": dict(positions="rope", norm="rmsnorm", mlp="geglu", block="sandwich", sliding_window=4,
                   layer_types=("sliding", "full"), rope_base=1e6, rope_base_sliding=1e4, attn_scale=0.2,
                   attn_softcap=1.5, embed_scale=D**0.5, logit_softcap=3.0, qk_norm=True, bias=False),
    "olmo": dict(positions="rope", norm="rmsnorm", mlp="swiglu", block="post_norm", qk_norm="projection",
                 rope_scaling=SCALING, n_kv_heads=2, bias=False),
    "cohere": dict(positions="rope", block="parallel", nope_layers=(1,), logit_scale=0.5, qkv_bias=False,
                   sliding_window=4, layer_types=("sliding", "full"), tie_embeddings=False),
    "llama4": dict(positions="rope", norm="rmsnorm", mlp="swiglu", qk_norm="unweighted", nope_layers=(0,),
                   rope_scaling=RopeScaling("llama3", factor=8.0, original_max_position_embeddings=8), bias=False),
    "granite": dict(positions="rope", norm="rmsnorm", mlp="swiglu", embed_scale=3.0, residual_scale=0.3,
                    logit_scale=0.25, attn_scale=0.5, qkv_bias=True, bias=False),
    "phi": dict(positions="rope", rotary_dim=4, n_kv_heads=1, qkv_bias=True, out_bias=False, d_head=12),
    "gpt2_biases": dict(qkv_bias=False, out_bias=True),  # learned positions: generation's plain steps
}  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_with_the_options_equals_greedy_over_full_forwards(family):
    """With the cache, without it, and an argmax loop over full forward passes: the same tokens."""
    c = GPTConfig(**{**SMALL, "tie_embeddings": False, **FAMILIES[family]})  # untied: less self-repetition
    model = scramble(GPT(c).to(F64), seed=2)
    ids = torch.tensor([[7, 3, 9, 1, 4], [2, 2, 8, 5, 0]])
    cached, uncached = model.generate(ids, 10), model.generate(ids, 10, use_cache=False)
    out = ids
    with torch.no_grad():
        for _ in range(10):
            out = torch.cat([out, model(out)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(cached, out) and torch.equal(uncached, out)
    assert len(set(out[:, 5:].flatten().tolist())) > 1  # not one token repeated everywhere


# ------------------------------------------------------------------ 3. parameter counts


def count_on_meta(c):
    with torch.device("meta"):
        return count_params(GPT(c))


GRID = list(itertools.product(KINDS, [False, True, "head", "projection", "unweighted"],
                              [(None, None), (True, False), (False, True), (False, False)],
                              ["rmsnorm", "layernorm"], [True, False]))  # fmt: skip


def test_gpt_params_counts_every_combination():
    """block kinds x QK-norm kinds x biases per projection x norm kinds x bias, with d_head != d_model / n_heads."""
    for i, (kind, qk, (qkv_bias, out_bias), norm, bias) in enumerate(GRID):
        mlp = ("gelu", "swiglu", "geglu")[i % 3]
        c = GPTConfig(**SMALL, positions="rope", n_kv_heads=2, d_head=10, block=kind, qk_norm=qk, qkv_bias=qkv_bias,
                      out_bias=out_bias, norm=norm, bias=bias, mlp=mlp, tie_embeddings=i % 2 == 0)  # fmt: skip
        assert gpt_params(c) == count_on_meta(c), c


@pytest.mark.parametrize(
    "options",
    [
        dict(rotary_dim=4), dict(nope_layers=(0, 1)), dict(rope_scaling=SCALING), dict(attn_scale=0.1),
        dict(attn_softcap=20.0), dict(embed_scale=2.0, residual_scale=0.5, logit_scale=0.3, logit_softcap=30.0),
        dict(sliding_window=4, layer_types=("sliding", "full"), rope_base_sliding=1e4, learned_sinks=True),
        *(dict(FAMILIES[f]) for f in FAMILIES),
    ],
)  # fmt: skip
def test_gpt_params_with_the_other_options(options):
    options = {"positions": "rope", **options}
    c = GPTConfig(**SMALL, **options)
    assert gpt_params(c) == count_on_meta(c)


def test_param_breakdown_refuses_an_external_mlp():
    c = GPTConfig(**SMALL, mlp="external")
    for count in (param_breakdown, gpt_params):
        with pytest.raises(AttnlibError, match=r"mlp='external'.*") as e:
            count(c)
        assert "count_params" in str(e.value)


# ------------------------------------------------------------------ 4. errors


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(block="sandwiches"), r"^block: expected .*pre_norm.*sandwich.*post_norm.*parallel.*received.*sandwiches"),
        (dict(qk_norm="foo"), r"^qk_norm: expected .*head.*projection.*unweighted.*received.*foo"),
        (dict(qk_norm=1), r"^qk_norm: expected"),
        (dict(positions="rope", rotary_dim=3), r"^rotary_dim: expected an even number.*received 3"),
        (dict(positions="rope", rotary_dim=10), r"^rotary_dim: expected at most d_head = 8.*received 10"),
        (dict(rotary_dim=4), r"rotary_dim"),
        (dict(rope_scaling=RopeScaling("linear", factor=2.0)), r"rope_scaling"),
        (dict(positions="rope", rope_scaling={"rope_type": "linear"}), r"^rope_scaling: expected .*RopeScaling.*dict"),
        (dict(nope_layers=(2,)), r"^nope_layers: expected .*0 \.\. 1.*received \(2,\)"),
        (dict(nope_layers=(-1,)), r"^nope_layers: expected"),
        (dict(nope_layers=1), r"^nope_layers: expected"),
        (dict(rope_base_sliding=0.0), r"^rope_base_sliding: expected None or a finite positive number"),
        (dict(embed_scale=0), r"^embed_scale: expected a finite positive number"),
        (dict(residual_scale=-1.0), r"^residual_scale: expected a finite positive number"),
        (dict(logit_scale="2"), r"^logit_scale: expected a finite positive number"),
        (dict(logit_softcap=-3.0), r"^logit_softcap: expected None or a finite positive number"),
        (dict(qkv_bias="yes"), r"^qkv_bias: expected True or False"),
        (dict(out_bias=1), r"^out_bias: expected True or False"),
        (dict(mlp="moe"), r"^mlp: expected .*geglu.*external"),
    ],
)
def test_config_errors_name_the_field(options, match):
    with pytest.raises(AttnlibError, match=match):
        GPTConfig(**SMALL, **options)


@pytest.mark.parametrize("field", ["attn_scale", "attn_softcap"])
def test_config_score_errors_name_the_config_field(field):
    """A GPTConfig user wrote attn_scale, not MultiHeadAttention's scale: the message should say attn_scale."""
    with pytest.raises(AttnlibError, match=rf"^{field}: expected None or a finite positive number"):
        GPTConfig(**SMALL, **{field: -1.0})


@pytest.mark.parametrize("options", [dict(rotary_dim=4), dict(rope_scaling=RopeScaling("linear", factor=2.0))])
def test_config_rope_options_without_rope_name_positions(options):
    """A GPTConfig has no field rope: the message should point at positions='rope'."""
    with pytest.raises(AttnlibError, match=r"positions"):
        GPTConfig(**SMALL, **options)


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(scale=-1.0), r"^scale: expected None or a finite positive number"),
        (dict(scale=float("nan")), r"^scale: expected"),
        (dict(softcap=0), r"^softcap: expected None or a finite positive number"),
        (dict(qk_norm="foo"), r"^qk_norm: expected"),
        (dict(rope=True, rotary_dim=5), r"^rotary_dim: expected an even number"),
        (dict(rope=True, rotary_dim=12), r"^rotary_dim: expected at most d_head = 8"),
        (dict(rotary_dim=4), r"rope.*rotary_dim"),
        (dict(rope_scaling=RopeScaling("linear", factor=2.0)), r"rope.*rope_scaling"),
        (dict(rope=True, rope_scaling="linear"), r"^rope_scaling: expected"),
        (dict(qkv_bias="no"), r"^qkv_bias: expected True or False"),
        (dict(out_bias=0), r"^out_bias: expected True or False"),
    ],
)
def test_layer_errors_name_the_argument(options, match):
    with pytest.raises(AttnlibError, match=match):
        MultiHeadAttention(D, H, **options)


@pytest.mark.parametrize("where", ["layer", "logits"])
def test_an_infinite_softcap_is_refused_or_harmless(where):
    x = x_in()
    try:
        if where == "layer":
            out = layer(softcap=math.inf)(x, is_causal=True)[0]
        else:
            torch.manual_seed(0)
            out = GPT(GPTConfig(**SMALL, logit_softcap=math.inf))(torch.tensor([[1, 2, 3]]))
    except AttnlibError:
        return
    assert not out.isnan().any()


@pytest.mark.parametrize("options", [dict(attn_softcap=0.01), dict(qkv_bias=True), dict(out_bias=False)])
def test_mla_refuses_the_options_it_ignores(options):
    """attention="mla" refuses rope_scaling, rotary_dim, nope_layers and attn_scale; the others it would ignore."""
    with pytest.raises(AttnlibError, match=r"attention"):
        GPTConfig(**SMALL, attention="mla", positions="rope", kv_rank=8, **options)


def test_nope_layers_refuses_booleans():
    with pytest.raises(AttnlibError, match=r"^nope_layers"):
        GPTConfig(**SMALL, positions="rope", nope_layers=(True,))
