"""Checks of what ``attnlib.from_hf`` converts (chapters 15-17): a ``transformers`` model of a
supported family and its configuration, RoPE in both of transformers' spellings included.

Each raises :class:`~attnlib._validate.AttnlibError` through ``attnlib/_validate.py``'s helpers.
"""

from __future__ import annotations

from torch import nn

from ._validate import fail

# 14, 18. Hugging Face models ---------------------------------------------------------------------

HF_FAMILIES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "smollm3": "SmolLM3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "olmo3": "Olmo3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "glm": "GlmForCausalLM",
    "glm4": "Glm4ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "granite": "GraniteForCausalLM",
    "cohere2": "Cohere2ForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",  # chapter 20: Gated DeltaNet layers among gated attention ones
    "deepseek_v3": "DeepseekV3Attention",  # one attention layer: MultiHeadLatentAttention (chapter 17)
    "deepseek_v32": "DeepseekV32Attention",  # the same with its lightning indexer (chapter 20)
}


def check_hf_model(model) -> str:
    """A ``transformers`` causal language model of a family ``from_hf`` converts; return its ``model_type``."""
    family = getattr(getattr(model, "config", None), "model_type", None)
    supported = ", ".join(HF_FAMILIES.values())
    if not isinstance(model, nn.Module) or type(model).__name__ != HF_FAMILIES.get(family):
        got = type(model).__name__ + (f" (model_type {family!r})" if family else "")
        raise fail("model", f"a transformers model of a supported family: {supported}", got)
    return family


def hf_rope(c, family: str, kind: str = "full") -> tuple[float, dict]:
    """The RoPE of a ``transformers`` config's ``kind`` of layer (``"full"`` or ``"sliding"``): its base
    theta and its parameters (``rope_type``, ``factor``, ...), whichever transformers wrote them.

    transformers 5 keeps RoPE in ``rope_parameters``, one dict, or one per layer type (Gemma 3, OLMo 3);
    4 in ``rope_theta`` and ``rope_scaling`` (where Llama 3.1's "llama3" scaling and YaRN live), Gemma 3's
    sliding layers in ``rope_local_base_freq``, and OLMo 3's sliding layers are unscaled. A config can carry
    both spellings (a keyword that transformers 4 does not know becomes a plain attribute), and a model reads
    only its own: every spelling present must say the same (base 10000, transformers' default, where none
    gives one).
    """
    spellings = {}
    v5 = getattr(c, "rope_parameters", None)
    if v5 and ("full_attention" in v5 or "sliding_attention" in v5):  # one dict per layer type
        v5 = v5.get(f"{kind}_attention") or v5.get("full_attention")
    if v5:
        spellings["rope_parameters"] = dict(v5)
    v5_alias = isinstance(getattr(type(c), "rope_scaling", None), property)  # transformers 5: rope_parameters again
    v4 = {} if v5_alias else dict(getattr(c, "rope_scaling", None) or {})
    if getattr(c, "rope_theta", None) is not None:
        v4.setdefault("rope_theta", c.rope_theta)
    if kind == "sliding" and family == "gemma3_text" and getattr(c, "rope_local_base_freq", None) is not None:
        v4 = {"rope_type": "default", "rope_theta": c.rope_local_base_freq}
    elif kind == "sliding" and family in ("gemma3_text", "olmo3") and v4:
        v4 = {"rope_type": "default", "rope_theta": v4.get("rope_theta", 10000.0)}  # sliding layers: unscaled
    if v4:
        spellings["rope_scaling"] = v4
    return _one_rope(c, spellings)


def _one_rope(c, spellings: dict) -> tuple[float, dict]:
    """The RoPE every spelling of a config says: its base theta and its parameters; an error if they differ."""
    said = {}
    for spelling, rope in spellings.items():
        kind_of = rope.get("rope_type", rope.get("type", "default"))
        keys = {k: v for k, v in rope.items() if k not in ("rope_type", "type", "partial_rotary_factor")}
        said[spelling] = (kind_of, tuple(sorted((k, repr(v)) for k, v in keys.items())))
    if len(set(said.values())) > 1:
        got = "; ".join(f"{spelling}: {rope}" for spelling, rope in spellings.items())
        raise fail("model", f"a {type(c).__name__} whose RoPE spellings agree (each transformers reads its own)", got)
    rope = next(iter(spellings.values()), {})
    return float(rope.get("rope_theta", 10000.0)), rope


def check_hf_rope(c, what: str) -> float:
    """A ``transformers`` config whose RoPE is the default one, whichever ``transformers`` wrote it; return theta."""
    spellings = {"rope_parameters": dict(getattr(c, "rope_parameters", None) or {})}
    spellings["rope_scaling"] = dict(getattr(c, "rope_scaling", None) or {})
    if getattr(c, "rope_theta", None) is not None:
        spellings["rope_scaling"].setdefault("rope_theta", c.rope_theta)
    spellings = {spelling: rope for spelling, rope in spellings.items() if rope}
    for rope in spellings.values():  # every spelling present, whichever this transformers reads
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise fail("model", f"{what} with rope type = 'default' (what attnlib builds)", f"rope type = {kind!r}")
    return _one_rope(c, spellings)[0]


def hf_layer_types(c, family: str) -> tuple[str, ...] | None:
    """Each layer's attention, ``"full"`` or ``"sliding"``, from ``layer_types`` where the config has it
    (Gemma, Qwen2/3, OLMo 3, gpt-oss, Cohere 2), else every layer sliding where a window is set (Mistral,
    Mixtral, Phi-3, Qwen3-MoE); None: every layer full."""
    names = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"}
    types = getattr(c, "layer_types", None)
    if types is not None:
        unknown = sorted(set(types) - set(names))
        if unknown:
            raise fail("model", f"layer types among {', '.join(names)} (what attnlib builds)", unknown)
        windowed = getattr(c, "sliding_window", None) is not None
        types = tuple("full" if names[t] == "sliding" and not windowed else names[t] for t in types)
        return None if set(types) == {"full"} else types
    if family in ("mistral", "mixtral", "phi3", "qwen3_moe") and getattr(c, "sliding_window", None):
        return ("sliding",) * c.num_hidden_layers
    return None


def check_hf_activation(c, wanted: str) -> str:
    """The gated MLP's activation: ``"silu"`` (SwiGLU), or ``"gelu"`` for Gemma's tanh-GELU; return it."""
    act = getattr(c, "hidden_activation", None) or c.hidden_act
    ok = {"silu": ("silu", "swish"), "gelu": ("gelu_pytorch_tanh",)}[wanted]
    if act not in ok:
        raise fail("model", f"a {type(c).__name__} whose MLP activation is {ok[0]!r} (what attnlib builds)", act)
    return wanted


def check_hf_options(c, family: str) -> None:
    """The options of a decoder family's config that attnlib's GPT does not build, each named."""
    name = type(c).__name__
    options = {  # option: (value, what attnlib builds)
        "use_qk_norm": (bool(getattr(c, "use_qk_norm", False)), False),  # Cohere's per-head LayerNorm
        "use_bidirectional_attention": (bool(getattr(c, "use_bidirectional_attention", False)), False),
        "attention_chunk_size": (getattr(c, "attention_chunk_size", None), None),
        "attention_dropout": (float(getattr(c, "attention_dropout", 0.0) or 0.0), 0.0),
    }
    for option, (value, wanted) in options.items():
        if value != wanted:
            raise fail(
                "model", f"a {name} with {option} = {wanted!r} (what attnlib's GPT builds)", f"{option} = {value!r}"
            )


def check_hf_mla_config(c) -> tuple[float, dict]:
    """A DeepSeek-V3 attention config that ``MultiHeadLatentAttention`` builds; return its RoPE base theta and
    parameters (default, or YaRN as DeepSeek-V3 ships it: chapter 19), in either transformers' spelling."""
    theta, rope = hf_rope(c, "deepseek_v3")
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", "yarn"):
        raise fail("model", "a DeepseekV3Attention with rope type 'default' or 'yarn' (what attnlib builds)", kind)
    options = {
        "rope_interleave": (bool(getattr(c, "rope_interleave", True)), True),
        "attention_bias": (bool(getattr(c, "attention_bias", False)), False),
        "num_key_value_heads": (c.num_key_value_heads, c.num_attention_heads),
    }
    for option, (value, wanted) in options.items():
        if value != wanted:
            raise fail("model", f"a DeepseekV3Attention with {option} = {wanted!r} (what attnlib builds)", f"{value!r}")
    return theta, rope


def check_hf_config(c, family: str) -> None:
    """The parts of GPT-2's ``transformers`` config that attnlib's GPT builds."""
    options = {
        "activation_function": (c.activation_function, "gelu_new"),
        "scale_attn_weights": (c.scale_attn_weights, True),
        "scale_attn_by_inverse_layer_idx": (c.scale_attn_by_inverse_layer_idx, False),
    }
    for option, (value, wanted) in options.items():
        if value != wanted:
            raise fail("model", f"a {type(c).__name__} with {option} = {wanted!r} (what attnlib's GPT builds)",
                       f"{option} = {value!r}")  # fmt: skip
