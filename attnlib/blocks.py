"""Chapters 7, 15 and 19: the transformer block, its norms and its MLPs.

A block is an attention layer and an MLP, each added to the residual stream. Where the norms sit is
the family's choice (``GPTConfig.block``, chapter 19)::

    pre_norm   x = x + attn(norm1(x));              x = x + mlp(norm2(x))           GPT-2, Llama, Qwen
    sandwich   x = x + norm1'(attn(norm1(x)));      x = x + norm2'(mlp(norm2(x)))   Gemma 2/3, GLM-4
    post_norm  x = x + norm1'(attn(x));             x = x + norm2'(mlp(x))          OLMo 2/3
    parallel   x = x + attn(norm1(x)) + mlp(norm1(x))                               Cohere

Granite scales each sublayer's output by ``residual_scale`` before adding it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import fail
from .config import GPTConfig
from .kv_cache import KVCache, StateCache
from .latent import MultiHeadLatentAttention
from .linear import Linear
from .multihead import MultiHeadAttention
from .recurrent import GatedDeltaNet

__all__ = ["SwiGLU", "GatedMLP", "TransformerBlock", "make_norm", "make_attention", "make_mlp"]


class GatedMLP(nn.Module):
    """A gated MLP (Shazeer 2020): ``down(act(gate(x)) * up(x))``.

    ``gate`` and ``up`` map ``d_model -> d_ff``, ``down`` maps ``d_ff -> d_model``: three
    matrices where GELU's MLP has two, so ``3 d_model d_ff`` weights. ``act`` is SiLU in SwiGLU
    (Llama, Qwen) and tanh-GELU in GeGLU (Gemma).

    Example:
        >>> GatedMLP(8, 16, activation="gelu")(torch.zeros(2, 3, 8)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False, activation: str = "silu"):
        super().__init__()
        self.gate = Linear(d_model, d_ff, bias=bias)  # (..., d_model) -> (..., d_ff)
        self.up = Linear(d_model, d_ff, bias=bias)  # (..., d_model) -> (..., d_ff)
        self.down = Linear(d_ff, d_model, bias=bias)  # (..., d_ff) -> (..., d_model)
        self.activation = activation  # "silu" or "gelu" (tanh-GELU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.gate(x)  # (..., d_ff)
        g = F.silu(g) if self.activation == "silu" else F.gelu(g, approximate="tanh")
        return self.down(g * self.up(x))  # (..., d_ff) -> (..., d_model)


class SwiGLU(GatedMLP):
    """The gated MLP of Llama and Qwen (Shazeer 2020): ``down(SiLU(gate(x)) * up(x))``.

    ``gate`` and ``up`` map ``d_model -> d_ff``, ``down`` maps ``d_ff -> d_model``: three
    matrices where GELU's MLP has two, so ``3 d_model d_ff`` weights.

    Example:
        >>> SwiGLU(8, 16)(torch.zeros(2, 3, 8)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__(d_model, d_ff, bias, activation="silu")


class ExternalMLP(nn.Module):
    """``GPTConfig(mlp="external")``: the place of an MLP that the config does not describe (a mixture
    of experts, chapter 19), filled by :func:`attnlib.from_hf` with the checkpoint's own module.
    Until then it has no parameters and calling it raises an error that says so."""

    def __init__(self, module: nn.Module | None = None):
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.module is None:
            raise fail("mlp", "a block whose MLP was given (from_hf puts a checkpoint's own module here)",
                       'GPTConfig(mlp="external") with no module')  # fmt: skip
        out = self.module(x)
        return out[0] if isinstance(out, tuple) else out  # some return (hidden states, router logits)


def make_norm(config: GPTConfig) -> nn.Module:
    """The config's norm over ``d_model``: ``nn.LayerNorm`` or ``nn.RMSNorm``, with its ``norm_eps``."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=config.norm_eps)  # x / rms(x) * g: no mean, no bias
    return nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.bias)


def make_mlp(config: GPTConfig) -> nn.Module:
    """The config's MLP: GELU's two matrices (GPT-2), a gated MLP (SwiGLU, GeGLU), or a given module."""
    d, bias = config.d_model, config.bias
    if config.mlp == "swiglu":
        return SwiGLU(d, config.d_ff, bias)
    if config.mlp == "geglu":
        return GatedMLP(d, config.d_ff, bias, activation="gelu")
    if config.mlp == "external":
        return ExternalMLP()
    return nn.Sequential(
        Linear(d, config.d_ff, bias=bias),  # (B, T, d_model) -> (B, T, d_ff)
        nn.GELU(approximate="tanh"),  # GPT-2 uses the tanh approximation of GELU
        Linear(config.d_ff, d, bias=bias),  # (B, T, d_ff) -> (B, T, d_model)
    )


def make_attention(config: GPTConfig, layer: int = 0) -> nn.Module:
    """The attention layer of block ``layer``: multi-head attention with the config's options
    (chapters 6-16, 19: this layer's RoPE, :meth:`GPTConfig.layer_rope`), or multi-head latent
    attention (``attention="mla"``, chapter 17)."""
    if config.is_recurrent(layer):  # chapter 20: a Gated DeltaNet layer (Qwen3-Next's "linear_attention")
        return GatedDeltaNet(config.d_model, config.delta_heads, config.delta_d_k, config.delta_d_v,
                             config.delta_k_heads, config.delta_conv, config.norm_eps)  # fmt: skip
    if config.attention == "mla":
        return MultiHeadLatentAttention(
            config.d_model, config.n_heads, kv_rank=config.kv_rank, q_rank=config.q_rank,
            d_head_nope=config.mla_nope_dim, d_head_rope=config.mla_rope_dim, d_head_v=config.mla_v_dim,
            rope_base=config.rope_base, norm_eps=config.norm_eps, rope_scaling=config.rope_scaling,
        )  # fmt: skip
    rope = config.layer_rope(layer)  # (base, scaling), or None: no positions in this layer
    base, scaling = rope if rope is not None else (config.rope_base, None)
    return MultiHeadAttention(
        config.d_model, config.n_heads, n_kv_heads=config.n_kv_heads, bias=config.bias, d_head=config.head_dim,
        rope=rope is not None, rope_base=base, qk_norm=config.qk_norm, norm_eps=config.norm_eps,
        sliding_window=config.layer_window(layer), learned_sinks=config.learned_sinks,
        rope_scaling=scaling, rotary_dim=config.rotary_dim, scale=config.attn_scale, softcap=config.attn_softcap,
        qkv_bias=config.qkv_bias, out_bias=config.out_bias, output_gate=config.output_gate,
    )  # fmt: skip


class TransformerBlock(nn.Module):
    """One block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))`` (pre-norm), or the config's ``block``.

    GPT-2: ``mlp(x) = GELU(x W_1 + b_1) W_2 + b_2`` with ``W_1 (d_model, d_ff)`` and
    ``W_2 (d_ff, d_model)``, LayerNorms, causal multi-head self-attention. The config's
    chapter 15 options make it a Llama/Qwen3 block: ``ln1``, ``ln2`` are RMSNorms
    (``norm="rmsnorm"``), ``mlp`` is a :class:`SwiGLU`, the attention rotates queries and keys
    (``positions="rope"``), with QK-norm and its own ``d_head`` when set. Chapter 19: ``block``
    places the norms (this module's docstring): ``ln1_out`` and ``ln2_out`` normalise the
    sublayers' outputs (``"sandwich"``, ``"post_norm"``; None otherwise), ``"post_norm"``
    has no ``ln1``, ``ln2`` (identities) and ``"parallel"`` no ``ln2``.

    Args:
        config: a :class:`GPTConfig`.
        layer: the block's index in the model, 0-based (default 0): which layer type it is
            when ``config.layer_types`` mixes full and sliding layers (chapter 16), and whether it
            has positions (``config.nope_layers``, chapter 19).

    Example:
        >>> block = TransformerBlock(GPTConfig(100, 16, d_model=32, n_layers=1, n_heads=4))
        >>> block(torch.zeros(2, 5, 32)).shape                # (B, T, d_model) in and out
        torch.Size([2, 5, 32])
    """

    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        kind = config.block
        self.parallel, self.scale = kind == "parallel", config.residual_scale
        self.recurrent = config.is_recurrent(layer)  # chapter 20: a Gated DeltaNet in place of attention
        outputs = kind in ("sandwich", "post_norm")  # norms on the sublayers' outputs (None: none)
        self.ln1 = nn.Identity() if kind == "post_norm" else make_norm(config)  # the attention's input
        self.attn = make_attention(config, layer)
        self.ln1_out = make_norm(config) if outputs else None  # the attention's output
        self.ln2 = nn.Identity() if kind in ("post_norm", "parallel") else make_norm(config)  # the MLP's input
        self.mlp = make_mlp(config)
        self.ln2_out = make_norm(config) if outputs else None  # the MLP's output

    def forward(
        self,
        x: torch.Tensor,
        need_weights: bool = False,
        kv_cache: KVCache | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``x``: ``(B, T, d_model)`` -> ``(B, T, d_model)``.

        With ``need_weights=True`` it returns ``(x, weights)``: also the attention weights
        ``(B, n_heads, T, T)``, computed step by step (the default path uses
        ``F.scaled_dot_product_attention``, faster, and keeps no weights).
        With a ``kv_cache`` (this block's :class:`KVCache`), ``x`` holds the new tokens only;
        they attend to the cached ones too (weights ``(B, n_heads, T, T_cached + T)``).
        ``positions`` (RoPE only): the tokens' positions, as ``MultiHeadAttention`` takes them.
        """
        h = self.ln1(x)  # (B, T, d_model)
        if self.recurrent:  # chapter 20: a Gated DeltaNet carries a state, not keys and values; it has no weights
            a, weights = self.recur(h, kv_cache), None
        else:
            a, weights = self.attn(h, is_causal=True, need_weights=need_weights, kv_cache=kv_cache, positions=positions)
        if self.parallel:  # Cohere: the MLP reads the same normalised input, both added at once
            x = x + self.residual(a, None) + self.residual(self.mlp(h), None)
        else:
            x = x + self.residual(a, self.ln1_out)
            x = x + self.residual(self.mlp(self.ln2(x)), self.ln2_out)
        return (x, weights) if need_weights else x

    def recur(self, h: torch.Tensor, cache: StateCache | None) -> torch.Tensor:
        """Chapter 20: the Gated DeltaNet layer over ``h`` ``(B, T, d_model)``, from the cache's state and into it."""
        y, state = self.attn(h, None if cache is None else cache.state)  # (B, T, d_model), the state after h
        if cache is not None:
            cache.update(state, h.shape[1])
        return y

    def residual(self, y: torch.Tensor, norm: nn.Module | None) -> torch.Tensor:
        """A sublayer's output ``y`` as it joins the residual stream: through its output norm (``"sandwich"``,
        ``"post_norm"``), times ``residual_scale`` (Granite); as it is otherwise."""
        y = y if norm is None else norm(y)
        return y if self.scale == 1.0 else y * self.scale
