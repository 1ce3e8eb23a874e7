"""Checkers for chapter 9's coding exercises."""

from __future__ import annotations

import torch

from ..positions import apply_rope
from ._core import Cases, Check, _register


def _rope_cases() -> Cases:
    """(x, positions): x (..., T, d_head) with d_head even, positions (T,), seeded."""
    g = torch.Generator().manual_seed(9)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=dtype)

    # the small cases come first: a message shows a tensor in full up to 24 entries
    cases = [
        (
            "one pair (d_head = 2), the vector (1, 0) at positions 0 to 3: (cos t, sin t)",
            (torch.tensor([[1.0, 0.0]] * 4), torch.arange(4)),
        ),
        (
            "d_head = 4, T = 3, positions 0, 1, 2: pair 1 turns 100 times slower than pair 0",
            (randn(3, 4), torch.arange(3)),
        ),
        ("all positions 0: nothing turns", (randn(5, 8), torch.zeros(5, dtype=torch.long))),
        ("(T, d_head) = (6, 8), positions 0 to 5", (randn(6, 8), torch.arange(6))),
        ("positions after 100 cached tokens: 100 to 104", (randn(5, 8), torch.arange(100, 105))),
        ("positions in any order, repeats allowed: 7, 0, 3, 3", (randn(4, 6), torch.tensor([7, 0, 3, 3]))),
        ("float positions: 0.5, 1.5, 2.5", (randn(3, 4), torch.tensor([0.5, 1.5, 2.5]))),
        ("heads of a batch, (B, n_heads, T, d_head) = (2, 3, 5, 16)", (randn(2, 3, 5, 16), torch.arange(5))),
        ("a GPT-2-sized head: d_head = 64, T = 32", (randn(1, 2, 32, 64), torch.arange(32))),
        ("float64 inputs: the result must stay float64", (randn(2, 7, 12, dtype=torch.float64), torch.arange(7))),
    ]
    for _ in range(4):
        T, half = (int(s) for s in torch.randint(1, 9, (2,), generator=g))
        lead = tuple(int(s) for s in torch.randint(1, 4, (int(torch.randint(0, 3, (1,), generator=g)),), generator=g))
        start = int(torch.randint(0, 50, (1,), generator=g))
        cases.append(
            (
                f"random, x {lead + (T, 2 * half)}, positions {start} to {start + T - 1}",
                (randn(*lead, T, 2 * half), torch.arange(start, start + T)),
            )
        )
    return cases


def _rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """attnlib.apply_rope, base 10000: pair (2i, 2i+1) of row t turned by positions[t] * 10000^(-2i/d_head)."""
    return apply_rope(x, positions)


rope = _register(
    Check(
        exercise="ch09-rope",
        function="rope",
        cases=_rope_cases,
        reference=_rope,
        atol=1e-4,
        rtol=1e-4,
        hint="pair the dimensions (2i, 2i+1): the even ones are x[..., 0::2], the odd ones x[..., 1::2] (not the "
        "two halves, which is the 'rotate half' convention); theta_i = 10000 ** (-2i / d_head) for "
        "i = 0 .. d_head/2 - 1, i.e. 10000 ** (-torch.arange(0, d_head, 2) / d_head); the angle of row t is "
        "positions[t] * theta_i, shape (T, d_head/2), which broadcasts over the leading axes; "
        "new even = even cos - odd sin, new odd = even sin + odd cos; put them back interleaved with "
        "torch.stack([...], dim=-1).flatten(-2), not torch.cat; keep x's dtype",
        covers="d_head = 2, positions all 0, offsets after a cache, unordered and float positions, "
        "(B, n_heads, T, d_head), d_head = 64, float64, random shapes",
        forbids=("apply_rope",),
        diagnoses=(
            (
                "your pairs are the two halves (i, i + d_head/2), the 'rotate half' layout; this exercise pairs "
                "neighbours (2i, 2i+1)",
                lambda got, want, x, positions: torch.allclose(
                    got[..., _neighbours(x)], apply_rope(x[..., _neighbours(x)], positions), atol=1e-4
                ),
            ),
            (
                "your rows turn the other way: new even = even cos - odd sin, new odd = even sin + odd cos",
                lambda got, want, x, positions: torch.allclose(got, apply_rope(x, -positions), atol=1e-4),
            ),
            (
                "your rows are turned by 0, 1, 2, ... whatever the positions say: row t turns by positions[t]",
                lambda got, want, x, positions: torch.allclose(got, apply_rope(x), atol=1e-4),
            ),
            (
                "your rotated pairs are concatenated (all evens, then all odds): put each pair back in place, "
                "interleaved",
                lambda got, want, x, positions: torch.allclose(got, torch.cat((want[..., 0::2], want[..., 1::2]), -1)),
            ),
        ),
    )
)


def _neighbours(x: torch.Tensor) -> torch.Tensor:
    """The order that puts dimensions i and i + d_head/2 side by side: 0, d/2, 1, d/2 + 1, ..."""
    half = x.shape[-1] // 2
    return torch.stack((torch.arange(half), torch.arange(half) + half), dim=-1).flatten()  # (d_head,)
