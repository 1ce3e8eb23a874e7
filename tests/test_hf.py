"""Chapter 15: attnlib.from_hf against Hugging Face transformers, the same weights (small random configs).

Nothing is downloaded: every model is built from a config with random weights."""

import dataclasses
import warnings
from types import SimpleNamespace

import pytest
import torch

import attnlib
from attnlib import AttnlibError, from_hf
from attnlib.hf import rotate_half_to_interleaved

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
from _transformers import V5, rope  # noqa: E402

SMALL = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, max_position_embeddings=64)


def _init(model, seed=0):
    """Random weights of large scale, so that logits differ clearly between tokens and greedy
    generation does not repeat one token (a wrong permutation, norm or cache then shows): matrices
    std 2 / sqrt(fan_in), norm gains 1 + 0.3 N(0, 1) (QK-norm's included), biases 0.3 N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() > 1:
                p.copy_(noise * 2 / p.shape[-1] ** 0.5)
            else:
                p.copy_(noise * 0.3 + (name.endswith("weight")))  # a gain around 1, a bias around 0
    return model.eval()


def llama(tie=False, n_kv=2, theta=500000.0, **kw):
    cfg = transformers.LlamaConfig(**SMALL, num_attention_heads=4, num_key_value_heads=n_kv, tie_word_embeddings=tie,
                                   rope_theta=theta, **kw)  # fmt: skip
    return _init(transformers.LlamaForCausalLM(cfg))


def qwen3(tie=False):
    cfg = transformers.Qwen3Config(**SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=tie)  # fmt: skip
    return _init(transformers.Qwen3ForCausalLM(cfg))


def mistral():
    cfg = transformers.MistralConfig(**SMALL, num_attention_heads=4, num_key_value_heads=1, sliding_window=None)
    return _init(transformers.MistralForCausalLM(cfg))


def gpt2(tie=True):
    cfg = transformers.GPT2Config(
        vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4, tie_word_embeddings=tie
    )
    return _init(transformers.GPT2LMHeadModel(cfg), seed=3)  # seed 3: the tied model does not repeat one token


MODELS = {
    "gpt2": gpt2,
    "gpt2, untied": lambda: gpt2(tie=False),
    "llama, GQA, rope_theta 500000, untied": llama,
    "llama, tied head": lambda: llama(tie=True),
    "llama, multi-head (n_kv = n_heads), rope_theta 10000": lambda: llama(n_kv=4, theta=10000.0),
    "qwen3, QK-norm, d_head 16 with d_model 32 and 4 heads": qwen3,
    "qwen3, tied": lambda: qwen3(tie=True),
    "mistral, multi-query": mistral,
}
IDS = torch.randint(0, 97, (3, 11), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", MODELS)
def test_logits_equal_transformers(name):
    hf = MODELS[name]()
    mine = from_hf(hf)
    with torch.no_grad():
        want = hf(IDS).logits
        got = mine(IDS)
    assert want.std() > 0.5  # logits that differ between tokens: the comparison can fail
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert attnlib.count_params(mine) == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generation_equals_transformers_with_and_without_the_cache(name):
    hf = MODELS[name]()
    mine = from_hf(hf)
    prompt = IDS[:2, :5]
    with torch.no_grad():
        want = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None)
    cached = mine.generate(prompt, 12)
    assert torch.equal(cached, want)
    assert torch.equal(mine.generate(prompt, 12, use_cache=False), want)
    assert cached[:, 5:].unique().numel() > 3  # the model does not repeat one token


def test_the_config_read_from_transformers():
    c = from_hf(qwen3()).config
    assert (c.positions, c.norm, c.mlp, c.qk_norm, c.bias, c.tie_embeddings) == (
        "rope",
        "rmsnorm",
        "swiglu",
        True,
        False,
        False,
    )
    assert (c.d_head, c.n_kv_heads, c.rope_base, c.norm_eps, c.context_length) == (16, 2, 1e6, 1e-6, 64)
    g = from_hf(gpt2()).config
    assert (g.positions, g.norm, g.mlp, g.bias, g.tie_embeddings, g.d_ff) == (
        "learned",
        "layernorm",
        "gelu",
        True,
        True,
        128,
    )


def test_dtype_device_and_training_mode_follow_the_model():
    hf = llama().to(torch.float64).train()
    mine = from_hf(hf)
    assert mine.training and {p.dtype for p in mine.parameters()} == {torch.float64}
    assert mine.lm_head.weight is not mine.tok_emb.weight  # untied stays untied
    tied = from_hf(llama(tie=True))
    assert tied.lm_head.weight is tied.tok_emb.weight and not tied.training


@pytest.mark.parametrize("n_heads, d_head, d_in", [(1, 2, 3), (4, 8, 5), (8, 128, 2)])
def test_rotate_half_to_interleaved_undoes_the_permutation_of_metas_conversion(n_heads, d_head, d_in):
    w = torch.randn(n_heads * d_head, d_in)
    # what transformers' convert_llama_weights_to_hf.py applies to Meta's interleaved q/k weights
    meta_to_hf = w.view(n_heads, d_head // 2, 2, d_in).transpose(1, 2).reshape(n_heads * d_head, d_in)
    assert torch.equal(rotate_half_to_interleaved(meta_to_hf, n_heads), w)
    bias = torch.randn(n_heads * d_head)
    hf_bias = bias.view(n_heads, d_head // 2, 2).transpose(1, 2).reshape(-1)
    assert torch.equal(rotate_half_to_interleaved(hf_bias, n_heads), bias)


def test_rope_after_the_permutation_equals_rotate_half():
    """transformers' apply_rotary_pos_emb (rotate half) on q, k equals attnlib's apply_rope (interleaved)
    on the permuted dimensions: the same rotation, and the same scores."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    d_head, T, base = 16, 9, 500000.0
    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=base)
    q, k = torch.randn(2, 4, T, d_head, dtype=torch.float64), torch.randn(2, 4, T, d_head, dtype=torch.float64)
    pos = torch.arange(3, 3 + T)[None]
    cos, sin = LlamaRotaryEmbedding(cfg)(q, pos)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos.double(), sin.double())
    perm = rotate_half_to_interleaved(torch.arange(d_head), 1)
    q_mine, k_mine = (attnlib.apply_rope(t[..., perm], pos[0], base) for t in (q, k))
    torch.testing.assert_close(q_mine, q_hf[..., perm], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(q_mine @ k_mine.transpose(-1, -2), q_hf @ k_hf.transpose(-1, -2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "config, hf_class",
    [
        (attnlib.LLAMA3_8B, "LlamaForCausalLM"),
        (attnlib.QWEN3_8B, "Qwen3ForCausalLM"),
    ],
)
def test_published_parameter_counts_equal_transformers_on_the_meta_device(config, hf_class):
    """Llama 3 8B and Qwen3 8B from their published config.json values, built without memory."""
    common = dict(
        vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads, max_position_embeddings=config.context_length,
        rms_norm_eps=config.norm_eps, rope_theta=config.rope_base, tie_word_embeddings=False,
    )  # fmt: skip
    if config.d_head is not None:
        common["head_dim"] = config.d_head
    hf_config = getattr(transformers, hf_class.replace("ForCausalLM", "Config"))(**common)
    with torch.device("meta"):
        hf = getattr(transformers, hf_class)(hf_config)
        mine = attnlib.GPT(config)
    n_hf = sum(p.numel() for p in hf.parameters())
    assert attnlib.gpt_params(config) == attnlib.count_params(mine) == n_hf
    read = from_hf(hf).config  # the preset is what transformers' config describes
    assert dataclasses.replace(read, d_head=read.head_dim) == dataclasses.replace(config, d_head=config.head_dim)


def test_published_parameter_counts():
    """The counts Meta and Qwen publish, rounded: 8.0B and 8.2B (the Qwen3 model card: 8.2B)."""
    assert round(attnlib.gpt_params(attnlib.LLAMA3_8B) / 1e9, 1) == 8.0
    assert round(attnlib.gpt_params(attnlib.QWEN3_8B) / 1e9, 1) == 8.2
    # the KV cache: 2 n_layers n_kv_heads d_head numbers per token, bfloat16
    assert attnlib.kv_cache_bytes(attnlib.LLAMA3_8B, T=1, dtype=torch.bfloat16) == 2 * 32 * 8 * 128 * 2
    assert attnlib.kv_cache_bytes(attnlib.QWEN3_8B, T=1, dtype=torch.bfloat16) == 2 * 36 * 8 * 128 * 2


def test_unsupported_models_name_the_supported_families():
    bert = transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                                          intermediate_size=32))  # fmt: skip
    with pytest.raises(AttnlibError, match="model: expected a transformers model of a supported family: "
                       "GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM.*Qwen3ForCausalLM.*BertModel"):  # fmt: skip
        from_hf(bert)
    with pytest.raises(AttnlibError, match="model: expected .*received.*LlamaModel"):
        from_hf(llama().model)  # the body without its head
    with pytest.raises(AttnlibError, match="model: expected .*received str"):
        from_hf("meta-llama/Meta-Llama-3-8B")  # a name: attnlib never downloads


def test_unsupported_options_are_named():
    """Chapter 19 builds RoPE scaling and every family's windows (tests/test_hf_families.py); what attnlib
    does not build is still refused by name: another MLP activation, chunked attention (Llama 4), a
    bidirectional window (Gemma 3's embedding models), dropout on the attention weights."""
    with pytest.raises(AttnlibError, match=r"MLP activation is 'silu'.*received relu"):
        from_hf(llama(hidden_act="relu"))
    for option, value in (("attention_chunk_size", 8), ("use_bidirectional_attention", True),
                          ("attention_dropout", 0.1)):  # fmt: skip
        hf = llama()
        setattr(hf.config, option, value)
        with pytest.raises(AttnlibError, match=rf"{option} = .*received {option} = {value!r}"):
            from_hf(hf)
    relu = transformers.GPT2Config(vocab_size=97, n_positions=64, n_embd=32, n_layer=1, n_head=4,
                                   activation_function="relu")  # fmt: skip
    with pytest.raises(AttnlibError, match=r"activation_function = 'gelu_new'"):
        from_hf(transformers.GPT2LMHeadModel(relu))


YARN = {"factor": 40.0, "original_max_position_embeddings": 4096}


@pytest.mark.parametrize(
    "config, match",
    [  # transformers 5's spelling, 4's, both (a keyword 4 does not know stays a plain attribute)
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, **YARN}}, "received rope type = 'yarn'"),
        ({"rope_theta": 1e4, "rope_scaling": {"rope_type": "yarn", **YARN}}, "received rope type = 'yarn'"),
        ({"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2.0}}, "received rope type = 'linear'"),
        (
            {
                "rope_parameters": {"rope_type": "default", "rope_theta": 1e4},
                "rope_theta": 1e4,
                "rope_scaling": {"rope_type": "yarn", **YARN},
            },
            "received rope type = 'yarn'",
        ),  # fmt: skip
        (
            {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}, "rope_theta": 1e4},
            r"RoPE spellings agree .*received rope_parameters: .*1000000.0\}; rope_scaling: \{'rope_theta': 10000",
        ),
    ],
)
def test_rope_is_read_in_both_transformers_spellings(config, match):
    """Every spelling of RoPE a config carries must say default RoPE with one theta, whatever the
    transformers version: 4.x keeps YaRN in rope_scaling, and accepting it builds a wrong layer."""
    from attnlib._hf_checks import check_hf_rope

    with pytest.raises(AttnlibError, match=match):
        check_hf_rope(SimpleNamespace(**config), "a config")
    default = {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}, "rope_theta": 5e5, "rope_scaling": None}
    assert check_hf_rope(SimpleNamespace(**default), "a config") == 5e5
    assert check_hf_rope(SimpleNamespace(rope_theta=1e6, rope_scaling={"rope_type": "default"}), "a config") == 1e6


@pytest.mark.parametrize("spelling", ["installed", "other"])
def test_from_hf_reads_a_yarn_deepseek_v3_layer_only_in_the_installed_spelling(spelling):
    """A DeepseekV3Attention with YaRN (chapter 19) is loaded when its config says so in the installed
    transformers' spelling, which its layer reads (tests/test_latent.py compares the outputs); said in
    4.x's only through a 5.x attribute, which its layer never reads, it is refused."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    sizes = dict(
        vocab_size=50, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10,
        first_k_dense_replace=1,
    )  # fmt: skip
    if spelling == "installed":
        config = transformers.DeepseekV3Config(**sizes, **rope(10000.0, "yarn", **YARN))
    else:
        config = transformers.DeepseekV3Config(**sizes, **rope())
        if V5:  # 4.x's spelling; in 5 rope_scaling is a deprecated alias that writes rope_parameters
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                config.rope_scaling = {"rope_type": "yarn", "rope_theta": 10000.0, **YARN}
        else:  # 5's spelling: 4.x keeps it as a plain attribute that its layer never reads
            config.rope_parameters = {"rope_type": "yarn", "rope_theta": 10000.0, **YARN}
    if spelling == "installed" or V5:  # in 5 the alias wrote rope_parameters, which the layer reads
        assert from_hf(ds.DeepseekV3Attention(config, layer_idx=0)).pos_enc.scaling.rope_type == "yarn"
        return
    with pytest.raises(AttnlibError, match=r"RoPE spellings agree.*'yarn'"):
        from_hf(ds.DeepseekV3Attention(config, layer_idx=0))


def test_a_config_changed_after_loading_is_a_different_model():
    """The weights alone do not make the model: the same weights with Llama's RoPE base changed give
    other logits (so the equality above tests the config too)."""
    hf = llama()
    mine = from_hf(hf)
    other = attnlib.GPT(dataclasses.replace(mine.config, rope_base=10000.0)).eval()
    other.load_state_dict(mine.state_dict())
    with torch.no_grad():
        assert not torch.allclose(other(IDS), mine(IDS), atol=1e-3)


def test_deepseek_v3s_query_norm_becomes_q_latent_norm_not_qk_norm():
    """DeepSeek-V3's RMSNorm of the compressed query, q_a_layernorm (over q_lora_rank), lands in
    MultiHeadLatentAttention.q_latent_norm; the name q_norm stays QK-norm's (MultiHeadAttention, over d_head)."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    config = transformers.DeepseekV3Config(
        vocab_size=50, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10,
        **rope(), first_k_dense_replace=1,
    )  # fmt: skip
    layer = ds.DeepseekV3Attention(config, layer_idx=0)
    with torch.no_grad():
        layer.q_a_layernorm.weight.copy_(torch.linspace(0.5, 1.5, 24))  # gains that differ from the default 1
        layer.kv_a_layernorm.weight.copy_(torch.linspace(2.0, 3.0, 16))
    mine = from_hf(layer)
    assert not hasattr(mine, "q_norm") and "q_latent_norm.weight" in mine.state_dict()
    assert torch.equal(mine.q_latent_norm.weight, layer.q_a_layernorm.weight)
    assert torch.equal(mine.kv_norm.weight, layer.kv_a_layernorm.weight)


def test_a_decoder_familys_rope_is_read_per_layer_type_and_its_spellings_must_agree():
    """Chapter 19: a scaled RoPE is read in either spelling, per layer type where transformers 5 keeps one dict
    per type (Gemma 3) or 4 keeps the sliding layers' base apart (rope_local_base_freq); a config whose two
    spellings say different things is refused, since each transformers version reads only its own."""
    from attnlib._hf_checks import hf_rope

    yarn = {"rope_type": "yarn", "rope_theta": 1e4, **YARN}
    both = SimpleNamespace(rope_parameters=dict(yarn), rope_theta=1e4, rope_scaling={"rope_type": "yarn", **YARN})
    assert hf_rope(both, "llama") == (1e4, yarn)
    stray = SimpleNamespace(rope_parameters=dict(yarn), rope_theta=1e4, rope_scaling=None)  # 4.x ignores the first
    with pytest.raises(AttnlibError, match="RoPE spellings agree"):
        hf_rope(stray, "llama")
    per_type = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
    v5 = SimpleNamespace(rope_parameters=per_type)
    assert hf_rope(v5, "gemma3_text", "full") == (1e6, per_type["full_attention"])
    assert hf_rope(v5, "gemma3_text", "sliding") == (1e4, per_type["sliding_attention"])
    v4 = SimpleNamespace(rope_theta=1e6, rope_scaling={"rope_type": "linear", "factor": 8.0}, rope_local_base_freq=1e4)
    assert hf_rope(v4, "gemma3_text", "full") == (1e6, {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6})
    assert hf_rope(v4, "gemma3_text", "sliding") == (1e4, {"rope_type": "default", "rope_theta": 1e4})
