"""Chapters 12 and 16: generating text, one token at a time, with or without a KV cache.

Greedy decoding appends the most likely next token, again and again::

    ids_{t+1} = argmax(logits of the last position)           # computed from ids_0 .. ids_t

Without a cache every step runs the whole sequence through the model again. With one
(chapter 12) the prompt runs once, every layer keeps its keys and values in a
:class:`~attnlib.kv_cache.KVCache`, and each later step feeds only the newest token: the same
tokens, a fraction of the work. A sliding layer (chapter 16) keeps its window only, and
StreamingLLM keeps the first tokens and a window in every layer.

``GPT.generate`` is :func:`generate`; :func:`new_caches` makes the caches it uses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._layer_checks import check_generate
from .kv_cache import KVCache, StateCache
from .latent import LatentCache
from .multihead import MultiHeadAttention, merge_heads, split_heads

__all__ = ["generate", "new_caches"]


@torch.no_grad()
def generate(
    model: nn.Module,
    ids: torch.Tensor,
    max_new_tokens: int,
    use_cache: bool = True,
    *,
    cache_window: int | None = None,
    cache_sinks: int = 0,
) -> torch.Tensor:
    """``model.generate(ids, ...)`` for an :class:`attnlib.GPT` ``model``: the arguments and the
    result are those of :meth:`attnlib.GPT.generate`, whose docstring says what they mean.

    Runs without gradients (``torch.inference_mode``) and in evaluation mode: the model is put in
    ``eval()`` for the call (no dropout) and back in its previous mode after. In a model with
    GPT-2's layers, the one-token steps after the prompt skip what each layer's ``forward`` would
    repeat at every step (its argument checks, its options, the module calls) and compute the same
    numbers, to the bit; forward hooks of the layers run for the prompt's step only.

    Example:
        >>> from attnlib import GPT, GPTConfig
        >>> _ = torch.manual_seed(0)
        >>> model = GPT(GPTConfig(vocab_size=10, context_length=8, d_model=16, n_layers=2, n_heads=4))
        >>> torch.equal(generate(model, torch.tensor([[1, 2, 3]]), 4), model.generate(torch.tensor([[1, 2, 3]]), 4))
        True
    """
    check_generate(model, ids, max_new_tokens, use_cache, cache_window, cache_sinks)  # T0 + new <= context
    was_training = model.training
    model.eval()
    try:
        # inference mode: no_grad without autograd's bookkeeping of versions and views, which
        # every one of a step's ~400 small operations would pay for (chapter 12, issue 19)
        with torch.inference_mode():
            cache = new_caches(model, ids.shape[1] + max_new_tokens, cache_window, cache_sinks) if use_cache else None
            out, new = ids, ids  # new: the tokens the model has not read yet
            plain = use_cache and plain_steps(model, cache)  # GPT-2's layers, full caches
            where = None if cache_window is None else "in_cache"  # StreamingLLM: positions within the caches
            for i in range(max_new_tokens):
                if plain and i > 0:
                    h = plain_step(model, new, cache)  # (B, 1, d_model): one new token, as forward computes it
                elif use_cache:
                    if i > 0 and frequencies_switch(model, cache[0].seen, out.shape[1]):
                        cache, new = new_caches(model, ids.shape[1] + max_new_tokens), out  # LongRoPE: all again
                    h = model._hidden(new, kv_cache=cache, positions=where)[0]  # (B, T_new, d_model): prompt, then 1
                else:
                    h = model._hidden(out)[0]  # (B, T, d_model): the whole sequence again
                logits = model.head(h[:, -1])  # (B, d_model) -> (B, vocab_size): the last position only
                new = logits.argmax(dim=-1, keepdim=True).to(ids.dtype)  # (B, 1), greedy
                out = torch.cat([out, new], dim=1)  # (B, T) -> (B, T + 1)
    finally:
        model.train(was_training)
    return out.clone()  # a plain tensor, usable anywhere (an inference-mode tensor is not)


def new_caches(
    model: nn.Module, T_end: int, cache_window: int | None = None, cache_sinks: int = 0
) -> list[KVCache | LatentCache]:
    """One cache per block for :func:`generate`: room for ``T_end`` tokens allocated once (chapter 12),
    a rolling cache of its window for a sliding layer, StreamingLLM's for every layer if asked (chapter 16).

    Example:
        >>> from attnlib import GPT, GPTConfig
        >>> model = GPT(GPTConfig(100, 16, 32, 2, 4, sliding_window=4, layer_types=("sliding", "full")))
        >>> new_caches(model, 16)
        [KVCache(T_cached=0, k and v of shape None, window=4, sinks=0, seen=0), KVCache(T_cached=0, k and v of shape None)]
    """
    if cache_window is not None:
        return [KVCache(window=cache_window, sinks=cache_sinks) for _ in model.blocks]
    if model.config.attention == "mla":  # chapter 17: an MLA block caches its latents and rotated keys
        return [LatentCache(max_tokens=T_end) for _ in model.blocks]
    windows = [model.config.layer_window(i) for i in range(len(model.blocks))]
    caches = [KVCache(max_tokens=T_end) if w is None else KVCache(window=w) for w in windows]
    return [StateCache() if model.config.is_recurrent(i) else c for i, c in enumerate(caches)]  # chapter 20


def frequencies_switch(model: nn.Module, T_cached: int, T: int) -> bool:
    """Chapter 19, LongRoPE (Phi-3): whether the sequence grows past the original length ``L0`` in this
    step (``T_cached <= L0 < T``), so that its rotary frequencies change from the short factors to the
    long ones. The cached keys were rotated with the short ones: like ``transformers``' Phi-3, generation
    then runs the whole sequence again, so that every key has the rotation a full forward pass gives it."""
    for block in model.blocks:
        scaling = getattr(getattr(block.attn, "pos_enc", None), "scaling", None)
        if scaling is not None and scaling.rope_type == "longrope":
            return T_cached <= scaling.original_max_position_embeddings < T
    return False


def plain_steps(model: nn.Module, caches: list[KVCache]) -> bool:
    """Whether :func:`plain_step` computes this model's one-token steps: GPT-2's layers (learned
    positions, LayerNorm, the GELU MLP, multi-head or grouped-query attention without RoPE,
    QK-norm, windows, sinks or a head mask; chapter 19's options at their defaults) and caches that keep
    every token."""
    c = model.config
    return (
        model.pos_emb is not None
        and (c.embed_scale, c.logit_scale, c.logit_softcap) == (1.0, 1.0, None)
        and all(c.window is None for c in caches)
        and all(
            type(b.attn) is MultiHeadAttention
            and not b.attn.rope
            and b.attn.q_norm is None
            and b.attn.sliding_window is None
            and b.attn.sinks is None
            and b.attn.head_mask is None
            and b.attn.scale is None
            and b.attn.softcap is None
            and b.attn.w_g is None
            and type(b.ln1) is type(b.ln2) is nn.LayerNorm
            and b.ln1_out is None
            and not b.parallel
            and b.scale == 1.0
            and type(b.mlp) is nn.Sequential
            for b in model.blocks
        )
    )


def plain_step(model: nn.Module, ids: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
    """``model._hidden(ids, kv_cache=caches)[0]`` for one new token per sequence, ``ids (B, 1)``,
    in a model that :func:`plain_steps` accepts: the same operations on the same numbers, so the
    same result to the bit, without what every layer's ``forward`` repeats at each step (its
    argument checks, its options, the module calls), which the prompt's step has done once
    (chapter 12, issue 19). Forward hooks of the layers do not run here. -> ``(B, 1, d_model)``."""
    x = model.tok_emb.weight[ids] + model.pos_emb.weight[caches[0].seen]  # (B, 1, d_model)
    for block, cache in zip(model.blocks, caches):
        attn, (fc, gelu, proj) = block.attn, block.mlp
        h = block.ln1.forward(x)  # (B, 1, d_model)
        q = split_heads(attn.w_q.forward(h), attn.n_heads)  # (B, 1, n_heads * d_head) -> (B, n_heads, 1, d_head)
        k = split_heads(attn.w_k.forward(h), attn.n_kv_heads)  # -> (B, n_kv_heads, 1, d_head)
        v = split_heads(attn.w_v.forward(h), attn.n_kv_heads)
        k, v = cache.update(k, v)  # (B, n_kv_heads, T_cached + 1, d_head)
        y = F.scaled_dot_product_attention(
            q, k, v, enable_gqa=attn.n_kv_heads != attn.n_heads
        )  # softmax(q K^T / sqrt(d_head)) V: (B, n_heads, 1, d_head); the newest token sees every cached key, no mask
        x = x + attn.w_o.forward(merge_heads(y))  # (B, n_heads, 1, d_head) -> (B, 1, d_model)
        x = x + proj.forward(gelu.forward(fc.forward(block.ln2.forward(x))))  # d_model -> d_ff -> d_model
    return model.ln_f.forward(x)
