"""Checks of the arguments that belong together: queries, keys and values, masks, token ids,
KV caches, layers, models and training.

Each raises :class:`~attnlib._validate.AttnlibError` through the helpers of
``attnlib/_validate.py`` (one per kind of argument), so that every message has the same
shape: ``<name>: expected <what>, received <what>``. A public function opens with one of
these calls, then its math.

5. queries, keys, values, the scale and the mask of attention;
6. token ids;
7. layers, KV caches and models;
8. positions, training, cost and the worked examples.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from ._validate import (
    describe,
    ensure_bool,
    ensure_callable,
    ensure_dim,
    ensure_even,
    ensure_float,
    ensure_heads,
    ensure_in_range,
    ensure_instance,
    ensure_int,
    ensure_int_tensor,
    ensure_kv_heads,
    ensure_number,
    ensure_tensor,
    fail,
)

# 5. Queries, keys, values, the scale and the mask ------------------------------------------------


def check_scale(scale) -> None:
    """Check the factor on the dot products: None or a finite number."""
    if scale is not None:
        ensure_number("scale", scale, "None or a finite number", math.isfinite)


def batch_shape(*named: tuple[str, torch.Tensor]) -> torch.Size:
    """Broadcast of the batch dimensions ``shape[:-2]`` of ``(name, tensor)`` pairs."""
    shape = torch.Size()
    for name, x in named:
        try:
            shape = torch.broadcast_shapes(shape, x.shape[:-2])
        except RuntimeError:
            raise fail(name, f"batch dimensions that broadcast with {tuple(shape)}", describe(x)) from None
    return shape


def check_qk(q, k) -> None:
    """Queries ``(..., T_q, d_k)`` and keys ``(..., T_k, d_k)``: floating point, same rank, d_k,
    dtype and device, batch dimensions that broadcast."""
    ensure_float("q", q)
    ensure_float("k", k)
    if q.dim() < 2:
        raise fail("q", "a tensor of shape (..., T_q, d_k)", describe(q))
    if k.dim() != q.dim():
        raise fail("k", f"a {q.dim()}-D tensor like q {tuple(q.shape)} (same rank)", describe(k))
    if k.shape[-1] != q.shape[-1]:
        raise fail("k", f"last dimension d_k = {q.shape[-1]} (q's d_k)", f"d_k = {k.shape[-1]} in {describe(k)}")
    if k.dtype != q.dtype or k.device != q.device:
        raise fail("k", f"dtype {q.dtype} on {q.device} (same as q)", f"{describe(k)} on {k.device}")
    batch_shape(("q", q), ("k", k))


def check_qkv(q, k, v) -> None:
    """q and k as :func:`check_qk` wants them; v float, of q's rank, dtype and device, one row per key.

    (The batch dimensions of ``v`` are checked by :func:`batch_shape`.)
    """
    check_qk(q, k)
    ensure_float("v", v)
    if v.dim() != q.dim():
        raise fail("v", f"a {q.dim()}-D tensor like q {tuple(q.shape)} (same rank)", describe(v))
    if v.shape[-2] != k.shape[-2]:
        raise fail("v", f"T_k = {k.shape[-2]} rows (k's T_k)", f"T_k = {v.shape[-2]} in {describe(v)}")
    if v.dtype != q.dtype or v.device != q.device:
        raise fail("v", f"dtype {q.dtype} on {q.device} (same as q)", f"{describe(v)} on {v.device}")


def check_mask(attn_mask, is_causal, scores_shape: tuple, device: torch.device) -> None:
    """Check ``attn_mask``/``is_causal`` against scores of shape ``scores_shape`` on ``device``.

    ``is_causal`` is a flag; ``attn_mask`` is None, or (when ``is_causal`` is False) a bool or
    floating-point tensor on ``device`` that broadcasts to ``scores_shape``.
    """
    ensure_bool("is_causal", is_causal)
    if attn_mask is None:
        return
    if is_causal:
        raise fail("attn_mask", "None when is_causal=True (the causal mask is built for you)", describe(attn_mask))
    ensure_tensor("attn_mask", attn_mask)
    if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
        raise fail(
            "attn_mask",
            "a bool tensor (True = may attend) or a floating-point tensor (added to the scores)",
            describe(attn_mask),
        )
    if attn_mask.device != device:
        raise fail(
            "attn_mask", f"a tensor on {device} (the device of q)", f"{describe(attn_mask)} on {attn_mask.device}"
        )
    scores_shape = torch.Size(scores_shape)
    try:
        fits = torch.broadcast_shapes(attn_mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        fits = False
    if not fits:
        raise fail(
            "attn_mask",
            f"a shape that broadcasts to the scores' shape {tuple(scores_shape)} (..., T_q, T_k)",
            describe(attn_mask),
        )


def check_lengths(lengths, T: int) -> None:
    """Lengths of padded sequences: a 1-D integer tensor ``(B,)``, each in ``[0, T]``."""
    ensure_int_tensor("lengths", lengths, "a 1-D integer tensor of shape (B,)", dim=1)
    ensure_in_range("lengths", lengths, 0, T, f"every length in [0, {T}] (T={T})", "length ")


# 6. Token ids ------------------------------------------------------------------------------------


def ensure_ids_in_vocab(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Check that every token id is in ``[0, vocab_size)``."""
    return ensure_in_range(
        "ids", ids, 0, vocab_size - 1, f"token ids in [0, {vocab_size - 1}] (vocab_size={vocab_size})", "id "
    )


def check_ids(ids, vocab_size) -> torch.Tensor:
    """``vocab_size`` a positive int, and token ids of any shape: an integer tensor, every id in
    ``[0, vocab_size)``."""
    ensure_int("vocab_size", vocab_size)
    ensure_int_tensor("ids", ids, "an integer tensor of token ids")
    return ensure_ids_in_vocab(ids, vocab_size)


def check_gpt_ids(model, ids, kv_cache=None) -> int:
    """The input of a :class:`~attnlib.model.GPT` and its caches; return ``T_cached``.

    ``ids``: integer ``(B, T)``, ``1 <= T <= context_length - T_cached``, ids in the
    vocabulary (not read on the meta device), on the model's device. ``kv_cache``: None,
    or one :class:`~attnlib.kv_cache.KVCache` per block, as :func:`check_gpt_caches` wants
    (``T_cached``: the tokens they have seen; rolling caches hold fewer).
    """
    cfg, device = model.config, model.tok_emb.weight.device
    ensure_tensor("ids", ids)
    T_cached = (
        0 if kv_cache is None else check_gpt_caches(kv_cache, len(model.blocks), ids.shape[0] if ids.dim() else 0)
    )
    ensure_int_tensor("ids", ids, "a 2-D integer tensor of token ids (B, T)", dim=2)
    T = ids.shape[1]
    if kv_cache is not None and cfg.positions != "learned" and all(c.window is not None for c in kv_cache):
        T_cached = 0  # rolling caches without a position table: only this call's T is bounded
    if not 1 <= T <= cfg.context_length - T_cached:
        limit = (
            "(context_length)"
            if not T_cached
            else f"(context_length={cfg.context_length} minus {T_cached} cached tokens)"
        )
        raise fail("ids", f"T in [1, {cfg.context_length - T_cached}] tokens {limit}", describe(ids))
    if ids.device.type != "meta":  # a model on the meta device has no values to check
        ensure_ids_in_vocab(ids, cfg.vocab_size)
    if ids.device != device:
        raise fail("ids", f"a tensor on {device} (the model's device)", f"{describe(ids)} on {ids.device}")
    return T_cached if kv_cache is None else kv_cache[0].seen


# 7. Layers, KV caches and models -----------------------------------------------------------------


def check_activations(name: str, x, d_model: int, weight: torch.Tensor, lead: torch.Size | None = None):
    """A layer's input ``(..., T, d_model)``: floating point, in the dtype and on the device of
    ``weight`` (the layer's parameters), with the leading (batch) axes ``lead`` when given."""
    ensure_float(name, x)
    if x.dim() < 2 or x.shape[-1] != d_model:
        raise fail(name, f"a tensor of shape (..., T, d_model={d_model}), e.g. (B, T, d_model)", describe(x))
    if lead is not None and x.shape[:-2] != lead:
        shown = lead[0] if len(lead) == 1 else tuple(lead)
        raise fail(name, f"batch size B = {shown} (the batch size of x)", describe(x))
    if x.dtype != weight.dtype or x.device != weight.device:
        raise fail(
            name, f"dtype {weight.dtype} on {weight.device} (the module's parameters)", f"{describe(x)} on {x.device}"
        )
    return x


@functools.cache
def _kv_cache_class() -> type:
    """:class:`attnlib.kv_cache.KVCache`, imported on first use (kv_cache imports this module)."""
    from .kv_cache import KVCache

    return KVCache


def check_mha_options(d_model, n_heads, dropout, d_head, rope, rope_base, qk_norm, norm_eps) -> int:
    """The options of ``MultiHeadAttention``; return ``d_head`` (None: ``d_model // n_heads``)."""
    ensure_int("d_model", d_model)
    ensure_number("dropout", dropout, "a probability in [0, 1)", lambda p: 0 <= p < 1)
    if d_head is None:
        ensure_heads(d_model, n_heads)  # n_heads divides d_model
        d_head = d_model // n_heads
    else:
        ensure_int("n_heads", n_heads)
        ensure_int("d_head", d_head)
    for name, flag in (("rope", rope), ("qk_norm", qk_norm)):
        ensure_bool(name, flag)
    if rope and d_head % 2:
        raise fail("d_head", "an even number with rope=True (RoPE rotates pairs of dimensions)", f"d_head={d_head}")
    ensure_number("rope_base", rope_base, "a positive number", lambda b: b > 0)
    ensure_number("norm_eps", norm_eps, "a positive number", lambda e: e > 0)
    return d_head


def check_mla_options(d_model, n_heads, kv_rank, q_rank, d_head_nope, d_head_rope, d_head_v, absorb):
    """``MultiHeadLatentAttention``'s sizes; return ``(d_head_nope, d_head_rope, d_head_v)`` with defaults filled in."""
    for name, n in (("d_model", d_model), ("n_heads", n_heads), ("kv_rank", kv_rank)):
        ensure_int(name, n)
    if q_rank is not None:
        ensure_int("q_rank", q_rank)
    if d_head_nope is None:
        ensure_heads(d_model, n_heads)  # d_head_nope = d_model // n_heads
        d_head_nope = d_model // n_heads
    ensure_int("d_head_nope", d_head_nope)
    d_head_rope = d_head_nope // 2 if d_head_rope is None else d_head_rope
    ensure_int("d_head_rope", d_head_rope)
    ensure_even("d_head_rope", d_head_rope)  # RoPE rotates pairs
    d_head_v = d_head_nope if d_head_v is None else ensure_int("d_head_v", d_head_v)
    ensure_bool("absorb", absorb)
    return d_head_nope, d_head_rope, d_head_v


def check_mla_inputs(layer, x, positions, is_causal, need_weights, kv_cache) -> None:
    """The arguments of ``MultiHeadLatentAttention.forward``: ``x`` ``(B, T, d_model)``, positions ``(T,)``."""
    check_activations("x", x, layer.d_model, layer.w_dkv.weight)
    ensure_dim("x", x, 3, f"a 3-D tensor of shape (B, T, d_model={layer.d_model})")
    ensure_bool("is_causal", is_causal)
    ensure_bool("need_weights", need_weights)
    if kv_cache is not None:
        ensure_instance("kv_cache", kv_cache, _kv_cache_class(), "None or an attnlib KVCache")
        if kv_cache.window is not None:
            raise fail("kv_cache", "a KVCache without a window (MLA's layer attends to every token)", repr(kv_cache))
    if positions is not None:
        ensure_dim("positions", positions, 1, f"a 1-D tensor of {x.shape[1]} positions (T,)")
        if positions.shape[0] != x.shape[1]:
            raise fail("positions", f"{x.shape[1]} positions, one per token of x", describe(positions))


def check_window_options(sliding_window, learned_sinks) -> None:
    """Chapter 15's options of ``MultiHeadAttention``: a window of at least 1 key, or None; a bool."""
    if sliding_window is not None:
        ensure_int("sliding_window", sliding_window, why="how many keys a query sees, itself included")
    ensure_bool("learned_sinks", learned_sinks)


def check_mha_inputs(layer, x, context, attn_mask, is_causal, need_weights, kv_cache, positions=None) -> None:
    """The arguments of ``MultiHeadAttention.forward`` (see its docstring), in order."""
    check_activations("x", x, layer.d_model, layer.w_q.weight)
    if kv_cache is not None:
        ensure_instance("kv_cache", kv_cache, _kv_cache_class(), "None or an attnlib KVCache")
        if context is not None:
            raise fail(
                "context",
                "None when a kv_cache is given (the cache holds the keys and "
                "values of x's own earlier tokens: self-attention)",
                describe(context),
            )
    if context is not None:
        if layer.rope:
            raise fail("context", "None with rope=True (RoPE rotates by positions in one sequence)", describe(context))
        check_activations("context", context, layer.d_model, layer.w_q.weight, lead=x.shape[:-2])
    ensure_bool("need_weights", need_weights)
    if layer.sliding_window is not None and is_causal is not True:
        raise fail(
            "is_causal",
            f"True with sliding_window={layer.sliding_window} (the window cuts the causal mask)",
            describe(is_causal),
        )
    rolling = kv_cache is not None and kv_cache.window is not None
    if rolling and layer.sliding_window is not None and kv_cache.window < layer.sliding_window:
        raise fail(
            "kv_cache", f"a window of at least the layer's sliding_window={layer.sliding_window}", repr(kv_cache)
        )
    if positions is not None and rolling and layer.sliding_window is None:
        raise fail(
            "positions",
            "None with a rolling KVCache on a full-attention layer (StreamingLLM counts positions within the cache)",
            describe(positions),
        )
    lead, T = x.shape[:-2], x.shape[-2]
    T_k = (0 if kv_cache is None else len(kv_cache)) + (x if context is None else context).shape[-2]
    check_mask(attn_mask, is_causal, (*lead, layer.n_heads, T, T_k), x.device)
    if positions is not None:
        if not layer.rope:
            raise fail(
                "positions", "None unless the layer has rope=True (positions rotate q and k)", describe(positions)
            )
        check_rope(x[..., :2], positions, layer.rope_base)  # (..., T) positions for x's T tokens


def check_kv_options(max_tokens, window, sinks) -> tuple[int | None, int | None, int]:
    """``KVCache``'s arguments: ``max_tokens`` or a ``window`` (not both), ``sinks >= 0`` with a window."""
    max_tokens = None if max_tokens is None else ensure_int("max_tokens", max_tokens)
    window = None if window is None else ensure_int("window", window)
    sinks = ensure_int("sinks", sinks, min=0)
    if max_tokens is not None and window is not None:
        raise fail("window", "None with max_tokens (a rolling cache holds at most sinks + window tokens)", f"{window}")
    if sinks and window is None:
        raise fail("sinks", "0 without a window (sinks are kept when a window evicts the rest)", f"{sinks}")
    return max_tokens, window, sinks


def check_kv_new(k_new, v_new) -> None:
    """New keys and values for a KV cache: 4-D ``(B, n_kv_heads, T_new, d_head)``, the same ``B``,
    ``n_kv_heads`` and ``T_new`` (the last widths may differ: MLA caches a latent and a rotated key)."""
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        ensure_dim(name, t, 4, "a 4-D tensor of shape (B, n_kv_heads, T_new, d_head)")
    if v_new.shape[:3] != k_new.shape[:3]:
        raise fail("v_new", f"the shape of k_new but for the last axis, {tuple(k_new.shape[:3])}", describe(v_new))


def check_kv_append(cache, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
    """New keys and values that fit a non-empty cache: its ``B``, ``n_kv_heads``, widths, dtype and device."""
    for name, new, held in (("k_new", k_new, cache.k), ("v_new", v_new, cache.v)):
        B, H, _, D = held.shape
        if (
            (new.shape[0], new.shape[1], new.shape[3]) != (B, H, D)
            or new.dtype != held.dtype
            or new.device != held.device
        ):
            raise fail(
                name,
                f"shape ({B}, {H}, T_new, {D}), dtype {held.dtype} on {held.device} "
                f"(what the cache holds: {len(cache)} tokens)",
                f"{describe(new)} on {new.device}",
            )


def check_kv_room(cache, T_new: int) -> None:
    """New tokens that fit in a cache of ``max_tokens``: ``T_cached + T_new <= max_tokens``."""
    if len(cache) + T_new > cache.max_tokens:
        raise fail(
            "k_new",
            f"at most {cache.max_tokens - len(cache)} new tokens (the cache has room for "
            f"max_tokens={cache.max_tokens} and holds {len(cache)})",
            f"T_new = {T_new}",
        )


def check_gpt_caches(kv_cache, n: int, batch: int) -> int:
    """A list of ``n`` caches, one per block, holding the same number of tokens of ``batch``
    sequences; return that number."""
    KVCache = _kv_cache_class()
    if (
        not isinstance(kv_cache, (list, tuple))
        or len(kv_cache) != n
        or not all(isinstance(c, KVCache) for c in kv_cache)
    ):
        raise fail(
            "kv_cache",
            f"a list of {n} KVCache, one per block ([KVCache() for _ in model.blocks])",
            describe(kv_cache)
            if not isinstance(kv_cache, (list, tuple))
            else f"a {type(kv_cache).__name__} of {[type(c).__name__ for c in kv_cache]}",
        )
    lengths = {c.seen for c in kv_cache}  # tokens that went through each cache (rolling ones hold fewer)
    if len(lengths) != 1:
        raise fail(
            "kv_cache",
            "caches that hold the same number of tokens in every block",
            f"lengths {[c.seen for c in kv_cache]}",
        )
    if kv_cache[0].k is not None and kv_cache[0].k.shape[0] != batch:
        raise fail("ids", f"B = {kv_cache[0].k.shape[0]} sequences (the batch in kv_cache)", f"B = {batch}")
    return lengths.pop()


def check_torch_mha(m) -> None:
    """A ``torch.nn.MultiheadAttention`` that attnlib's layer can copy: one embedding width,
    no ``add_bias_kv``, no ``add_zero_attn``."""
    if not isinstance(m, nn.MultiheadAttention):
        raise fail("m", "a torch.nn.MultiheadAttention", type(m).__name__)
    if not m._qkv_same_embed_dim:
        raise fail("m", "kdim == vdim == embed_dim", f"kdim={m.kdim}, vdim={m.vdim}, embed_dim={m.embed_dim}")
    if m.bias_k is not None or m.add_zero_attn:
        raise fail(
            "m",
            "add_bias_kv=False and add_zero_attn=False",
            f"add_bias_kv={m.bias_k is not None}, add_zero_attn={m.add_zero_attn}",
        )


def check_gpt_config(c) -> None:
    """The fields of a :class:`~attnlib.model.GPTConfig` (``d_ff`` may still be None)."""
    for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads"):
        ensure_int(name, getattr(c, name))
    for name in ("d_ff", "d_head"):
        if getattr(c, name) is not None:
            ensure_int(name, getattr(c, name))
    if c.d_head is None:
        ensure_heads(c.d_model, c.n_heads)  # d_head = d_model / n_heads
    for name in ("bias", "tie_embeddings", "qk_norm"):
        ensure_bool(name, getattr(c, name))
    ensure_kv_heads(c.n_heads, c.n_kv_heads)
    for name, allowed in (("positions", ("learned", "rope", "none")), ("norm", ("layernorm", "rmsnorm")),
                          ("mlp", ("gelu", "swiglu"))):  # fmt: skip
        if getattr(c, name) not in allowed:
            raise fail(name, f"one of {', '.join(map(repr, allowed))}", f"{name}={getattr(c, name)!r}")
    ensure_number("rope_base", c.rope_base, "a positive number", lambda b: b > 0)
    ensure_number("norm_eps", c.norm_eps, "a positive number", lambda e: e > 0)
    if c.positions == "rope" and (c.d_head or c.d_model // c.n_heads) % 2:
        raise fail("d_head", "an even head width with positions='rope' (RoPE rotates pairs)", f"{c!r}")
    check_window_options(c.sliding_window, c.learned_sinks)
    if c.attention not in ("mha", "mla"):
        raise fail("attention", "'mha' or 'mla'", f"attention={c.attention!r}")
    mla_sizes = ("kv_rank", "q_rank", "d_head_rope", "d_head_v")
    if c.attention == "mla":
        if c.kv_rank is None or c.positions != "rope":
            raise fail("attention", "'mla' with a kv_rank and positions='rope' (its decoupled RoPE)", f"{c!r}")
        if c.sliding_window is not None or c.learned_sinks or c.qk_norm or (c.n_kv_heads or c.n_heads) != c.n_heads:
            raise fail("attention", "'mla' without chapter 15's windows and sinks, QK-norm or n_kv_heads", f"{c!r}")
        check_mla_options(c.d_model, c.n_heads, c.kv_rank, c.q_rank, c.head_dim, c.d_head_rope, c.d_head_v, False)
    elif any(getattr(c, name) is not None for name in mla_sizes):
        raise fail("attention", "'mla' when an MLA size (kv_rank, q_rank, d_head_rope, d_head_v) is set", f"{c!r}")
    if c.layer_types is not None:
        types = c.layer_types
        if not isinstance(types, tuple) or len(types) != c.n_layers or not set(types) <= {"full", "sliding"}:
            raise fail("layer_types", f'a tuple of {c.n_layers} "full" or "sliding", one per layer', repr(types))
        if "sliding" in types and c.sliding_window is None:
            raise fail("sliding_window", 'a window (an int) for the "sliding" layers of layer_types', "None")


def check_generate(model, ids, max_new_tokens, use_cache, cache_window=None, cache_sinks=0) -> None:
    """The arguments of ``GPT.generate``: a prompt as :func:`check_gpt_ids` wants it, and room
    for ``max_new_tokens >= 0`` more tokens in the context, unless a rolling cache
    (``cache_window``, RoPE or no positions) keeps the positions within ``cache_sinks + cache_window``."""
    check_gpt_ids(model, ids)  # (B, T0) integer ids in [0, vocab_size), 1 <= T0 <= context_length
    ensure_int("max_new_tokens", max_new_tokens, min=0)
    ensure_bool("use_cache", use_cache)
    check_kv_options(None, cache_window, cache_sinks)
    T0, C = ids.shape[1], model.config.context_length
    if cache_window is not None:
        if not use_cache or model.config.positions == "learned":
            raise fail(
                "cache_window",
                "None unless use_cache=True and the model has positions='rope' or 'none' (StreamingLLM's cache)",
                f"cache_window={cache_window} with use_cache={use_cache}, positions={model.config.positions!r}",
            )
        if cache_sinks + cache_window > C:
            raise fail("cache_window", f"cache_sinks + cache_window <= context_length = {C}", f"{cache_window}")
        return
    if T0 + max_new_tokens > C:
        raise fail(
            "max_new_tokens",
            f"T0 + max_new_tokens <= context_length = {C} (the model reads at most {C} tokens)",
            f"T0 = {T0} prompt tokens + max_new_tokens = {max_new_tokens} = {T0 + max_new_tokens}",
        )


def renamed(old: str, new: str, old_value, new_value):
    """The value of an argument passed under its old name, with a DeprecationWarning.

    ``new_value`` must still be the new argument's default, ``False``.
    """
    import warnings

    if new_value is not False:
        raise fail(old, f"not given together with {new} (its new name)", f"{old}={old_value!r}, {new}={new_value!r}")
    warnings.warn(f"{old} is deprecated: use {new}={old_value!r}", DeprecationWarning, stacklevel=3)
    return old_value


# 8. Positions, training, cost and the worked examples --------------------------------------------


def check_rope(x, positions, base) -> None:
    """The arguments of ``apply_rope``: ``x`` float ``(..., T, d_head)`` with ``d_head`` even and
    positive, ``base`` a positive number, ``positions`` None or ``T`` real positions ``(T,)``."""
    ensure_tensor("x", x, min_dim=2)
    if not x.is_floating_point():
        raise fail("x", "a floating-point tensor of shape (..., T, d_head)", describe(x))
    T, d_head = x.shape[-2], x.shape[-1]
    if d_head == 0 or d_head % 2:
        raise fail(
            "x", "a last dimension d_head that is even and positive (RoPE rotates pairs of dimensions)", describe(x)
        )
    ensure_number("base", base, "a positive number", lambda b: b > 0)
    if positions is None:
        return
    ensure_instance("positions", positions, torch.Tensor, f"None or a tensor of T={T} positions (..., T)")
    wanted = f"a tensor of shape ({T},) or (..., {T}) that broadcasts against x's leading axes {tuple(x.shape[:-2])}"
    if positions.dim() == 0 or positions.shape[-1] != T or positions.dim() > x.dim() - 1:
        raise fail("positions", f"{wanted}, one position per row of x", describe(positions))
    try:
        fits = torch.broadcast_shapes(positions.shape[:-1], x.shape[:-2]) == x.shape[:-2]
    except RuntimeError:
        fits = False
    if not fits:
        raise fail("positions", wanted, describe(positions))
    if positions.is_complex() or positions.dtype == torch.bool:
        raise fail("positions", "integer or float positions", describe(positions))


def check_reverse_batch(batch_size, length, vocab_size, generator) -> None:
    """The arguments of ``reverse_batch``: positive sizes, ``vocab_size >= 3``, a CPU generator or None."""
    ensure_int("batch_size", batch_size)
    ensure_int("length", length)
    ensure_int("vocab_size", vocab_size)
    if vocab_size < 3:
        raise fail("vocab_size", "at least 3 (two digits and the separator)", f"vocab_size={vocab_size}")
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise fail("generator", "None or a CPU torch.Generator", describe(generator))


def check_logits_targets(logits, targets) -> None:
    """Logits ``(B, T, vocab_size)``, floating point, and integer targets ``(B, T)``."""
    ensure_tensor("logits", logits)
    if logits.dim() != 3 or not logits.is_floating_point():
        raise fail("logits", "a floating-point tensor of shape (B, T, vocab_size)", describe(logits))
    ensure_tensor("targets", targets)
    if targets.shape != logits.shape[:2] or targets.is_floating_point() or targets.dtype == torch.bool:
        raise fail("targets", f"an integer tensor of shape (B, T) = {tuple(logits.shape[:2])}", describe(targets))


def check_loss_mask(mask, targets: torch.Tensor) -> None:
    """A boolean mask of the targets' shape ``(B, T)`` with at least one True position."""
    ensure_tensor("mask", mask)
    if mask.dtype != torch.bool or mask.shape != targets.shape:
        raise fail("mask", f"a boolean tensor of shape (B, T) = {tuple(targets.shape)}", describe(mask))
    if not mask.any():
        raise fail("mask", "at least one True position (the loss averages over them)", "no True entry")


def check_train(model, make_batch, steps, lr, weight_decay, progress) -> None:
    """The arguments of ``train``: a module, a batch function, a positive number of steps,
    ``lr > 0``, ``weight_decay >= 0`` and a flag."""
    ensure_instance("model", model, nn.Module, "a torch.nn.Module mapping ids (B, T) to logits (B, T, vocab_size)")
    ensure_callable("make_batch", make_batch, "a function returning (ids, targets, mask)")
    ensure_int("steps", steps)
    # written as "not below the bound", so nan passes here, as it always has (AdamW rejects it)
    ensure_number("lr", lr, "a positive number", lambda v: not v <= 0)
    ensure_number("weight_decay", weight_decay, "a non-negative number", lambda v: not v < 0)
    ensure_bool("progress", progress)


def ensure_trainable(model: nn.Module, params: list) -> list:
    """Check that ``params``, the model's trainable parameters, is not empty."""
    if not params:
        raise fail("model", "a module with trainable parameters", f"{type(model).__name__} without any")
    return params


def ensure_batch(batch) -> tuple:
    """Check what ``make_batch()`` returned: a tuple ``(ids, targets, mask)``."""
    if not isinstance(batch, tuple) or len(batch) != 3:
        raise fail(
            "make_batch", "a function returning a tuple (ids, targets, mask)", f"a function returning {describe(batch)}"
        )
    return batch


def check_fit_points(xs, ys) -> tuple[list[float], list[float]]:
    """Points of a log-log fit: as many finite positive ys as xs, at least 2; return them as floats."""
    try:
        x = [float(v) for v in xs]
        y = [float(v) for v in ys]
    except (TypeError, ValueError):
        raise fail("xs, ys", "two sequences of numbers", f"{describe(xs)}, {describe(ys)}") from None
    if len(x) != len(y) or len(x) < 2:
        raise fail("xs, ys", "two sequences of the same length, at least 2", f"lengths {len(x)} and {len(y)}")
    if min(x) <= 0 or min(y) <= 0 or not all(map(math.isfinite, x + y)):
        raise fail("xs, ys", "finite positive numbers (their logarithms are fitted)", f"xs {x}, ys {y}")
    return x, y


def ensure_cpu_or_cuda(device: torch.device) -> torch.device:
    """Check that memory can be measured on ``device``: the CPU or a CUDA device."""
    if device.type not in ("cpu", "cuda"):
        raise fail("device", '"cpu" or a CUDA device', describe(device))
    return device


def check_sentence(sentence: str, tokens: list[str], vocab: list[str], d_model) -> None:
    """The arguments of ``examples.sentence_embeddings``: words of the corpus and a width.

    (As it always has, this ``d_model`` check accepts ``True`` and shows ``repr(d_model)``.)
    """
    missing = [t for t in tokens if t not in vocab]
    if missing:
        raise fail("sentence", f"words of the corpus {vocab}", f"{sentence!r} with {missing} not in it")
    if not isinstance(d_model, int) or d_model < 1:
        raise fail("d_model", "a positive int", repr(d_model))


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
