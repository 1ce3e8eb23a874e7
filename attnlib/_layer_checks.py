"""Checks of the arguments of attnlib's layers and models (chapters 6-17): ``MultiHeadAttention``,
``MultiHeadLatentAttention``, ``GPTConfig``, ``GPT``'s input, caches and ``generate``.

Each raises :class:`~attnlib._validate.AttnlibError` through ``attnlib/_validate.py``'s helpers,
as ``attnlib/_checks.py`` does; this module sits above ``kv_cache.py`` (it checks that a layer
got a :class:`~attnlib.kv_cache.KVCache`) and below the layers.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import check_kv_options, check_mask, check_rope, ensure_ids_in_vocab
from ._validate import (
    describe,
    ensure_bool,
    ensure_choice,
    ensure_dim,
    ensure_even,
    ensure_float,
    ensure_heads,
    ensure_instance,
    ensure_int,
    ensure_int_tensor,
    ensure_kv_heads,
    ensure_number,
    ensure_tensor,
    fail,
)
from .kv_cache import KVCache
from .rope_scaling import RopeScaling


def check_gpt_ids(model, ids, kv_cache=None, positions=None) -> int:
    """The input of a :class:`~attnlib.model.GPT` and its caches; return ``T_cached``.

    ``ids``: integer ``(B, T)``, ``1 <= T <= context_length - T_cached``, ids in the
    vocabulary (not read on the meta device), on the model's device. ``kv_cache``: None,
    or one :class:`~attnlib.kv_cache.KVCache` per block, as :func:`check_gpt_caches` wants
    (``T_cached``: the tokens they have seen; rolling caches hold fewer).
    """
    cfg, device = model.config, model.tok_emb.weight.device
    ensure_tensor("ids", ids)
    if positions is not None and (positions != "in_cache" or kv_cache is None):
        wanted = 'None, or "in_cache" with a kv_cache (StreamingLLM: positions counted within the caches)'
        raise fail("positions", wanted, repr(positions) + ("" if kv_cache is None else " with a kv_cache"))
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
    ensure_bool("rope", rope)
    if not isinstance(qk_norm, bool):  # chapter 19: which QK-norm
        ensure_choice("qk_norm", qk_norm, QK_NORMS)
    if rope and d_head % 2:
        raise fail("d_head", "an even number with rope=True (RoPE rotates pairs of dimensions)", f"d_head={d_head}")
    ensure_number("rope_base", rope_base, "a positive number", lambda b: b > 0)
    ensure_number("norm_eps", norm_eps, "a positive number", lambda e: e > 0)
    return d_head


QK_NORMS = ("head", "projection", "unweighted")  # besides True (= "head") and False


LAYER_NAMES = {"rope": "rope", "scale": "scale", "softcap": "softcap"}  # the layer's arguments
CONFIG_NAMES = {"rope": "positions", "scale": "attn_scale", "softcap": "attn_softcap"}  # GPTConfig's fields


def check_score_options(d_head, rope, rope_scaling, rotary_dim, scale, softcap, qkv_bias, out_bias,
                        names: dict = LAYER_NAMES) -> None:  # fmt: skip
    """Chapter 19's options of ``MultiHeadAttention`` (or of a ``GPTConfig``, ``names=CONFIG_NAMES``): RoPE's
    scaling and rotated width, the scores' factor and soft cap, the biases per projection."""
    if rope_scaling is not None:
        ensure_instance("rope_scaling", rope_scaling, RopeScaling, "None or an attnlib RopeScaling")
    if rotary_dim is not None:
        ensure_even("rotary_dim", ensure_int("rotary_dim", rotary_dim))
        if rotary_dim > d_head:
            raise fail("rotary_dim", f"at most d_head = {d_head} (the first rotary_dim dimensions turn)", rotary_dim)
    if (rope_scaling is not None or rotary_dim is not None) and not rope:
        wanted = "True" if names["rope"] == "rope" else "'rope'"
        raise fail(names["rope"], f"{wanted} with rope_scaling or rotary_dim (options of RoPE)", "no RoPE")
    for name, value in ((names["scale"], scale), (names["softcap"], softcap)):
        if value is not None:
            ensure_number(name, value, "None or a finite positive number", lambda v: math.isfinite(v) and v > 0)
    for name, flag in (("qkv_bias", qkv_bias), ("out_bias", out_bias)):
        if flag is not None:
            ensure_bool(name, flag)


def check_family_options(c) -> None:
    """Chapter 19's fields of a ``GPTConfig``: each None or neutral unless a family sets it."""
    ensure_choice("block", c.block, ("pre_norm", "sandwich", "post_norm", "parallel"))
    ensure_bool("output_gate", c.output_gate)  # chapter 20
    check_score_options(c.head_dim, c.positions == "rope", c.rope_scaling, c.rotary_dim, c.attn_scale,
                        c.attn_softcap, c.qkv_bias, c.out_bias, CONFIG_NAMES)  # fmt: skip
    finite = lambda v: math.isfinite(v) and v > 0
    for name in ("embed_scale", "residual_scale", "logit_scale"):
        ensure_number(name, getattr(c, name), "a finite positive number (1.0: none)", finite)
    for name in ("rope_base_sliding", "logit_softcap"):
        if getattr(c, name) is not None:
            ensure_number(name, getattr(c, name), "None or a finite positive number", finite)
    if c.nope_layers is not None:
        layers, indices = c.nope_layers, range(c.n_layers)
        if not isinstance(layers, tuple) or not all(type(i) is int and i in indices for i in layers):
            raise fail("nope_layers", f"a tuple of layer indices in 0 .. {c.n_layers - 1}", repr(layers))
    chapter19 = (c.rotary_dim, c.nope_layers, c.attn_scale, c.attn_softcap, c.qkv_bias, c.out_bias) + (
        c.output_gate or None,
    )
    if c.attention == "mla" and chapter19 != (None,) * len(chapter19):  # rope_scaling it takes (DeepSeek's YaRN)
        raise fail("attention", "'mla' without chapter 19's partial rotary, NoPE layers, score scale, soft cap "
                   "and biases", f"{c!r}")  # fmt: skip


def check_window_options(sliding_window, learned_sinks) -> None:
    """Chapter 16's options of ``MultiHeadAttention``: a window of at least 1 key, or None; a bool."""
    if sliding_window is not None:
        ensure_int("sliding_window", sliding_window, why="how many keys a query sees, itself included")
    ensure_bool("learned_sinks", learned_sinks)


def check_mha_inputs(layer, x, context, attn_mask, is_causal, need_weights, kv_cache, positions=None) -> None:
    """The arguments of ``MultiHeadAttention.forward`` (see its docstring), in order."""
    check_activations("x", x, layer.d_model, layer.w_q.weight)
    if kv_cache is not None:
        ensure_instance("kv_cache", kv_cache, KVCache, "None or an attnlib KVCache")
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
    lead, T = x.shape[:-2], x.shape[-2]
    T_k = (0 if kv_cache is None else len(kv_cache)) + (x if context is None else context).shape[-2]
    check_mask(attn_mask, is_causal, (*lead, layer.n_heads, T, T_k), x.device)
    if layer.head_mask is not None:
        mask = layer.head_mask
        if not (isinstance(mask, torch.Tensor) and mask.is_floating_point() and mask.shape == (layer.n_heads,)):
            raise fail(
                "head_mask", f"None or a float tensor of shape ({layer.n_heads},): one factor per head", describe(mask)
            )
    if positions is not None and not layer.rope:
        raise fail("positions", "None unless the layer has rope=True (positions rotate q and k)", describe(positions))
    if isinstance(positions, str):
        if positions != "in_cache" or kv_cache is None:
            wanted = '"in_cache" with a kv_cache (StreamingLLM: positions counted within the cache)'
            raise fail("positions", wanted, repr(positions) + ("" if kv_cache is None else " with a kv_cache"))
    elif positions is not None:
        check_rope(x[..., :2], positions, layer.rope_base)  # (..., T) positions for x's T tokens


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


def check_mla_inputs(layer, x, positions, is_causal, need_weights, kv_cache, latent_cache: type) -> None:
    """The arguments of ``MultiHeadLatentAttention.forward``: ``x`` ``(B, T, d_model)``, positions ``(T,)``,
    ``kv_cache`` None or a ``latent_cache`` (:class:`~attnlib.latent.LatentCache`, passed in by
    ``latent.py``, which imports this module)."""
    check_activations("x", x, layer.d_model, layer.w_dkv.weight)
    ensure_dim("x", x, 3, f"a 3-D tensor of shape (B, T, d_model={layer.d_model})")
    ensure_bool("is_causal", is_causal)
    ensure_bool("need_weights", need_weights)
    if kv_cache is not None and not isinstance(kv_cache, latent_cache):
        raise fail(
            "kv_cache",
            "None or an attnlib LatentCache (MLA caches a latent and a rotated key, not keys and values: "
            "attnlib.LatentCache(), one per layer)",
            repr(kv_cache) if hasattr(kv_cache, "update") else describe(kv_cache),
        )
    if positions is not None:
        ensure_dim("positions", positions, 1, f"a 1-D tensor of {x.shape[1]} positions (T,)")
        if positions.shape[0] != x.shape[1]:
            raise fail("positions", f"{x.shape[1]} positions, one per token of x", describe(positions))


def check_latent_update(cache, c_new, k_rope_new) -> None:
    """``LatentCache.update``'s arguments: ``c_new`` ``(B, 1, T_new, kv_rank)`` and ``k_rope_new``
    ``(B, 1, T_new, d_head_rope)``, floating point, alike in ``B``, ``T_new``, dtype and device; after
    a first update, like what is cached; room left."""
    for name, t, width in (("c_new", c_new, "kv_rank"), ("k_rope_new", k_rope_new, "d_head_rope")):
        ensure_float(name, t)
        if t.dim() != 4 or t.shape[1] != 1:
            raise fail(name, f"a tensor of shape (B, 1, T_new, {width}): one for every head", describe(t))
    if c_new.shape[:3] != k_rope_new.shape[:3] or c_new.dtype != k_rope_new.dtype or c_new.device != k_rope_new.device:
        raise fail(
            "k_rope_new",
            f"the B and T_new of c_new, {tuple(c_new.shape[:3])}, its dtype {c_new.dtype} and device {c_new.device}",
            f"{describe(k_rope_new)} on {k_rope_new.device}",
        )
    if cache.c is not None:
        for name, t, held in (("c_new", c_new, cache.c), ("k_rope_new", k_rope_new, cache.k_rope)):
            if (
                t.shape[0] != held.shape[0]
                or t.shape[3] != held.shape[3]
                or (t.dtype, t.device) != (held.dtype, held.device)
            ):
                raise fail(
                    name,
                    f"B = {held.shape[0]}, width {held.shape[3]}, dtype {held.dtype} on {held.device} (what is cached)",
                    f"{describe(t)} on {t.device}",
                )
    if cache.max_tokens is not None and len(cache) + c_new.shape[2] > cache.max_tokens:
        raise fail(
            "c_new",
            f"at most {cache.max_tokens - len(cache)} new tokens (the cache has room for "
            f"max_tokens={cache.max_tokens} and holds {len(cache)})",
            f"T_new = {c_new.shape[2]}",
        )


def check_gpt_caches(kv_cache, n: int, batch: int) -> int:
    """A list of ``n`` caches, one per block, holding the same number of tokens of ``batch``
    sequences; return that number. A cache is what has ``update`` and ``seen``: a ``KVCache``, or an
    MLA block's ``LatentCache``; each block's attention layer checks that it has its own kind."""
    if (
        not isinstance(kv_cache, (list, tuple))
        or len(kv_cache) != n
        or not all(hasattr(c, "update") and hasattr(c, "seen") for c in kv_cache)
    ):
        raise fail(
            "kv_cache",
            f"a list of {n} KVCache, one per block ([KVCache() for _ in model.blocks]; "
            "with attention='mla', LatentCache())",
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
    held = getattr(kv_cache[0], "k", getattr(kv_cache[0], "c", None))  # the keys, or MLA's latents: (B, ...)
    if held is not None and held.shape[0] != batch:
        raise fail("ids", f"B = {held.shape[0]} sequences (the batch in kv_cache)", f"B = {batch}")
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
    if c.d_head is None and c.attention != "mla":  # MLA's widths: check_mla_options below
        ensure_heads(c.d_model, c.n_heads)  # d_head = d_model / n_heads
    for name in ("bias", "tie_embeddings"):
        ensure_bool(name, getattr(c, name))
    if not isinstance(c.qk_norm, bool):
        ensure_choice("qk_norm", c.qk_norm, QK_NORMS)
    ensure_kv_heads(c.n_heads, c.n_kv_heads)
    for name, allowed in (("positions", ("learned", "rope", "none")), ("norm", ("layernorm", "rmsnorm")),
                          ("mlp", ("gelu", "swiglu", "geglu", "external"))):  # fmt: skip
        if getattr(c, name) not in allowed:
            raise fail(name, f"one of {', '.join(map(repr, allowed))}", f"{name}={getattr(c, name)!r}")
    ensure_number("rope_base", c.rope_base, "a positive number", lambda b: b > 0)
    ensure_number("norm_eps", c.norm_eps, "a positive number", lambda e: e > 0)
    if c.positions == "rope" and c.attention != "mla" and (c.d_head or c.d_model // c.n_heads) % 2:
        raise fail("d_head", "an even head width with positions='rope' (RoPE rotates pairs)", f"{c!r}")
    check_window_options(c.sliding_window, c.learned_sinks)
    check_family_options(c)
    if c.attention not in ("mha", "mla"):
        raise fail("attention", "'mha' or 'mla'", f"attention={c.attention!r}")
    mla_sizes = ("kv_rank", "q_rank", "d_head_nope", "d_head_rope", "d_head_v")
    if c.attention == "mla":
        if c.kv_rank is None or c.positions != "rope":
            raise fail("attention", "'mla' with a kv_rank and positions='rope' (its decoupled RoPE)", f"{c!r}")
        if c.sliding_window is not None or c.learned_sinks or c.qk_norm or (c.n_kv_heads or c.n_heads) != c.n_heads:
            raise fail("attention", "'mla' without chapter 16's windows and sinks, QK-norm or n_kv_heads", f"{c!r}")
        if c.d_head is not None:  # d_head is multi-head attention's head width only
            raise fail(
                "d_head",
                "None with attention='mla' (an MLA head's widths are d_head_nope, d_head_rope and d_head_v: "
                f"set d_head_nope={c.d_head} for the unrotated key width)",
                f"d_head={c.d_head}",
            )
        check_mla_options(c.d_model, c.n_heads, c.kv_rank, c.q_rank, c.d_head_nope, c.d_head_rope, c.d_head_v, False)
    elif any(getattr(c, name) is not None for name in mla_sizes):
        raise fail(
            "attention", "'mla' when an MLA size (kv_rank, q_rank, d_head_nope, d_head_rope, d_head_v) is set", f"{c!r}"
        )
    if c.layer_types is not None:
        types = c.layer_types
        if not isinstance(types, tuple) or len(types) != c.n_layers or not set(types) <= {"full", "sliding", "linear"}:
            raise fail(
                "layer_types", f'a tuple of {c.n_layers} "full", "sliding" or "linear", one per layer', repr(types)
            )
        if "linear" in types and (c.delta_heads is None or c.delta_d_k is None or c.delta_d_v is None):
            raise fail("delta_heads", 'delta_heads, delta_d_k and delta_d_v for the "linear" layers (Gated DeltaNet)',
                       f"{c!r}")  # fmt: skip
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
        if model.config.attention == "mla" or "linear" in (model.config.layer_types or ()):
            raise fail(
                "cache_window",
                "None for an MLA model or one with Gated DeltaNet layers (their caches keep every token's trace)",
                f"cache_window={cache_window}",
            )
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
