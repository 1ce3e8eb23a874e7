"""Checkers for chapter 5's coding exercises."""
from __future__ import annotations

import math

import torch

from ..attention import attention as _attention
from ..softmax import softmax as _softmax
from ._core import Cases, Check, _register

def _stable_softmax_cases() -> Cases:
    g = torch.Generator().manual_seed(5)
    inf = float("inf")
    cases = [
        ("the worked example's scores (chapter 5)",
         (torch.tensor([[2.0, 4.0, 4.0], [4.0, 16.0, 12.0], [4.0, 12.0, 10.0]]),)),
        ("large scores 1000, 999, 998 (exp overflows)", (torch.tensor([1000.0, 999.0, 998.0]),)),
        ("scores of 1e4 and -1e4", (torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4]]),)),
        ("very negative scores (exp underflows to 0)", (torch.tensor([-1000.0, -1001.0]),)),
        ("-inf entries get weight 0", (torch.tensor([[1.0, -inf, 2.0], [-inf, 0.0, -inf]]),)),
        ("a row that is all -inf gives zeros", (torch.tensor([[0.5, -inf, 1.5], [-inf, -inf, -inf]]),)),
        ("one entry per row (size-1 last axis)", (torch.tensor([[3.0], [-inf], [1e4]]),)),
        ("equal scores give equal weights", (torch.zeros(1, 4),)),
        ("causal scores (B, T, T) = (2, 3, 3)",
         (torch.randn(2, 3, 3, generator=g).masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), -inf),)),
    ]
    for i, scale in enumerate([1.0, 10.0, 100.0, 1e3, 1e4]):
        shape = tuple(int(s) for s in torch.randint(1, 6, (1 + i % 3,), generator=g))
        x = torch.randn(shape, generator=g) * scale
        x = x.masked_fill(torch.rand(shape, generator=g) < 0.3, -inf)  # some masked keys, maybe whole rows
        cases.append((f"random scores of size {scale:g}, shape {shape}, some -inf", (x,)))
    return cases


stable_softmax = _register(Check(
    exercise="ch05-stable-softmax", function="stable_softmax", cases=_stable_softmax_cases,
    reference=_softmax,
    hint="subtract the row maximum (amax over the last axis, keepdim=True) before exp; where a row is "
         "all -inf its maximum is -inf: subtract 0 there and divide by 1 instead of the sum 0",
    covers="scores of 1000 and 1e4, -inf entries, all -inf rows, a size-1 axis, batches"))


def _attend_cases() -> Cases:
    g = torch.Generator().manual_seed(6)
    x = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 2.0], [1.0, 1.0, 1.0, 1.0]])
    w_k = torch.tensor([[0.0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]])
    w_q = torch.tensor([[1.0, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]])
    w_v = torch.tensor([[0.0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]])
    key = torch.randn(1, 4, generator=g)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    cases = [
        ("the worked example of chapter 5 (T = 3, d_k = d_v = 3)", (x @ w_q, x @ w_k, x @ w_v)),
        ("one token (T_q = T_k = 1): out is v", (r(1, 4), r(1, 4), r(1, 2))),
        ("2 queries, 5 keys (T_q != T_k)", (r(2, 4), r(5, 4), r(5, 3))),
        ("d_v != d_k (d_k = 4, d_v = 7)", (r(3, 4), r(3, 4), r(3, 7))),
        ("d_k = 1", (r(4, 1), r(4, 1), r(4, 2))),
        ("batch and heads (B, h, T, d) = (2, 3, 4, 8)", (r(2, 3, 4, 8), r(2, 3, 4, 8), r(2, 3, 4, 8))),
        ("large scores (exp of the raw scores overflows)", (20 * r(3, 4), 20 * r(5, 4), r(5, 2))),
        ("identical keys: equal weights", (r(2, 4), key.expand(3, 4).clone(), r(3, 2))),
    ]
    for _ in range(5):
        T_q, T_k, d_k, d_v = (int(s) for s in torch.randint(1, 9, (4,), generator=g))
        batch = tuple(int(s) for s in torch.randint(1, 4, (int(torch.randint(0, 3, (1,), generator=g)),),
                                                    generator=g))
        cases.append((f"random, batch {batch}, T_q={T_q}, T_k={T_k}, d_k={d_k}, d_v={d_v}",
                      (r(*batch, T_q, d_k), r(*batch, T_k, d_k), r(*batch, T_k, d_v))))
    return cases


attend = _register(Check(
    exercise="ch05-attend", function="attend", cases=_attend_cases, reference=_attention,
    hint="weights = softmax(q @ k^T / sqrt(d_k)) over the last axis (the keys), with d_k = q.shape[-1] and "
         "k.transpose(-2, -1); out = weights @ v; return (out, weights) in that order",
    covers="the worked example, T = 1, T_q != T_k, d_v != d_k, batch and head axes, large scores"))

