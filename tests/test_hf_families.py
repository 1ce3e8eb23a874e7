"""Chapter 19: ``attnlib.from_hf`` loads every family of the chapter's table, each from a small random config
with the options its real config.json sets (RoPE scaling, windows, sinks, biases, soft-caps, multipliers, norms).

Each model is tiny (d_model 64, 4 heads, 2 key/value heads, vocabulary 128, 2 to 6 layers: enough for every
layer type its pattern has), but its windows (6 or 8 tokens) and its RoPE's original length (16 to 32) are short, so
that the 40-token inputs below cross them and every option changes the logits. Nothing is downloaded.
Runs under transformers 5.24 and 4.57 (tests/test_transformers4.py): RoPE is spelled the installed version's
way (tests/_transformers.py)."""

import pytest
import torch

import attnlib

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
from _transformers import V5, rope  # noqa: E402  (after the skip: it imports transformers)

V = 128  # vocabulary
SIZES = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2)
T = 40  # the logits' input length: past every window and every original_max_position_embeddings below
PROMPT, NEW = 24, 16  # generation: a prompt past the windows, 16 new tokens (Phi-3's crosses its original length)


def _rope_per_type(full: dict, sliding_theta: float) -> dict:
    """Gemma 3's and OLMo 3's RoPE, one per layer type: in transformers 5 a dict per type; in 4.57 the full
    layers' ``rope_theta`` and ``rope_scaling`` (the sliding layers take default RoPE; Gemma 3 its own base,
    ``rope_local_base_freq``, OLMo 3 the same ``rope_theta``)."""
    rope_type = full.get("rope_type", "default")
    scaling = {k: v for k, v in full.items() if k not in ("rope_type", "rope_theta")}
    if V5:
        full_layers = {"rope_type": rope_type, "rope_theta": full["rope_theta"], **scaling}
        sliding_layers = {"rope_type": "default", "rope_theta": sliding_theta}
        return {"rope_parameters": {"full_attention": full_layers, "sliding_attention": sliding_layers}}
    return {"rope_theta": full["rope_theta"], "rope_scaling": {"rope_type": rope_type, **scaling}}


def _factors(n, top):
    """LongRoPE's per-pair divisors as Phi-3's config has them: about 1 for the fast pairs, growing to ``top``."""
    return [round(1.0 + (top - 1.0) * (i / (n - 1)) ** 2, 4) for i in range(n)]


def _longrope(short, long):
    """Phi-3's LongRoPE, rope_theta 10000: transformers 4.57's Phi3Config reads the legacy key ``type`` (as
    Phi-3's config.json spells it), not ``rope_type``."""
    kw = rope(10000.0, "longrope", short_factor=short, long_factor=long)
    if not V5:
        kw["rope_scaling"]["type"] = kw["rope_scaling"].pop("rope_type")
    return kw


def _init(model, seed, emb_norm=0.5):
    """Random weights of large scale, so that a wrong formula shows in the logits and greedy generation does
    not repeat one token: matrices (experts' stacks too) N(0, 1) * 2 / sqrt(fan_in); the embedding's rows of one
    norm, ``emb_norm``, small enough that the residual stream is not its own token's embedding (a tied head then
    repeats the last token); norm gains 1 + 0.3 N(0, 1) (Gemma stores gain - 1: 0.3 N(0, 1)); biases and routers'
    biases N(0, 1) * 0.3; gpt-oss's sinks N(0, 1) * 0.9."""
    g = torch.Generator().manual_seed(seed)
    gemma_norms = {
        n for n, m in model.named_modules() if type(m).__name__.startswith("Gemma") and "RMSNorm" in type(m).__name__
    }
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("sinks"):
                p.copy_(noise * 0.9)
            elif name.endswith("embed_tokens.weight"):  # rows of one norm: with a tied head, no token wins by its norm
                p.copy_(noise / noise.norm(dim=-1, keepdim=True) * emb_norm)
            elif p.dim() > 1:
                # gpt-oss's experts are stored (E, d_in, d_out) and multiplied x @ W: fan_in is the middle dimension
                fan_in = p.shape[-2] if "experts" in name and "GptOss" in type(model).__name__ else p.shape[-1]
                p.copy_(noise * 2 / fan_in**0.5)
            elif name.endswith("weight"):  # a norm's gain
                p.copy_(noise * 0.3 + (name.rsplit(".", 1)[0] not in gemma_norms))
            else:
                p.copy_(noise * 0.3)  # a bias
    return model.eval()


def _build(cls_name, config_name, seed=0, emb_norm=0.5, **config):
    """The model of class ``transformers.<cls_name>`` from ``transformers.<config_name>(**config)``, eager
    attention (the reference formula, and the only one Gemma 2's soft-cap and gpt-oss's sinks have). A family
    the installed transformers does not have is skipped."""
    if not hasattr(transformers, cls_name):
        pytest.skip(f"{cls_name}: not in transformers {transformers.__version__}")
    cfg = getattr(transformers, config_name)(**config, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg._attn_implementation = "eager"
    return _init(getattr(transformers, cls_name)(cfg), seed, emb_norm)


def llama(rope_type="llama3", **scaling):
    """Llama 3.1 / 3.2 / 3.3: rope_type "llama3" factor 8, low 1, high 4; here its original length 16 (real 8192),
    so that of the head's 8 pairs the fastest (wavelength 6.3) is in the smooth band and the seven others are
    divided by 8. Other RoPE types: the same model with linear, dynamic NTK or YaRN scaling."""
    if rope_type == "llama3":
        scaling = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16)
    max_pos = 32 if rope_type == "dynamic" else 64  # dynamic NTK scales only past max_position_embeddings
    return _build("LlamaForCausalLM", "LlamaConfig", seed=2, **SIZES, num_hidden_layers=2,
                  max_position_embeddings=max_pos, tie_word_embeddings=False, rms_norm_eps=1e-5,
                  **rope(500000.0, rope_type, **scaling))  # fmt: skip


FAMILIES = {
    "llama 3.1 (rope llama3)": llama,
    "llama, rope linear x4": lambda: llama("linear", factor=4.0),
    "llama, rope dynamic NTK x2": lambda: llama("dynamic", factor=2.0),
    "llama, rope yarn x4": lambda: llama("yarn", factor=4.0, original_max_position_embeddings=16),
    # Qwen2.5 0.5B/1.5B/3B: biases on q, k, v (not o), tied head, rope_theta 1e6
    "qwen2.5": lambda: _build(
        "Qwen2ForCausalLM",
        "Qwen2Config",
        **SIZES,
        num_hidden_layers=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        **rope(1e6),
    ),  # fmt: skip
    # Qwen3 with YaRN factor 4 as its model card enables it (original 32768 -> here 16); head_dim 24 != 64 / 4
    "qwen3, yarn x4": lambda: _build(
        "Qwen3ForCausalLM",
        "Qwen3Config",
        **SIZES,
        head_dim=24,
        num_hidden_layers=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        **rope(1e6, "yarn", factor=4.0, original_max_position_embeddings=16),
    ),  # fmt: skip
    # Mistral 7B v0.1: a sliding window on every layer (4096 -> 8)
    "mistral, window 8": lambda: _build(
        "MistralForCausalLM",
        "MistralConfig",
        **SIZES,
        num_hidden_layers=2,
        max_position_embeddings=64,
        sliding_window=8,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        **rope(10000.0),
    ),  # fmt: skip
    # Mixtral 8x7B: 8 experts top-2 (here 4 experts), no window, rope_theta 1e6
    "mixtral, 4 experts top-2": lambda: _build(
        "MixtralForCausalLM",
        "MixtralConfig",
        **SIZES,
        num_hidden_layers=2,
        max_position_embeddings=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=None,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        **rope(1e6),
    ),  # fmt: skip
    # Qwen3-30B-A3B: QK-norm, 128 experts top-8 with norm_topk_prob (here 4 top-2), every layer sparse
    "qwen3-moe, 4 experts top-2": lambda: _build(
        "Qwen3MoeForCausalLM",
        "Qwen3MoeConfig",
        **SIZES,
        head_dim=16,
        num_hidden_layers=2,
        max_position_embeddings=64,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        **rope(1e6),
    ),  # fmt: skip
    # the same with its first layer dense (mlp_only_layers) and routing weights not renormalised
    "qwen3-moe, layer 0 dense, top-k not renormalised": lambda: _build(
        "Qwen3MoeForCausalLM",
        "Qwen3MoeConfig",
        **SIZES,
        head_dim=16,
        num_hidden_layers=2,
        max_position_embeddings=64,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=False,
        mlp_only_layers=[0],
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        **rope(1e6),
    ),  # fmt: skip
    # Gemma 2 27B: soft-caps 50 / 30, query_pre_attn_scalar = d_model / heads (144) != head_dim (128): here 24 vs
    # 16; sliding and full layers alternating (window 4096 -> 6); gelu (tanh); tied; sqrt(d_model) embeddings
    "gemma2": lambda: _build(
        "Gemma2ForCausalLM",
        "Gemma2Config",
        **SIZES,
        head_dim=16,
        num_hidden_layers=2,
        max_position_embeddings=64,
        query_pre_attn_scalar=24,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        sliding_window=6,
        hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        **rope(10000.0),
    ),  # fmt: skip
    # Gemma 3 4B (text): five sliding layers per full one (window 1024 -> 6), local base 10000, full layers rope_theta
    # 1e6 with linear factor 8, QK-norm, query_pre_attn_scalar = head_dim, no soft-caps
    "gemma3": lambda: _build(
        "Gemma3ForCausalLM",
        "Gemma3TextConfig",
        **SIZES,
        head_dim=16,
        num_hidden_layers=6,
        max_position_embeddings=64,
        query_pre_attn_scalar=16,
        sliding_window=6,
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        rope_local_base_freq=10000.0,
        **_rope_per_type({"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}, 10000.0),
    ),  # fmt: skip
    # SmolLM3 3B: every 4th layer without RoPE (no_rope_layer_interval 4), rope_theta 5e6, tied
    "smollm3": lambda: _build(
        "SmolLM3ForCausalLM",
        "SmolLM3Config",
        **SIZES,
        num_hidden_layers=4,
        max_position_embeddings=64,
        no_rope_layer_interval=4,
        use_sliding_window=False,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        **rope(5e6),
    ),  # fmt: skip
    # OLMo 2: norms after attention and MLP (none before), QK-norm over the whole projection
    "olmo2": lambda: _build(
        "Olmo2ForCausalLM",
        "Olmo2Config",
        **SIZES,
        num_hidden_layers=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        **rope(500000.0),
    ),  # fmt: skip
    # OLMo 3 7B: three sliding layers per full one (window 4096 -> 6), YaRN factor 8 on the full layers (original
    # 8192 -> 16), with its config's attention_factor 1.2079 (= 0.1 ln 8 + 1) and beta 32 / 1
    "olmo3": lambda: _build(
        "Olmo3ForCausalLM",
        "Olmo3Config",
        **SIZES,
        num_hidden_layers=4,
        max_position_embeddings=64,
        sliding_window=6,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        **_rope_per_type(
            {
                "rope_type": "yarn",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "original_max_position_embeddings": 16,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "attention_factor": 1.2079441541679836,
            },
            500000.0,
        ),
    ),  # fmt: skip
    # Phi-3 mini 128k: LongRoPE (original 4096 -> 32, short and long factors per pair), fused qkv and gate_up
    "phi3, longrope": lambda: _build(
        "Phi3ForCausalLM",
        "Phi3Config",
        **SIZES,
        num_hidden_layers=2,
        max_position_embeddings=128,
        original_max_position_embeddings=32,
        sliding_window=None,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        **_longrope(_factors(8, 1.2), _factors(8, 20.0)),
    ),  # fmt: skip
    # Phi-4-mini: the same with partial_rotary_factor 0.75 (12 of 16 dimensions, 6 pairs) and a tied head
    "phi4-mini, longrope, partial rotary 0.75": lambda: _build(
        "Phi3ForCausalLM",
        "Phi3Config",
        **SIZES,
        num_hidden_layers=2,
        max_position_embeddings=128,
        original_max_position_embeddings=32,
        partial_rotary_factor=0.75,
        sliding_window=None,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        **_longrope(_factors(6, 1.1), _factors(6, 20.0)),
    ),  # fmt: skip
    # GLM-4 9B 0414: partial rotary 0.5 with interleaved pairs, biases on q, k, v, norms after attention and MLP too
    "glm4": lambda: _build(
        "Glm4ForCausalLM",
        "Glm4Config",
        **SIZES,
        head_dim=16,
        num_hidden_layers=2,
        max_position_embeddings=64,
        partial_rotary_factor=0.5,
        attention_bias=True,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        **rope(10000.0),
    ),  # fmt: skip
    # GLM-4 9B (0605, GlmForCausalLM): the same attention, Llama's norms
    "glm": lambda: _build(
        "GlmForCausalLM",
        "GlmConfig",
        **SIZES,
        head_dim=16,
        num_hidden_layers=2,
        max_position_embeddings=64,
        partial_rotary_factor=0.5,
        attention_bias=True,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        **rope(10000.0),
    ),  # fmt: skip
    # gpt-oss 20b: sinks, biases on q, k, v, o, YaRN factor 32 with truncate false (original 4096 -> 16), sliding and
    # full layers alternating (window 128 -> 6), 32 experts top-4 (here 4 top-2) with its clamped SwiGLU
    "gpt-oss": lambda: _build(
        "GptOssForCausalLM",
        "GptOssConfig",
        **SIZES,
        head_dim=16,
        num_hidden_layers=2,
        max_position_embeddings=64,
        sliding_window=6,
        num_local_experts=4,
        num_experts_per_tok=2,
        attention_bias=True,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        layer_types=["sliding_attention", "full_attention"],
        **rope(
            150000.0,
            "yarn",
            factor=32.0,
            beta_fast=32.0,
            beta_slow=1.0,
            truncate=False,
            original_max_position_embeddings=16,
        ),
    ),  # fmt: skip
    # Granite 3.3 8B: embedding x 12, score scale 1 / head_dim (1/128 -> 1/16), residual branches x 0.22, logits / 16
    "granite": lambda: _build(
        "GraniteForCausalLM",
        "GraniteConfig",
        **SIZES,
        num_hidden_layers=2,
        emb_norm=0.1,
        max_position_embeddings=64,
        embedding_multiplier=12.0,
        attention_multiplier=1 / 16,
        residual_multiplier=0.22,
        logits_scaling=16.0,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        **rope(10000000.0),
    ),  # fmt: skip
    # Command R7B: three sliding layers (interleaved RoPE) per full one without positions (window 4096 -> 6), one
    # LayerNorm without bias before attention and MLP in parallel, logits x 0.25, tied
    "cohere2": lambda: _build(
        "Cohere2ForCausalLM",
        "Cohere2Config",
        **SIZES,
        num_hidden_layers=4,
        max_position_embeddings=64,
        sliding_window=6,
        logit_scale=0.25,
        layer_norm_eps=1e-5,
        tie_word_embeddings=True,
        **rope(50000.0),
    ),  # fmt: skip
}

# HF's dynamic NTK recomputes the frequencies at each call from that call's last position, while the cache keeps
# the keys rotated with the earlier ones: its cached generation depends on how the calls were cut. Its logits are
# tested; its generation only within max_position_embeddings, where dynamic NTK is plain RoPE.
PROMPT_LENGTH = {"llama, rope dynamic NTK x2": 12}

# transformers 4.57's cached generation of Phi-3 differs from its own uncached one (and from its logits) once the
# sequence passes original_max_position_embeddings, where it drops the cache to switch to the long factors; 5.24's
# agrees with both. Under 4.57 these are compared with transformers' uncached generation.
HF4_CACHE_DIFFERS = {"phi3, longrope", "phi4-mini, longrope, partial rotary 0.75"}

IDS = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", FAMILIES)
def test_logits_and_parameter_count_equal_transformers(name):
    """Float32 logits equal to transformers' within 2e-5 of their largest magnitude. The two compute the same
    sums in another order (fused projections split, RoPE's pairs permuted, another attention kernel): measured,
    attnlib's logits differ from transformers' eager ones by at most 6e-6 of their scale, as much as transformers'
    own sdpa differs from its eager (2e-6); each family's options move them by 1e-3 (Gemma 2's final soft-cap, whose
    30 these small logits hardly reach) to 1.4 of their scale (a window, a RoPE scaling, a multiplier)."""
    hf = FAMILIES[name]()
    gpt = attnlib.from_hf(hf)
    with torch.no_grad():
        want = hf(IDS).logits
        got = gpt(IDS)
    scale = want.abs().max().item()
    assert want.std() > 0.1 * scale  # logits that differ between tokens: the comparison can fail
    torch.testing.assert_close(got, want, rtol=0, atol=2e-5 * scale)
    assert attnlib.count_params(gpt) == sum(
        p.numel() for p in hf.parameters()
    )  # parameters() counts a tied tensor once


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_generation_with_the_cache_equals_transformers(name):
    """attnlib's cached greedy generation (windows rolling, Phi-3's LongRoPE switching from its short to its long
    factors at position 32, as transformers' does by computing the cache anew) equals transformers' ``generate``."""
    hf = FAMILIES[name]()
    gpt = attnlib.from_hf(hf)
    prompt = IDS[:, : PROMPT_LENGTH.get(name, PROMPT)]
    hf.generation_config.eos_token_id = None  # never stop early: 16 new tokens exactly
    with torch.no_grad():
        # an explicit mask: without one, transformers masks every prompt token equal to pad_token_id
        out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW, do_sample=False,
                          pad_token_id=0, output_scores=True, return_dict_in_generate=True,
                          use_cache=V5 or name not in HF4_CACHE_DIFFERS)  # fmt: skip
    want, scores = out.sequences, torch.stack(out.scores)  # (B, T0 + NEW), (NEW, B, V)
    assert want.shape == (2, prompt.shape[1] + NEW)
    assert want[:, prompt.shape[1] :].unique().numel() > 3  # the model does not repeat one token
    top2 = scores.topk(2).values
    # no near-tie: each choice wins by far more than float32's rounding (the logits test: < 2e-5 of the scale)
    assert (top2[..., 0] - top2[..., 1]).min() > 1e-4 * scores.abs().max()
    assert torch.equal(gpt.generate(prompt, NEW), want)
