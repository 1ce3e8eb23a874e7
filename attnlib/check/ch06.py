"""Checkers for chapter 6's coding exercises."""
from __future__ import annotations

import math

import torch

from ..multihead import merge_heads
from ..multihead import split_heads
from ._core import Cases, Check, _register

def _split_heads_cases() -> Cases:
    g = torch.Generator().manual_seed(6)
    cases = [
        ("2 heads, entries numbered x[0, t, c] = 4 t + c", (torch.arange(12.0).reshape(1, 3, 4), 2)),
        ("n_heads = 1: one head holds every column", (torch.randn(2, 3, 4, generator=g), 1)),
        ("n_heads = d_model: heads of width d_head = 1", (torch.randn(2, 3, 4, generator=g), 4)),
        ("one token (T = 1)", (torch.randn(2, 1, 6, generator=g), 3)),
        ("GPT-2-wide heads: d_head = 64, n_heads = 3", (torch.randn(1, 4, 192, generator=g), 3)),
        ("x not contiguous in memory (a transposed view)",
         (torch.randn(3, 2, 6, generator=g).transpose(0, 1), 2)),  # (3, 2, 6) -> (2, 3, 6)
        ("large values (1e6)", (1e6 * torch.randn(2, 4, 6, generator=g), 3)),
    ]
    for _ in range(5):
        B, T, H, d_head = (int(s) for s in torch.randint(1, 6, (4,), generator=g))
        cases.append((f"random, B={B}, T={T}, n_heads={H}, d_head={d_head}",
                      (torch.randn(B, T, H * d_head, generator=g), H)))
    return cases


split_heads_by_hand = _register(Check(
    exercise="ch06-split-heads", function="split_heads_by_hand", cases=_split_heads_cases,
    reference=split_heads, atol=0.0, rtol=0.0,
    hint="head h holds columns h*d_head .. (h+1)*d_head - 1 of every token: reshape to "
         "(B, T, n_heads, d_head) first, then swap the T and n_heads axes with transpose(1, 2). "
         "Reshaping straight to (B, n_heads, T, d_head) gives the right shape but cuts across tokens",
    covers="n_heads = 1, n_heads = d_model, T = 1, a non-contiguous x, large values"))


def _merge_heads_cases() -> Cases:
    g = torch.Generator().manual_seed(66)
    cases = [
        ("2 heads, entries numbered 0..11", (torch.arange(12.0).reshape(1, 2, 3, 2),)),
        ("one head (n_heads = 1)", (torch.randn(2, 1, 3, 4, generator=g),)),
        ("heads of width 1 (d_head = 1)", (torch.randn(2, 4, 3, 1, generator=g),)),
        ("one token (T = 1)", (torch.randn(2, 3, 1, 2, generator=g),)),
        ("GPT-2 small heads (B, n_heads, T, d_head) = (1, 12, 5, 64)", (torch.randn(1, 12, 5, 64, generator=g),)),
        ("heads as split_heads returns them (not contiguous)",
         (split_heads(torch.randn(2, 3, 6, generator=g), 2),)),
        ("large values (1e6)", (1e6 * torch.randn(2, 3, 4, 2, generator=g),)),
    ]
    for _ in range(5):
        B, H, T, d_head = (int(s) for s in torch.randint(1, 6, (4,), generator=g))
        cases.append((f"random, B={B}, n_heads={H}, T={T}, d_head={d_head}",
                      (torch.randn(B, H, T, d_head, generator=g),)))
    return cases


merge_heads_by_hand = _register(Check(
    exercise="ch06-merge-heads", function="merge_heads_by_hand", cases=_merge_heads_cases,
    reference=merge_heads, atol=0.0, rtol=0.0,
    hint="swap the head and token axes back with transpose(1, 2), giving (B, T, n_heads, d_head), then "
         "reshape to (B, T, n_heads * d_head). Reshaping straight from (B, n_heads, T, d_head) gives the "
         "right shape but glues the wrong numbers; after the transpose use reshape (view fails on a "
         "non-contiguous tensor)",
    covers="n_heads = 1, d_head = 1, T = 1, non-contiguous heads, large values"))

