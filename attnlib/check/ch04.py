"""Checkers for chapter 4's coding exercises."""
from __future__ import annotations

import math

import torch

from ..attention import attention_weights
from ..masks import causal_mask
from ..masks import padding_mask
from ._core import Cases, Check, _register

def _causal_weights_cases() -> Cases:
    g = torch.Generator().manual_seed(4)
    eye2 = torch.eye(2)
    cases = [
        ("T = 2, q = k = identity: token 0 sees only itself", (eye2, eye2)),
        ("a single token (T = 1)", (torch.randn(1, 3, generator=g), torch.randn(1, 3, generator=g))),
        ("negative scores, so a masked score of 0 would beat them",
         (torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([[-1.0], [-2.0], [-3.0]]))),
        ("batch dims (B, n_heads, T, d_k) = (2, 3, 4, 5)",
         (torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 3, 4, 5, generator=g))),
        ("large values (scores in the thousands)",
         (100 * torch.randn(3, 2, generator=g), 100 * torch.randn(3, 2, generator=g))),
    ]
    for i in range(5):
        T, d = (int(s) for s in torch.randint(1, 9, (2,), generator=g))
        batch = tuple(int(s) for s in torch.randint(1, 4, (i % 3,), generator=g))
        shape = batch + (T, d)
        cases.append((f"random, shape {shape}",
                      (torch.randn(shape, generator=g), torch.randn(shape, generator=g))))
    return cases


def _causal_attention_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return attention_weights(q, k, is_causal=True)  # (..., T, T)


causal_attention_weights = _register(Check(
    exercise="ch04-causal-weights", function="causal_attention_weights",
    cases=_causal_weights_cases, reference=_causal_attention_weights, atol=1e-5,
    hint="token i attends to keys 0..i, itself included: keep the diagonal (torch.ones(T, T).tril(), "
         "not tril(-1) or triu()); set the blocked scores to -inf (not 0) before the softmax; "
         "divide by sqrt(d_k); softmax over the last dimension with torch.softmax (a hand-written "
         "exp overflows on large scores unless you subtract the row maximum first)",
    covers="T = 1, batch dims, scores that are negative or in the thousands"))


def _combine_masks_cases() -> Cases:
    g = torch.Generator().manual_seed(44)
    cases = [
        ("the chapter's batch: lengths 5, 3, 1, T = 5", (torch.tensor([5, 3, 1]), 5)),
        ("one token (T = 1)", (torch.tensor([1]), 1)),
        ("an empty sequence (length 0)", (torch.tensor([0, 2]), 3)),
        ("no padding at all", (torch.tensor([4, 4]), 4)),
    ]
    for _ in range(5):
        B, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 9, (1,), generator=g))
        lengths = torch.randint(0, T + 1, (B,), generator=g)
        cases.append((f"random, B={B}, T={T}", (lengths, T)))
    return cases


def _combine_masks(lengths: torch.Tensor, T: int) -> torch.Tensor:
    # (T, T) & (B, 1, 1, T) -> (B, 1, T, T)
    return causal_mask(T, device=lengths.device) & padding_mask(lengths, T)


combine_masks = _register(Check(
    exercise="ch04-combine-masks", function="combine_masks",
    cases=_combine_masks_cases, reference=_combine_masks,
    hint="mask[b, 0, i, j] is True (may attend) when j <= i AND j < lengths[b]; return a bool tensor "
         "of shape (B, 1, T, T), True = may attend (not nn.MultiheadAttention's True = blocked)",
    covers="T = 1, a sequence of length 0, no padding"))

