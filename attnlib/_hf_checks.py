"""Checks of what ``attnlib.from_hf`` converts (chapters 14-16): a ``transformers`` model of a
supported family and its configuration, RoPE in both of transformers' spellings included.

Each raises :class:`~attnlib._validate.AttnlibError` through ``attnlib/_validate.py``'s helpers.
"""

from __future__ import annotations

from torch import nn

from ._validate import fail

# 14. Hugging Face models -------------------------------------------------------------------------

HF_FAMILIES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "deepseek_v3": "DeepseekV3Attention",  # one attention layer: MultiHeadLatentAttention (chapter 16)
}


def check_hf_model(model) -> str:
    """A ``transformers`` causal language model of a family ``from_hf`` converts; return its ``model_type``."""
    family = getattr(getattr(model, "config", None), "model_type", None)
    supported = ", ".join(HF_FAMILIES.values())
    if not isinstance(model, nn.Module) or type(model).__name__ != HF_FAMILIES.get(family):
        got = type(model).__name__ + (f" (model_type {family!r})" if family else "")
        raise fail("model", f"a transformers model of a supported family: {supported}", got)
    return family


def check_hf_rope(c, what: str) -> float:
    """A ``transformers`` config whose RoPE is the default one, whichever ``transformers`` wrote it; return theta.

    transformers 5 keeps RoPE in ``rope_parameters``, 4 in ``rope_theta`` and ``rope_scaling`` (where
    Llama 3.1's "llama3" scaling and YaRN live). A config can carry both spellings (a keyword that
    transformers 4 does not know becomes a plain attribute), and a model reads only its own: every
    spelling present must say default RoPE, with one base theta (10000, transformers' default, where
    neither spelling gives one).
    """
    spellings = {}
    if getattr(c, "rope_parameters", None):
        spellings["rope_parameters"] = dict(c.rope_parameters)
    v4 = dict(getattr(c, "rope_scaling", None) or {})
    if getattr(c, "rope_theta", None) is not None:
        v4.setdefault("rope_theta", c.rope_theta)
    if v4:
        spellings["rope_scaling"] = v4
    for rope in spellings.values():
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise fail(
                "model",
                f"{what} with rope type = 'default' (what attnlib builds)",
                f"rope type = {kind!r}",
            )
    thetas = {spelling: float(rope["rope_theta"]) for spelling, rope in spellings.items() if "rope_theta" in rope}
    if len(set(thetas.values())) > 1:
        got = ", ".join(f"rope_theta = {theta:g} in {spelling}" for spelling, theta in thetas.items())
        raise fail("model", f"{what} with one RoPE base theta", got)
    return next(iter(thetas.values()), 10000.0)


def check_hf_mla_config(c) -> float:
    """A DeepSeek-V3 attention config that ``MultiHeadLatentAttention`` builds; return its RoPE base theta."""
    theta = check_hf_rope(c, "a DeepseekV3Attention")
    options = {
        "rope_interleave": (bool(getattr(c, "rope_interleave", True)), True),
        "attention_bias": (bool(getattr(c, "attention_bias", False)), False),
        "num_key_value_heads": (c.num_key_value_heads, c.num_attention_heads),
    }
    for option, (value, wanted) in options.items():
        if value != wanted:
            raise fail("model", f"a DeepseekV3Attention with {option} = {wanted!r} (what attnlib builds)", f"{value!r}")
    return theta


def check_hf_config(c, family: str) -> float | None:
    """The parts of a ``transformers`` config that attnlib's GPT builds; return the RoPE base theta (None: GPT-2)."""
    name = type(c).__name__
    if family == "gpt2":
        options = {
            "activation_function": (c.activation_function, "gelu_new"),
            "scale_attn_weights": (c.scale_attn_weights, True),
            "scale_attn_by_inverse_layer_idx": (c.scale_attn_by_inverse_layer_idx, False),
        }
        theta = None
    else:
        theta = check_hf_rope(c, f"a {name}")  # default RoPE, in either transformers' spelling
        window = getattr(c, "sliding_window", None)
        if getattr(c, "use_sliding_window", True) is False or family == "mistral":
            window = None  # Qwen3 ignores its sliding_window unless use_sliding_window; Mistral's is built
        options = {
            "hidden_act": (c.hidden_act, "silu"),
            "sliding_window": (window, None),
            "mlp_bias": (bool(getattr(c, "mlp_bias", False)), bool(getattr(c, "attention_bias", False))),
        }
    for option, (value, wanted) in options.items():
        if value != wanted:
            raise fail(
                "model",
                f"a {name} with {option} = {wanted!r} (attnlib builds Mistral's sliding window, not this model's)"
                if option == "sliding_window"
                else f"a {name} with {option} = {wanted!r} (what attnlib's GPT builds)",
                f"{option} = {value!r}",
            )
    return theta
