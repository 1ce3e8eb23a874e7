"""Chapter 7: a GPT-2 style model, the home of the attention layers we count.

A decoder-only transformer (Radford et al. 2019, GPT-2), pre-norm:

    x = tok_emb[ids] + pos_emb[0..T-1]             # (B, T, d_model)
    for each block:
        x = x + attn(ln1(x), causal)               # multi-head self-attention
        x = x + mlp(ln2(x))                        # d_model -> d_ff -> d_model, GELU
    logits = ln_f(x) @ tok_emb^T                   # (B, T, vocab_size); head tied to the embedding

The published configurations are below; build the big ones on the meta
device (``with torch.device("meta"): GPT(GPT3_175B)``) to inspect and count
their parameters without allocating any memory.

Chapter 12: ``GPT.generate(ids, max_new_tokens)`` continues ``ids`` greedily, one token at
a time, with a KV cache per layer (``use_cache=True``) or by running the whole sequence
again at every step (``use_cache=False``): the same tokens. ``GPTConfig(n_kv_heads=...)``
gives every layer grouped-query attention.

Chapter 15: the same model with the options of today's open models (Llama 3, Qwen3,
Mistral): ``GPTConfig(positions="rope", norm="rmsnorm", mlp="swiglu", bias=False,
tie_embeddings=False, n_kv_heads=..., d_head=..., qk_norm=...)``::

    x = tok_emb[ids]                                # no position table: RoPE inside attention
    for each block:
        x = x + attn(rmsnorm1(x), causal, rope)     # q, k rotated by position; QK-norm before it
        x = x + down(silu(gate(rmsnorm2(x))) * up(rmsnorm2(x)))    # SwiGLU
    logits = rmsnorm_f(x) @ W_head                  # untied

``LLAMA3_8B`` and ``QWEN3_8B`` are their published configurations; ``attnlib.from_hf``
(``attnlib/hf.py``) loads a ``transformers`` model's weights into such a ``GPT``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._layer_checks import check_gpt_ids, renamed
from ._validate import ensure_bool, ensure_instance
from .blocks import SwiGLU, TransformerBlock, make_attention, make_norm  # noqa: F401  (attnlib.model.make_attention)
from .config import GPT2_LARGE, GPT2_MEDIUM, GPT2_SMALL, GPT2_XL, GPT3_175B, LLAMA3_8B, QWEN3_8B, GPTConfig
from .generation import generate
from .kv_cache import KVCache
from .linear import Linear

__all__ = [  # GPTConfig and the published configurations live in config.py, the blocks in blocks.py
    "GPTConfig",
    "GPT2_SMALL",
    "GPT2_MEDIUM",
    "GPT2_LARGE",
    "GPT2_XL",
    "GPT3_175B",
    "LLAMA3_8B",
    "QWEN3_8B",
    "SwiGLU",
    "TransformerBlock",
    "GPT",
]


class GPT(nn.Module):
    """A GPT-2 style language model: token ids ``(B, T)`` -> next-token logits ``(B, T, vocab_size)``.

    ``logits = ln_f(blocks(tok_emb[ids] + pos_emb[0..T-1])) @ W_head^T``, causal: the
    logits at position ``t`` depend on ``ids[:, :t+1]`` only. With ``tie_embeddings``
    ``lm_head.weight is tok_emb.weight``. Weights start as in GPT-2: normal with std 0.02,
    ``0.02 / sqrt(2 n_layers)`` for the projections that write into the residual stream.
    With ``positions="rope"`` (or ``"none"``) there is no ``pos_emb``: ``x = tok_emb[ids]``, and
    every attention layer rotates its queries and keys by position (chapter 15).

    Args:
        config: a :class:`GPTConfig`.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = GPT(GPTConfig(vocab_size=100, context_length=16, d_model=32, n_layers=2, n_heads=4))
        >>> model(torch.tensor([[1, 2, 3], [4, 5, 6]])).shape
        torch.Size([2, 3, 100])
        >>> model.lm_head.weight is model.tok_emb.weight
        True
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        ensure_instance("config", config, GPTConfig, "a GPTConfig")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        # GPT-2's learned positions; with RoPE (or none) the model has no position table
        self.pos_emb = nn.Embedding(config.context_length, config.d_model) if config.positions == "learned" else None
        self.blocks = nn.ModuleList(TransformerBlock(config, i) for i in range(config.n_layers))
        self.ln_f = make_norm(config)
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight  # one (vocab_size, d_model) matrix, used twice
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("attn.w_o.weight", "mlp.2.weight", "mlp.down.weight")):  # write into the residual stream
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        ids: torch.Tensor,
        need_weights: bool = False,
        kv_cache: list[KVCache] | None = None,
        *,
        return_weights: bool | None = None,
        positions: str | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """``ids``: integer token ids ``(B, T)``, ``T <= context_length`` -> logits ``(B, T, vocab_size)``.

        With ``need_weights=True`` it returns ``(logits, weights)``, ``weights`` a list with
        one ``(B, n_heads, T, T)`` tensor per block: every layer's attention weights
        ``softmax(Q_h K_h^T / sqrt(d_head) + M)``, from the same forward pass. The default
        (False) takes the fast path, ``F.scaled_dot_product_attention``, and keeps none.
        ``need_weights`` is the flag's name in every attnlib layer (``TransformerBlock``,
        ``MultiHeadAttention``) and in ``nn.MultiheadAttention``; the block and the model
        return ``(output, weights)`` when it is True and the output alone otherwise.
        ``return_weights``, its old name, still works and warns (``DeprecationWarning``).

        With ``kv_cache``, a list of one :class:`~attnlib.multihead.KVCache` per block that
        already holds ``T_cached`` tokens, ``ids`` are the **next** ``T`` tokens: they get the
        positions ``T_cached .. T_cached + T - 1``, attend to the cached tokens and to each
        other (causally), and their keys and values are appended to the caches. The logits
        equal those of the last ``T`` positions of a forward pass over the whole sequence.
        ``positions="in_cache"`` (chapter 16, StreamingLLM, with rolling caches): every full-attention
        RoPE layer counts positions within its cache (``MultiHeadAttention.forward``'s
        ``positions="in_cache"``); a sliding layer keeps each token's own position, which its window makes
        exact. ``None`` (default): each token's position in the sequence.

        Example:
            >>> _ = torch.manual_seed(0)
            >>> model = GPT(GPTConfig(vocab_size=10, context_length=8, d_model=16, n_layers=2, n_heads=4))
            >>> logits, weights = model(torch.tensor([[1, 2, 3]]), need_weights=True)
            >>> logits.shape, len(weights), weights[0].shape       # one (B, n_heads, T, T) per layer
            (torch.Size([1, 3, 10]), 2, torch.Size([1, 4, 3, 3]))
            >>> weights[1][0, 0, 0].tolist()                       # token 0 sees only itself
            [1.0, 0.0, 0.0]
            >>> cache = [KVCache() for _ in model.blocks]
            >>> first = model(torch.tensor([[1, 2]]), kv_cache=cache)   # tokens 0, 1 fill the caches
            >>> last = model(torch.tensor([[3]]), kv_cache=cache)       # token 2 attends to 0, 1, 2
            >>> len(cache[0]), torch.allclose(last[0, -1], logits[0, -1], atol=1e-6)
            (3, True)
        """
        if return_weights is not None:
            need_weights = renamed("return_weights", "need_weights", return_weights, need_weights)
        x, weights = self._hidden(ids, need_weights, kv_cache, positions)  # (B, T, d_model), after ln_f
        logits = self.head(x)  # (B, T, d_model) @ (d_model, vocab_size) -> (B, T, vocab_size)
        return (logits, weights) if need_weights else logits

    def _hidden(
        self,
        ids: torch.Tensor,
        need_weights: bool = False,
        kv_cache: list[KVCache] | None = None,
        positions: str | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The final hidden states ``ln_f(blocks(...))`` ``(B, T, d_model)``, and the weights if asked."""
        ensure_bool("need_weights", need_weights)
        T_cached = check_gpt_ids(self, ids, kv_cache, positions)  # (B, T) ids after T_cached tokens seen
        T = ids.shape[1]
        pos = torch.arange(T_cached, T_cached + T, device=ids.device)  # (T,): positions after the cached ones
        # (RoPE: each attention layer rotates q and k by the same positions, from its cache's count)
        x = self.tok_emb(ids)  # (B, T, d_model)
        if self.config.embed_scale != 1.0:
            x = x * self.config.embed_scale  # chapter 19: Gemma's sqrt(d_model), Granite's multiplier
        if self.pos_emb is not None:
            x = x + self.pos_emb(pos)  # (B, T, d_model) + (T, d_model) -> (B, T, d_model)
        caches = kv_cache if kv_cache is not None else [None] * len(self.blocks)
        weights = []
        for i, (block, cache) in enumerate(zip(self.blocks, caches)):
            # "in_cache" (StreamingLLM) for the full-attention RoPE layers; None: positions from the cache's count
            rotated_in_cache = self.config.positions == "rope" and self.config.layer_window(i) is None
            where = positions if rotated_in_cache else None
            if need_weights:
                x, w = block(x, True, cache, where)  # (B, T, d_model), w: (B, n_heads, T, T_k)
                weights.append(w)
            else:
                x = block(x, kv_cache=cache, positions=where)  # (B, T, d_model) -> (B, T, d_model)
        return self.ln_f(x), weights

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """The logits of the final hidden states ``x`` ``(..., d_model)``: ``x W_head^T``, ``(..., vocab_size)``.

        Chapter 19: times ``logit_scale`` (Cohere, Granite), then soft-capped, ``c tanh(z / c)`` with
        ``c = logit_softcap`` (Gemma 2), where the config sets them.
        """
        logits = self.lm_head(x)  # (..., d_model) -> (..., vocab_size)
        if self.config.logit_scale != 1.0:
            logits = logits * self.config.logit_scale
        if self.config.logit_softcap is not None:
            logits = self.config.logit_softcap * torch.tanh(logits / self.config.logit_softcap)
        return logits

    def generate(
        self,
        ids: torch.Tensor,
        max_new_tokens: int,
        use_cache: bool = True,
        *,
        cache_window: int | None = None,
        cache_sinks: int = 0,
    ) -> torch.Tensor:
        """Continue ``ids`` greedily: append the most likely next token, ``max_new_tokens`` times
        (the code: :func:`attnlib.generation.generate`).

        ``ids_{t+1} = argmax(logits of the last position)``, computed from the whole sequence so
        far. ``use_cache=True`` (default) runs the prompt once, keeping every layer's keys and
        values in a :class:`~attnlib.multihead.KVCache`, and then feeds one new token per step
        (position ``T``, its query attending to all cached keys); ``use_cache=False`` runs
        the whole sequence through the model again at every step. A sliding layer
        (``config.sliding_window``) keeps only its window, ``KVCache(window=...)``, whose memory
        stays constant however many tokens are generated (chapter 16). Both give the same tokens;
        both compute the output head for the last position only (it is ``vocab_size`` wide).

        Args:
            ids: the prompt, integer token ids ``(B, T0)`` with ``T0 >= 1``.
            max_new_tokens: how many tokens to append, ``>= 0``, with
                ``T0 + max_new_tokens <= context_length`` (the learned positions end there).
            use_cache: keep the keys and values (True) or recompute everything (False).
            cache_window, cache_sinks: chapter 16, StreamingLLM: a new token attends to the first
                ``cache_sinks`` tokens and the last ``cache_window`` (itself included): between
                steps every layer's cache keeps the sinks and the last ``cache_window - 1``
                (``KVCache(window=..., sinks=...)``), with positions counted within the cache,
                so generation may go past ``context_length`` (positions ``"rope"`` or
                ``"none"``). The tokens then differ from the full model's once the first
                tokens are evicted. Default: keep every token (the sliding layers of a
                windowed model keep their window only, which changes nothing).

        Returns:
            Token ids ``(B, T0 + max_new_tokens)``: the prompt, then the new tokens.

        Example:
            >>> _ = torch.manual_seed(0)
            >>> model = GPT(GPTConfig(vocab_size=10, context_length=8, d_model=16, n_layers=2, n_heads=4))
            >>> prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])            # (B, T0) = (2, 3)
            >>> out = model.generate(prompt, max_new_tokens=4)
            >>> out.shape, torch.equal(out[:, :3], prompt)
            (torch.Size([2, 7]), True)
            >>> torch.equal(out, model.generate(prompt, max_new_tokens=4, use_cache=False))
            True
        """
        return generate(self, ids, max_new_tokens, use_cache, cache_window=cache_window, cache_sinks=cache_sinks)
