"""Checkers for chapter 1's coding exercises."""

from __future__ import annotations

import torch

from ..embedding import embed, one_hot
from ._core import Cases, Check, _register


def _one_hot_cases() -> Cases:
    # the reference (attnlib.one_hot) returns float32, the dtype the exercise asks for: a float64
    # (or integer, or bool) answer fails on the dtype, whatever its values
    g = torch.Generator().manual_seed(1)
    cases = [
        ("the sentence of chapter 1", (torch.tensor([0, 1, 2, 3, 4, 5]), 6)),
        ("repeated ids, id vocab_size - 1 included", (torch.tensor([3, 3, 0, 9]), 10)),
        ("a single token", (torch.tensor([0]), 1)),
        ("no tokens at all (T = 0)", (torch.zeros(0, dtype=torch.long), 5)),
        ("a batch (B, T) = (2, 3)", (torch.tensor([[1, 0, 2], [2, 2, 1]]), 3)),
    ]
    for i in range(5):
        vocab_size = int(torch.randint(1, 50, (1,), generator=g))
        shape = tuple(int(s) for s in torch.randint(1, 6, (1 + i % 2,), generator=g))
        cases.append(
            (
                f"random ids, shape {shape}, vocab_size={vocab_size}",
                (torch.randint(0, vocab_size, shape, generator=g), vocab_size),
            )
        )
    return cases


one_hot_rows = _register(
    Check(
        exercise="ch01-one-hot",
        function="one_hot_rows",
        cases=_one_hot_cases,
        reference=one_hot,
        hint=(
            "row i has a single 1, in column ids[i]; the result has one more axis, of size vocab_size, "
            "and dtype float32"
        ),
        covers="shapes (T,) and (B, T), T = 0, vocab_size = 1; float32",
        forbids=("embed",),
    )
)


def _mean_embedding_cases() -> Cases:
    g = torch.Generator().manual_seed(2)
    cases = [
        ("one token", (torch.tensor([2]), torch.arange(8.0).reshape(4, 2))),
        ("a token repeated", (torch.tensor([1, 1, 3]), torch.arange(8.0).reshape(4, 2))),
        ("large values", (torch.tensor([0, 1]), torch.tensor([[1e6, -1e6], [1e6, 3e6]]))),
    ]
    for _ in range(5):
        vocab_size, d, T = (int(s) for s in torch.randint(1, 20, (3,), generator=g))
        cases.append(
            (
                f"random, T={T}, vocab_size={vocab_size}, d={d}",
                (torch.randint(0, vocab_size, (T,), generator=g), torch.randn(vocab_size, d, generator=g)),
            )
        )
    return cases


def _mean_embedding(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return embed(ids, table).mean(dim=0)  # (T, d_model) -> (d_model,)


mean_embedding = _register(
    Check(
        exercise="ch01-mean-embedding",
        function="mean_embedding",
        cases=_mean_embedding_cases,
        reference=_mean_embedding,
        atol=1e-4,
        hint="average the rows table[ids]; written as a product it is (counts / T) @ table",
        covers="repeated tokens, T = 1, large values",
        allows=("one_hot",),
    )
)
