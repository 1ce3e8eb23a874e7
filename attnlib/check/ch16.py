"""Checkers for chapter 16's coding exercises."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._core import Cases, Check, _register

# ------------------------------------------------------------------ ch16-latent-from-mha


def _spectrum_matrix(g: torch.Generator, rows: int, cols: int, singular: list[float], dtype=torch.float32):
    """A random ``(rows, cols)`` matrix with the given singular values (well apart: its best low-rank
    approximation is unique and stable in float32), in random directions."""
    m = len(singular)
    U, _ = torch.linalg.qr(torch.randn(rows, m, generator=g, dtype=torch.float64))  # (rows, m), orthonormal columns
    V, _ = torch.linalg.qr(torch.randn(cols, m, generator=g, dtype=torch.float64))  # (cols, m)
    return ((U * torch.tensor(singular, dtype=torch.float64)) @ V.T).to(dtype)  # (rows, cols)


def _latent_cases() -> Cases:
    """(w_k, w_v, kv_rank): an MHA layer's key and value weights, row vectors ``(d_model, n_heads d_head)``
    each (``k = x @ w_k``), and a latent width; seeded."""
    g = torch.Generator().manual_seed(16)

    def layer(d_model, d_k, d_v, decay=0.7, scale=4.0, dtype=torch.float32):
        m = min(d_model, d_k + d_v)
        w = _spectrum_matrix(g, d_model, d_k + d_v, [scale * decay**i for i in range(m)], dtype)
        return w[:, :d_k], w[:, d_k:]  # (d_model, d_k), (d_model, d_v)

    def low_rank(d_model, d_k, d_v, rank):
        w = _spectrum_matrix(g, d_model, d_k + d_v, [3.0 - 0.4 * i for i in range(rank)])  # rank `rank` exactly
        return w[:, :d_k], w[:, d_k:]

    gqa_k = torch.randn(24, 4, generator=g)  # one key/value head of d_head = 4, d_model = 24
    gqa_v = torch.randn(24, 4, generator=g)
    big_k, big_v = layer(12, 8, 8)
    cases = [
        ("d_model = 4, one head of d_head = 2, kv_rank = 1", (*layer(4, 2, 2), 1)),
        ("kv_rank = d_model = 8: the latent can be x itself, nothing is lost", (*layer(8, 16, 16), 8)),
        ("kv_rank = 20, more than d_model = 8", (*layer(8, 12, 12), 20)),
        ("[W_K | W_V] of rank 4 and kv_rank = 4: reproduced exactly", (*low_rank(16, 12, 12, 4), 4)),
        (
            "a grouped-query layer written as multi-head: 4 query heads share one key/value head of d_head = 4; "
            "kv_rank = 2 n_kv d_head = 8",
            (gqa_k.repeat(1, 4), gqa_v.repeat(1, 4), 8),
        ),
        ("W_K 10 times larger than W_V: one latent for both", (10 * big_k, big_v, 4)),
        ("d_head_v = 4, d_head = 8: values narrower than keys", (*layer(16, 16, 8), 6)),
        ("float64 weights: the results must stay float64", (*layer(12, 8, 8, dtype=torch.float64), 5)),
    ]
    for _ in range(3):
        d_model = 4 * int(torch.randint(2, 9, (1,), generator=g))
        d_k, d_v = (4 * int(s) for s in torch.randint(1, 7, (2,), generator=g))
        kv_rank = int(torch.randint(1, d_model + 1, (1,), generator=g))
        cases.append(
            (
                f"random: d_model = {d_model}, W_K {d_k} wide, W_V {d_v} wide, kv_rank = {kv_rank}",
                (*layer(d_model, d_k, d_v), kv_rank),
            )
        )
    return cases


def _latent_from_mha(w_k: torch.Tensor, w_v: torch.Tensor, kv_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The key and value weights closest to ``w_k``, ``w_v`` (``(d_model, d_k)``, ``(d_model, d_v)``,
    row vectors) that an MLA layer with a latent of width ``kv_rank`` can have: ``W_DKV W_UK`` and
    ``W_DKV W_UV`` with one ``W_DKV`` ``(d_model, kv_rank)``, so ``[W_K | W_V]`` of rank at most
    ``kv_rank``. By the Eckart-Young theorem, the closest in the Frobenius norm is the truncated
    singular value decomposition of the stacked ``[W_K | W_V]``: its first ``kv_rank`` singular
    values and directions (all of them when ``kv_rank`` is at least the rank). Computed in float64,
    returned in the inputs' dtype."""
    d_k = w_k.shape[1]
    stacked = torch.cat([w_k, w_v], dim=1).double()  # (d_model, d_k + d_v)
    U, S, Vh = torch.linalg.svd(stacked, full_matrices=False)  # U (d_model, m), S (m,), Vh (m, d_k + d_v)
    r = min(kv_rank, S.shape[0])
    closest = (U[:, :r] * S[:r]) @ Vh[:r]  # (d_model, d_k + d_v), of rank r
    return closest[:, :d_k].to(w_k.dtype), closest[:, d_k:].to(w_v.dtype)


latent_from_mha = _register(
    Check(
        exercise="ch16-latent-from-mha",
        function="latent_from_mha",
        cases=_latent_cases,
        reference=_latent_from_mha,
        atol=1e-4,
        rtol=1e-4,
        hint="keys and values come from one latent c = x @ W_DKV, so [W_K | W_V] = W_DKV @ [W_UK | W_UV] has rank at "
        "most kv_rank: put the two side by side, w = torch.cat([w_k, w_v], dim=1), and keep the first r = "
        "min(kv_rank, len(S)) terms of its singular value decomposition U, S, Vh = torch.linalg.svd(w, "
        "full_matrices=False), the first r columns of U times the first r values of S times the first r rows of "
        "Vh (not one decomposition of w_k and another of w_v, which would need two latents); split the columns "
        "back, the first w_k.shape[1] for the keys; keep the inputs' dtype",
        covers="kv_rank = 1, kv_rank at and above d_model, an exactly low-rank pair, a grouped-query layer, keys "
        "larger than values, values narrower than keys, float64, random shapes",
    )
)


# ------------------------------------------------------------------ ch16-absorbed-attention


def _absorbed_cases() -> Cases:
    """(q_nope, q_rope, c, k_rope, w_uk, w_uv): new queries' two parts ``(B, H, T_new, n)``,
    ``(B, H, T_new, r)`` (rotated), the cached latents ``(B, T_k, kv_rank)`` and rotated keys
    ``(B, T_k, r)`` (the new tokens' last), ``nn.Linear`` weights ``(H n, kv_rank)``, ``(H d_v, kv_rank)``;
    seeded."""
    g = torch.Generator().manual_seed(1616)

    def case(label, B, H, T_new, T_k, n, r, kv_rank, d_v, dtype=torch.float32, q_scale=1.0):
        def randn(*shape, std=1.0):
            return torch.randn(*shape, generator=g, dtype=dtype) * std

        q_nope, q_rope = randn(B, H, T_new, n, std=q_scale), randn(B, H, T_new, r, std=q_scale)
        c, k_rope = randn(B, T_k, kv_rank), randn(B, T_k, r)
        w_uk = randn(H * n, kv_rank, std=kv_rank**-0.5)  # as nn.Linear stores it: (out, in)
        w_uv = randn(H * d_v, kv_rank, std=kv_rank**-0.5)
        return label, (q_nope, q_rope, c, k_rope, w_uk, w_uv)

    cases = [
        case("a decoding step: 1 new token after 5 cached, 2 heads", 1, 2, 1, 6, 4, 2, 6, 4),
        case("the prompt: 5 new tokens, nothing cached before (T_new = T_k)", 2, 2, 5, 5, 4, 2, 8, 4),
        case("3 new tokens after 4 cached: the causal mask at the bottom right", 1, 3, 3, 7, 8, 4, 12, 8),
        case("values narrower than keys: d_head_v = 6, d_head_nope = 8", 2, 2, 2, 6, 8, 4, 16, 6),
        case(
            "DeepSeek's proportions: kv_rank = 4 d_head_nope, d_head_rope = d_head_nope / 2", 1, 2, 2, 9, 16, 8, 64, 16
        ),
        case("one head", 2, 1, 3, 8, 8, 4, 8, 8),
        case("large queries: scores near 100", 1, 2, 2, 6, 8, 4, 16, 8, q_scale=50.0),
        case("float64 inputs: the result must stay float64", 2, 2, 2, 5, 4, 2, 8, 4, dtype=torch.float64),
    ]
    for _ in range(3):
        B, H, T_new, T_cached = (int(s) for s in torch.randint(1, 5, (4,), generator=g))
        half = int(torch.randint(1, 4, (1,), generator=g))
        n, r, kv_rank = 4 * half, 2 * half, 4 * int(torch.randint(1, 6, (1,), generator=g))
        label = (
            f"random: B={B}, n_heads={H}, {T_new} new after {T_cached} cached, d_head_nope={n}, "
            f"d_head_rope={r}, kv_rank={kv_rank}"
        )
        cases.append(case(label, B, H, T_new, T_new + T_cached, n, r, kv_rank, n))
    return cases


def _absorbed_attention(q_nope, q_rope, c, k_rope, w_uk, w_uv) -> torch.Tensor:
    """Every head's attention output, before ``W_O``, for the new queries against the cached
    latents and rotated keys, computed the long way: each head's keys and values expanded from
    the latents, ``k_h = [c W_UK,h, k_rope]``, ``v_h = c W_UV,h``, then PyTorch's
    ``F.scaled_dot_product_attention`` (scale ``1/√(d_head_nope + d_head_rope)``, its default for
    queries of that width) with the causal mask at the bottom right (new query ``i`` is token
    ``T_k - T_new + i``). Returns ``(B, H, T_new, d_head_v)``."""
    B, H, T_new, n = q_nope.shape
    T_k, r = c.shape[1], k_rope.shape[-1]
    k_nope = (c @ w_uk.T).unflatten(-1, (H, n)).transpose(1, 2)  # (B, T_k, H n) -> (B, H, T_k, n)
    v = (c @ w_uv.T).unflatten(-1, (H, -1)).transpose(1, 2)  # (B, T_k, H d_v) -> (B, H, T_k, d_v)
    k = torch.cat([k_nope, k_rope[:, None].expand(B, H, T_k, r)], dim=-1)  # (B, H, T_k, n + r)
    q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, T_new, n + r)
    allowed = torch.ones(T_new, T_k, dtype=torch.bool, device=q.device).tril(diagonal=T_k - T_new)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, H, T_new, d_v)


absorbed_attention = _register(
    Check(
        exercise="ch16-absorbed-attention",
        function="absorbed_attention",
        cases=_absorbed_cases,
        reference=_absorbed_attention,
        atol=1e-4,
        rtol=1e-4,
        hint="n_heads = q_nope.shape[1] and d_head_nope = q_nope.shape[-1]; nn.Linear stores its weight as (out, in), "
        "so head h's W_UK,h transposed is w_uk.view(n_heads, d_head_nope, kv_rank)[h]; the absorbed queries are "
        "q_nope @ w_uk.view(n_heads, d_head_nope, kv_rank), of shape (B, n_heads, T_new, kv_rank), scored against "
        "the latents c.unsqueeze(1), one for every head, plus q_rope @ k_rope.unsqueeze(1).transpose(-2, -1), one "
        "rotated key for every head; scale by 1/sqrt(d_head_nope + d_head_rope), the width of the model's queries, "
        "not kv_rank; the causal mask at the bottom right, new query i sees keys 0 .. T_k - T_new + i, "
        "tril(diagonal=T_k - T_new); softmax over the keys; mix the latents, weights @ c.unsqueeze(1), then expand "
        "once with w_uv.view(n_heads, d_head_v, kv_rank).transpose(-2, -1); keep the inputs' dtype",
        covers="a decoding step, the prompt, new tokens after cached ones, values narrower than keys, DeepSeek's "
        "proportions, one head, large scores, float64, random shapes",
        forbids=("MultiHeadLatentAttention", "GPT"),
    )
)
