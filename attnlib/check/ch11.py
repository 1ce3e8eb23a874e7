"""Checkers for chapter 11's coding exercises."""

from __future__ import annotations

import math

import torch

from ._core import Cases, Check, _register


def _longest_context_cases() -> Cases:
    """(budget_bytes, B, n_heads, dtype): budgets in bytes, seeded random cases at the end."""
    GiB = 2**30
    cases = [
        ("GPT-2 small, one sequence, float32, 1 GiB", (GiB, 1, 12, torch.float32)),
        ("float16: 2 bytes a number", (GiB, 1, 12, torch.float16)),
        ("bfloat16: 2 bytes a number", (GiB, 1, 12, torch.bfloat16)),
        ("float64: 8 bytes a number", (GiB, 1, 12, torch.float64)),
        ("a batch of 8 sequences", (GiB, 8, 12, torch.float32)),
        ("the budget holds T = 1000 exactly (equal counts as fitting)", (12 * 1000 * 1000 * 4, 1, 12, torch.float32)),
        ("one byte short of T = 1000", (12 * 1000 * 1000 * 4 - 1, 1, 12, torch.float32)),
        ("a budget of 3 bytes: not even one float32 fits", (3, 1, 1, torch.float32)),
        ("a budget of 0 bytes", (0, 2, 4, torch.float16)),
        ("an 80 GiB GPU, GPT-3's 96 heads in bfloat16", (80 * GiB, 1, 96, torch.bfloat16)),
        ("one head, one sequence: T = sqrt(budget / 4)", (4 * 4096**2, 1, 1, torch.float32)),
    ]
    g = torch.Generator().manual_seed(11)
    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
    for _ in range(5):
        budget = int(torch.randint(0, 2**40, (1,), generator=g))
        B, n_heads = (int(v) for v in torch.randint(1, 33, (2,), generator=g))
        dtype = dtypes[int(torch.randint(0, 4, (1,), generator=g))]
        cases.append((f"random: {budget:,} bytes, B = {B}, {n_heads} heads, {dtype}", (budget, B, n_heads, dtype)))
    return cases


def _longest_context(budget_bytes: int, B: int, n_heads: int, dtype: torch.dtype) -> int:
    """The largest ``T`` with ``B * n_heads * T * T * bytes_per_number <= budget_bytes``; 0 if none.

    ``budget // (B n_heads s)`` is the number of entries that fit (``s`` bytes each), and
    ``math.isqrt`` the largest ``T`` with ``T^2`` at most that: exact, no floating point.
    """
    entries = budget_bytes // (B * n_heads * (torch.finfo(dtype).bits // 8))
    return math.isqrt(entries)


longest_context = _register(
    Check(
        exercise="ch11-longest-context",
        function="longest_context",
        cases=_longest_context_cases,
        reference=_longest_context,
        atol=0,
        rtol=0,
        hint="the weights (B, n_heads, T, T) take B * n_heads * T * T * dtype.itemsize bytes; the largest T "
        "that fits is the square root of budget_bytes / (B * n_heads * dtype.itemsize), rounded DOWN "
        "(math.isqrt of the whole number of entries that fit is exact); count every factor: the batch, "
        "the heads and the bytes of the dtype (2 for float16 and bfloat16, 8 for float64); return an int",
        covers="GPT-2 small at 1 GiB, float16, bfloat16, float64, a batch, an exact fit, one byte short, "
        "budgets too small for one number, 80 GiB, random budgets",
    )
)
