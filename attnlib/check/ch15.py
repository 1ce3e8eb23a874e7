"""Checkers for chapter 15's coding exercises."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..positions import apply_rope
from ._core import Cases, Check, _register, matches

# ------------------------------------------------------------------ ch15-rotate-half


def _rotate_half_cases() -> Cases:
    """(w, n_heads): w of shape (n_heads * d_head, ...) (a projection's weight, a bias, a gain), seeded."""
    g = torch.Generator().manual_seed(14)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=dtype)

    # the small cases come first: a message shows a tensor in full up to 24 entries
    cases = [
        ("rows numbered 0 to 7: 2 heads of d_head = 4, one input", (torch.arange(8.0).reshape(8, 1), 2)),
        ("d_head = 2: both layouts pair dimensions 0 and 1, nothing moves", (randn(6, 3), 3)),
        ("a bias vector (n_heads * d_head,) = (12,): 3 heads of 4", (randn(12), 3)),
        ("a QK-norm gain (d_head,) = (16,): one head", (randn(16), 1)),
        ("W_Q of a small Llama: 4 heads of d_head = 8, d_model = 16", (randn(32, 16), 4)),
        ("W_K with grouped-query attention: 2 key/value heads of d_head = 8", (randn(16, 16), 2)),
        ("one head of d_head = 64 (n_heads = 1), 10 inputs", (randn(64, 10), 1)),
        ("Llama 3 8B's W_K shape, 8 key/value heads of 128, cut to 32 inputs", (randn(1024, 32), 8)),
        ("float64 weights: the result must stay float64", (randn(24, 5, dtype=torch.float64), 3)),
    ]
    for _ in range(3):
        n_heads, half, d_in = (int(s) for s in torch.randint(1, 7, (3,), generator=g))
        cases.append(
            (
                f"random: {n_heads} heads of d_head = {2 * half}, d_in = {d_in}",
                (randn(n_heads * 2 * half, d_in), n_heads),
            )
        )
    return cases


def _interleaved_to_rotate_half(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The rows of a query or key projection from the interleaved pair layout (Meta's Llama code,
    attnlib) to the rotate-half layout (Hugging Face's Llama): within each head, row ``2i`` goes
    to row ``i`` and row ``2i + 1`` to row ``d_head / 2 + i``. ``w``: ``(n_heads * d_head, ...)``;
    the permutation of ``transformers``' ``convert_llama_weights_to_hf.py`` (its ``permute``),
    for any trailing shape."""
    d_head = w.shape[0] // n_heads
    # (n_heads * d_head, ...) -> (n_heads, d_head/2, 2, ...) -> (n_heads, 2, d_head/2, ...) -> (n_heads * d_head, ...)
    return w.reshape(n_heads, d_head // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _rotate_half_to_interleaved(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The inverse permutation (rotate half -> interleaved): row ``i`` of a head goes to row ``2i`` and row
    ``d_head / 2 + i`` to row ``2i + 1``; the same as :func:`_interleaved_to_rotate_half` for ``d_head <= 4``."""
    d_head = w.shape[0] // n_heads
    # (n_heads * d_head, ...) -> (n_heads, 2, d_head/2, ...) -> (n_heads, d_head/2, 2, ...) -> (n_heads * d_head, ...)
    return w.reshape(n_heads, 2, d_head // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


interleaved_to_rotate_half = _register(
    Check(
        exercise="ch15-rotate-half",
        function="interleaved_to_rotate_half",
        cases=_rotate_half_cases,
        reference=_interleaved_to_rotate_half,
        atol=0.0,
        rtol=0.0,
        hint="only rows move, within each head: d_head = w.shape[0] // n_heads; new row h * d_head + i is old "
        "row h * d_head + 2i and new row h * d_head + d_head/2 + i is old row h * d_head + 2i + 1 (the even rows "
        "of the head first, then the odd ones); with reshape: w.reshape(n_heads, d_head // 2, 2, *w.shape[1:]), "
        "swap axes 1 and 2, reshape back to w.shape (not the other order of axes, which is the inverse); "
        "a vector (a bias, a gain) is permuted the same way; keep w's dtype",
        covers="rows numbered, d_head = 2, a bias, a QK-norm gain, grouped-query heads, one head, Llama 3 8B's "
        "head size, float64, random shapes",
        diagnoses=(
            (
                "your rows have not moved: within each head, row 2i goes to row i and row 2i + 1 to row d_head/2 + i",
                lambda got, e, w, n_heads: matches(got, w),
            ),
            (
                "you applied the inverse permutation (rotate half -> interleaved: row i to row 2i), which is the "
                "same only for d_head <= 4: reshape to (n_heads, d_head // 2, 2, ...), not (n_heads, 2, d_head // 2, "
                "...), before swapping axes 1 and 2",
                lambda got, e, w, n_heads: matches(got, _rotate_half_to_interleaved(w, n_heads)),
            ),
            (
                "you permuted all the rows as one head: the permutation works within each head of d_head = "
                "w.shape[0] // n_heads rows",
                lambda got, e, w, n_heads: matches(got, _interleaved_to_rotate_half(w, 1)),
            ),
            (
                "your rows are right but the dtype changed: reshape and transpose keep w's dtype, so do not convert "
                "it (no .float())",
                lambda got, e, w, n_heads: got.dtype != e.dtype and matches(got, e, atol=1e-6),
            ),
        ),
    )
)


# ------------------------------------------------------------------ ch15-qk-norm-bound


def _bound_cases() -> Cases:
    """(g_q, g_k): the gains (d_head,) of a head's query and key RMSNorms, seeded."""
    g = torch.Generator().manual_seed(141)
    cases = [
        ("gains 1, as initialised, d_head = 4", (torch.ones(4), torch.ones(4))),
        ("gains 1, d_head = 128 (Qwen3)", (torch.ones(128), torch.ones(128))),
        ("g_q = 2 everywhere, g_k = 0.75 everywhere, d_head = 16", (torch.full((16,), 2.0), torch.full((16,), 0.75))),
        (
            "the largest product is not at the largest g_q: (4, 1, 1, 1) and (0.1, 3, 1, 1)",
            (torch.tensor([4.0, 1.0, 1.0, 1.0]), torch.tensor([0.1, 3.0, 1.0, 1.0])),
        ),
        (
            "a negative gain: (1, -5, 1, 1) and (1, 2, 1, 1)",
            (torch.tensor([1.0, -5.0, 1.0, 1.0]), torch.tensor([1.0, 2.0, 1.0, 1.0])),
        ),
        (
            "both gains negative on one axis: (-3, 1) and (-3, 1)",
            (torch.tensor([-3.0, 1.0]), torch.tensor([-3.0, 1.0])),
        ),
        (
            "float64 gains, d_head = 8",
            (1 + torch.rand(8, generator=g, dtype=torch.float64), 1 + torch.rand(8, generator=g, dtype=torch.float64)),
        ),
    ]
    for _ in range(3):
        d_head = 2 * int(torch.randint(1, 33, (1,), generator=g))
        cases.append(
            (
                f"random gains, d_head = {d_head}",
                (torch.randn(d_head, generator=g) * 2, torch.randn(d_head, generator=g) * 2),
            )
        )
    return cases


def _largest_score(g_q: torch.Tensor, g_k: torch.Tensor) -> float:
    """The supremum of ``|q' · k'| / √d_head`` over all queries and keys, where ``q' = g_q ⊙ q / rms(q)``
    and ``k' = g_k ⊙ k / rms(k)`` (RMSNorm without its ``eps``): ``√d_head · max_i |g_q[i] g_k[i]|``.

    ``q / rms(q)`` and ``k / rms(k)`` are vectors of length ``√d_head``, and ``q' · k'`` is
    ``(q / rms(q)) diag(g_q g_k) (k / rms(k))ᵀ``: at most ``d_head`` times the largest ``|g_q[i] g_k[i]|``,
    reached by ``q`` and ``k`` along that axis ``i``."""
    return math.sqrt(g_q.shape[-1]) * (g_q.double() * g_k.double()).abs().max().item()


def _is(got, value: float) -> bool:
    """Whether a wrong answer (a number or a one-element tensor) is ``value``, to float rounding."""
    got = got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
    return isinstance(got, (int, float)) and math.isclose(got, value, rel_tol=1e-5, abs_tol=1e-7)


def _products(g_q: torch.Tensor, g_k: torch.Tensor) -> torch.Tensor:
    return g_q.double() * g_k.double()  # (d_head,): g_q[i] g_k[i]


largest_score = _register(
    Check(
        exercise="ch15-qk-norm-bound",
        function="largest_score",
        cases=_bound_cases,
        reference=_largest_score,
        atol=1e-6,
        rtol=1e-5,
        hint="after RMSNorm (leave eps out) a head's query q / rms(q) has length sqrt(d_head), and so has the key; "
        "with the gains, the score is sum_i g_q[i] g_k[i] qn[i] kn[i] / sqrt(d_head): put all of both lengths on "
        "the one axis i where |g_q[i] g_k[i]| is largest (the two vectors may point the same way or opposite "
        "ways); that gives d_head * max_i |g_q[i] * g_k[i]| / sqrt(d_head) = sqrt(d_head) * max_i |g_q[i] * "
        "g_k[i]|: the largest product, with its sign removed, not max|g_q| times max|g_k|; return a Python float",
        covers="gains 1 at d_head = 4 and 128, constant gains, the largest product away from the largest gain, "
        "negative gains, float64, random gains",
        diagnoses=(
            (
                "you multiplied max|g_q| by max|g_k|: the two largest gains may sit on different axes, and a score "
                "puts its length on one axis i: take the largest |g_q[i] g_k[i]|",
                lambda got, e, g_q, g_k: _is(
                    got, math.sqrt(g_q.shape[-1]) * g_q.double().abs().max().item() * g_k.double().abs().max().item()
                ),
            ),
            (
                "you kept the sign of the products: a negative g_q[i] g_k[i] gives as large a score, with q and k "
                "pointing opposite ways; take .abs() before .max()",
                lambda got, e, g_q, g_k: _is(got, math.sqrt(g_q.shape[-1]) * _products(g_q, g_k).max().item()),
            ),
            (
                "you left out the score's 1 / sqrt(d_head): d_head * max|g_q[i] g_k[i]| / sqrt(d_head) = "
                "sqrt(d_head) * max|g_q[i] g_k[i]|",
                lambda got, e, g_q, g_k: _is(got, g_q.shape[-1] * _products(g_q, g_k).abs().max().item()),
            ),
            (
                "q / rms(q) has mean square 1, so its length is sqrt(d_head), not 1 (and so has the key's): the "
                "score reaches d_head max|g_q[i] g_k[i]| / sqrt(d_head)",
                lambda got, e, g_q, g_k: any(
                    _is(got, _products(g_q, g_k).abs().max().item() / f) for f in (1.0, math.sqrt(g_q.shape[-1]))
                ),
            ),
            (
                "you averaged the products over the axes: the largest score puts all of both lengths on the one "
                "best axis, so take the max, not the mean",
                lambda got, e, g_q, g_k: _is(got, math.sqrt(g_q.shape[-1]) * _products(g_q, g_k).abs().mean().item()),
            ),
        ),
    )
)


# ------------------------------------------------------------------ ch15-qwen3-attention

ROPE_BASE, EPS = 1_000_000.0, 1e-6  # Qwen3's rope_theta and rms_norm_eps


def _qwen3_cases() -> Cases:
    """(x, w_q, w_k, w_v, w_o, g_q, g_k): row-vector weights (d_in, d_out), gains (d_head,), seeded."""
    g = torch.Generator().manual_seed(1414)

    def case(label, B, T, d_model, n_heads, n_kv_heads, d_head, dtype=torch.float32, grow=1.0):
        def randn(*shape, std=1.0):
            return torch.randn(*shape, generator=g, dtype=dtype) * std

        x = randn(B, T, d_model)
        w_q = randn(d_model, n_heads * d_head, std=grow / math.sqrt(d_model))  # Q = x @ w_q
        w_k = randn(d_model, n_kv_heads * d_head, std=grow / math.sqrt(d_model))
        w_v = randn(d_model, n_kv_heads * d_head, std=1 / math.sqrt(d_model))
        w_o = randn(n_heads * d_head, d_model, std=1 / math.sqrt(n_heads * d_head))
        g_q, g_k = 1 + 0.5 * randn(d_head), 1 + 0.5 * randn(d_head)  # trained gains are not all 1
        return label, (x, w_q, w_k, w_v, w_o, g_q, g_k)

    cases = [
        case("d_model = 32, 4 query heads and 2 key/value heads of d_head = 16 (4 * 16 is not 32)", 2, 6, 32, 4, 2, 16),
        case("plain multi-head: 4 heads, 4 key/value heads, d_head = 8 = d_model / n_heads", 2, 5, 32, 4, 4, 8),
        case("multi-query: 6 query heads share 1 key/value head", 1, 7, 24, 6, 1, 8),
        case("one token (T = 1): it attends to itself only", 3, 1, 16, 2, 1, 8),
        case("W_Q and W_K 30 times larger: QK-norm keeps the scores where they were", 2, 8, 32, 4, 2, 16, grow=30.0),
        case(
            "W_Q and W_K 1000 times smaller: the mean square of q and k is near eps = 1e-6, which then counts",
            2,
            6,
            32,
            4,
            2,
            16,
            grow=1e-3,
        ),
        case("a long head: d_head = 64, T = 12, 2 query heads, 1 key/value head", 1, 12, 16, 2, 1, 64),
        case("float64 inputs: the result must stay float64", 2, 5, 16, 4, 2, 8, dtype=torch.float64),
    ]
    for _ in range(3):
        n_kv, group, half, B, T = (int(s) for s in torch.randint(1, 5, (5,), generator=g))
        d_model = 4 * int(torch.randint(2, 7, (1,), generator=g))
        cases.append(
            case(
                f"random: B={B}, T={T}, d_model={d_model}, n_heads={n_kv * group}, n_kv_heads={n_kv}, d_head={4 * half}",
                B,
                T,
                d_model,
                n_kv * group,
                n_kv,
                4 * half,
            )
        )
    return cases


def _qwen3_attention(x, w_q, w_k, w_v, w_o, g_q, g_k) -> torch.Tensor:
    """Qwen3's causal self-attention layer, from row-vector weights: ``Q = x @ w_q`` split into
    heads of ``d_head = len(g_q)``; ``torch.nn.functional.rms_norm`` over each head's ``d_head``
    (gains ``g_q``, ``g_k``, eps 1e-6) on queries and keys; then RoPE (``attnlib.apply_rope``,
    interleaved pairs, base 1,000,000, positions ``0 .. T - 1``); PyTorch's causal
    ``F.scaled_dot_product_attention`` with ``enable_gqa=True`` (scale ``1/√d_head``); the heads
    merged and ``@ w_o``. ``x``: ``(B, T, d_model)``; returns ``(B, T, d_model)``."""
    d_head = g_q.shape[0]
    n_heads, n_kv = w_q.shape[1] // d_head, w_k.shape[1] // d_head
    q = (
        (x @ w_q).unflatten(-1, (n_heads, d_head)).transpose(1, 2)
    )  # (B, T, n_heads * d_head) -> (B, n_heads, T, d_head)
    k = (x @ w_k).unflatten(-1, (n_kv, d_head)).transpose(1, 2)  # (B, n_kv_heads, T, d_head)
    v = (x @ w_v).unflatten(-1, (n_kv, d_head)).transpose(1, 2)
    q, k = F.rms_norm(q, (d_head,), g_q, EPS), F.rms_norm(k, (d_head,), g_k, EPS)
    q, k = apply_rope(q, base=ROPE_BASE), apply_rope(k, base=ROPE_BASE)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, n_heads, T, d_head)
    return y.transpose(1, 2).flatten(-2) @ w_o  # (B, T, n_heads * d_head) @ (n_heads * d_head, d_model)


def _qwen3_mistake(x, w_q, w_k, w_v, w_o, g_q, g_k, **mistake) -> torch.Tensor:
    """The reference with one of the classic mistakes switched on, to tell a wrong answer what it got
    wrong: ``order="rope_norm"`` (RoPE before QK-norm), ``pairs="rotate_half"``, ``base``,
    ``share="tile"`` (``repeat`` instead of ``repeat_interleave``), ``scale="d_model"``
    (``1/√(d_model / n_heads)``), ``per_head=False`` (one RMS over all heads, OLMo 2's QK-norm),
    ``gains=False``, ``eps``, ``causal=False``, ``rope_values=True``. Explicit softmax, float64 inside."""
    opt = dict(order="norm_rope", pairs="interleaved", base=ROPE_BASE, share="interleave", scale="d_head")
    opt.update(per_head=True, gains=True, eps=EPS, causal=True, rope_values=False)
    opt.update(mistake)
    dtype = x.dtype
    x, w_q, w_k, w_v, w_o, g_q, g_k = (t.double() for t in (x, w_q, w_k, w_v, w_o, g_q, g_k))
    B, T, d_model = x.shape
    d_head = g_q.shape[0]
    n_heads, n_kv = w_q.shape[1] // d_head, w_k.shape[1] // d_head

    def heads(y, n):  # (B, T, n * d_head) -> (B, n, T, d_head)
        return y.reshape(B, T, n, d_head).transpose(1, 2)

    def norm(y, gain):  # over each head's d_head, or over the whole projection (B, T, n * d_head)
        if opt["per_head"]:
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + opt["eps"])
        else:
            flat = y.transpose(1, 2).flatten(-2)  # (B, n, T, d_head) -> (B, T, n * d_head)
            flat = flat * torch.rsqrt(flat.pow(2).mean(-1, keepdim=True) + opt["eps"])
            y = flat.unflatten(-1, (-1, d_head)).transpose(1, 2)  # back to (B, n, T, d_head)
        return y * gain if opt["gains"] else y

    def rope(y):
        if opt["pairs"] == "interleaved":
            return apply_rope(y, base=opt["base"])
        half = d_head // 2  # rotate half: dimension i pairs with i + d_head/2
        theta = 1.0 / opt["base"] ** (torch.arange(0, d_head, 2, dtype=y.dtype) / d_head)  # (d_head/2,)
        angles = torch.cat([torch.arange(T, dtype=y.dtype)[:, None] * theta] * 2, -1)  # (T, d_head)
        return y * angles.cos() + torch.cat([-y[..., half:], y[..., :half]], -1) * angles.sin()

    q, k, v = heads(x @ w_q, n_heads), heads(x @ w_k, n_kv), heads(x @ w_v, n_kv)
    if opt["order"] == "norm_rope":
        q, k = rope(norm(q, g_q)), rope(norm(k, g_k))
    else:
        q, k = norm(rope(q), g_q), norm(rope(k), g_k)
    if opt["rope_values"]:
        v = rope(v)
    if opt["share"] == "interleave":
        k, v = (t.repeat_interleave(n_heads // n_kv, dim=1) for t in (k, v))  # (B, n_heads, T, d_head)
    else:
        k, v = (t.repeat(1, n_heads // n_kv, 1, 1) for t in (k, v))  # head h uses h % n_kv
    width = d_head if opt["scale"] == "d_head" else d_model // n_heads
    scores = q @ k.transpose(-2, -1) / math.sqrt(width)  # (B, n_heads, T, T)
    if opt["causal"]:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    y = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, n_heads * d_head)  # (B, T, n_heads * d_head)
    return (y @ w_o).to(dtype)  # (B, T, d_model)


def _made(**mistake):
    """A diagnosis's test: the wrong answer equals the reference with this mistake."""
    return lambda got, e, *args: matches(got, _qwen3_mistake(*args, **mistake), atol=1e-4)


qwen3_attention = _register(
    Check(
        exercise="ch15-qwen3-attention",
        function="qwen3_attention",
        cases=_qwen3_cases,
        reference=_qwen3_attention,
        atol=1e-4,
        rtol=1e-4,
        hint="d_head = g_q.shape[0], n_heads = w_q.shape[1] // d_head, n_kv_heads = w_k.shape[1] // d_head "
        "(not d_model // n_heads); project x @ w_q and split into (B, n_heads, T, d_head), the same for k and v "
        "with n_kv_heads; RMSNorm over the last axis of each head, q * rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) "
        "* g_q (and g_k for k), before RoPE, not after; RoPE with interleaved pairs (2i, 2i+1) and base 1,000,000, positions "
        "0 .. T-1, on q and k only; share each key/value head with repeat_interleave(n_heads // n_kv_heads, "
        "dim=1); scores scaled by 1/sqrt(d_head), causal mask, softmax over the keys, @ v; merge the heads back "
        "to (B, T, n_heads * d_head) and @ w_o; keep x's dtype",
        covers="d_head independent of d_model / n_heads, plain multi-head, multi-query, T = 1, grown W_Q and W_K, "
        "shrunk W_Q and W_K (eps counts), d_head = 64, float64, random shapes",
        forbids=("MultiHeadAttention", "TransformerBlock", "GPT"),
        diagnoses=(
            (
                "you applied RoPE before QK-norm: normalise each head's q and k (with the gains) first, then rotate",
                _made(order="rope_norm"),
            ),
            (
                "you paired dimension i with i + d_head/2 (rotate half, Hugging Face's layout): this exercise uses "
                "interleaved pairs (2i, 2i+1), as attnlib.apply_rope does",
                _made(pairs="rotate_half"),
            ),
            ("your RoPE base is 10,000: Qwen3's is 1,000,000", _made(base=10000.0)),
            (
                "you shared the key/value heads with repeat (tiled: query head h used key/value head h % n_kv_heads): "
                "a group of neighbouring query heads shares one key/value head, repeat_interleave(n_heads // "
                "n_kv_heads, dim=1)",
                _made(share="tile"),
            ),
            (
                "you scaled the scores by 1/sqrt(d_model / n_heads): here the head width is d_head = g_q.shape[0]",
                _made(scale="d_model"),
            ),
            (
                "you normalised the whole projection at once (as OLMo 2 does): Qwen3's QK-norm is an RMSNorm over "
                "each head's d_head",
                _made(per_head=False),
            ),
            ("your QK-norm has no gains: multiply by g_q and g_k after dividing by the RMS", _made(gains=False)),
            (
                "your RMSNorm's eps is not Qwen3's 1e-6: it counts where the mean square of q or k is near eps",
                lambda got, e, *args: any(
                    matches(got, _qwen3_mistake(*args, eps=eps), atol=1e-4) for eps in (0.0, 1e-5)
                ),
            ),
            ("you rotated the values too: RoPE is for q and k only", _made(rope_values=True)),
            ("your queries see later tokens: mask the scores with the causal mask", _made(causal=False)),
        ),
    )
)
