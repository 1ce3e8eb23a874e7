"""Checkers for chapter 2's coding exercises."""

from __future__ import annotations

import torch

from ..examples import illustrated
from ..scores import qk_scores
from ._core import Cases, Check, _register


def _scores_cases() -> Cases:
    g = torch.Generator().manual_seed(3)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def randint(bound, *shape):  # whole numbers in [-bound, bound], as floats
        return torch.randint(-bound, bound + 1, shape, generator=g).float()

    ex = illustrated()  # [E]'s inputs and weights, from attnlib.examples
    cases = [
        ("the worked example of Illustrated: Self-Attention", (ex["X"], ex["W_Q"], ex["W_K"])),
        ("W_Q != W_K: S is not symmetric, so Q K^T and K Q^T differ", (randn(3, 4), randn(4, 2), randn(4, 2))),
        ("a single token (T = 1)", (randn(1, 4), randn(4, 3), randn(4, 3))),
        ("d_k = 1", (randn(5, 3), randn(3, 1), randn(3, 1))),
        ("d_k > d_model", (randn(4, 2), randn(2, 5), randn(2, 5))),
        ("a batch (B, T, d_model) = (2, 3, 4)", (randn(2, 3, 4), randn(4, 3), randn(4, 3))),
        ("two batch axes (2, 3, 5, 4)", (randn(2, 3, 5, 4), randn(4, 2), randn(4, 2))),
        # whole numbers stay exact in float32 in any summation order (all sums < 2**24)
        ("large values (whole numbers up to 50)", (randint(50, 4, 3), randint(10, 3, 2), randint(10, 3, 2))),
    ]
    for i in range(5):
        T, d_model, d_k = (int(s) for s in torch.randint(1, 9, (3,), generator=g))
        batch = (int(torch.randint(1, 4, (1,), generator=g)),) if i % 2 else ()
        cases.append(
            (
                f"random, x of shape {batch + (T, d_model)}, d_k={d_k}",
                (randn(*batch, T, d_model), randn(d_model, d_k), randn(d_model, d_k)),
            )
        )
    return cases


def _scores(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor) -> torch.Tensor:
    return qk_scores(x @ w_q, x @ w_k, scale=1.0)  # (..., T, d_k) @ (..., d_k, T) -> (..., T, T)


scores = _register(
    Check(
        exercise="ch02-scores",
        function="scores",
        cases=_scores_cases,
        reference=_scores,
        atol=1e-4,
        rtol=1e-4,
        hint="Q = x @ w_q and K = x @ w_k are (..., T, d_k); S = Q @ K.transpose(-2, -1) (not K.T, which "
        "reverses every axis of a batch); row i is query i; no 1/sqrt(d_k) in this exercise",
        covers="the worked example, T = 1, d_k = 1, d_k > d_model, batch axes, large values",
        forbids=("qk_scores", "attention_weights"),
        diagnoses=(
            (
                "your result is the transpose of S: row i must hold query i's scores, Q @ K^T, not K @ Q^T",
                lambda got, s, x, w_q, w_k: (
                    not torch.allclose(s, s.mT, atol=1e-4) and torch.allclose(got, s.mT, atol=1e-4, rtol=1e-4)
                ),
            ),
            (
                "your scores are divided by sqrt(d_k): this exercise asks for the raw Q K^T (chapter 3 scales it)",
                lambda got, s, x, w_q, w_k: (
                    w_q.shape[-1] > 1 and torch.allclose(got, s / w_q.shape[-1] ** 0.5, atol=1e-4, rtol=1e-4)
                ),
            ),
        ),
    )
)
