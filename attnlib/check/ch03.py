"""Checkers for chapter 3's coding exercises."""

from __future__ import annotations

import math

import torch

from ..scores import qk_scores
from ._core import Cases, Check, _register


def _scaled_scores_cases() -> Cases:
    g = torch.Generator().manual_seed(31)
    cases = [
        ("d_k = 1: divide by sqrt(1) = 1", (torch.tensor([[2.0], [-1.0]]), torch.tensor([[3.0], [0.5], [-2.0]]))),
        (
            "d_k = 4: divide by 2",
            (torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 2.0]])),
        ),
        ("T_q = 3, T_k = 5, d_k = 2 (all different)", (torch.randn(3, 2, generator=g), torch.randn(5, 2, generator=g))),
        (
            "one query, one key (T_q = T_k = 1), d_k = 64",
            (torch.randn(1, 64, generator=g), torch.randn(1, 64, generator=g)),
        ),
        (
            "a batch (B, T_q, d_k) = (2, 3, 4) with T_k = 6",
            (torch.randn(2, 3, 4, generator=g), torch.randn(2, 6, 4, generator=g)),
        ),
        (
            "GPT-2 heads (B, n_heads, T, d_k) = (1, 12, 5, 64)",
            (torch.randn(1, 12, 5, 64, generator=g), torch.randn(1, 12, 5, 64, generator=g)),
        ),
        ("large values (1e3)", (1e3 * torch.randn(4, 8, generator=g), 1e3 * torch.randn(3, 8, generator=g))),
        (
            "float64 inputs: the result stays float64",
            (torch.randn(2, 5, dtype=torch.float64, generator=g), torch.randn(4, 5, dtype=torch.float64, generator=g)),
        ),
    ]
    for i in range(5):
        T_q, T_k, d_k = (int(s) for s in torch.randint(1, 9, (3,), generator=g))
        batch = tuple(int(s) for s in torch.randint(1, 4, (i % 3,), generator=g))
        cases.append(
            (
                f"random, batch {batch}, T_q={T_q}, T_k={T_k}, d_k={d_k}",
                (torch.randn(*batch, T_q, d_k, generator=g), torch.randn(*batch, T_k, d_k, generator=g)),
            )
        )
    return cases


scaled_scores = _register(
    Check(
        exercise="ch03-scaled-scores",
        function="scaled_scores",
        cases=_scaled_scores_cases,
        reference=qk_scores,
        hint="q @ k.transpose(-2, -1) (swap only the last two axes), divided by the square root "
        "of d_k = q.shape[-1], the length of each vector (not by d_k, not by T_q or T_k); "
        "divide by a Python float (math.sqrt) and do not cast, so the result keeps the inputs' dtype",
        covers="d_k = 1, T_q != T_k, T = 1, batch and head axes, large values, float64 kept as float64",
        forbids=("attention_weights",),
        diagnoses=(
            (
                "your scores are divided by d_k; the scale is 1/sqrt(d_k)",
                lambda got, s, q, k: q.shape[-1] > 1 and torch.allclose(got, s / math.sqrt(q.shape[-1]), rtol=1e-4),
            ),
            (
                "your scores are not scaled: divide q @ k^T by sqrt(d_k)",
                lambda got, s, q, k: q.shape[-1] > 1 and torch.allclose(got, s * math.sqrt(q.shape[-1]), rtol=1e-4),
            ),
        ),
    )
)


def _unit_variance_scale_cases() -> Cases:
    g = torch.Generator().manual_seed(32)
    cases = [
        ("unit-variance entries, d_k = 64 (GPT-2): 1/8", (64, 1.0, 1.0)),
        ("d_k = 1, unit variance: 1", (1, 1.0, 1.0)),
        ("sigma_q = 2, sigma_k = 1, d_k = 64", (64, 2.0, 1.0)),
        ("sigma_q = 1, sigma_k = 0.5, d_k = 16", (16, 1.0, 0.5)),
        ("small entries: sigma_q = sigma_k = 0.02, d_k = 128", (128, 0.02, 0.02)),
    ]
    for _ in range(5):
        d_k = int(torch.randint(1, 1025, (1,), generator=g))
        s_q, s_k = (round(float(s), 3) for s in 0.1 + 3 * torch.rand(2, generator=g))
        cases.append((f"random: d_k={d_k}, sigma_q={s_q}, sigma_k={s_k}", (d_k, s_q, s_k)))
    return cases


def _unit_variance_scale(d_k: int, sigma_q: float, sigma_k: float) -> float:
    # Var(q . k) = d_k * sigma_q^2 * sigma_k^2; the scale divides by its square root
    return 1.0 / (sigma_q * sigma_k * math.sqrt(d_k))


unit_variance_scale = _register(
    Check(
        exercise="ch03-unit-variance-scale",
        function="unit_variance_scale",
        cases=_unit_variance_scale_cases,
        reference=_unit_variance_scale,
        atol=0.0,
        rtol=1e-6,
        hint="each product q_i k_i has variance sigma_q^2 * sigma_k^2 and d_k of them add up; "
        "the scale is 1 / (standard deviation of q . k)",
        covers="d_k = 1, GPT-2's d_k = 64, sigma_q != sigma_k, small entries",
    )
)
