"""Chapter 6: multi-head attention.

Each head attends in its own ``d_head = d_model / n_heads`` dimensional
subspace; the heads' outputs are concatenated and mixed by ``W_O``
(Vaswani et al. 2017, section 3.2.2):

    Q = X W_Q,  K = Y W_K,  V = Y W_V               # (T, d_model) @ (d_model, d_model)
    head_h = attention(Q_h, K_h, V_h)               # Q_h: columns h*d_head .. (h+1)*d_head of Q
    MultiHead(X, Y) = concat(head_0, ..., head_{n_heads-1}) W_O

``Y = X`` for self-attention; for cross-attention the keys and values come
from another sequence ``Y`` (the ``context`` argument). Splitting into heads is
only a reshape: one ``(d_model, d_model)`` matrix holds all the heads' ``W_Q^h``
side by side, so ``n_heads`` heads cost as many parameters as one big head.

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

from ._checks import check_mha_inputs, check_mha_options, check_torch_mha, check_window_options
from ._validate import ensure_dim, ensure_divisible, ensure_heads, ensure_int, ensure_kv_heads
from .attention import attention_weights
from .kv_cache import KVCache
from .linear import Linear
from .masks import causal_mask, float_mask, sliding_window_mask
from .positions import apply_rope

__all__ = ["split_heads", "merge_heads", "repeat_kv", "KVCache", "MultiHeadAttention"]


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Split the last dimension into heads: ``(B, T, d_model) -> (B, n_heads, T, d_head)``.

    ``split_heads(x, n_heads)[b, h, t, i] = x[b, t, h * d_head + i]`` with ``d_head = d_model / n_heads``:
    head ``h`` gets the ``h``-th block of ``d_head`` columns.

    Args:
        x: tensor of shape ``(B, T, d_model)``, ``d_model`` a multiple of ``n_heads``.
        n_heads: number of heads.

    Returns:
        Tensor of shape ``(B, n_heads, T, d_head)`` (a view of ``x`` when possible).

    Example:
        >>> x = torch.arange(8.0).reshape(1, 2, 4)   # B=1, T=2, d_model=4
        >>> split_heads(x, 2)                        # head 0: columns 0-1, head 1: columns 2-3
        tensor([[[[0., 1.],
                  [4., 5.]],
        <BLANKLINE>
                 [[2., 3.],
                  [6., 7.]]]])
    """
    ensure_dim("x", x, 3, "a 3-D tensor of shape (B, T, d_model)")
    B, T, d_model = x.shape
    ensure_heads(d_model, n_heads)
    x = x.reshape(B, T, n_heads, d_model // n_heads)  # (B, T, d_model) -> (B, T, n_heads, d_head)
    return x.transpose(1, 2)  # (B, T, n_heads, d_head) -> (B, n_heads, T, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads again: ``(B, n_heads, T, d_head) -> (B, T, d_model)``.

    The inverse of :func:`split_heads`:
    ``merge_heads(x)[b, t, h * d_head + i] = x[b, h, t, i]``.

    Args:
        x: tensor of shape ``(B, n_heads, T, d_head)``.

    Returns:
        Tensor of shape ``(B, T, n_heads * d_head)``.

    Example:
        >>> x = torch.arange(8.0).reshape(1, 2, 4)
        >>> torch.equal(merge_heads(split_heads(x, 2)), x)
        True
    """
    ensure_dim("x", x, 4, "a 4-D tensor of shape (B, n_heads, T, d_head)")
    B, n_heads, T, d_head = x.shape
    x = x.transpose(1, 2)  # (B, n_heads, T, d_head) -> (B, T, n_heads, d_head)
    return x.reshape(B, T, n_heads * d_head)  # (B, T, n_heads, d_head) -> (B, T, d_model)


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Share key/value heads among query heads: ``(B, n_kv_heads, T, d_head) -> (B, n_heads, T, d_head)``.

    ``repeat_kv(x, n_heads)[:, h] = x[:, h // g]`` with ``g = n_heads / n_kv_heads``, the
    group size: each key/value head is repeated ``g`` times in a row
    (``repeat_interleave``), the grouping of ``F.scaled_dot_product_attention(...,
    enable_gqa=True)``. With ``n_kv_heads == n_heads`` it returns ``x`` itself.

    Args:
        x: keys or values, shape ``(B, n_kv_heads, T, d_head)``.
        n_heads: number of query heads, a multiple of ``n_kv_heads``.

    Returns:
        Tensor of shape ``(B, n_heads, T, d_head)``.

    Example:
        >>> kv = torch.tensor([10.0, 20.0]).reshape(1, 2, 1, 1)   # 2 key/value heads
        >>> repeat_kv(kv, 4).flatten().tolist()                  # 4 query heads: groups of 2
        [10.0, 10.0, 20.0, 20.0]
    """
    ensure_dim("x", x, 4, "a 4-D tensor of shape (B, n_kv_heads, T, d_head)")
    n_kv_heads = x.shape[1]
    ensure_int("n_heads", n_heads)
    ensure_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads, "x.shape[1]")
    if n_heads == n_kv_heads:
        return x
    return x.repeat_interleave(n_heads // n_kv_heads, dim=1)  # (B, n_kv_heads, T, d_head) -> (B, n_heads, T, d_head)


def flatten_batch(mask: torch.Tensor | None, lead: torch.Size) -> torch.Tensor | None:
    """A mask for scores ``(*lead, n_heads, T, T_k)`` with the leading axes made one: ``(B, n_heads, T, T_k)``.

    A mask of at most 3 dimensions broadcasts over the batch as it is and comes back unchanged.
    """
    if mask is None or mask.dim() <= 3:
        return mask
    mask = mask.reshape((1,) * (len(lead) + 3 - mask.dim()) + mask.shape)  # (..., h, T, T_k), lead axes padded
    return mask.expand(*lead, *mask.shape[-3:]).reshape(-1, *mask.shape[-3:])  # (*lead, ...) -> (B, ...)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with learned projections ``W_Q, W_K, W_V, W_O``.

    ``out = concat_h(softmax(Q_h K_h^T / sqrt(d_head) + M) V_h) W_O`` with
    ``Q = x W_Q``, ``K = c W_K``, ``V = c W_V`` and ``c = x`` unless a ``context`` is given.

    ``w_q, w_k, w_v, w_o`` are ``nn.Linear(d_model, d_model)`` layers (attnlib's
    :class:`~attnlib.linear.Linear`, the same layer with a faster product for one token,
    chapter 12); an ``nn.Linear`` stores its matrix transposed, so the papers' ``W_Q`` is ``w_q.weight.T``
    (and ``x @ w_q.weight.T + w_q.bias == w_q(x)``).

    With ``n_kv_heads < n_heads`` (grouped-query attention; ``n_kv_heads=1`` is multi-query
    attention) ``w_k`` and ``w_v`` map ``d_model`` to ``n_kv_heads * d_head`` only, and
    query head ``h`` attends with key/value head ``h // (n_heads // n_kv_heads)``
    (:func:`repeat_kv`).

    Chapter 14 (Llama, Qwen3): with ``rope=True`` each head's query and key are rotated by
    their positions after the projections, before the scores,
    ``Q_h = RoPE(x W_Q,h)``, ``K_h = RoPE(x W_K,h)`` (:func:`~attnlib.positions.apply_rope`,
    interleaved pairs), and the values are not; with ``qk_norm=True`` an RMSNorm over
    ``d_head`` (gains ``q_norm.weight``, ``k_norm.weight``) comes first:
    ``Q_h = RoPE(RMSNorm(x W_Q,h))``. With ``d_head`` set, ``W_Q`` is
    ``(d_model, n_heads d_head)`` and ``W_O`` ``(n_heads d_head, d_model)``.

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
    ):
        super().__init__()
        d_head = check_mha_options(d_model, n_heads, dropout, d_head, rope, rope_base, qk_norm, norm_eps)
        check_window_options(sliding_window, learned_sinks)
        self.n_kv_heads = ensure_kv_heads(n_heads, n_kv_heads)  # None -> n_heads
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.dropout = float(dropout)
        self.rope, self.rope_base = rope, float(rope_base)
        d_q, d_kv = n_heads * d_head, self.n_kv_heads * d_head  # both d_model for plain multi-head attention
        self.w_q = Linear(d_model, d_q, bias=bias)  # (d_model) -> (n_heads * d_head)
        self.w_k = Linear(d_model, d_kv, bias=bias)  # (d_model) -> (n_kv_heads * d_head)
        self.w_v = Linear(d_model, d_kv, bias=bias)
        self.w_o = Linear(d_q, d_model, bias=bias)  # (n_heads * d_head) -> (d_model)
        # QK-norm (chapter 14): an RMSNorm over each head's d_head, on queries and keys, before RoPE
        self.q_norm = nn.RMSNorm(d_head, eps=norm_eps) if qk_norm else None
        self.k_norm = nn.RMSNorm(d_head, eps=norm_eps) if qk_norm else None
        self.attn_dropout = nn.Dropout(self.dropout)
        # chapter 15: attend to the last sliding_window keys only; learned sinks: one logit per head (gpt-oss)
        self.sliding_window = sliding_window
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if learned_sinks else None

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = True,
        kv_cache: KVCache | None = None,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x`` to ``context`` (to ``x`` itself when ``context`` is None).

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

        Returns:
            ``(out, weights)``: ``out`` of shape ``(..., T, d_model)``; ``weights`` of shape
            ``(..., n_heads, T, T_k)`` (after dropout, as used to mix the values) or None.
        """
        check_mha_inputs(self, x, context, attn_mask, is_causal, need_weights, kv_cache, positions)
        lead, T = x.shape[:-2], x.shape[-2]  # any leading batch axes, flattened into one: B
        context = x if context is None else context  # self-attention: keys and values from x
        x, context = x.reshape(-1, T, self.d_model), context.reshape(-1, context.shape[-2], self.d_model)
        attn_mask = flatten_batch(attn_mask, lead)  # (..., n_heads, T, T_k) -> (B, n_heads, T, T_k)
        T_cached = 0 if kv_cache is None else len(kv_cache)  # keys held by the cache
        start = 0 if kv_cache is None else kv_cache.seen  # the position of x's first token
        T_k = T_cached + context.shape[1]
        # StreamingLLM: a full-attention layer with a rolling cache counts positions within the cache
        streaming = kv_cache is not None and kv_cache.window is not None and self.sliding_window is None

        q = split_heads(self.w_q(x), self.n_heads)  # (B, T, n_heads * d_head) -> (B, n_heads, T, d_head)
        k = split_heads(self.w_k(context), self.n_kv_heads)  # (B, T_ctx, n_kv * d_head) -> (B, n_kv, T_ctx, d_head)
        v = split_heads(self.w_v(context), self.n_kv_heads)  # (B, T_ctx, n_kv * d_head) -> (B, n_kv, T_ctx, d_head)
        if self.q_norm is not None:  # QK-norm: each head's query and key rescaled to RMS 1 (times a gain)
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope and not streaming:  # rotate queries and keys by their positions (chapter 9), before the scores
            pos = torch.arange(start, start + T, device=x.device) if positions is None else positions
            pos = pos if pos.dim() == 1 else pos.expand(*lead, T).reshape(-1, 1, T)  # (T,) or (B, 1, T)
            q, k = apply_rope(q, pos, self.rope_base), apply_rope(k, pos, self.rope_base)
        windowed = self.sliding_window is not None or (kv_cache is not None and kv_cache.window is not None)
        if kv_cache is not None:
            held = kv_cache.positions if windowed else None  # (T_cached,): the cached tokens' positions, if needed
            k, v = kv_cache.update(k, v)  # (B, n_kv_heads, T_cached + T, d_head): earlier tokens first
        if streaming and self.rope:  # rotate by the index in the cache: positions stay below sinks + window
            index = torch.arange(T_k, device=x.device)  # (T_k,)
            q, k = apply_rope(q, index[T_k - T :], self.rope_base), apply_rope(k, index, self.rope_base)
        if is_causal and windowed:  # the causal mask cut to the window(s), from the tokens' positions
            is_causal = False
            q_pos = torch.arange(start, start + T, device=x.device)  # (T,)
            k_pos = q_pos if kv_cache is None else torch.cat([held.to(x.device), q_pos])  # (T_k,)
            attn_mask = self._window_mask(q_pos, k_pos, kv_cache)
        elif is_causal and T_cached:
            # the new queries are tokens T_cached .. T_k - 1: each sees every cached key
            is_causal = False
            attn_mask = None if T == 1 else causal_mask(T, T_k, device=x.device, align="bottom_right")
        if self.sinks is not None:  # one more key per head: score sinks[h], value 0 (gpt-oss)
            k, v, attn_mask, is_causal = self._add_sink(q, k, v, attn_mask, is_causal)
        if need_weights:
            k = repeat_kv(k, self.n_heads)  # (B, n_kv_heads, T_k, d_head) -> (B, n_heads, T_k, d_head)
            v = repeat_kv(v, self.n_heads)
            weights = attention_weights(q, k, attn_mask, is_causal)  # (B, n_heads, T, T_k)
            weights = self.attn_dropout(weights)
            y = weights @ v  # (B, n_heads, T, T_k) @ (B, n_heads, T_k, d_head) -> (B, n_heads, T, d_head)
            weights = weights[..., :T_k]  # without the sink's column, if any: (B, n_heads, T, T_k)
            weights = weights.reshape(*lead, self.n_heads, T, T_k)  # (B, ...) -> (..., n_heads, T, T_k)
        else:
            if attn_mask is not None and attn_mask.is_floating_point():
                attn_mask = attn_mask.to(q.dtype)  # SDPA wants a float mask in q's dtype
            weights = None
            y = F.scaled_dot_product_attention(  # (B, n_heads, T, d_head)
                q,
                k,
                v,
                attn_mask=attn_mask,
                is_causal=is_causal,
                dropout_p=self.dropout if self.training else 0.0,
                enable_gqa=self.n_kv_heads != self.n_heads,
            )  # SDPA shares k, v heads as repeat_kv does
        out = self.w_o(merge_heads(y))  # (B, n_heads, T, d_head) -> (B, T, n_heads * d_head) -> (B, T, d_model)
        return out.reshape(*lead, T, self.d_model), weights  # (B, T, d_model) -> (..., T, d_model)

    def _window_mask(self, q_pos: torch.Tensor, k_pos: torch.Tensor, kv_cache: KVCache | None) -> torch.Tensor:
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

    def _add_sink(self, q, k, v, attn_mask, is_causal):
        """Learned sinks: a key of score ``sinks[h]`` and value 0 joins every row's softmax.

        ``weights = softmax([q k^T / sqrt(d_head) + M, sinks[h]])`` without its last column: the
        sink takes its share of each row's weight and adds nothing to the output. Returns ``k``, ``v``
        with the zero key and value appended ``(B, n_kv_heads, T_k + 1, d_head)`` and the float
        mask ``(B, n_heads, T, T_k + 1)`` whose last column is ``sinks[h]``.
        """
        B, T, T_k = q.shape[0], q.shape[2], k.shape[2]
        if attn_mask is None:
            attn_mask = causal_mask(T, T_k, device=q.device) if is_causal else torch.ones(T, T_k, dtype=torch.bool)
        if attn_mask.dtype == torch.bool:
            attn_mask = float_mask(attn_mask.to(q.device), q.dtype)  # 0 where allowed, -inf where not
        attn_mask = torch.broadcast_to(attn_mask.to(q.dtype), (B, self.n_heads, T, T_k))  # (B, n_heads, T, T_k)
        sink = self.sinks.to(q.dtype).view(1, -1, 1, 1).expand(B, -1, T, 1)  # (n_heads,) -> (B, n_heads, T, 1)
        zero = k.new_zeros(B, k.shape[1], 1, k.shape[3])  # (B, n_kv_heads, 1, d_head)
        k, v = torch.cat([k, zero], dim=2), torch.cat([v, zero], dim=2)  # (B, n_kv_heads, T_k + 1, d_head)
        return k, v, torch.cat([attn_mask, sink], dim=-1), False  # (B, n_heads, T, T_k + 1)

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
