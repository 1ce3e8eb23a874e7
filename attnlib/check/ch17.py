"""Checkers for chapter 17's coding exercises. ``absorbed_attention`` also counts the answer's
multiply-adds (``FlopCounterMode``, in the notebook's check, and in the student's kernel when the
grader runs: ``cost_case`` and ``judge_cost``): the exercise asks for form 2, the absorbed form, which
expands no key or value."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ..i18n import tr
from . import _core
from ._core import Cases, Check, _register

# ------------------------------------------------------------------ ch17-latent-from-mha


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
        exercise="ch17-latent-from-mha",
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
        diagnoses=(
            (
                "your answer returns w_k and w_v unchanged: nothing is compressed to kv_rank",
                lambda got, e, w_k, w_v, r: _pair_is(got, (w_k, w_v)),
            ),
            (
                "you approximated w_k and w_v each with its own decomposition: that needs two latents, one for the "
                "keys and one for the values; decompose the two side by side, torch.cat([w_k, w_v], dim=1)",
                lambda got, e, w_k, w_v, r: _pair_is(got, (_truncated(w_k, r), _truncated(w_v, r))),
            ),
            (
                "you stacked w_k and w_v as rows (dim=0): that shares their up-projection, not the latent; put them "
                "side by side, dim=1, so that one W_DKV serves both",
                lambda got, e, w_k, w_v, r: _pair_is(got, _split_rows(_truncated(torch.cat([w_k, w_v], 0), r), w_k)),
            ),
            (
                "you kept the smallest singular values: torch.linalg.svd returns them largest first, keep the first r",
                lambda got, e, w_k, w_v, r: _pair_is(
                    got, _split(_truncated(torch.cat([w_k, w_v], 1), r, last=True), w_k)
                ),
            ),
            (
                "you kept kv_rank - 1 terms of the decomposition: keep kv_rank of them (S[:r], not S[:r - 1])",
                lambda got, e, w_k, w_v, r: (
                    r > 1 and _pair_is(got, _split(_truncated(torch.cat([w_k, w_v], 1), r - 1), w_k))
                ),
            ),
            (
                "you kept kv_rank + 1 terms of the decomposition: keep kv_rank of them",
                lambda got, e, w_k, w_v, r: _pair_is(got, _split(_truncated(torch.cat([w_k, w_v], 1), r + 1), w_k)),
            ),
        ),
    )
)


def _truncated(w: torch.Tensor, r: int, last: bool = False) -> torch.Tensor:
    """``w``'s first ``r`` terms of its singular value decomposition (its last ``r`` with ``last``), float64."""
    U, S, Vh = torch.linalg.svd(w.double(), full_matrices=False)  # U (rows, m), S (m,), Vh (m, cols)
    keep = slice(max(S.shape[0] - r, 0), None) if last else slice(0, r)
    return (U[:, keep] * S[keep]) @ Vh[keep]  # (rows, cols)


def _split(w: torch.Tensor, w_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d_model, d_k + d_v)`` -> its first ``w_k.shape[1]`` columns (keys), then the rest (values)."""
    return w[:, : w_k.shape[1]], w[:, w_k.shape[1] :]


def _split_rows(w: torch.Tensor, w_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(2 d_model, d)`` -> its first ``w_k.shape[0]`` rows, then the rest."""
    return w[: w_k.shape[0]], w[w_k.shape[0] :]


def _pair_is(got, pair) -> bool:
    """Whether an answer is a pair of tensors equal, to float32 rounding, to ``pair`` (what a given mistake gives)."""
    return (
        isinstance(got, (tuple, list))
        and len(got) == 2
        and all(
            isinstance(g, torch.Tensor)
            and g.shape == p.shape
            and torch.allclose(g.double(), p.double(), atol=1e-4, rtol=1e-4)
            for g, p in zip(got, pair)
        )
    )


# ------------------------------------------------------------------ ch17-absorbed-attention


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


def _absorbed_variant(
    q_nope, q_rope, c, k_rope, w_uk, w_uv, scale="model", mask="bottom_right", rope=True, view="right"
):
    """Form 2 with one of the classic mistakes, in float64, for the diagnoses: ``scale`` "model"
    (``1/√(d_nope + d_rope)``), "latent" (``1/√(kv_rank + d_rope)``) or "nope" (``1/√d_nope``); ``mask``
    "bottom_right", "top_left" (``is_causal``'s alignment) or "none"; ``rope`` False leaves the rotated part
    out; ``view`` "wrong" reads ``w_uk`` as ``(n_heads, kv_rank, d_nope)`` blocks. ``(B, H, T_new, d_v)``."""
    q_nope, q_rope, c, k_rope, w_uk, w_uv = (a.double() for a in (q_nope, q_rope, c, k_rope, w_uk, w_uv))
    H, T_new, n = q_nope.shape[1:]
    T_k, rank = c.shape[1:]
    r = q_rope.shape[-1]
    W_uk = w_uk.view(H, n, rank) if view == "right" else w_uk.T.reshape(H, rank, n).mT  # (H, n, rank): W_UK,h^T
    scores = (q_nope @ W_uk) @ c[:, None].mT  # (B, H, T_new, rank) @ (B, 1, rank, T_k) -> (B, H, T_new, T_k)
    if rope:
        scores = scores + q_rope @ k_rope[:, None].mT
    scores = scores / math.sqrt({"model": n + r, "latent": rank + r, "nope": n}[scale])
    if mask != "none":
        allowed = torch.ones(T_new, T_k, dtype=torch.bool).tril(diagonal=T_k - T_new if mask == "bottom_right" else 0)
        scores = scores.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return (w @ c[:, None]) @ w_uv.view(H, -1, rank).mT  # (B, H, T_new, rank) @ (H, rank, d_v) -> (B, H, T_new, d_v)


def _is(got, expected: torch.Tensor) -> bool:
    """Whether an answer equals, to float32 rounding, what a given mistake gives."""
    return _core.matches(got, expected, atol=1e-4)


def _cost_case() -> tuple:
    """One decoding step after many more cached tokens than kv_rank (the label is in ``_FormCheck.count``):
    the arguments, seeded."""
    g = torch.Generator().manual_seed(16016)
    B, H, T_k, n, r, rank, d_v = 1, 2, 256, 16, 4, 8, 16
    args = (
        torch.randn(B, H, 1, n, generator=g),  # q_nope
        torch.randn(B, H, 1, r, generator=g),  # q_rope
        torch.randn(B, T_k, rank, generator=g),  # c
        torch.randn(B, T_k, r, generator=g),  # k_rope
        torch.randn(H * n, rank, generator=g) * rank**-0.5,  # w_uk, as nn.Linear stores it
        torch.randn(H * d_v, rank, generator=g) * rank**-0.5,  # w_uv
    )
    return args


def _expansion(q_nope, q_rope, c, k_rope, w_uk, w_uv) -> int:
    """The multiply-adds of expanding the keys alone from the latents, ``T_k kv_rank n_heads d_head_nope``:
    what form 2 never spends. Expanding the values alone costs as much in the counted case
    (``d_head_v = d_head_nope``), and expanding both, form 1, twice as much."""
    return c.shape[1] * c.shape[2] * q_nope.shape[1] * q_nope.shape[-1]


@dataclass(frozen=True)
class _FormCheck(Check):
    """A Check that, once the outputs are right, also counts the answer's multiply-adds with
    ``torch.utils.flop_counter.FlopCounterMode`` on one decoding step with ``T_k ≫ kv_rank``: an answer
    that expands keys or values from the latents (form 1) spends at least ``budget(*args)``, form 2 far less."""

    budget: Callable[..., int] = _expansion
    cost_diagnosis: str = (  # what an answer over the budget did
        "you expand keys or values from the latents (form 1): map the queries into the latent space, "
        "q_nope @ W_UK,h^T, score them against c itself, and mix the latents, weights @ c, before "
        "expanding once with W_UV,h"
    )

    def run(self, fn: Callable) -> int:
        """The cases (``Check.run``), then the multiply-adds of the decoding step (:meth:`count`)."""
        n = super().run(fn)
        self.count(fn)
        return n

    def cost_case(self) -> tuple:
        """The arguments of the counted decoding step (the grader runs them in the student's kernel)."""
        return _cost_case()

    def count(self, fn: Callable) -> int:
        """The answer's multiply-adds on the decoding step (FLOPs / 2); AssertionError if they reach the budget."""
        with FlopCounterMode(display=False) as counter:
            fn(*[a.clone() for a in self.cost_case()])
        return self.judge_cost(counter.get_total_flops())

    def judge_cost(self, flops: int, hold_hint: bool = True) -> int:
        """The multiply-adds of ``flops`` counted on :meth:`cost_case`; AssertionError if they reach the budget
        (``hold_hint``: as in ``_core.compare``; the grader shows the hint at once)."""
        args = self.cost_case()
        label = tr("one new token after 255 cached (kv_rank = 8, 2 heads of d_head_nope = d_head_v = 16)")
        spent, budget = flops // 2, self.budget(*args)
        if spent >= budget:
            raise AssertionError(
                tr("{name}: {problem}").format(
                    name=self.function,
                    problem=tr("right outputs, but too many multiply-adds for form 2"),
                )
                + "\n"
                + tr("  case: {label}").format(label=label)
                + "\n"
                + tr(
                    "  counted: {spent} multiply-adds (torch.utils.flop_counter.FlopCounterMode); expanding the keys "
                    "alone costs T_k · kv_rank · n_heads · d_head_nope = {budget}"
                ).format(spent=f"{spent:,}", budget=f"{budget:,}")
                + "\n"
                + _core.advice(self.function, self.hint, self.cost_diagnosis, hold_hint)
            )
        return spent


absorbed_attention = _register(
    _FormCheck(
        exercise="ch17-absorbed-attention",
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
        "proportions, one head, large scores, float64, random shapes, and fewer multiply-adds than expanding the "
        "keys after 255 cached tokens",
        forbids=("MultiHeadLatentAttention", "GPT"),
        diagnoses=(
            (
                "your scale is 1/sqrt(kv_rank + d_head_rope): the scores are those of the model's queries and keys, "
                "d_head_nope + d_head_rope wide, whatever the form; scale by 1/sqrt(d_head_nope + d_head_rope)",
                lambda got, e, *a: _is(got, _absorbed_variant(*a, scale="latent")),
            ),
            (
                "your scale is 1/sqrt(d_head_nope): the rotated part belongs to the query's width too, "
                "1/sqrt(d_head_nope + d_head_rope)",
                lambda got, e, *a: _is(got, _absorbed_variant(*a, scale="nope")),
            ),
            (
                "your causal mask is aligned at the top left (is_causal's): the new queries are the last T_new tokens, "
                "so new query i sees keys 0 .. T_k - T_new + i, tril(diagonal=T_k - T_new)",
                lambda got, e, *a: _is(got, _absorbed_variant(*a, mask="top_left")),
            ),
            (
                "your answer has no causal mask: a new query must not see the new tokens after it",
                lambda got, e, *a: _is(got, _absorbed_variant(*a, mask="none")),
            ),
            (
                "the rotated part is missing from your scores: add q_rope @ k_rope.unsqueeze(1).transpose(-2, -1)",
                lambda got, e, *a: _is(got, _absorbed_variant(*a, rope=False)),
            ),
            (
                "your w_uk mixes the heads: nn.Linear stores (n_heads * d_head_nope, kv_rank), so head h's rows are "
                "w_uk.view(n_heads, d_head_nope, kv_rank)[h], not a reshape of w_uk.T",
                lambda got, e, *a: _is(got, _absorbed_variant(*a, view="wrong")),
            ),
        ),
    )
)
