"""Checkers for chapter 4's coding exercises."""

from __future__ import annotations

import torch

from ..masks import causal_mask, padding_mask
from ._core import Cases, Check, _register


def _window(T: int, width: int) -> torch.Tensor:
    """Sliding-window causal mask: query i may attend to keys i - width + 1 .. i. (T, T) bool."""
    i = torch.arange(T)[:, None]  # (T, 1)
    j = torch.arange(T)[None, :]  # (1, T)
    return (j <= i) & (j > i - width)  # (T, T)


def _reach_cases() -> Cases:
    # every mask keeps its diagonal (each token may attend to itself), as the exercise says: then
    # a query's own token is also one of its keys, and the mask alone says what an output reads
    g = torch.Generator().manual_seed(40)
    # the small cases come first: a message shows a tensor in full up to 24 entries (T = 4)
    both_sides = _window(4, 2) | _window(4, 2).T  # (4, 4): i - 1 <= j <= i + 1, an encoder's local window
    cases = [
        ("the causal mask, T = 4, one layer", (causal_mask(4), 1)),
        ("the causal mask, T = 6, three layers", (causal_mask(6), 3)),
        ("a sliding window of width 2, T = 4, two layers", (_window(4, 2), 2)),
        ("a sliding window of width 2, T = 6, three layers", (_window(6, 2), 3)),
        ("a sliding window of width 3, T = 9, two layers", (_window(9, 3), 2)),
        ("a window on both sides (i - 1 <= j <= i + 1), T = 4, two layers", (both_sides, 2)),
        ("no mask at all (every entry True), T = 4, two layers", (torch.ones(4, 4, dtype=torch.bool), 2)),
        ("one token (T = 1), four layers", (causal_mask(1), 4)),
    ]
    for layers in (2, 3):  # neither triangular nor symmetric: row i is the query, column j the key
        T = 7
        m = (torch.rand(T, T, generator=g) < 0.2) | torch.eye(T, dtype=torch.bool)  # (T, T), diagonal kept
        cases.append((f"a random mask with its diagonal, T = {T}, {layers} layers", (m, layers)))
    return cases


def _reach(mask: torch.Tensor, n_layers: int) -> torch.Tensor:
    # output i of the last layer depends on input j when a chain i -> k_1 -> ... -> j of
    # n_layers allowed entries connects them: the n_layers-th boolean power of the mask
    step = mask.to(torch.int64)  # (T, T), 1 = may attend
    paths = step
    for _ in range(n_layers - 1):
        paths = (step @ paths).clamp(max=1)  # (T, T) @ (T, T) -> (T, T); clamp keeps the counts 0 or 1
    return paths.bool()  # (T, T)


reach = _register(
    Check(
        exercise="ch04-reach",
        partial=True,  # its cases test independent things (the edge cases): partial credit
        function="reach",
        cases=_reach_cases,
        reference=_reach,
        hint="output i of the last layer depends on input j when a chain of n_layers allowed entries "
        "mask[i, k_1], mask[k_1, k_2], ..., mask[k_(n_layers-1), j] joins them: the n_layers-th power of "
        "the mask in 0/1 arithmetic (multiply float or int copies, then > 0). Row i is the query, column j "
        "the key (do not transpose: mask[i, j] says that query i reads key j), one layer gives the mask "
        "itself, and each extra layer is one more product. Return a bool tensor of shape (T, T)",
        covers="one layer, deep causal stacks, sliding windows, a two-sided window, T = 1, random masks",
    )
)


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


combine_masks = _register(
    Check(
        exercise="ch04-combine-masks",
        function="combine_masks",
        cases=_combine_masks_cases,
        reference=_combine_masks,
        hint="mask[b, 0, i, j] is True (may attend) when j <= i AND j < lengths[b]; return a bool tensor "
        "of shape (B, 1, T, T), True = may attend (not nn.MultiheadAttention's True = blocked)",
        covers="T = 1, a sequence of length 0, no padding",
        forbids=("causal_mask", "padding_mask"),
        diagnoses=(
            (
                "your mask is inverted: True must mean 'may attend', as in F.scaled_dot_product_attention, "
                "not 'blocked' as in nn.MultiheadAttention",
                lambda got, mask, lengths, T: torch.equal(got, ~mask),
            ),
            (
                "your mask is the causal mask alone: the padded keys (j >= lengths[b]) must be blocked too",
                lambda got, mask, lengths, T: torch.equal(got.expand_as(mask), _causal_only(lengths, T)),
            ),
            (
                "your mask hides the padding but not the future: add the causal condition j <= i",
                lambda got, mask, lengths, T: torch.equal(got.expand_as(mask), _padding_only(lengths, T)),
            ),
        ),
    )
)


def _causal_only(lengths: torch.Tensor, T: int) -> torch.Tensor:
    return causal_mask(T).expand(len(lengths), 1, T, T)  # (B, 1, T, T)


def _padding_only(lengths: torch.Tensor, T: int) -> torch.Tensor:
    return padding_mask(lengths, T).expand(len(lengths), 1, T, T)  # (B, 1, 1, T) -> (B, 1, T, T)
