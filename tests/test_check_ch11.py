"""Chapter 11's checker: the longest context whose attention weights fit in a memory budget.
The reference is right (against a search over T with tensors on the meta device, whose
sizes PyTorch computes), the notebook's solution passes, and the classic mistakes fail."""

import math

import pytest
import torch
from _solutions import notebook_solution

from attnlib import check
from attnlib.check import CHECKS

ENTRY = CHECKS["ch11-longest-context"]


def _weights_bytes(B, n_heads, T, dtype):
    """PyTorch's own size of a (B, n_heads, T, T) tensor: on the meta device nothing is allocated."""
    return torch.empty(B, n_heads, T, T, dtype=dtype, device="meta").nbytes


def _search(budget, B, n_heads, dtype):
    """The largest T whose weights fit, by doubling and bisection on PyTorch's sizes."""
    if _weights_bytes(B, n_heads, 1, dtype) > budget:
        return 0
    lo, hi = 1, 2
    while _weights_bytes(B, n_heads, hi, dtype) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # fits at lo, not at hi
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _weights_bytes(B, n_heads, mid, dtype) <= budget else (lo, mid)
    return lo


def test_registered_under_its_exercise():
    assert ENTRY is check.longest_context
    assert ENTRY.function == "longest_context"


def test_reference_equals_the_search_on_pytorch_sizes():
    for label, args in ENTRY.cases():
        expected = _search(*args)
        got = ENTRY.reference(*args)
        assert type(got) is int and got == expected, label


def test_cases_include_the_edge_cases():
    args = [a for _, a in ENTRY.cases()]
    dtypes = {a[3] for a in args}
    assert {torch.float16, torch.bfloat16, torch.float32, torch.float64} <= dtypes
    assert any(ENTRY.reference(*a) == 0 for a in args), "a budget too small for one number"
    assert any(a[0] == 0 for a in args), "a budget of 0"
    assert any(a[1] > 1 for a in args), "a batch"
    exact = [a for a in args if a[0] == a[1] * a[2] * ENTRY.reference(*a) ** 2 * a[3].itemsize and a[0] > 0]
    assert exact, "a budget that fits some T exactly"
    assert any((a[0] + 1, *a[1:]) in [tuple(e) for e in exact] for a in args), "one byte short of an exact fit"
    assert any(a[:3] == (2**30, 1, 12) and a[3] == torch.float32 for a in args), "the chapter's worked case"


def _notebook_solution():
    """The function the chapter's solution cell defines."""
    return notebook_solution("11_cost.ipynb", "longest_context", ("attnlib",))


def _with_float_sqrt(budget, B, n_heads, dtype):
    return int(math.sqrt(budget / (B * n_heads * dtype.itemsize)))


def test_the_solutions_pass(capsys):
    check.longest_context(_notebook_solution())
    check.longest_context(_with_float_sqrt)  # floor of a float square root: right at these sizes
    out = capsys.readouterr().out
    assert out.count(f"check.longest_context: all {len(CHECKS['ch11-longest-context'].cases())} cases passed") == 2


@pytest.mark.parametrize(
    "wrong, match",
    [
        # the batch forgotten
        (lambda b, B, h, dt: math.isqrt(b // (h * dt.itemsize)), r"wrong value.*case: a batch of 8"),
        # the heads forgotten
        (lambda b, B, h, dt: math.isqrt(b // (B * dt.itemsize)), r"wrong value.*case: GPT-2 small"),
        # always 4 bytes a number
        (lambda b, B, h, dt: math.isqrt(b // (B * h * 4)), r"wrong value.*case: float16"),
        # rounded to the nearest T, not down: one byte short still gives T = 1000
        (
            lambda b, B, h, dt: round(math.sqrt(b / (B * h * dt.itemsize))),
            r"wrong value.*case: (GPT-2 small|one byte short)",
        ),
        # rounded up
        (lambda b, B, h, dt: math.ceil(math.sqrt(b / (B * h * dt.itemsize))), r"wrong value.*case: GPT-2 small"),
        # the bytes of the weights returned, not T
        (lambda b, B, h, dt: B * h * dt.itemsize * math.isqrt(b // (B * h * dt.itemsize)) ** 2, r"wrong value"),
        # a float T
        (lambda b, B, h, dt: math.sqrt(b / (B * h * dt.itemsize)), r"wrong value"),
    ],
)
def test_classic_mistakes_are_caught(wrong, match):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*hint:"):
        check.longest_context(wrong)


def test_a_function_that_raises_gets_the_case_and_the_hint():
    def broken(budget, B, n_heads, dtype):
        return math.isqrt(budget // (B * n_heads * dtype.element_size()))  # dtypes have no element_size

    with pytest.raises(AssertionError, match=r"(?s)raised AttributeError.*case: GPT-2 small.*hint:"):
        check.longest_context(broken)
