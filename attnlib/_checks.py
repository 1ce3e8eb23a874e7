"""Checks of the arguments that belong together: queries, keys and values, masks, token ids,
KV caches, positions and training. (Layers and models: ``_layer_checks.py``; Hugging Face
models: ``_hf_checks.py``.)

Each raises :class:`~attnlib._validate.AttnlibError` through the helpers of
``attnlib/_validate.py`` (one per kind of argument), so that every message has the same
shape: ``<name>: expected <what>, received <what>``. A public function opens with one of
these calls, then its math.

5. queries, keys, values, the scale and the mask of attention;
6. token ids;
7. KV caches;
8. positions, training, cost and the worked examples.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import (
    describe,
    ensure_bool,
    ensure_callable,
    ensure_dim,
    ensure_float,
    ensure_in_range,
    ensure_instance,
    ensure_int,
    ensure_int_tensor,
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


# 7. KV caches ------------------------------------------------------------------------------------


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
    ``n_kv_heads`` and ``T_new`` (the last widths may differ: values of width ``d_v``)."""
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
