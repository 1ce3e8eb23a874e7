"""Chapters 7, 15-19: ``GPTConfig``, the sizes and choices of a GPT model, and published configurations.

Chapter 7 counts GPT-2's and GPT-3's parameters from these numbers; chapter 15 adds the options that
make the same model a Llama or a Qwen3, chapter 16 windows and sinks, chapter 17 latent attention,
chapter 19 those of every major open family (RoPE scaling, positions per layer, score scale and
soft-capping, QK-norm kinds, biases per projection, where the norms sit). :class:`~attnlib.model.GPT`
builds the model a config describes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from ._layer_checks import check_gpt_config

if TYPE_CHECKING:
    from .rope_scaling import RopeScaling

__all__ = [
    "GPTConfig",
    "GPT2_SMALL",
    "GPT2_MEDIUM",
    "GPT2_LARGE",
    "GPT2_XL",
    "GPT3_175B",
    "LLAMA3_8B",
    "QWEN3_8B",
]


@dataclass(frozen=True)
class GPTConfig:
    """The sizes of a GPT model, and (chapter 15) the choices that make it a Llama or a Qwen.

    Args:
        vocab_size: the number of token ids.
        context_length: the most tokens the model reads at once (learned positions).
        d_model: width of every token vector.
        n_layers: number of transformer blocks.
        n_heads: attention heads per block; must divide ``d_model`` unless ``d_head`` is set.
        d_ff: hidden width of the MLP; ``None`` (default) means ``4 * d_model``, filled in at
            construction (so ``dataclasses.replace(c, d_model=...)`` keeps ``c.d_ff``
            unless you also pass ``d_ff=None``).
        bias: whether linear layers and LayerNorms have biases.
        tie_embeddings: whether the output head reuses the token embedding matrix.
        n_kv_heads: key/value heads per attention layer, a divisor of ``n_heads``; ``None``
            (default) means ``n_heads``, plain multi-head attention, and is left as None
            (the printed config shows the field only when it is set). ``1`` is multi-query
            attention (Shazeer 2019), in between grouped-query attention (Ainslie et al. 2023).
        positions: ``"learned"`` (default, GPT-2: a ``(context_length, d_model)`` table added
            to the token vectors), ``"rope"`` (rotary positions inside every attention layer,
            Su et al. 2021) or ``"none"`` (no positions: only the causal mask orders tokens).
        rope_base: RoPE's frequency base (Llama 3: 500000, Qwen3: 1000000).
        norm: ``"layernorm"`` (default) or ``"rmsnorm"`` (Zhang and Sennrich 2019: no mean, no bias).
        norm_eps: the ``eps`` of every norm, QK-norm's included.
        mlp: ``"gelu"`` (default, ``W_2 GELU(W_1 x)``) or ``"swiglu"`` (Shazeer 2020:
            ``W_down (SiLU(W_gate x) * W_up x)``, three matrices).
        d_head: width of each attention head; ``None`` (default) means ``d_model // n_heads``.
            Qwen3 sets it independently (128 with ``d_model = 1024`` and 16 heads).
        qk_norm: whether each head's queries and keys go through an RMSNorm over ``d_head``
            before RoPE (Qwen3, Gemma 3; OLMo 2 instead normalises the whole
            ``n_heads * d_head`` projection, which this option does not do).
        sliding_window: chapter 16: the sliding layers attend to the last ``sliding_window``
            tokens only, each itself included (Mistral 7B: 4096); ``None`` (default): no window.
        layer_types: ``"full"`` or ``"sliding"`` for each layer (Gemma 2 alternates them,
            Gemma 3 has five sliding layers per full one); ``None`` (default): every layer
            sliding when ``sliding_window`` is set, every layer full otherwise.
        learned_sinks: one learned logit per head that joins each row's softmax and takes
            weight without adding a value (gpt-oss).
        attention: ``"mha"`` (default: multi-head attention, grouped with ``n_kv_heads``) or
            ``"mla"`` (chapter 17: multi-head latent attention, DeepSeek-V2/V3; needs
            ``positions="rope"``), with its sizes: ``kv_rank`` (the cached latent's width),
            ``q_rank`` (None: uncompressed queries), ``d_head_nope`` (the unrotated key width;
            None: ``d_model // n_heads``), ``d_head_rope`` (the rotated part; None:
            ``d_head_nope // 2``) and ``d_head_v`` (None: ``d_head_nope``). ``d_head`` is
            multi-head attention's head width and stays None with ``"mla"``.

    Chapter 19, the options of every major open family (each None or neutral by default):

        rope_scaling: a :class:`~attnlib.rope_scaling.RopeScaling` (linear, dynamic, yarn, llama3,
            longrope): RoPE's frequencies rescaled to stretch the context (Llama 3.1: "llama3").
            It applies to every RoPE layer (MLA's rotated part too: DeepSeek-V3's YaRN), or to the
            full layers only when ``rope_base_sliding`` is set.
        rope_base_sliding: the sliding layers' own RoPE base, with unscaled frequencies (Gemma 3:
            10000 beside 1000000; OLMo 3: ``rope_base`` itself, the scaling for the full layers
            only); None: the sliding layers as the full ones.
        rotary_dim: how many of each head's ``d_head`` dimensions RoPE rotates, the first ones
            (partial rotary: GPT-NeoX, Phi-4-mini, GLM-4); None: all of them.
        nope_layers: the layers (0-based) without positions among RoPE layers (SmolLM3 every
            fourth, Cohere 2 its full layers): their queries and keys are not rotated.
        attn_scale: the factor on the scores, ``softmax(q k^T * attn_scale + M)``; None:
            ``1 / sqrt(d_head)`` (Gemma: ``query_pre_attn_scalar ** -0.5``; Granite's multiplier).
        attn_softcap: the scores soft-capped, ``c tanh(s / c)``, before the mask (Gemma 2: 50).
        qk_norm: also ``"head"`` (True: per head, with gains), ``"projection"`` (OLMo 2/3: one
            RMSNorm over the whole ``n_heads * d_head`` projection) or ``"unweighted"`` (per head,
            no gains: Llama 4).
        qkv_bias, out_bias: biases of the query/key/value projections and of ``W_O``; None: ``bias``
            (Qwen2: q/k/v biases only; gpt-oss: all four, with bias-free norms).
        block: ``"pre_norm"`` (default, ``x + f(norm(x))``), ``"sandwich"`` (Gemma 2/3, GLM-4:
            ``x + norm_out(f(norm(x)))``), ``"post_norm"`` (OLMo 2/3: ``x + norm_out(f(x))``) or
            ``"parallel"`` (Cohere: ``x + attn(norm(x)) + mlp(norm(x))``).
        mlp: also ``"geglu"`` (Gemma: the gate through tanh-GELU) and ``"external"`` (a mixture of
            experts kept as ``transformers`` built it: ``from_hf`` puts it in the block).
        embed_scale: the token vectors times this (Gemma: ``sqrt(d_model)``; Granite's multiplier).
        residual_scale: each sublayer's output times this before it is added (Granite).
        logit_scale: the logits times this (Cohere; Granite: ``1 / logits_scaling``).
        logit_softcap: the logits soft-capped, ``c tanh(z / c)`` (Gemma 2: 30).

    Chapter 20: ``output_gate`` multiplies each head's output by ``sigmoid(x W_G)`` before ``W_O``
    (gated attention, Qwen3-Next). A ``"linear"`` entry of ``layer_types`` makes that layer a
    :class:`~attnlib.recurrent.GatedDeltaNet` (Qwen3-Next: three per attention layer), with
    ``delta_heads`` value heads of ``delta_d_v``, ``delta_k_heads`` query/key heads of ``delta_d_k``
    (None: ``delta_heads``) and a causal convolution ``delta_conv`` wide; it keeps a state, not keys.

    The chapter 15 and 19 fields are printed only when they differ from their defaults, which keep
    every earlier model as it was.

    Example:
        >>> GPTConfig(vocab_size=100, context_length=16, d_model=32, n_layers=2, n_heads=4).d_ff
        128
        >>> GPTConfig(100, 16, 32, 2, 4, positions="rope", norm="rmsnorm", mlp="swiglu", d_head=16)
        GPTConfig(vocab_size=100, context_length=16, d_model=32, n_layers=2, n_heads=4, d_ff=128, bias=True, tie_embeddings=True, positions='rope', norm='rmsnorm', mlp='swiglu', d_head=16)
    """

    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int | None = None
    bias: bool = True
    tie_embeddings: bool = True
    n_kv_heads: int | None = None
    positions: str = "learned"
    rope_base: float = 10000.0
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    mlp: str = "gelu"
    d_head: int | None = None
    qk_norm: bool | str = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    learned_sinks: bool = False
    attention: str = "mha"
    kv_rank: int | None = None
    q_rank: int | None = None
    d_head_rope: int | None = None
    d_head_v: int | None = None
    d_head_nope: int | None = None
    rope_scaling: RopeScaling | None = None
    rope_base_sliding: float | None = None
    rotary_dim: int | None = None
    nope_layers: tuple[int, ...] | None = None
    attn_scale: float | None = None
    attn_softcap: float | None = None
    qkv_bias: bool | None = None
    out_bias: bool | None = None
    block: str = "pre_norm"
    embed_scale: float = 1.0
    residual_scale: float = 1.0
    logit_scale: float = 1.0
    logit_softcap: float | None = None
    output_gate: bool = False
    delta_heads: int | None = None
    delta_k_heads: int | None = None
    delta_d_k: int | None = None
    delta_d_v: int | None = None
    delta_conv: int = 4

    def __repr__(self) -> str:
        always = ("vocab_size", "context_length", "d_model", "n_layers", "n_heads", "d_ff", "bias", "tie_embeddings")
        shown = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name in always or getattr(self, f.name) != f.default
        ]  # as before chapters 12 and 15 for the models of chapters 7-13
        return f"GPTConfig({', '.join(shown)})"

    def __post_init__(self):
        for name in ("layer_types", "nope_layers"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))  # frozen, hashable: a tuple
        check_gpt_config(self)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)  # frozen dataclass: set once here

    @property
    def head_dim(self) -> int:
        """``d_head``, filled in: ``d_model // n_heads`` unless the config sets it (multi-head attention's
        head width; MLA's are :attr:`mla_nope_dim`, :attr:`mla_rope_dim` and :attr:`mla_v_dim`)."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def mla_nope_dim(self) -> int:
        """MLA's ``d_head_nope``, filled in: ``d_model // n_heads`` unless the config sets it."""
        return self.d_head_nope if self.d_head_nope is not None else self.d_model // self.n_heads

    @property
    def mla_rope_dim(self) -> int:
        """MLA's ``d_head_rope``, filled in: ``mla_nope_dim // 2`` unless the config sets it."""
        return self.d_head_rope if self.d_head_rope is not None else self.mla_nope_dim // 2

    @property
    def mla_v_dim(self) -> int:
        """MLA's ``d_head_v``, filled in: ``mla_nope_dim`` unless the config sets it."""
        return self.d_head_v if self.d_head_v is not None else self.mla_nope_dim

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of layer ``layer`` (0-based): ``sliding_window`` for a sliding layer, None for a full one.

        Example:
            >>> c = GPTConfig(100, 16, 32, 4, 4, sliding_window=8, layer_types=("sliding", "full") * 2)
            >>> [c.layer_window(i) for i in range(4)]
            [8, None, 8, None]
        """
        if self.layer_types is None:
            return self.sliding_window
        return self.sliding_window if self.layer_types[layer] == "sliding" else None

    def is_recurrent(self, layer: int) -> bool:
        """Chapter 20: whether layer ``layer`` is a Gated DeltaNet (``layer_types[layer] == "linear"``)."""
        return self.layer_types is not None and self.layer_types[layer] == "linear"

    def layer_rope(self, layer: int) -> tuple[float, RopeScaling | None] | None:
        """Chapter 19: layer ``layer``'s RoPE, ``(base, scaling)``, or None for a layer without positions
        (``positions`` not ``"rope"``, or one of ``nope_layers``).

        Example:
            >>> c = GPTConfig(100, 16, 32, 3, 4, positions="rope", rope_base=1e6, sliding_window=4,
            ...               layer_types=("sliding", "full", "full"), rope_base_sliding=1e4, nope_layers=(2,))
            >>> [c.layer_rope(i) for i in range(3)]
            [(10000.0, None), (1000000.0, None), None]
        """
        if self.positions != "rope" or layer in (self.nope_layers or ()) or self.is_recurrent(layer):
            return None
        if self.rope_base_sliding is not None and self.layer_window(layer) is not None:
            return float(self.rope_base_sliding), None  # a sliding layer's own base, unscaled (Gemma 3, OLMo 3)
        return float(self.rope_base), self.rope_scaling


# Published configurations. GPT-2: Radford et al. 2019, table 2 (with the released code's
# vocab_size = 50257 and context 1024); GPT-3: Brown et al. 2020, table 2.1 (same tokenizer, context 2048).
GPT2_SMALL = GPTConfig(vocab_size=50257, context_length=1024, d_model=768, n_layers=12, n_heads=12)
GPT2_MEDIUM = GPTConfig(vocab_size=50257, context_length=1024, d_model=1024, n_layers=24, n_heads=16)
GPT2_LARGE = GPTConfig(vocab_size=50257, context_length=1024, d_model=1280, n_layers=36, n_heads=20)
GPT2_XL = GPTConfig(vocab_size=50257, context_length=1024, d_model=1600, n_layers=48, n_heads=25)
GPT3_175B = GPTConfig(vocab_size=50257, context_length=2048, d_model=12288, n_layers=96, n_heads=96)
# Chapter 15, from the published config.json files: Llama 3 8B as released in April 2024
# (meta-llama/Meta-Llama-3-8B, 8,192 tokens; Llama 3.1 8B has the same shapes and reaches 131,072
# tokens by rescaling RoPE's frequencies, "llama3" rope scaling) and Qwen3 8B (Qwen/Qwen3-8B), both
# RMSNorm, SwiGLU, RoPE, no biases, untied heads, 8 key/value heads.
LLAMA3_8B = GPTConfig(
    vocab_size=128256, context_length=8192, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336,
    bias=False, tie_embeddings=False, positions="rope", rope_base=500000.0, norm="rmsnorm", norm_eps=1e-5,
    mlp="swiglu",
)  # fmt: skip
QWEN3_8B = GPTConfig(
    vocab_size=151936, context_length=40960, d_model=4096, n_layers=36, n_heads=32, n_kv_heads=8, d_ff=12288,
    bias=False, tie_embeddings=False, positions="rope", rope_base=1000000.0, norm="rmsnorm", norm_eps=1e-6,
    mlp="swiglu", d_head=128, qk_norm=True,
)  # fmt: skip
