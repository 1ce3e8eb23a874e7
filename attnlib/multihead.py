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
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import describe, ensure_float, ensure_positive_int, ensure_tensor, fail
from .attention import _check_mask, attention_weights

__all__ = ["split_heads", "merge_heads", "MultiHeadAttention"]


def _check_divisible(d_model: int, n_heads: int) -> None:
    ensure_positive_int("n_heads", n_heads)
    if d_model % n_heads:
        raise fail("d_model", f"a multiple of n_heads={n_heads} (d_head = d_model / n_heads)",
                   f"d_model={d_model}")


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
    ensure_tensor("x", x)
    if x.dim() != 3:
        raise fail("x", "a 3-D tensor of shape (B, T, d_model)", describe(x))
    B, T, d_model = x.shape
    _check_divisible(d_model, n_heads)
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
    ensure_tensor("x", x)
    if x.dim() != 4:
        raise fail("x", "a 4-D tensor of shape (B, n_heads, T, d_head)", describe(x))
    B, n_heads, T, d_head = x.shape
    x = x.transpose(1, 2)  # (B, n_heads, T, d_head) -> (B, T, n_heads, d_head)
    return x.reshape(B, T, n_heads * d_head)  # (B, T, n_heads, d_head) -> (B, T, d_model)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with learned projections ``W_Q, W_K, W_V, W_O``.

    ``out = concat_h(softmax(Q_h K_h^T / sqrt(d_head) + M) V_h) W_O`` with
    ``Q = x W_Q``, ``K = c W_K``, ``V = c W_V`` and ``c = x`` unless a ``context`` is given.

    ``w_q, w_k, w_v, w_o`` are ``nn.Linear(d_model, d_model)``; an ``nn.Linear``
    stores its matrix transposed, so the papers' ``W_Q`` is ``w_q.weight.T``
    (and ``x @ w_q.weight.T + w_q.bias == w_q(x)``).

    Args:
        d_model: model width, a multiple of ``n_heads``.
        n_heads: number of heads; each has ``d_head = d_model // n_heads`` dimensions.
        bias: whether the four projections have biases (parameters: ``4 d^2 + 4 d``, or ``4 d^2``).
        dropout: probability of zeroing an attention weight, in training mode only.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> mha = MultiHeadAttention(d_model=8, n_heads=2)
        >>> x = torch.randn(3, 5, 8)                       # (B, T, d_model)
        >>> out, weights = mha(x, is_causal=True)
        >>> out.shape, weights.shape                        # weights: (B, n_heads, T, T)
        (torch.Size([3, 5, 8]), torch.Size([3, 2, 5, 5]))
        >>> weights[0, 0, 0].tolist()                       # token 0 sees only itself
        [1.0, 0.0, 0.0, 0.0, 0.0]
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        ensure_positive_int("d_model", d_model)
        _check_divisible(d_model, n_heads)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise fail("dropout", "a probability in [0, 1)", describe(dropout))
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = float(dropout)
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(self.dropout)

    def _check_input(self, name: str, x, batch: int | None = None) -> None:
        ensure_float(name, x)
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise fail(name, f"a tensor of shape (B, T, d_model={self.d_model})", describe(x))
        w = self.w_q.weight
        if x.dtype != w.dtype or x.device != w.device:
            raise fail(name, f"dtype {w.dtype} on {w.device} (the module's parameters)",
                       f"{describe(x)} on {x.device}")
        if batch is not None and x.shape[0] != batch:
            raise fail(name, f"batch size B = {batch} (the batch size of x)", describe(x))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, is_causal: bool = False,
                need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x`` to ``context`` (to ``x`` itself when ``context`` is None).

        Args:
            x: queries' input, shape ``(B, T, d_model)``.
            context: keys' and values' input, shape ``(B, T_ctx, d_model)``;
                ``None`` (default) is self-attention, ``T_ctx = T``.
            attn_mask: optional mask that broadcasts to ``(B, n_heads, T, T_ctx)``, e.g.
                ``(T, T_ctx)`` or a ``padding_mask`` ``(B, 1, 1, T_ctx)``: boolean with
                True = may attend (``nn.MultiheadAttention`` uses True = blocked), or
                floating point (added to the scores).
            is_causal: if True, position ``i`` attends to positions ``0 .. i`` only.
            need_weights: True (default) computes the attention step by step with
                :func:`attention_weights` and returns the weights; False takes the fast
                path through ``F.scaled_dot_product_attention`` and returns None.

        Returns:
            ``(out, weights)``: ``out`` of shape ``(B, T, d_model)``; ``weights`` of shape
            ``(B, n_heads, T, T_ctx)`` (after dropout, as used to mix the values) or None.
        """
        self._check_input("x", x)
        if context is None:
            context = x
        else:
            self._check_input("context", context, batch=x.shape[0])
        if not isinstance(need_weights, bool):
            raise fail("need_weights", "True or False", describe(need_weights))
        B, T, T_ctx = x.shape[0], x.shape[1], context.shape[1]
        _check_mask(attn_mask, is_causal, (B, self.n_heads, T, T_ctx), x.device)

        q = split_heads(self.w_q(x), self.n_heads)        # (B, T, d_model) -> (B, n_heads, T, d_head)
        k = split_heads(self.w_k(context), self.n_heads)  # (B, T_ctx, d_model) -> (B, n_heads, T_ctx, d_head)
        v = split_heads(self.w_v(context), self.n_heads)  # (B, T_ctx, d_model) -> (B, n_heads, T_ctx, d_head)
        if need_weights:
            weights = attention_weights(q, k, attn_mask, is_causal)  # (B, n_heads, T, T_ctx)
            weights = self.attn_dropout(weights)
            y = weights @ v  # (B, n_heads, T, T_ctx) @ (B, n_heads, T_ctx, d_head) -> (B, n_heads, T, d_head)
        else:
            if attn_mask is not None and attn_mask.is_floating_point():
                attn_mask = attn_mask.to(q.dtype)  # SDPA wants a float mask in q's dtype
            weights = None
            y = F.scaled_dot_product_attention(  # (B, n_heads, T, d_head)
                q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                dropout_p=self.dropout if self.training else 0.0)
        return self.w_o(merge_heads(y)), weights  # (B, n_heads, T, d_head) -> (B, T, d_model)

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> "MultiHeadAttention":
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
            A new module (same device, dtype, dropout and training mode as ``m``).

        Example:
            >>> _ = torch.manual_seed(0)
            >>> m = torch.nn.MultiheadAttention(8, num_heads=2, batch_first=True)
            >>> mine = MultiHeadAttention.from_torch(m)
            >>> x = torch.randn(2, 4, 8)
            >>> torch.allclose(mine(x)[0], m(x, x, x)[0], atol=1e-6)
            True
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise fail("m", "a torch.nn.MultiheadAttention", type(m).__name__)
        if not m._qkv_same_embed_dim:
            raise fail("m", "kdim == vdim == embed_dim",
                       f"kdim={m.kdim}, vdim={m.vdim}, embed_dim={m.embed_dim}")
        if m.bias_k is not None or m.add_zero_attn:
            raise fail("m", "add_bias_kv=False and add_zero_attn=False",
                       f"add_bias_kv={m.bias_k is not None}, add_zero_attn={m.add_zero_attn}")
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
