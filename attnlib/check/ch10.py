"""Checkers for chapter 10's coding exercises."""

from __future__ import annotations

import torch

from ..masks import causal_mask
from ._core import Cases, Check, _register


def _weight_on(weights: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """The mean attention weight on an expected key: ``(..., T_q, T_k), (T_q,) -> (...)``.

    ``result[...] = mean over the queries t with key[t] >= 0 of weights[..., t, key[t]]``;
    ``key[t] = -1`` leaves query ``t`` out (it is not an index: ``-1`` would pick the last key).
    Keeps ``weights``' dtype.
    """
    counted = key >= 0  # (T_q,) bool
    rows = torch.arange(key.shape[0], device=key.device)[counted]  # the counted queries
    return weights[..., rows, key[counted]].mean(dim=-1)  # (..., n_counted) -> (...)


def _weight_on_cases() -> Cases:
    """(weights, key): causal or full softmax weights (..., T_q, T_k), key (T_q,) int64, seeded."""
    g = torch.Generator().manual_seed(10)

    def weights(*shape, causal=True, dtype=torch.float32, sharp=1.0):
        scores = sharp * torch.randn(*shape, generator=g, dtype=dtype)  # (..., T_q, T_k)
        if causal:
            scores = scores.masked_fill(~causal_mask(shape[-2], shape[-1]), float("-inf"))
        return torch.softmax(scores, dim=-1)

    T = 13  # the chapter's 6 digits, |, 6 digits
    t = torch.arange(T)
    anti = torch.where((t >= 6) & (t <= 11), 11 - t, -1)  # query t -> key 2n - 1 - t
    previous = torch.arange(-1, 4)  # query t -> key t - 1; query 0 left out
    last_only = torch.full((5,), -1)
    last_only[-1] = 4  # only the last query, on the last key
    cases = [
        (
            "the chapter's reversal: B = 4, 4 heads, T = 13, keys 11 - t for t = 6 .. 11, -1 elsewhere",
            (weights(4, 4, T, T), anti),
        ),
        ("a previous-token head: key t - 1, and -1 for query 0 (not the last key)", (weights(2, 3, 5, 5), previous)),
        ("one counted query, on the last key (T_k - 1), the others -1", (weights(2, 5, 5), last_only)),
        (
            "no batch or head axes: weights (T_q, T_k) -> a 0-d tensor",
            (weights(6, 6), torch.tensor([-1, 0, 1, 2, 3, 4])),
        ),
        ("cross-attention, T_q = 3 != T_k = 7, no mask", (weights(2, 3, 7, causal=False), torch.tensor([6, 0, 3]))),
        ("sharp weights (scores x 20): nearly one-hot rows", (weights(3, 2, 6, 6, sharp=20.0), torch.arange(-1, 5))),
        (
            "float64 weights: the result must stay float64",
            (weights(2, 2, 5, 5, dtype=torch.float64), torch.tensor([0, 0, 1, -1, 2])),
        ),
    ]
    for _ in range(4):
        B, H, T_q = (int(s) for s in torch.randint(1, 5, (3,), generator=g))
        T_q += 1
        key = torch.randint(-1, T_q, (T_q,), generator=g).minimum(torch.arange(T_q))  # causal: key <= t
        key[int(torch.randint(0, T_q, (1,), generator=g))] = 0  # at least one counted
        cases.append((f"random, B={B}, n_heads={H}, T={T_q}", (weights(B, H, T_q, T_q), key)))
    return cases


weight_on = _register(
    Check(
        exercise="ch10-weight-on",
        function="weight_on",
        cases=_weight_on_cases,
        reference=_weight_on,
        hint="for every query t with key[t] >= 0 take weights[..., t, key[t]] (index the last two axes "
        "with two tensors: the counted rows and their keys), then average over those queries only; "
        "key[t] = -1 means 'leave query t out': used as an index, -1 is the last key; keep the "
        "leading axes (B, n_heads) and the weights' dtype",
        covers="the chapter's reversal, a previous-token key t - 1 with -1 at t = 0, one counted query, "
        "no leading axes, T_q != T_k, sharp weights, float64, random shapes",
    )
)
