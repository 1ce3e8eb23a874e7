"""Chapter 7: counting parameters, in closed form and by walking a module.

Multi-head attention has four ``d x d`` projections, whatever the number of
heads (the heads split ``d_model``, they do not multiply it):

    attention_params(d) = 4 d^2 + 4 d           # W_Q, W_K, W_V, W_O and their biases

A GPT block adds an MLP (``2 d d_ff + d_ff + d``) and two LayerNorms
(``2 d`` each); the model adds the token and position embeddings, a final
LayerNorm, and an output head that is free when tied to the token embedding.
For GPT-2 small this is 124,439,808, exactly what ``count_params`` finds by
walking the module.

Chapter 12: with grouped-query attention (``n_kv_heads`` key/value heads) ``W_K`` and
``W_V`` are only ``d x (n_kv_heads d_head)``; and :func:`kv_cache_bytes` gives the memory
of the keys and values a model keeps while it generates.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    check_cached_tokens,
    check_head_counts,
    ensure_bool,
    ensure_float_dtype,
    ensure_instance,
    ensure_int,
    fail,
)
from .model import GPTConfig

__all__ = [
    "attention_params",
    "mla_params",
    "mlp_params",
    "layernorm_params",
    "param_breakdown",
    "gpt_params",
    "count_params",
    "kv_cache_bytes",
]


def attention_params(
    d_model: int,
    bias: bool = True,
    *,
    n_heads: int | None = None,
    n_kv_heads: int | None = None,
    d_head: int | None = None,
) -> int:
    """Parameters of one multi-head attention layer: ``4 d^2 + 4 d`` (``4 d^2`` without biases).

    Independent of the number of heads. With grouped-query attention, ``n_kv_heads``
    key/value heads of ``d_head = d / n_heads``: ``W_Q`` and ``W_O`` stay ``d x d``,
    ``W_K`` and ``W_V`` are ``d x d_kv`` with ``d_kv = n_kv_heads d_head``, so
    ``2 d^2 + 2 d d_kv`` weights and ``2 d + 2 d_kv`` biases. With a ``d_head`` of its own
    (chapter 15), ``W_Q`` is ``d x d_q`` and ``W_O`` ``d_q x d`` with ``d_q = n_heads d_head``:
    ``2 d d_q + 2 d d_kv`` weights and ``d_q + d + 2 d_kv`` biases.

    Args:
        d_model: model width ``d``.
        bias: whether the four projections have biases.
        n_heads, n_kv_heads, d_head: needed only for grouped-query attention or a head width
            other than ``d / n_heads``; ``n_kv_heads=None`` (default) means ``n_heads``,
            ``d_head=None`` means ``d_model / n_heads``.

    Example:
        >>> attention_params(768)                 # GPT-2 small: 4 * 768**2 + 4 * 768
        2362368
        >>> attention_params(768, bias=False)
        2359296
        >>> attention_params(768, n_heads=12, n_kv_heads=1)   # multi-query: W_K, W_V are 768 x 64
        1279616
        >>> attention_params(1024, False, n_heads=16, n_kv_heads=8, d_head=128)   # Qwen3 0.6B: d_q = 2048
        6291456
    """
    ensure_int("d_model", d_model)
    ensure_bool("bias", bias)
    check_head_counts(d_model, n_heads, n_kv_heads, d_head)
    if d_head is None:
        d_head = d_model if n_heads is None else d_model // n_heads
        n_heads = n_heads or 1
    d_q = n_heads * d_head  # d_model unless the config sets d_head
    d_kv = d_q if n_kv_heads is None else n_kv_heads * d_head  # n_kv_heads * d_head
    return 2 * d_model * d_q + 2 * d_model * d_kv + (d_q + d_model + 2 * d_kv if bias else 0)


def mla_params(
    d_model: int, n_heads: int, kv_rank: int, q_rank: int | None, d_head_nope: int, d_head_rope: int, d_head_v: int
) -> int:
    """Parameters of one multi-head latent attention layer (chapter 17), no biases:

    queries ``d H (n + r)`` (or ``d q_rank + q_rank + q_rank H (n + r)`` compressed, with the
    RMSNorm's gain), the latent and the shared rotated key ``d (kv_rank + r) + kv_rank`` (with its
    RMSNorm's gain), keys and values from the latent ``kv_rank H (n + d_v)``, the output
    ``H d_v d``; ``n = d_head_nope``, ``r = d_head_rope``, ``H = n_heads``.

    Example:
        >>> mla_params(32, 4, kv_rank=8, q_rank=None, d_head_nope=8, d_head_rope=4, d_head_v=8)
        3464
        >>> from attnlib import MultiHeadLatentAttention
        >>> count_params(MultiHeadLatentAttention(32, 4, kv_rank=8, d_head_nope=8, d_head_rope=4, d_head_v=8))
        3464
    """
    d, H, n, r = d_model, n_heads, d_head_nope, d_head_rope
    queries = d * H * (n + r) if q_rank is None else d * q_rank + q_rank + q_rank * H * (n + r)
    return queries + d * (kv_rank + r) + kv_rank + kv_rank * H * (n + d_head_v) + H * d_head_v * d


def mlp_params(d_model: int, d_ff: int, bias: bool = True, *, gated: bool = False) -> int:
    """Parameters of the MLP ``d_model -> d_ff -> d_model``: ``2 d d_ff + d_ff + d`` (``2 d d_ff`` without biases).

    ``gated=True`` is SwiGLU (chapter 15): three matrices, ``gate`` and ``up`` ``d x d_ff`` and
    ``down`` ``d_ff x d``, so ``3 d d_ff`` weights (``+ 2 d_ff + d`` biases).

    Example:
        >>> mlp_params(768, 3072)
        4722432
        >>> mlp_params(4096, 14336, bias=False, gated=True)   # Llama 3 8B: 3 * 4096 * 14336
        176160768
    """
    ensure_int("d_model", d_model)
    ensure_int("d_ff", d_ff)
    ensure_bool("bias", bias)
    ensure_bool("gated", gated)
    if gated:
        return 3 * d_model * d_ff + (2 * d_ff + d_model if bias else 0)
    return 2 * d_model * d_ff + (d_ff + d_model if bias else 0)


def layernorm_params(d_model: int, bias: bool = True) -> int:
    """Parameters of a LayerNorm: ``2 d`` (scale and shift), ``d`` without the shift.

    Example:
        >>> layernorm_params(768)
        1536
    """
    ensure_int("d_model", d_model)
    ensure_bool("bias", bias)
    return 2 * d_model if bias else d_model


def param_breakdown(config: GPTConfig) -> dict[str, int]:
    """The parameters of a :class:`~attnlib.model.GPT`, part by part (all blocks together).

    ``n_vocab d`` token embeddings (n_vocab = vocab_size), ``context_length d`` positions, ``n_layers`` times
    (attention + MLP + 2 LayerNorms), a final LayerNorm, and ``n_vocab d`` for the
    output head only when it is not tied to the token embedding.

    Args:
        config: a :class:`~attnlib.model.GPTConfig`.

    Returns:
        A dict from part name to parameter count; its values sum to :func:`gpt_params`.

    Example:
        >>> from attnlib.model import GPT2_SMALL
        >>> for part, n in param_breakdown(GPT2_SMALL).items():
        ...     print(f"{part:24} {n:>12,}")
        token embeddings           38,597,376
        position embeddings           786,432
        attention                  28,348,416
        MLP                        56,669,184
        LayerNorms                     38,400
        output head (untied)                0
    """
    ensure_instance("config", config, GPTConfig, "a GPTConfig")
    d, L, b, c = config.d_model, config.n_layers, config.bias, config
    d_q, d_kv = c.n_heads * c.head_dim, (c.n_kv_heads or c.n_heads) * c.head_dim  # the projections' widths
    if c.attention == "mla":  # chapter 17
        attention = mla_params(d, c.n_heads, c.kv_rank, c.q_rank, c.mla_nope_dim, c.mla_rope_dim, c.mla_v_dim)
    else:
        attention = attention_params(d, False, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, d_head=c.d_head)
        qkv_bias, out_bias = (b if x is None else x for x in (c.qkv_bias, c.out_bias))  # chapter 19: per projection
        attention += (d_q + 2 * d_kv if qkv_bias else 0) + (d if out_bias else 0)
        attention += (d * d_q + (d_q if qkv_bias else 0)) if c.output_gate else 0  # chapter 20: W_G (and its bias)
    qk_norm = {"projection": d_q + d_kv, "unweighted": 0}.get(c.qk_norm, 2 * c.head_dim) if c.qk_norm else 0
    sinks = c.n_heads if c.learned_sinks else 0  # chapter 16: one sink logit per head
    norms = ("LayerNorms", layernorm_params(d, b)) if c.norm == "layernorm" else ("RMSNorms", d)  # one gain
    per_block = {"pre_norm": 2, "sandwich": 4, "post_norm": 2, "parallel": 1}[c.block]  # chapter 19: where they sit
    n_delta = sum(c.is_recurrent(i) for i in range(L))  # chapter 20: Gated DeltaNet layers, their own parameters
    delta = delta_net_params(c) if n_delta else 0
    if c.mlp == "external":
        raise fail("config", "a config whose MLP it describes (count a model with count_params)",
                   "mlp='external', a module from the checkpoint")  # fmt: skip
    return {
        "token embeddings": c.vocab_size * d,
        "position embeddings": c.context_length * d if c.positions == "learned" else 0,
        "attention": (L - n_delta) * (attention + qk_norm + sinks) + n_delta * delta,  # chapter 20: DeltaNet layers
        "MLP": L * mlp_params(d, c.d_ff, b, gated=c.mlp in ("swiglu", "geglu")),
        norms[0]: (per_block * L + 1) * norms[1],  # per block + the final one
        "output head (untied)": 0 if c.tie_embeddings else c.vocab_size * d,
    }


def delta_net_params(c: GPTConfig) -> int:
    """Parameters of one Gated DeltaNet layer (chapter 20): ``W_q``, ``W_k`` ``d x H_k d_k``; ``W_v``, ``W_z``
    ``d x H d_v``; ``W_b``, ``W_a`` ``d x H``; the convolution ``(2 H_k d_k + H d_v) x conv``; ``A_log`` and
    ``dt_bias`` ``(H,)`` each; the output norm's gains ``(d_v,)``; ``W_out`` ``H d_v x d``."""
    d, H, K = c.d_model, c.delta_heads, c.delta_conv
    d_k, d_v = (c.delta_k_heads or H) * c.delta_d_k, H * c.delta_d_v
    return 2 * d * d_k + 2 * d * d_v + 2 * d * H + (2 * d_k + d_v) * K + 2 * H + c.delta_d_v + d_v * d


def gpt_params(config: GPTConfig) -> int:
    """Total parameters of ``GPT(config)`` in closed form.

    ``n_vocab d + C d + L (attention_params + mlp_params + 2 layernorm_params) + layernorm_params
    (+ n_vocab d if the head is untied)``, with ``C`` the context length and ``L`` the layers.

    Example:
        >>> from attnlib.model import GPT2_SMALL
        >>> gpt_params(GPT2_SMALL)
        124439808
    """
    return sum(param_breakdown(config).values())


def count_params(module: nn.Module) -> int:
    """Count a module's parameters by walking it; a shared (tied) tensor counts once.

    ``count_params(m) = sum(p.numel() for p in m.parameters())`` (``parameters()``
    skips a tensor it has already seen). Works on the meta device.

    Args:
        module: any ``torch.nn.Module``.

    Example:
        >>> count_params(nn.Linear(768, 768))      # 768 * 768 weights + 768 biases
        590592
    """
    ensure_instance("module", module, nn.Module, "a torch.nn.Module")
    return sum(p.numel() for p in module.parameters())


def kv_cache_bytes(config: GPTConfig, T: int | None = None, B: int = 1, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the KV cache of ``GPT(config)`` holding ``T`` tokens of ``B`` sequences.

    ``2 n_layers B n_kv_heads T d_head x bytes per number``: every layer keeps a key and a
    value ``(B, n_kv_heads, T, d_head)``. With ``n_kv_heads = n_heads`` it is
    ``2 n_layers B T d_model`` numbers; grouped-query attention divides it by
    ``n_heads / n_kv_heads``. The weights do not depend on ``T`` or ``B``; the cache grows
    with both. A sliding layer (chapter 16) of window ``w`` needs no key further back than
    ``w - 1`` tokens: after ``T`` tokens its rolling cache, ``KVCache(window=w)``, holds
    ``min(T, w - 1)`` of them until the next step (``w`` during a step, with the new token), and
    that is what is counted here, so ``kv_cache_bytes`` equals the caches' ``nbytes`` between two
    steps. StreamingLLM's sinks are an option of the cache, not of the config, and are not counted:
    ``KVCache(window=w, sinks=s)`` holds ``min(T, s + w - 1)`` tokens. Multi-head latent attention
    (chapter 17) caches ``kv_rank + d_head_rope`` numbers per token and layer (DeepSeek-V2's Table 1), in
    one :class:`~attnlib.latent.LatentCache` per layer, whose ``nbytes`` this equals.

    Args:
        config: a :class:`~attnlib.model.GPTConfig` (its ``n_kv_heads`` is used).
        T: cached tokens per sequence, ``1 .. context_length``; ``None`` (default): the full
            context, ``context_length``.
        B: number of sequences.
        dtype: the cache's dtype: ``torch.float32`` (default, what attnlib computes in)
            or ``torch.float16`` / ``torch.bfloat16`` (2 bytes, what serving uses).

    Example:
        >>> from attnlib.model import GPT2_SMALL
        >>> kv_cache_bytes(GPT2_SMALL, dtype=torch.float16)   # 2 * 12 * 1024 * 768 * 2 bytes
        37748736
    """
    ensure_instance("config", config, GPTConfig, "a GPTConfig")
    T = check_cached_tokens(T, config.context_length)  # None: the full context
    ensure_int("B", B)
    ensure_float_dtype("dtype", dtype, "a floating-point torch.dtype", complex_ok=True)
    n_kv_heads = config.n_kv_heads or config.n_heads
    d_head = config.head_dim  # d_model // n_heads unless the config sets it
    # held: tokens summed over the layers; a sliding layer of window w keeps the last w - 1 between steps
    held = sum(T if w is None else min(T, w - 1) for w in map(config.layer_window, range(config.n_layers)))
    if config.attention == "mla":  # the latent and the rotated key, whatever the heads (chapter 17)
        return held * B * (config.kv_rank + config.mla_rope_dim) * dtype.itemsize
    return 2 * held * B * n_kv_heads * d_head * dtype.itemsize
