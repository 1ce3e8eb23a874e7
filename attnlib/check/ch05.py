"""Checkers for chapter 5's coding exercises."""

from __future__ import annotations

import torch

from ..attention import attention as _attention
from ..examples import ILLUSTRATED_PUBLISHED, illustrated
from ..softmax import softmax as _softmax
from ._core import Cases, Check, _register


def _stable_softmax_cases() -> Cases:
    g = torch.Generator().manual_seed(5)
    inf = float("inf")
    cases = [
        (
            "the worked example's scores (chapter 5)",
            (torch.tensor(ILLUSTRATED_PUBLISHED["scores"], dtype=torch.float32),),
        ),
        ("large scores 1000, 999, 998 (exp overflows)", (torch.tensor([1000.0, 999.0, 998.0]),)),
        ("scores of 1e4 and -1e4", (torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4]]),)),
        ("very negative scores (exp underflows to 0)", (torch.tensor([-1000.0, -1001.0]),)),
        ("-inf entries get weight 0", (torch.tensor([[1.0, -inf, 2.0], [-inf, 0.0, -inf]]),)),
        ("a row that is all -inf gives zeros", (torch.tensor([[0.5, -inf, 1.5], [-inf, -inf, -inf]]),)),
        ("one entry per row (size-1 last axis)", (torch.tensor([[3.0], [-inf], [1e4]]),)),
        ("equal scores give equal weights", (torch.zeros(1, 4),)),
        (
            "causal scores (B, T, T) = (2, 3, 3)",
            (torch.randn(2, 3, 3, generator=g).masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), -inf),),
        ),
    ]
    for i, scale in enumerate([1.0, 10.0, 100.0, 1e3, 1e4]):
        shape = tuple(int(s) for s in torch.randint(1, 6, (1 + i % 3,), generator=g))
        x = torch.randn(shape, generator=g) * scale
        x = x.masked_fill(torch.rand(shape, generator=g) < 0.3, -inf)  # some masked keys, maybe whole rows
        cases.append((f"random scores of size {scale:g}, shape {shape}, some -inf", (x,)))
    return cases


stable_softmax = _register(
    Check(
        exercise="ch05-stable-softmax",
        partial=True,  # its cases test independent things (the edge cases): partial credit
        function="stable_softmax",
        cases=_stable_softmax_cases,
        reference=_softmax,
        hint="subtract the row maximum (amax over the last axis, keepdim=True) before exp; where a row is "
        "all -inf its maximum is -inf: subtract 0 there and divide by 1 instead of the sum 0",
        covers="scores of 1000 and 1e4, -inf entries, all -inf rows, a size-1 axis, batches",
        forbids=("online_softmax", "attention_weights", "attention"),
        diagnoses=(
            (
                "a row whose scores are all -inf gives NaN in your answer; it must give zeros (its maximum is "
                "-inf, and -inf - (-inf) is NaN)",
                lambda got, w, x: bool((torch.isnan(got) & (x == float("-inf")).all(-1, keepdim=True)).any()),
            ),
            (
                "exp overflowed to inf (NaN after the division): subtract each row's maximum before exp",
                lambda got, w, x: bool(torch.isnan(got).any()) and bool((x > 88).any()),
            ),
        ),
    )
)


def _shifted_values_setups() -> list[tuple[str, tuple]]:
    """The attention runs behind the cases of ``shifted_output``: (label, (q, k, v, attn_mask, scale, shift)).

    The student never sees q, k or v: only the output, the weights and the shift. The tests
    recompute attention with ``v + shift`` to check the reference against them.
    """
    g = torch.Generator().manual_seed(55)

    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=dtype)

    ex = illustrated()
    q_ex, k_ex, v_ex = ex["X"] @ ex["W_Q"], ex["X"] @ ex["W_K"], ex["X"] @ ex["W_V"]  # (3, 3) each
    no_key = torch.tensor([[True, False, True], [False, False, False]])  # query 1: every key masked
    causal = torch.ones(4, 4, dtype=torch.bool).tril()  # (T, T)
    padded = torch.tensor([[True, True, True, True], [True, True, False, False]])  # (B, T_k): lengths 4, 2
    pad_q = torch.tensor([[True, True, True, True], [True, True, False, False]])  # padded queries too
    both = causal & padded[:, None, :] & pad_q[:, :, None]  # (B, T, T)
    setups = [
        (
            "the worked example (scale 1, as the article), shift (1, -2, 0.5)",
            (q_ex, k_ex, v_ex, None, 1.0, torch.tensor([1.0, -2.0, 0.5])),
        ),
        (
            "query 1 has every key masked (its weights and output are zeros)",
            (r(2, 4), r(3, 4), r(3, 2), no_key, None, torch.tensor([3.0, -1.0])),
        ),
        ("a causal mask, T = 4, d_v = 2", (r(4, 3), r(4, 3), r(4, 2), causal, None, r(2))),
        (
            "a batch of 2 with padding: the padded queries of sequence 1 have no key",
            (r(2, 4, 3), r(2, 4, 3), r(2, 4, 2), both, None, r(2)),
        ),
        ("one key (T_k = 1)", (r(3, 4), r(1, 4), r(1, 3), None, None, r(3))),
        ("shift zero: nothing moves", (r(3, 4), r(5, 4), r(5, 3), None, None, torch.zeros(3))),
        (
            "float64 (keep the dtype)",
            (
                r(3, 4, dtype=torch.float64),
                r(5, 4, dtype=torch.float64),
                r(5, 3, dtype=torch.float64),
                None,
                None,
                r(3, dtype=torch.float64),
            ),
        ),
    ]
    for _ in range(3):
        B, n_heads, T_q, T_k, d_k, d_v = (int(s) for s in torch.randint(1, 6, (6,), generator=g))
        blocked = torch.rand(B, 1, T_q, T_k, generator=g) < 0.4  # some rows fully masked
        setups.append(
            (
                f"random, (B, n_heads, T_q, T_k) = {(B, n_heads, T_q, T_k)}, d_v = {d_v}, some keys masked",
                (r(B, n_heads, T_q, d_k), r(B, n_heads, T_k, d_k), r(B, n_heads, T_k, d_v), ~blocked, None, 3 * r(d_v)),
            )
        )
    return setups


def _shifted_output_cases() -> Cases:
    cases = []
    for label, (q, k, v, mask, scale, shift) in _shifted_values_setups():
        out, weights = _attention(q, k, v, attn_mask=mask, scale=scale)  # (..., T_q, d_v), (..., T_q, T_k)
        cases.append((label, (out, weights, shift)))
    return cases


def _shifted_output(out: torch.Tensor, weights: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    # row i: sum_j w_ij (v_j + c) = out_i + (sum_j w_ij) c; the sum is 1, or 0 for a query with no key
    return out + weights.sum(dim=-1, keepdim=True) * shift  # (..., T_q, d_v) + (..., T_q, 1) * (d_v,)


shifted_output = _register(
    Check(
        exercise="ch05-shifted-values",
        function="shifted_output",
        cases=_shifted_output_cases,
        reference=_shifted_output,
        hint="output row i is sum_j w_ij v_j; replace v_j by v_j + shift and take the shift out of the sum: "
        "it is multiplied by sum_j w_ij. That sum is 1 for most queries, but not for a query whose keys "
        "are all masked (its weights are all 0): use weights.sum(dim=-1, keepdim=True), shape (..., T_q, 1)",
        covers="the worked example, fully masked queries, causal and padding masks, T_k = 1, float64, batches",
    )
)
