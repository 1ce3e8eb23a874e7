"""Checkers for chapter 6's coding exercises."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..masks import causal_mask
from ._core import Cases, Check, _register


def _causal_mha_cases() -> Cases:
    """(x, w_q, w_k, w_v, w_o, n_heads): x (B, T, d_model), weights (d_model, d_model), seeded."""
    g = torch.Generator().manual_seed(6)

    def case(label, B, T, d_model, n_heads, dtype=torch.float32, x_scale=1.0):
        x = x_scale * torch.randn(B, T, d_model, generator=g, dtype=dtype)  # (B, T, d_model)
        weights = tuple(
            torch.randn(d_model, d_model, generator=g, dtype=dtype) / math.sqrt(d_model) for _ in range(4)
        )  # w_q, w_k, w_v, w_o
        return label, (x, *weights, n_heads)

    cases = [
        case("the chapter's GPT-2 small sizes: B = 4, T = 16, d_model = 768, 12 heads", 4, 16, 768, 12),
        case("one token (T = 1): it attends to itself only", 2, 1, 8, 2),
        case("one head (n_heads = 1): the whole width in one head", 2, 5, 8, 1),
        case("heads of width 1 (n_heads = d_model = 6)", 2, 5, 6, 6),
        case("a batch of 3 sequences of 7 tokens, 3 heads", 3, 7, 12, 3),
        case("large values (x times 1000): exp of the raw scores overflows", 2, 6, 8, 2, x_scale=1e3),
        case("float64 inputs: the result must stay float64", 2, 5, 8, 2, dtype=torch.float64),
    ]
    for _ in range(5):
        B, T, n_heads, d_head = (int(s) for s in torch.randint(1, 6, (4,), generator=g))
        cases.append(case(f"random, B={B}, T={T}, n_heads={n_heads}, d_head={d_head}", B, T, n_heads * d_head, n_heads))
    return cases


def _causal_self_attention(
    x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor, n_heads: int
) -> torch.Tensor:
    """PyTorch's ``nn.MultiheadAttention`` loaded with the four weights, called with the causal mask.

    Row-vector weights ``(d_model, d_model)``: ``q = x @ w_q``. ``nn.Linear`` layout stores
    the transposes: ``in_proj_weight`` is ``[w_q.T; w_k.T; w_v.T]`` ``(3 d_model, d_model)``,
    ``out_proj.weight`` is ``w_o.T``. Its boolean ``attn_mask`` means True = blocked, so it
    gets ``~causal_mask(T)``. Returns ``(B, T, d_model)`` in ``x``'s dtype.
    """
    B, T, d_model = x.shape
    # built on the meta device and then given empty memory: no random initialisation,
    # so checking does not move the student's global random number generator
    m = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True, device="meta", dtype=x.dtype).to_empty(
        device=x.device
    )
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))  # 3 x (d_model, d_model) -> (3 d_model, d_model)
        m.out_proj.weight.copy_(w_o.T)  # (d_model, d_model)
        out, _ = m.eval()(
            x,
            x,
            x,
            attn_mask=~causal_mask(T, device=x.device),  # True = blocked here
            need_weights=False,
        )
    return out  # (B, T, d_model)


causal_self_attention = _register(
    Check(
        exercise="ch06-causal-mha",
        function="causal_self_attention",
        cases=_causal_mha_cases,
        reference=_causal_self_attention,
        atol=1e-4,
        rtol=1e-4,
        hint="project with x @ w_q (and w_k, w_v); split each into heads with view/reshape to "
        "(B, T, n_heads, d_head) and then transpose(1, 2); scale the scores by 1/sqrt(d_head), the "
        "head's width; block the future with the causal mask, True = may attend: "
        "masked_fill(~allowed, -inf) before the softmax over the last axis (only "
        "nn.MultiheadAttention, the reference here, takes ~allowed, because its True means blocked); "
        "merge with transpose(1, 2) and then reshape to (B, T, d_model); finish with @ w_o, which "
        "mixes the heads; keep x's dtype",
        covers="GPT-2 small's sizes, T = 1, n_heads = 1, n_heads = d_model, B > 1, large values, "
        "float64, random shapes",
        forbids=(
            "attention",
            "attention_weights",
            "qk_scores",
            "softmax",
            "causal_mask",
            "split_heads",
            "merge_heads",
            "MultiHeadAttention",
            "tiled_attention",
        ),
    )
)
