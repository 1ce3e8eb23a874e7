"""Chapter 7: the GPT model and its parameter counts, against PyTorch and published numbers."""

import dataclasses
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlib._validate import AttnlibError
from attnlib.model import GPT, GPT2_LARGE, GPT2_MEDIUM, GPT2_SMALL, GPT2_XL, GPT3_175B, GPTConfig, TransformerBlock
from attnlib.multihead import MultiHeadAttention
from attnlib.params import attention_params, count_params, gpt_params, layernorm_params, mlp_params, param_breakdown

TINY = GPTConfig(vocab_size=11, context_length=8, d_model=12, n_layers=2, n_heads=3)


def raises(*fragments):
    """pytest.raises(AttnlibError) whose message contains every fragment, in order."""
    return pytest.raises(AttnlibError, match=".*".join(re.escape(f) for f in fragments))


def on_meta(config):
    with torch.device("meta"):
        model = GPT(config)
    assert all(p.device.type == "meta" for p in model.parameters())  # no memory allocated
    return model


# ---------------------------------------------------------------- parameter counts

# Published totals: GPT-2 small is 124,439,808 (tied head); medium, large and XL are the counts of
# the released checkpoints (Hugging Face `num_parameters()`); GPT-3 "175B" (Brown et al. 2020).
PUBLISHED = [(GPT2_SMALL, 124_439_808), (GPT2_MEDIUM, 354_823_168), (GPT2_LARGE, 774_030_080), (GPT2_XL, 1_557_611_200)]


@pytest.mark.parametrize("config,published", PUBLISHED, ids=["small", "medium", "large", "xl"])
def test_gpt2_counts_closed_form_module_and_published(config, published):
    assert gpt_params(config) == published
    assert count_params(on_meta(config)) == published


def test_gpt3_175b_on_meta_device():
    n = gpt_params(GPT3_175B)
    assert count_params(on_meta(GPT3_175B)) == n
    assert abs(n - 175e9) / 175e9 < 0.01  # the paper's rounded "175B"
    assert (GPT3_175B.d_model, GPT3_175B.n_layers, GPT3_175B.n_heads, GPT3_175B.context_length, GPT3_175B.d_ff) == (
        12288,
        96,
        96,
        2048,
        4 * 12288,
    )


def test_attention_params_matches_both_modules():
    assert attention_params(768) == 2_362_368
    assert count_params(MultiHeadAttention(768, 12)) == 2_362_368
    assert count_params(nn.MultiheadAttention(768, 12)) == 2_362_368  # PyTorch's own layer
    for heads in (1, 3, 8):  # independent of the number of heads
        assert count_params(MultiHeadAttention(24, heads, bias=False)) == attention_params(24, bias=False)
    assert attention_params(768, bias=False) == 4 * 768**2 == count_params(nn.MultiheadAttention(768, 12, bias=False))


def test_part_counts_match_torch_layers():
    assert mlp_params(12, 40) == count_params(nn.Sequential(nn.Linear(12, 40), nn.Linear(40, 12)))
    assert mlp_params(12, 40, bias=False) == count_params(
        nn.Sequential(nn.Linear(12, 40, bias=False), nn.Linear(40, 12, bias=False))
    )
    assert layernorm_params(12) == count_params(nn.LayerNorm(12))
    assert layernorm_params(12, bias=False) == count_params(nn.LayerNorm(12, bias=False))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("tie", [True, False])
def test_variants_closed_form_equals_module(bias, tie):
    for base in (TINY, GPT2_SMALL):
        config = dataclasses.replace(base, bias=bias, tie_embeddings=tie)
        model = on_meta(config)
        assert gpt_params(config) == count_params(model)
        assert sum(param_breakdown(config).values()) == gpt_params(config)
        assert (model.lm_head.weight is model.tok_emb.weight) == tie
    untied = dataclasses.replace(GPT2_SMALL, tie_embeddings=False)
    assert gpt_params(untied) == 124_439_808 + 50257 * 768  # an untied head adds V * d_model


@pytest.mark.parametrize("d_head_nope", [None, 12])
def test_mla_config_counts_with_its_own_head_widths(d_head_nope):
    """attention="mla": param_breakdown's attention part, with d_head_nope (default d_model / n_heads) and
    d_head_rope = d_head_nope / 2, d_head_v = d_head_nope by default, equals the layers' parameters walked."""
    config = GPTConfig(100, 16, 32, 2, 4, bias=False, positions="rope", norm="rmsnorm", mlp="swiglu",
                       attention="mla", kv_rank=8, d_head_nope=d_head_nope)  # fmt: skip
    model = on_meta(config)
    n = d_head_nope or 32 // 4
    attn = model.blocks[0].attn
    assert (attn.d_head_nope, attn.d_head_rope, attn.d_head_v) == (n, n // 2, n)
    assert param_breakdown(config)["attention"] == sum(count_params(b.attn) for b in model.blocks)
    assert gpt_params(config) == count_params(model)


def test_count_params_counts_a_tied_weight_once():
    model = on_meta(TINY)
    every_reference = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert every_reference - TINY.vocab_size * TINY.d_model == count_params(model)
    with raises("module:", "nn.Module", "list"):
        count_params([torch.zeros(3)])


def test_d_ff_default_and_explicit():
    assert GPT2_SMALL.d_ff == 3072
    config = dataclasses.replace(TINY, d_ff=7)
    assert config.d_ff == 7 and gpt_params(config) == count_params(on_meta(config))


# ---------------------------------------------------------------- the model itself


def reference_block(block):
    """nn.TransformerEncoderLayer (pre-norm, tanh GELU) holding the weights of an attnlib block."""
    d, d_ff = block.attn.d_model, block.mlp[0].out_features
    ref = nn.TransformerEncoderLayer(
        d,
        block.attn.n_heads,
        d_ff,
        dropout=0.0,
        batch_first=True,
        norm_first=True,
        activation=lambda x: F.gelu(x, approximate="tanh"),
        dtype=torch.float64,
    ).eval()
    with torch.no_grad():
        a = block.attn
        ref.self_attn.in_proj_weight.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
        ref.self_attn.in_proj_bias.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
        ref.self_attn.out_proj.load_state_dict(a.w_o.state_dict())
        ref.linear1.load_state_dict(block.mlp[0].state_dict())
        ref.linear2.load_state_dict(block.mlp[2].state_dict())
        ref.norm1.load_state_dict(block.ln1.state_dict())
        ref.norm2.load_state_dict(block.ln2.state_dict())
    return ref


def test_block_matches_torch_encoder_layer():
    torch.manual_seed(0)
    block = TransformerBlock(TINY).double()
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(6, dtype=torch.float64)  # -inf above diagonal
    torch.testing.assert_close(block(x), reference_block(block)(x, src_mask=causal, is_causal=True))


def test_gpt_forward_by_hand():
    torch.manual_seed(0)
    model = GPT(TINY).double()
    assert model.lm_head.weight is model.tok_emb.weight
    ids = torch.tensor([[1, 5, 2, 10, 0], [3, 3, 9, 4, 7]])
    logits = model(ids)
    assert logits.shape == (2, 5, TINY.vocab_size)
    x = model.tok_emb.weight[ids] + model.pos_emb.weight[:5]  # rows of the tables
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    for block in model.blocks:
        x = reference_block(block)(x, src_mask=causal, is_causal=True)
    x = F.layer_norm(x, (12,), model.ln_f.weight, model.ln_f.bias)
    torch.testing.assert_close(logits, x @ model.tok_emb.weight.T)  # tied head: the embedding, transposed


def test_gpt_is_causal():
    torch.manual_seed(0)
    model = GPT(TINY)
    ids = torch.randint(0, 11, (2, 8))
    logits = model(ids)
    for t in range(7):
        ids2 = ids.clone()
        ids2[:, t + 1 :] = (ids[:, t + 1 :] + 1) % 11  # change every later token
        logits2 = model(ids2)
        torch.testing.assert_close(logits2[:, : t + 1], logits[:, : t + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(logits2[:, t + 1 :], logits[:, t + 1 :])


def test_gpt_on_meta_infers_shapes_without_memory():
    model = on_meta(GPT2_SMALL)
    logits = model(torch.zeros(2, 1024, dtype=torch.long, device="meta"))
    assert logits.shape == (2, 1024, 50257) and logits.device.type == "meta"


def test_gpt_init_follows_gpt2():
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(TINY, d_model=96, n_heads=4, n_layers=8, vocab_size=500))
    assert model.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.blocks[0].attn.w_o.weight.std().item() == pytest.approx(0.02 / 4, rel=0.1)  # / sqrt(2 L)
    assert (model.blocks[0].attn.w_q.bias == 0).all()


# ---------------------------------------------------------------- bad input


def test_config_and_forward_bad_input():
    with raises("d_model:", "multiple of n_heads=5", "d_model=12"):
        GPTConfig(11, 8, d_model=12, n_layers=1, n_heads=5)
    with raises("n_layers:", "positive int", "0"):
        GPTConfig(11, 8, d_model=12, n_layers=0, n_heads=3)
    with raises("vocab_size:", "positive int", "-1"):
        GPTConfig(-1, 8, d_model=12, n_layers=1, n_heads=3)
    with raises("d_ff:", "positive int", "0"):
        GPTConfig(11, 8, d_model=12, n_layers=1, n_heads=3, d_ff=0)
    with raises("bias:", "True or False", "str 'yes'"):
        GPTConfig(11, 8, d_model=12, n_layers=1, n_heads=3, bias="yes")
    with raises("config:", "GPTConfig", "dict"):
        GPT({"vocab_size": 11})
    with raises("d_model:", "positive int", "0"):
        attention_params(0)
    model = GPT(TINY)
    with raises("ids:", "[1, 8]", "(1, 9)"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with raises("ids:", "[0, 10]", "id 11"):
        model(torch.tensor([[1, 11]]))
    with raises("ids:", "[0, 10]", "id -1"):
        model(torch.tensor([[-1, 2]]))
    with raises("ids:", "2-D integer", "torch.float32"):
        model(torch.zeros(1, 3))
    with raises("ids:", "on meta (the model's device)", "on cpu"):
        on_meta(TINY)(torch.zeros(1, 3, dtype=torch.long))
    with raises("ids:", "2-D integer", "(3,)"):
        model(torch.zeros(3, dtype=torch.long))
