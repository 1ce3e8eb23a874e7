"""Chapter 19: what each open family's attention uses, read from its ``transformers`` config.

:data:`FAMILIES` says, for every decoder family :func:`attnlib.from_hf` loads, what its checkpoints
share whatever their sizes: how RoPE's pairs are laid out (``"half"``: dimension ``i`` with
``i + d/2``, GPT-NeoX's "rotate half"; ``"interleaved"``: ``(2i, 2i + 1)``, attnlib's and RoFormer's),
where the norms sit, its MLP, its QK-norm. :func:`gpt_config` reads the rest, what one checkpoint
sets (sizes, RoPE base and scaling, windows, biases, score scale, soft caps), into a
:class:`~attnlib.config.GPTConfig`, and refuses an option attnlib does not build with an error that
names it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ._hf_checks import check_hf_activation, check_hf_options, hf_layer_types, hf_rope
from .config import GPTConfig
from .rope_scaling import RopeScaling

__all__ = ["Family", "FAMILIES", "gpt_config", "attention_summary"]

PRE = {"ln1": "input_layernorm", "ln2": "post_attention_layernorm"}
GEMMA = {"ln1": "input_layernorm", "ln1_out": "post_attention_layernorm",
         "ln2": "pre_feedforward_layernorm", "ln2_out": "post_feedforward_layernorm"}  # fmt: skip
GLM4 = {"ln1": "input_layernorm", "ln1_out": "post_self_attn_layernorm",
        "ln2": "post_attention_layernorm", "ln2_out": "post_mlp_layernorm"}  # fmt: skip
OLMO2 = {"ln1_out": "post_attention_layernorm", "ln2_out": "post_feedforward_layernorm"}


@dataclass(frozen=True)
class Family:
    """What every checkpoint of a ``transformers`` decoder family shares (the rest is in its config).

    Args:
        cls: the ``transformers`` class ``from_hf`` takes (``...ForCausalLM``).
        pairs: RoPE's layout in the checkpoint, ``"half"`` (permuted to attnlib's interleaved pairs on
            loading) or ``"interleaved"`` (kept).
        block: where the norms sit, ``GPTConfig.block``; ``norms``: attnlib's name -> the layer's.
        mlp: ``"swiglu"``, ``"geglu"``, ``"fused"`` (SwiGLU with gate and up stacked in one matrix,
            ``gate_up_proj``) or ``"external"`` (a mixture of experts, kept as transformers built it).
        qk_norm: ``False``, ``True`` (per head) or ``"projection"``.
        gemma_norms: RMSNorm gains stored as ``g - 1`` (Gemma: ``x / rms(x) * (1 + w)``).
    """

    cls: str
    pairs: str = "half"
    block: str = "pre_norm"
    norms: dict = field(default_factory=lambda: PRE)
    mlp: str = "swiglu"
    qk_norm: bool | str = False
    gemma_norms: bool = False


FAMILIES = {
    "llama": Family("LlamaForCausalLM"),
    "mistral": Family("MistralForCausalLM"),
    "mixtral": Family("MixtralForCausalLM", mlp="external"),
    "qwen2": Family("Qwen2ForCausalLM"),
    "qwen3": Family("Qwen3ForCausalLM", qk_norm=True),
    "qwen3_moe": Family("Qwen3MoeForCausalLM", qk_norm=True, mlp="external"),
    "gemma2": Family("Gemma2ForCausalLM", block="sandwich", norms=GEMMA, mlp="geglu", gemma_norms=True),
    "gemma3_text": Family(
        "Gemma3ForCausalLM", block="sandwich", norms=GEMMA, mlp="geglu", qk_norm=True, gemma_norms=True
    ),  # fmt: skip
    "smollm3": Family("SmolLM3ForCausalLM"),
    "olmo2": Family("Olmo2ForCausalLM", block="post_norm", norms=OLMO2, qk_norm="projection"),
    "olmo3": Family("Olmo3ForCausalLM", block="post_norm", norms=OLMO2, qk_norm="projection"),
    "phi3": Family("Phi3ForCausalLM", mlp="fused"),
    "glm": Family("GlmForCausalLM", pairs="interleaved", mlp="fused"),
    "glm4": Family("Glm4ForCausalLM", pairs="interleaved", block="sandwich", norms=GLM4, mlp="fused"),
    "gpt_oss": Family("GptOssForCausalLM", mlp="external"),
    "granite": Family("GraniteForCausalLM"),
    "cohere2": Family("Cohere2ForCausalLM", pairs="interleaved", block="parallel", norms={"ln1": "input_layernorm"}),
    "qwen3_next": Family("Qwen3NextForCausalLM", mlp="external", qk_norm=True, gemma_norms=True),  # chapter 20
}


def gpt_config(c, family: str) -> GPTConfig:
    """The :class:`~attnlib.config.GPTConfig` of a ``transformers`` config ``c`` of ``family`` (a key
    of :data:`FAMILIES`), in either transformers' spelling of RoPE (5: ``rope_parameters``, per layer
    type where it differs; 4: ``rope_theta``, ``rope_scaling``)."""
    f = FAMILIES[family]
    check_hf_options(c, family)  # options attnlib does not build, named
    n_layers, n_heads = c.num_hidden_layers, c.num_attention_heads
    d_head = getattr(c, "head_dim", None) or c.hidden_size // n_heads
    types = hf_layer_types(c, family)  # ("full" | "sliding", ...), or None: every layer full
    full, sliding = hf_rope(c, family, "full"), hf_rope(c, family, "sliding")  # (theta, params) each
    rotary = int(d_head * full[1].get("partial_rotary_factor", getattr(c, "partial_rotary_factor", 1.0)))
    scaling = RopeScaling.from_hf(
        full[1], c.max_position_embeddings, getattr(c, "original_max_position_embeddings", None)
    )
    nope = _nope_layers(c, family, types)
    context = c.max_position_embeddings  # dynamic NTK scaling is made for inputs longer than that: factor times
    context = int(context * scaling.factor) if scaling is not None and scaling.rope_type == "dynamic" else context
    bias = bool(getattr(c, "mlp_bias", False))  # the MLP's; the attention's are qkv_bias and out_bias
    qkv_bias = family == "qwen2" or bool(getattr(c, "attention_bias", False))  # Qwen2: always, without W_O's
    out_bias = bool(getattr(c, "attention_bias", False)) and family not in ("qwen2", "glm", "glm4")
    return GPTConfig(
        vocab_size=c.vocab_size, context_length=context, d_model=c.hidden_size,
        n_layers=n_layers, n_heads=n_heads, n_kv_heads=getattr(c, "num_key_value_heads", None) or n_heads,
        d_ff=c.intermediate_size, bias=bias,
        tie_embeddings=bool(c.tie_word_embeddings), positions="rope", rope_base=full[0],
        norm="layernorm" if family == "cohere2" else "rmsnorm",
        norm_eps=getattr(c, "rms_norm_eps", None) or c.layer_norm_eps, mlp=_mlp(c, f),
        d_head=None if d_head * n_heads == c.hidden_size else d_head, qk_norm=f.qk_norm,
        sliding_window=c.sliding_window if types and "sliding" in types else None, output_gate=family == "qwen3_next",
        layer_types=types if types and len(set(types)) > 1 else None,
        learned_sinks=family == "gpt_oss",
        rope_scaling=scaling,
        rope_base_sliding=sliding[0] if types and "sliding" in types and sliding != full else None,
        rotary_dim=rotary if rotary < d_head else None, nope_layers=nope,
        attn_scale=_attn_scale(c, family), attn_softcap=c.attn_logit_softcapping if family == "gemma2" else None,
        qkv_bias=None if qkv_bias == bias else qkv_bias, out_bias=None if out_bias == bias else out_bias,
        block=f.block, embed_scale=_embed_scale(c, family), residual_scale=getattr(c, "residual_multiplier", 1.0),
        logit_scale=_logit_scale(c, family), logit_softcap=getattr(c, "final_logit_softcapping", None),
        **_delta_sizes(c, types),
    )  # fmt: skip


def _delta_sizes(c, types) -> dict:
    """Chapter 20: the sizes of Qwen3-Next's Gated DeltaNet layers, where ``layer_types`` has some."""
    if not types or "linear" not in types:
        return {}
    return dict(
        delta_heads=c.linear_num_value_heads,
        delta_k_heads=c.linear_num_key_heads,
        delta_d_k=c.linear_key_head_dim,
        delta_d_v=c.linear_value_head_dim,
        delta_conv=c.linear_conv_kernel_dim,
    )


def _mlp(c, f: Family) -> str:
    """The block's MLP: a mixture of experts kept as it is, or a gated MLP whose activation is checked."""
    if f.mlp == "external":
        return "external"
    act = check_hf_activation(c, "gelu" if f.mlp == "geglu" else "silu")  # SiLU, or Gemma's tanh-GELU
    return "geglu" if act == "gelu" else "swiglu"


def _nope_layers(c, family: str, types) -> tuple[int, ...] | None:
    """The layers without positions: SmolLM3's ``no_rope_layers`` (0 = no RoPE), Cohere 2's full layers."""
    if family == "smollm3":
        layers = tuple(i for i, use in enumerate(c.no_rope_layers) if not use)
    elif family == "cohere2":
        layers = tuple(i for i, t in enumerate(types or ()) if t == "full")
    else:
        return None
    return layers or None


def _attn_scale(c, family: str) -> float | None:
    """The factor on the scores when it is not ``1 / sqrt(d_head)``: Gemma's and Granite's."""
    if family in ("gemma2", "gemma3_text"):
        return c.query_pre_attn_scalar**-0.5
    if family == "granite":
        return c.attention_multiplier
    return None


def _embed_scale(c, family: str) -> float:
    """Gemma multiplies the token vectors by ``sqrt(d_model)``, Granite by its ``embedding_multiplier``."""
    if family in ("gemma2", "gemma3_text"):
        return math.sqrt(c.hidden_size)
    return getattr(c, "embedding_multiplier", 1.0) if family == "granite" else 1.0


def _logit_scale(c, family: str) -> float:
    """Cohere multiplies the logits by ``logit_scale``; Granite divides them by ``logits_scaling``."""
    if family == "cohere2":
        return c.logit_scale
    return 1.0 / c.logits_scaling if family == "granite" else 1.0


def attention_summary(c: GPTConfig) -> dict[str, str]:
    """What a config's attention uses, in a few words per column (chapter 19's table of the families).

    Example:
        >>> from attnlib.model import QWEN3_8B
        >>> attention_summary(QWEN3_8B)
        {'heads (q/kv)': '32/8', 'RoPE': 'base 1,000,000', 'rotated': 'all', 'layers': 'full', 'QK-norm': 'per head', 'scale': '1/sqrt(128)', 'soft caps': '-', 'biases': '-', 'norms': 'pre_norm', 'MLP': 'swiglu'}
    """
    rope = f"base {c.rope_base:,.0f}" if c.positions == "rope" else c.positions
    if c.rope_scaling is not None:
        factor = c.rope_scaling.factor
        rope += f", {c.rope_scaling.rope_type}" + (f" x{factor:g}" if factor else "")
    if c.rope_base_sliding is not None:  # the sliding layers' own RoPE, unscaled
        same = c.rope_base_sliding == c.rope_base
        rope += "; sliding: unscaled" if same else f"; sliding: base {c.rope_base_sliding:,.0f}"
    if c.nope_layers:
        rope += f"; none in {len(c.nope_layers)}/{c.n_layers} layers"
    types = [("sliding" if c.layer_window(i) else "full") for i in range(c.n_layers)]
    n_sliding = types.count("sliding")
    layers = f"{n_sliding} sliding ({c.sliding_window}), {c.n_layers - n_sliding} full" if n_sliding else "full"
    layers = f"sliding ({c.sliding_window})" if n_sliding == c.n_layers else layers
    qk = {False: "-", True: "per head", "head": "per head", "projection": "projection", "unweighted": "no gains"}
    biases = [x for x, on in (("qkv", c.qkv_bias if c.qkv_bias is not None else c.bias),
                              ("o", c.out_bias if c.out_bias is not None else c.bias)) if on]  # fmt: skip
    caps = [f"{what} {cap:g}" for what, cap in (("scores", c.attn_softcap), ("logits", c.logit_softcap)) if cap]
    return {
        "heads (q/kv)": f"{c.n_heads}/{c.n_kv_heads or c.n_heads}" + (", sinks" if c.learned_sinks else ""),
        "RoPE": rope,
        "rotated": "all" if c.rotary_dim is None else f"{c.rotary_dim}/{c.head_dim}",
        "layers": layers,
        "QK-norm": qk[c.qk_norm],
        "scale": f"1/sqrt({c.head_dim})" if c.attn_scale is None else f"{c.attn_scale:.4g}",
        "soft caps": ", ".join(caps) or "-",
        "biases": "+".join(biases) or "-",
        "norms": c.block,
        "MLP": {"external": "experts (kept)"}.get(c.mlp, c.mlp),
    }
