"""Chapter 6: multi-head attention, and the attention layer that later chapters extend.

Each head attends in its own subspace of ``d_head`` dimensions (``d_head = d_model / n_heads``
unless a layer sets it); the heads' outputs are concatenated and mixed by ``W_O``
(Vaswani et al. 2017, section 3.2.2):

    Q = X W_Q,  K = Y W_K,  V = Y W_V    # (T, d_model) @ (d_model, n_heads d_head): (d_model, d_model) in chapter 6
    head_h = attention(Q_h, K_h, V_h)    # Q_h: columns h*d_head .. (h+1)*d_head of Q
    MultiHead(X, Y) = concat(head_0, ..., head_{n_heads-1}) W_O

``Y = X`` for self-attention; for cross-attention the keys and values come
from another sequence ``Y`` (the ``context`` argument). Splitting into heads is
only a reshape: one matrix holds all the heads' ``W_Q^h`` side by side, so
``n_heads`` heads of ``d_model / n_heads`` cost as many parameters as one big head.

:class:`MultiHeadAttention`'s ``forward`` is these steps, one method each, in the order the
chapters add them::

    project         Q = x W_Q, K = c W_K, V = c W_V, split into heads              chapter 6
    normalize       QK-norm: an RMSNorm over each head's queries and keys          chapter 15
    place           the positions: RoPE rotates q and k (NoPE: nothing)           chapters 9, 15
    append          the new keys and values appended to the KV cache              chapters 12, 16
    build_mask      causal, after a cache, cut to a window                        chapters 4, 16
    place_in_cache  StreamingLLM only: RoPE by the index in the cache             chapter 16
    attend          softmax(q k^T / sqrt(d_head) + M) v; learned sinks            chapters 5, 16
    gate            the output gate: a head's output times sigmoid(x W_G)         chapter 20
    mask_heads      head ablation: a head's output times head_mask[h]             chapter 18
    w_o             the heads merged and projected out                            chapter 6

Chapter 12 adds two things for generating text one token at a time:

* a :class:`KVCache`: the keys and values a layer has computed for the tokens seen so
  far, ``(B, n_kv_heads, T, d_head)`` each, so that each new token projects only its own
  key and value (``forward(..., kv_cache=cache)``);
* grouped-query attention (Ainslie et al. 2023; multi-query attention, Shazeer 2019, is
  ``n_kv_heads=1``): ``n_kv_heads`` key/value heads, each shared by a group of
  ``n_heads / n_kv_heads`` query heads; query head ``h`` uses key/value head
  ``h // (n_heads / n_kv_heads)``. ``W_K`` and ``W_V`` shrink to
  ``(d_model, n_kv_heads d_head)``, and so does the cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._layer_checks import (
    check_mha_inputs,
    check_mha_options,
    check_score_options,
    check_torch_mha,
    check_window_options,
)
from ._validate import ensure_bool, ensure_kv_heads
from .attention import masked_scores
from .heads import flatten_batch, merge_heads, repeat_kv, split_heads
from .kv_cache import KVCache
from .linear import Linear
from .masks import causal_mask, float_mask, sliding_window_mask
from .positions import NoPE, RoPE
from .rope_scaling import RopeScaling
from .softmax import softmax

__all__ = ["split_heads", "merge_heads", "repeat_kv", "KVCache", "MultiHeadAttention"]


def softmax_with_sink(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Chapter 16, gpt-oss's learned sinks: a softmax over each row's scores and one more logit per head.

    ``weights[..., j] = exp(s_j) / (exp(b_h) + sum_k exp(s_k))``: the softmax over the row and the
    sink logit ``b_h``, with the sink's column dropped, so each row sums to less than 1 and the
    sink adds no value.

    Args:
        scores: masked, scaled scores ``(B, n_heads, T_q, T_k)`` (``-inf`` where masked).
        sinks: one logit per head, ``(n_heads,)``.

    Returns:
        Weights of ``scores``' shape.

    Example:
        >>> w = softmax_with_sink(torch.zeros(1, 1, 1, 3), torch.zeros(1))   # 3 keys and the sink, all 0
        >>> w.tolist()                                                       # a quarter each; the sink's dropped
        [[[[0.25, 0.25, 0.25]]]]
    """
    b = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)  # (n_heads,) -> (B, n_heads, T_q, 1)
    return softmax(torch.cat([scores, b], dim=-1))[..., :-1]  # (B, n_heads, T_q, T_k + 1) -> (..., T_k)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with learned projections ``W_Q, W_K, W_V, W_O``.

    ``out = concat_h(softmax(Q_h K_h^T / sqrt(d_head) + M) V_h) W_O`` with
    ``Q = x W_Q``, ``K = c W_K``, ``V = c W_V`` and ``c = x`` unless a ``context`` is given.

    ``w_q, w_k, w_v, w_o`` are ``nn.Linear(d_model, d_model)`` layers (attnlib's
    :class:`~attnlib.linear.Linear`, which is ``nn.Linear`` itself); an ``nn.Linear`` stores its matrix transposed, so the papers' ``W_Q`` is ``w_q.weight.T``
    (and ``x @ w_q.weight.T + w_q.bias == w_q(x)``).

    With ``n_kv_heads < n_heads`` (grouped-query attention; ``n_kv_heads=1`` is multi-query
    attention) ``w_k`` and ``w_v`` map ``d_model`` to ``n_kv_heads * d_head`` only, and
    query head ``h`` attends with key/value head ``h // (n_heads // n_kv_heads)``
    (:func:`repeat_kv`).

    Chapter 15 (Llama, Qwen3): with ``rope=True`` each head's query and key are rotated by
    their positions after the projections, before the scores,
    ``Q_h = RoPE(x W_Q,h)``, ``K_h = RoPE(x W_K,h)`` (:func:`~attnlib.positions.apply_rope`,
    interleaved pairs), and the values are not; with ``qk_norm=True`` an RMSNorm over
    ``d_head`` (gains ``q_norm.weight``, ``k_norm.weight``) comes first:
    ``Q_h = RoPE(RMSNorm(x W_Q,h))``. With ``d_head`` set, ``W_Q`` is
    ``(d_model, n_heads d_head)`` and ``W_O`` ``(n_heads d_head, d_model)``. How positions enter is
    one object, ``pos_enc``: :class:`~attnlib.positions.RoPE` ``(d_head, rope_base)`` with ``rope=True``,
    :class:`~attnlib.positions.NoPE` otherwise (positions added before the first layer, or none).

    Chapter 16: ``sliding_window`` cuts the causal mask to the last ``sliding_window`` keys;
    ``learned_sinks`` adds one logit per head, ``sinks`` ``(n_heads,)``, to each row's softmax
    (:func:`softmax_with_sink`).

    Args:
        d_model: model width, a multiple of ``n_heads`` unless ``d_head`` is given.
        n_heads: number of (query) heads; each has ``d_head`` dimensions.
        n_kv_heads: number of key/value heads, a divisor of ``n_heads``; ``None`` (default)
            means ``n_heads``, plain multi-head attention.
        bias: whether the four projections have biases (parameters: ``4 d^2 + 4 d``, or ``4 d^2``,
            when ``n_kv_heads == n_heads``; see :func:`attnlib.params.attention_params`).
        dropout: probability of zeroing an attention weight, in training mode only.
        d_head: width of each head; ``None`` (default) means ``d_model // n_heads``.
        rope: rotate queries and keys by position (RoPE) inside the layer; self-attention only.
        rope_base: RoPE's frequency base (10000; Llama 3: 500000, Qwen3: 1000000).
        qk_norm: an RMSNorm over ``d_head`` on each head's queries and keys, before RoPE.
        norm_eps: that RMSNorm's ``eps`` (Qwen3: ``1e-6``).
        sliding_window: each query attends to the last ``sliding_window`` keys, itself included
            (needs ``is_causal=True``); ``None`` (default): every earlier key.
        learned_sinks: one learned logit per head that joins each row's softmax (gpt-oss).
        rope_scaling, rotary_dim, scale, softcap, qkv_bias, out_bias: chapter 19's options, as ``GPTConfig``'s.
        output_gate: chapter 20, a gate ``sigmoid(x W_G)`` on each head's output (``w_g``, Qwen3-Next).

    Chapter 18: ``head_mask``, None or a float tensor ``(n_heads,)`` set on the layer
    (``layer.head_mask = torch.tensor([1.0, 0.0, ...])``), multiplies each head's output before
    ``W_O``: 0 ablates a head (:meth:`mask_heads`). The weights returned are the heads' own, unmasked.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> mha = MultiHeadAttention(d_model=8, n_heads=2)
        >>> x = torch.randn(3, 5, 8)                       # (B, T, d_model)
        >>> out, weights = mha(x, is_causal=True)
        >>> out.shape, weights.shape                        # weights: (B, n_heads, T, T)
        (torch.Size([3, 5, 8]), torch.Size([3, 2, 5, 5]))
        >>> weights[0, 0, 0].tolist()                       # token 0 sees only itself
        [1.0, 0.0, 0.0, 0.0, 0.0]
        >>> gqa = MultiHeadAttention(d_model=8, n_heads=4, n_kv_heads=2)   # heads 0, 1 share k, v head 0
        >>> tuple(gqa.w_q.weight.shape), tuple(gqa.w_k.weight.shape)     # nn.Linear: (out, in)
        ((8, 8), (4, 8))
        >>> qwen = MultiHeadAttention(8, n_heads=2, d_head=8, rope=True, qk_norm=True)   # n_heads d_head = 16
        >>> tuple(qwen.w_q.weight.shape), tuple(qwen.q_norm.weight.shape), qwen(x, is_causal=True)[0].shape
        ((16, 8), (8,), torch.Size([3, 5, 8]))
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        *,
        d_head: int | None = None,
        rope: bool = False,
        rope_base: float = 10000.0,
        qk_norm: bool = False,
        norm_eps: float = 1e-5,
        sliding_window: int | None = None,
        learned_sinks: bool = False,
        rope_scaling: RopeScaling | None = None,
        rotary_dim: int | None = None,
        scale: float | None = None,
        softcap: float | None = None,
        qkv_bias: bool | None = None,
        out_bias: bool | None = None,
        output_gate: bool = False,
    ):
        super().__init__()
        d_head = check_mha_options(d_model, n_heads, dropout, d_head, rope, rope_base, qk_norm, norm_eps)
        check_window_options(sliding_window, learned_sinks)
        check_score_options(d_head, rope, rope_scaling, rotary_dim, scale, softcap, qkv_bias, out_bias)
        self.n_kv_heads = ensure_kv_heads(n_heads, n_kv_heads)  # None -> n_heads
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.dropout = float(dropout)
        # how positions enter (chapters 9, 15): RoPE rotates q and k inside the layer; NoPE leaves them
        self.rope_base = float(rope_base)  # kept with rope=False too: the checks and chapters read it
        self.pos_enc = RoPE(d_head, self.rope_base, scaling=rope_scaling, rotary_dim=rotary_dim) if rope else NoPE()
        d_q, d_kv = n_heads * d_head, self.n_kv_heads * d_head  # both d_model for plain multi-head attention
        qkv_bias, out_bias = bias if qkv_bias is None else qkv_bias, bias if out_bias is None else out_bias
        self.w_q = Linear(d_model, d_q, bias=qkv_bias)  # (d_model) -> (n_heads * d_head)
        self.w_k = Linear(d_model, d_kv, bias=qkv_bias)  # (d_model) -> (n_kv_heads * d_head)
        self.w_v = Linear(d_model, d_kv, bias=qkv_bias)
        self.w_o = Linear(d_q, d_model, bias=out_bias)  # (n_heads * d_head) -> (d_model)
        # QK-norm (chapter 15): an RMSNorm on queries and keys before RoPE, over each head's d_head (with gains
        # or, "unweighted", without) or over the whole projection ("projection", chapter 19)
        self.qk_norm = "head" if qk_norm is True else (qk_norm or None)
        q_width, k_width = (d_q, d_kv) if self.qk_norm == "projection" else (d_head, d_head)
        gains = self.qk_norm != "unweighted"
        self.q_norm = nn.RMSNorm(q_width, eps=norm_eps, elementwise_affine=gains) if self.qk_norm else None
        self.k_norm = nn.RMSNorm(k_width, eps=norm_eps, elementwise_affine=gains) if self.qk_norm else None
        # chapter 19: the factor on the scores (None: 1 / sqrt(d_head)) and Gemma 2's soft cap on them
        self.scale, self.softcap = scale, softcap
        # chapter 20, gated attention (Qwen3-Next): each head's output times sigmoid(x W_G), before W_O
        self.w_g = Linear(d_model, d_q, bias=qkv_bias) if ensure_bool("output_gate", output_gate) else None
        self.attn_dropout = nn.Dropout(self.dropout)
        # chapter 16: attend to the last sliding_window keys only; learned sinks: one logit per head (gpt-oss)
        self.sliding_window = sliding_window
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if learned_sinks else None
        # chapter 18, head ablation: None, or (n_heads,) factors on the heads' outputs (0 removes a head)
        self.register_buffer("head_mask", None, persistent=False)

    @property
    def rope(self) -> bool:
        """Whether the layer rotates its queries and keys by position (``rope=True``)."""
        return isinstance(self.pos_enc, RoPE)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = True,
        kv_cache: KVCache | None = None,
        positions: torch.Tensor | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x`` to ``context`` (to ``x`` itself when ``context`` is None).

        The steps, in the order of the chapters, one method each: :meth:`project` (6),
        :meth:`normalize` (14), :meth:`place` (9, 14), :meth:`append` (12, 15), :meth:`build_mask`
        (4, 15), :meth:`place_in_cache` (15, StreamingLLM only), :meth:`attend` (5; sinks: 15),
        :meth:`gate` (19, the output gate only), :meth:`mask_heads` (17, head ablation only), and the heads
        merged and projected out by ``W_O`` (6).

        Args:
            x: queries' input, shape ``(..., T, d_model)``: any number of leading batch
                axes, as ``nn.Linear`` takes, usually ``(B, T, d_model)``.
            context: keys' and values' input, shape ``(..., T_ctx, d_model)`` with ``x``'s
                leading axes; ``None`` (default) is self-attention, ``T_ctx = T``.
            attn_mask: optional mask that broadcasts to ``(..., n_heads, T, T_k)``, e.g.
                ``(T, T_k)`` or a ``padding_mask`` ``(B, 1, 1, T_k)``: boolean with
                True = may attend (``nn.MultiheadAttention`` uses True = blocked), or
                floating point (added to the scores). ``T_k = T_ctx``, or
                ``T_cached + T`` with a ``kv_cache``.
            is_causal: if True, position ``i`` attends to positions ``0 .. i`` only. With a
                ``kv_cache`` that already holds ``T_cached`` tokens, the ``T`` new tokens
                are positions ``T_cached .. T_cached + T - 1``: the mask is aligned at the
                bottom right, ``causal_mask(T, T_k, align="bottom_right")``, and a single
                new token (``T = 1``) needs no mask at all.
            need_weights: True (default) computes the attention step by step with
                :func:`attention_weights` and returns the weights; False takes the fast
                path through ``F.scaled_dot_product_attention`` and returns None.
            kv_cache: a :class:`KVCache` for self-attention (``context`` None): the new
                keys and values ``(B, n_kv_heads, T, d_head)`` are appended to it, and the
                queries attend to every cached key. ``None`` (default): no cache.
            positions: with ``rope=True``, the positions of ``x``'s tokens, ``(T,)`` or
                ``(..., T)`` (one row per sequence); ``None`` (default):
                ``T_cached .. T_cached + T - 1``, the tokens after the cached ones. The
                cache keeps rotated keys: a cached token keeps the rotation of its position.
                ``"in_cache"`` (chapter 16, StreamingLLM, with a ``kv_cache``): positions are
                counted within the cache instead; keys are cached unrotated, and at every step
                each held key is rotated by its index in the cache, the queries by the last ones.

        Returns:
            ``(out, weights)``: ``out`` of shape ``(..., T, d_model)``; ``weights`` of shape
            ``(..., n_heads, T, T_k)`` (after dropout, as used to mix the values) or None.
        """
        check_mha_inputs(self, x, context, attn_mask, is_causal, need_weights, kv_cache, positions)
        lead, T = x.shape[:-2], x.shape[-2]  # any leading batch axes: one axis B inside, restored at the end
        q, k, v = self.project(x, x if context is None else context)  # (B, heads, T, d_head); k, v: n_kv_heads
        q, k = self.normalize(q, k)  # QK-norm, if the layer has it
        q, k = self.place(q, k, kv_cache, positions, lead)  # RoPE by position (not yet with "in_cache")
        k, v, k_pos = self.append(k, v, kv_cache)  # (B, n_kv_heads, T_k, d_head); k_pos: (T_k,) positions
        mask, is_causal = self.build_mask(flatten_batch(attn_mask, lead), is_causal, T, k_pos, kv_cache)
        q, k = self.place_in_cache(q, k, positions)  # StreamingLLM: RoPE by the index in the cache
        y, weights = self.attend(q, k, v, mask, is_causal, need_weights)  # (B, n_heads, T, d_head), (..., T_k)
        y = self.gate(y, x)  # the output gate, if the layer has one
        y = self.mask_heads(y)  # head ablation, if a head_mask is set
        out = self.w_o(merge_heads(y))  # (B, n_heads, T, d_head) -> (B, T, n_heads * d_head) -> (B, T, d_model)
        if weights is not None:
            weights = weights.reshape(*lead, *weights.shape[1:])  # (B, n_heads, T, T_k) -> (..., n_heads, T, T_k)
        return out.reshape(*lead, T, self.d_model), weights  # (B, T, d_model) -> (..., T, d_model)

    def project(self, x: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Chapter 6: ``Q = x W_Q``, ``K = c W_K``, ``V = c W_V``, each split into heads.

        ``x`` ``(..., T, d_model)`` and ``context`` ``(..., T_ctx, d_model)`` (``x`` itself in
        self-attention), their leading axes flattened into one, ``B``. Returns ``q``
        ``(B, n_heads, T, d_head)`` and ``k``, ``v`` ``(B, n_kv_heads, T_ctx, d_head)``.
        """
        x = x.reshape(-1, x.shape[-2], self.d_model)  # (..., T, d_model) -> (B, T, d_model)
        context = context.reshape(-1, context.shape[-2], self.d_model)  # (..., T_ctx, d_model) -> (B, T_ctx, d_model)
        q = split_heads(self.w_q(x), self.n_heads)  # (B, T, n_heads * d_head) -> (B, n_heads, T, d_head)
        k = split_heads(self.w_k(context), self.n_kv_heads)  # (B, T_ctx, n_kv * d_head) -> (B, n_kv, T_ctx, d_head)
        v = split_heads(self.w_v(context), self.n_kv_heads)  # (B, T_ctx, n_kv * d_head) -> (B, n_kv, T_ctx, d_head)
        return q, k, v

    def normalize(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Chapter 15, QK-norm (``qk_norm=True``): ``q_h / rms(q_h) * g_q`` and ``k_h / rms(k_h) * g_k``,
        an RMSNorm over each head's ``d_head``; chapter 19: without gains (``"unweighted"``, Llama 4), or
        one RMSNorm over all heads' ``n_heads * d_head`` (``"projection"``, OLMo 2/3); without QK-norm,
        ``q`` and ``k`` unchanged. Shapes kept."""
        if self.q_norm is None:
            return q, k
        if self.qk_norm == "projection":  # one norm over all heads: (B, heads, T, d_head) -> (B, T, heads * d_head)
            return (split_heads(self.q_norm(merge_heads(q)), self.n_heads),
                    split_heads(self.k_norm(merge_heads(k)), self.n_kv_heads))  # fmt: skip
        return self.q_norm(q), self.k_norm(k)

    def place(self, q, k, kv_cache: KVCache | None, positions, lead: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
        """Chapters 9 and 15: the positions of the new tokens placed on ``q`` and ``k`` ``(B, heads, T, d_head)``
        by the layer's :attr:`pos_enc`: :class:`~attnlib.positions.RoPE` rotates pair ``i`` of the token at
        position ``m`` by ``m theta_i``, :class:`~attnlib.positions.NoPE` leaves them. Positions: ``positions``
        ``(T,)`` or ``(..., T)``, or ``T_cached .. T_cached + T - 1`` after the cached tokens. With
        ``positions="in_cache"`` nothing yet: :meth:`place_in_cache` rotates after the cache."""
        if isinstance(positions, str):  # "in_cache"
            return q, k
        T = q.shape[2]
        if positions is None:
            start = 0 if kv_cache is None else kv_cache.seen  # the position of the first new token
            positions = torch.arange(start, start + T, device=q.device)  # (T,)
        elif positions.dim() > 1:
            positions = positions.expand(*lead, T).reshape(-1, 1, T)  # (..., T) -> (B, 1, T): one row per sequence
        return self.pos_enc(q, positions), self.pos_enc(k, positions)

    def append(self, k: torch.Tensor, v: torch.Tensor, kv_cache: KVCache | None):
        """Chapters 12 and 16: the new keys and values ``(B, n_kv_heads, T, d_head)`` appended to the cache.

        Returns ``(k, v, k_pos)``: every key and value the new tokens attend to, ``(B, n_kv_heads, T_k,
        d_head)`` (the cached tokens first; ``k``, ``v`` themselves without a cache), and the keys'
        positions in the sequence ``(T_k,)``. A rolling cache evicts only after returning them."""
        if kv_cache is None:
            return k, v, torch.arange(k.shape[2], device=k.device)  # (T_ctx,)
        held = kv_cache.positions.to(k.device)  # (T_cached,): the held tokens' positions, before the update
        new = torch.arange(kv_cache.seen, kv_cache.seen + k.shape[2], device=k.device)  # (T,)
        k, v = kv_cache.update(k, v)  # (B, n_kv_heads, T_cached + T, d_head)
        return k, v, torch.cat([held, new])  # (T_k,)

    def build_mask(self, attn_mask, is_causal: bool, T: int, k_pos: torch.Tensor, kv_cache: KVCache | None):
        """Chapters 4 and 16: the mask of ``T`` new queries over the keys at positions ``k_pos`` ``(T_k,)``.

        Returns ``(mask, is_causal)`` for :meth:`attend`. Without ``is_causal``: ``attn_mask`` as given.
        Causal, with a window (the layer's ``sliding_window``, or a rolling cache's, whose sinks stay
        visible): the mask from positions, :meth:`window_mask`. Causal after ``T_cached`` cached tokens:
        ``causal_mask(T, T_k, align="bottom_right")``, none for a single token. Otherwise plain causal:
        ``(None, True)``, which the attention turns into ``causal_mask(T, T_k)``.
        """
        windowed = self.sliding_window is not None or (kv_cache is not None and kv_cache.window is not None)
        T_cached = 0 if kv_cache is None else len(k_pos) - T
        if not is_causal:
            return attn_mask, False
        if windowed:
            return self.window_mask(k_pos[-T:] if kv_cache is not None else k_pos, k_pos, kv_cache), False
        if T_cached:  # the new queries are tokens T_cached .. T_k - 1: each sees every cached key
            return (None if T == 1 else causal_mask(T, len(k_pos), device=k_pos.device, align="bottom_right")), False
        return None, True

    def window_mask(self, q_pos: torch.Tensor, k_pos: torch.Tensor, kv_cache: KVCache | None) -> torch.Tensor:
        """The causal mask cut to the layer's sliding window and the cache's window (its sinks kept),
        from positions: query positions ``(T,)``, key positions ``(T_k,)`` -> ``(T, T_k)``, True = may attend.
        Without a cache it is ``sliding_window_mask(T, window=sliding_window)``."""
        if kv_cache is None:
            return sliding_window_mask(len(q_pos), window=self.sliding_window, device=q_pos.device)
        q_pos, k_pos = q_pos[:, None], k_pos[None, :]  # (T, 1), (1, T_k)
        allowed = k_pos <= q_pos  # (T, T_k): causal
        if self.sliding_window is not None:
            allowed = allowed & (k_pos > q_pos - self.sliding_window)
        if kv_cache.window is not None:  # what the cache would have evicted, but for its sinks
            allowed = allowed & ((k_pos > q_pos - kv_cache.window) | (k_pos < kv_cache.sinks))
        return allowed

    def place_in_cache(self, q: torch.Tensor, k: torch.Tensor, positions) -> tuple[torch.Tensor, torch.Tensor]:
        """Chapter 16, StreamingLLM (``positions="in_cache"``): every key ``k`` ``(B, n_kv_heads, T_k, d_head)``
        rotated by its index in the cache, ``0 .. T_k - 1``, and the ``T`` queries by the last ``T`` indices,
        so positions stay below the cache's size however long the generation. Otherwise unchanged."""
        if not isinstance(positions, str):  # positions were placed before the cache
            return q, k
        T, T_k = q.shape[2], k.shape[2]
        index = torch.arange(T_k, device=k.device)  # (T_k,)
        return self.pos_enc(q, index[T_k - T :]), self.pos_enc(k, index)

    def attend(self, q, k, v, mask, is_causal: bool, need_weights: bool):
        """Chapter 5: ``softmax(q_h k_h^T / sqrt(d_head) + M) v_h`` for every head, with the key/value
        head ``h // (n_heads / n_kv_heads)`` (chapter 12).

        ``q`` ``(B, n_heads, T, d_head)``, ``k``, ``v`` ``(B, n_kv_heads, T_k, d_head)``; ``mask`` broadcasts to
        ``(B, n_heads, T, T_k)`` or is None. With learned sinks (chapter 16) each row's softmax has one more
        logit, ``sinks[h]``, and no value: :func:`softmax_with_sink`. Returns ``(y, weights)``: ``y``
        ``(B, n_heads, T, d_head)``, ``weights`` ``(B, n_heads, T, T_k)`` (after dropout), or None with
        ``need_weights=False``, the fast path through ``F.scaled_dot_product_attention``.
        """
        if not need_weights:
            return self.attend_fast(q, k, v, mask, is_causal), None
        k, v = repeat_kv(k, self.n_heads), repeat_kv(v, self.n_heads)  # (B, n_kv_heads, ...) -> (B, n_heads, ...)
        scores = masked_scores(q, k, mask, is_causal, self.scale, self.softcap)  # (B, n_heads, T, T_k)
        weights = softmax(scores) if self.sinks is None else softmax_with_sink(scores, self.sinks)  # sinks: < 1
        weights = self.attn_dropout(weights)
        return weights @ v, weights  # (B, n_heads, T, T_k) @ (B, n_heads, T_k, d_head) -> (B, n_heads, T, d_head)

    def gate(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Chapter 20, gated attention (Qiu et al. 2025; Qwen3-Next): ``y_h * sigmoid(x W_G,h)``, each head's output
        ``y`` ``(B, n_heads, T, d_head)`` times a gate in (0, 1) computed from the layer's input ``x`` ``(..., T,
        d_model)``, before ``W_O``; without ``output_gate``, ``y`` as it is."""
        if self.w_g is None:
            return y
        x = x.reshape(-1, x.shape[-2], self.d_model)  # (..., T, d_model) -> (B, T, d_model)
        return y * torch.sigmoid(split_heads(self.w_g(x), self.n_heads))  # (B, n_heads, T, d_head)

    def mask_heads(self, y: torch.Tensor) -> torch.Tensor:
        """Chapter 18, head ablation: head ``h``'s output ``y[:, h]`` times ``head_mask[h]`` before ``W_O``;
        ``head_mask[h] = 0`` removes head ``h``'s contribution, as zeroing its ``d_head`` columns of ``W_O``'s
        input would. Without a ``head_mask``, ``y`` as it is. ``y``: ``(B, n_heads, T, d_head)``, kept."""
        if self.head_mask is None:
            return y
        return y * self.head_mask.to(y.dtype).view(1, -1, 1, 1)  # (n_heads,) -> (1, n_heads, 1, 1)

    def attend_fast(self, q, k, v, mask, is_causal: bool) -> torch.Tensor:
        """:meth:`attend` through ``F.scaled_dot_product_attention`` (which shares key/value heads as
        :func:`repeat_kv` does, ``enable_gqa``) -> ``(B, n_heads, T, d_head)``.

        SDPA has no sink logit. A key of zeros with a value of zeros gives one: its score is
        ``q . 0 = 0``, and a float mask adds ``sinks[h]`` in its column, so its logit is exactly
        ``sinks[h]``; its value adds nothing to the output. The same softmax as
        :func:`softmax_with_sink`, with the sink's column present but multiplying zeros.
        """
        if self.softcap is not None:  # SDPA has no soft cap: the weights path, without its weights
            return self.attend(q, k, v, mask, is_causal, need_weights=True)[0]
        if self.sinks is not None:
            k, v, mask, is_causal = self.sink_as_key(q, k, v, mask, is_causal)
        if mask is not None and mask.is_floating_point():
            mask = mask.to(q.dtype)  # SDPA wants a float mask in q's dtype
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=self.dropout if self.training else 0.0,
            scale=self.scale, enable_gqa=self.n_kv_heads != self.n_heads,
        )  # fmt: skip

    def sink_as_key(self, q, k, v, mask, is_causal):
        """The sinks as one more key per head for SDPA (see :meth:`attend_fast`): ``k``, ``v`` with a row of
        zeros appended, ``(B, n_kv_heads, T_k + 1, d_head)``, and the float mask ``(B, n_heads, T, T_k + 1)``
        whose last column is ``sinks[h]`` (0 where a key may be attended, -inf where not, elsewhere)."""
        B, T, T_k = q.shape[0], q.shape[2], k.shape[2]
        if mask is None:
            mask = causal_mask(T, T_k, device=q.device) if is_causal else torch.ones(T, T_k, dtype=torch.bool)
        if mask.dtype == torch.bool:
            mask = float_mask(mask.to(q.device), q.dtype)  # 0 where allowed, -inf where not
        mask = torch.broadcast_to(mask.to(q.dtype), (B, self.n_heads, T, T_k))  # (B, n_heads, T, T_k)
        sink = self.sinks.to(q.dtype).view(1, -1, 1, 1).expand(B, -1, T, 1)  # (n_heads,) -> (B, n_heads, T, 1)
        zero = k.new_zeros(B, k.shape[1], 1, k.shape[3])  # (B, n_kv_heads, 1, d_head)
        k, v = torch.cat([k, zero], dim=2), torch.cat([v, zero], dim=2)  # (B, n_kv_heads, T_k + 1, d_head)
        return k, v, torch.cat([mask, sink], dim=-1), False  # (B, n_heads, T, T_k + 1)

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """A ``MultiHeadAttention`` with the weights of a ``torch.nn.MultiheadAttention``.

        ``m.in_proj_weight`` ``(3 d_model, d_model)`` stacks the weights of the q, k and v
        projections; ``m.out_proj`` is ``W_O``. The new module gives the same outputs,
        on ``(B, T, d_model)`` inputs (attnlib is batch-first; ``m.batch_first`` only
        changes ``m``'s input layout, not its weights). Remember that ``m`` takes
        boolean masks with True = blocked: ``m(..., attn_mask=~mask)``.

        Args:
            m: an ``nn.MultiheadAttention`` with ``kdim == vdim == embed_dim``, without
                ``add_bias_kv`` and ``add_zero_attn``.

        Returns:
            A new module (same device, dtype, dropout and training mode as ``m``), with
            ``n_kv_heads == n_heads``: ``nn.MultiheadAttention`` has one key/value head per
            query head, so it has no grouped-query form.

        Example:
            >>> _ = torch.manual_seed(0)
            >>> m = torch.nn.MultiheadAttention(8, num_heads=2, batch_first=True)
            >>> mine = MultiHeadAttention.from_torch(m)
            >>> x = torch.randn(2, 4, 8)
            >>> torch.allclose(mine(x)[0], m(x, x, x)[0], atol=1e-6)
            True
        """
        check_torch_mha(m)
        bias = m.in_proj_bias is not None
        w = m.in_proj_weight
        new = cls(m.embed_dim, m.num_heads, bias=bias, dropout=m.dropout).to(w.device, w.dtype)
        with torch.no_grad():
            for lin, w_part in zip((new.w_q, new.w_k, new.w_v), w.chunk(3)):  # 3 x (d_model, d_model)
                lin.weight.copy_(w_part)
            new.w_o.weight.copy_(m.out_proj.weight)
            if bias:
                for lin, b_part in zip((new.w_q, new.w_k, new.w_v), m.in_proj_bias.chunk(3)):
                    lin.bias.copy_(b_part)
                new.w_o.bias.copy_(m.out_proj.bias)
        return new.train(m.training)
