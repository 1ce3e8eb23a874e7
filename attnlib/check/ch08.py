"""Checkers for chapter 8's coding exercises."""

from __future__ import annotations

import math

import torch
from torch import nn

from ._core import Cases, Check, _register


def _cross_attention_cases() -> Cases:
    """(x, context, w_q, w_k, w_v, w_o, n_heads): x (B, T_q, d_model) from the decoder,
    context (B, T_k, d_model) from the encoder, weights (d_model, d_model), seeded."""
    g = torch.Generator().manual_seed(8)

    def case(label, B, T_q, T_k, d_model, n_heads, dtype=torch.float32, scale=1.0, context_is_x=False):
        x = scale * torch.randn(B, T_q, d_model, generator=g, dtype=dtype)  # (B, T_q, d_model)
        context = x.clone() if context_is_x else scale * torch.randn(B, T_k, d_model, generator=g, dtype=dtype)
        weights = tuple(
            torch.randn(d_model, d_model, generator=g, dtype=dtype) / math.sqrt(d_model) for _ in range(4)
        )  # w_q, w_k, w_v, w_o
        return label, (x, context, *weights, n_heads)

    cases = [
        case("the chapter's sizes: 4 target tokens ask 6 source tokens, d_model = 8, 2 heads", 1, 4, 6, 8, 2),
        case("as many target as source tokens (T_q = T_k = 5), different sequences", 2, 5, 5, 8, 2),
        case("one source token (T_k = 1): every weight is 1", 2, 4, 1, 8, 2),
        case("one target token (T_q = 1) asks 7 source tokens", 2, 1, 7, 12, 3),
        case("a longer target than source (T_q = 9, T_k = 3)", 2, 9, 3, 8, 4),
        case("context = x: self-attention is the special case", 2, 5, 5, 8, 2, context_is_x=True),
        case("one head (n_heads = 1)", 3, 4, 6, 8, 1),
        case("heads of width 1 (n_heads = d_model = 6)", 2, 3, 5, 6, 6),
        case("a batch of 4 pairs of sequences", 4, 6, 8, 16, 4),
        case("large values (inputs times 1000): exp of the raw scores overflows", 2, 3, 5, 8, 2, scale=1e3),
        case("float64 inputs: the result must stay float64", 2, 3, 5, 8, 2, dtype=torch.float64),
    ]
    for _ in range(4):
        B, T_q, T_k, n_heads, d_head = (int(s) for s in torch.randint(1, 6, (5,), generator=g))
        cases.append(
            case(
                f"random, B={B}, T_q={T_q}, T_k={T_k}, n_heads={n_heads}, d_head={d_head}",
                B,
                T_q,
                T_k,
                n_heads * d_head,
                n_heads,
            )
        )
    return cases


def _cross_attention(
    x: torch.Tensor,
    context: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    w_o: torch.Tensor,
    n_heads: int,
) -> torch.Tensor:
    """PyTorch's ``nn.MultiheadAttention`` loaded with the four weights, called as
    ``m(query=x, key=context, value=context)``, without a mask.

    Row-vector weights ``(d_model, d_model)``: ``q = x @ w_q``, ``k = context @ w_k``,
    ``v = context @ w_v``. ``nn.Linear`` layout stores the transposes: ``in_proj_weight``
    is ``[w_q.T; w_k.T; w_v.T]`` ``(3 d_model, d_model)``, ``out_proj.weight`` is ``w_o.T``.
    Returns ``(B, T_q, d_model)`` in ``x``'s dtype.
    """
    d_model = x.shape[-1]
    # built on the meta device and then given empty memory: no random initialisation,
    # so checking does not move the student's global random number generator
    m = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True, device="meta", dtype=x.dtype).to_empty(
        device=x.device
    )
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))  # 3 x (d_model, d_model) -> (3 d_model, d_model)
        m.out_proj.weight.copy_(w_o.T)  # (d_model, d_model)
        out, _ = m.eval()(x, context, context, need_weights=False)  # query from x; key and value from context
    return out  # (B, T_q, d_model)


cross_attention = _register(
    Check(
        exercise="ch08-cross-attention",
        function="cross_attention",
        cases=_cross_attention_cases,
        reference=_cross_attention,
        atol=1e-4,
        rtol=1e-4,
        hint="the queries come from x (the decoder), the keys and values both from context (the encoder): "
        "q = x @ w_q, k = context @ w_k, v = context @ w_v; split each into heads with its own length, "
        "(B, T, d_model) -> (B, T, n_heads, d_head) -> transpose(1, 2), where T is T_q for q and T_k "
        "for k and v; scores (B, n_heads, T_q, T_k) scaled by 1/sqrt(d_head); softmax over the last "
        "axis (the keys), no mask; merge back to (B, T_q, d_model) and finish with @ w_o; keep x's dtype",
        covers="T_q != T_k both ways, T_q = T_k with different sequences, T_k = 1, T_q = 1, context = x, "
        "n_heads = 1, n_heads = d_model, B > 1, large values, float64, random shapes",
        forbids=(
            "attention",
            "attention_weights",
            "qk_scores",
            "softmax",
            "split_heads",
            "merge_heads",
            "MultiHeadAttention",
            "tiled_attention",
        ),
    )
)
