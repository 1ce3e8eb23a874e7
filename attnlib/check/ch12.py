"""Checkers for chapter 12's coding exercises."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._core import Cases, Check, _register


def _attend_with_cache_cases() -> Cases:
    """(q_new (B, n_heads, T_new, d_head), k_cache, v_cache (B, n_kv_heads, T_k, d_head)), seeded."""
    g = torch.Generator().manual_seed(12)

    def case(label, B, n_heads, n_kv_heads, T_new, T_k, d_head, dtype=torch.float32, scale=1.0):
        q = scale * torch.randn(B, n_heads, T_new, d_head, generator=g, dtype=dtype)
        k = scale * torch.randn(B, n_kv_heads, T_k, d_head, generator=g, dtype=dtype)
        v = torch.randn(B, n_kv_heads, T_k, d_head, generator=g, dtype=dtype)
        return label, (q, k, v)

    cases = [
        case(
            "one decoding step at GPT-2 small's sizes: 12 heads of 64, 1 new token, 200 cached", 1, 12, 12, 1, 200, 64
        ),
        case("the prompt (T_new = T_k = 6): the ordinary causal mask", 2, 4, 4, 6, 6, 8),
        case("3 new tokens after 4 cached ones (T_new = 3, T_k = 7): the mask's alignment matters", 2, 4, 4, 3, 7, 8),
        case("grouped-query attention: 8 query heads share 2 key/value heads", 2, 8, 2, 3, 6, 4),
        case("multi-query attention: 4 query heads share 1 key/value head", 1, 4, 1, 2, 5, 8),
        case("the very first token (T_new = T_k = 1)", 3, 2, 1, 1, 1, 4),
        case("6 query heads, 3 key/value heads, B = 3", 3, 6, 3, 2, 9, 4),
        case(
            "large values (queries and keys times 30): exp of the raw scores overflows", 1, 4, 2, 3, 7, 16, scale=30.0
        ),
        case("float64 inputs: the result must stay float64", 2, 4, 2, 2, 5, 8, dtype=torch.float64),
    ]
    for _ in range(4):
        n_kv, group, T_new, extra, d_head, B = (int(s) for s in torch.randint(1, 5, (6,), generator=g))
        cases.append(
            case(
                f"random: B={B}, n_heads={n_kv * group}, n_kv_heads={n_kv}, T_new={T_new}, "
                f"T_k={T_new + extra}, d_head={d_head}",
                B,
                n_kv * group,
                n_kv,
                T_new,
                T_new + extra,
                d_head,
            )
        )
    return cases


def _attend_with_cache(q_new: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
    """PyTorch's attention for new tokens after cached ones: ``F.scaled_dot_product_attention``
    with its bottom-right causal bias ``causal_lower_right(T_new, T_k)`` (new query ``i`` is token
    ``T_k - T_new + i``) and ``enable_gqa=True`` (query head ``h`` uses key/value head
    ``h // (n_heads / n_kv_heads)``). Returns ``(B, n_heads, T_new, d_head)`` in ``q_new``'s dtype."""
    # imported here, when a check runs: the module brings torch._dynamo, seconds that
    # `from attnlib import check` need not pay
    from torch.nn.attention.bias import causal_lower_right

    T_new, T_k = q_new.shape[-2], k_cache.shape[-2]
    return F.scaled_dot_product_attention(
        q_new, k_cache, v_cache, attn_mask=causal_lower_right(T_new, T_k), enable_gqa=True
    )


attend_with_cache = _register(
    Check(
        exercise="ch12-attend-with-cache",
        function="attend_with_cache",
        cases=_attend_with_cache_cases,
        reference=_attend_with_cache,
        atol=1e-4,
        rtol=1e-4,
        hint="share the key/value heads first: k_cache.repeat_interleave(n_heads // n_kv_heads, dim=1) "
        "(query head h uses key/value head h // group; .repeat would give it h % n_kv_heads); "
        "scores q_new @ k.transpose(-2, -1) / sqrt(d_head), shape (B, n_heads, T_new, T_k); "
        "new query i is token T_k - T_new + i, so it may attend to keys j <= i + T_k - T_new: "
        "torch.ones(T_new, T_k, dtype=torch.bool).tril(diagonal=T_k - T_new), the mask aligned at the "
        "bottom right (tril() alone, or is_causal=True, aligns it at the top left and hides cached keys); "
        "masked_fill(~allowed, -inf), softmax over the last axis, then @ v; keep q_new's dtype",
        covers="a GPT-2 small decoding step, the prompt, new tokens after cached ones, grouped-query and "
        "multi-query heads, T = 1, B > 1, large values, float64, random shapes",
        forbids=("attention", "attention_weights", "repeat_kv", "MultiHeadAttention", "tiled_attention"),
    )
)
