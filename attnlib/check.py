"""Checkers for the coding exercises: instant, specific feedback.

Each coding exercise in a chapter ends with a call such as
``check.one_hot_rows(one_hot_rows)``. The checker runs the student's function
on random and edge cases (empty and size-1 axes, large values, ...) and compares
the results with attnlib's reference. It prints one line when every case passes,
or raises an ``AssertionError`` whose message gives the failing case, its input,
what was expected, what came back and a hint.

A checker is a :class:`Check`: its cases, the reference, a hint. They are
registered in ``CHECKS`` under the exercise's label (``ch01-one-hot``), with the
name of the function it checks, so that ``python -m attnlib.homework grade``
can grade a notebook whatever its check cells say: it runs the student's
function on the cases in the notebook's kernel and compares the results here.

Writing a checker for a new exercise::

    my_function = _register(Check(
        exercise="ch02-...", function="my_function",
        cases=_my_cases,             # () -> [(label, args), ...], seeded
        reference=attnlib_function,  # same signature as the student's function
        hint="what to look at when the values are wrong",
        covers="the edge cases it tries, for the success line"))
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .embedding import embed, one_hot

Cases = list[tuple[str, tuple]]


def _show(x: Any) -> str:
    """Short text for a value in a message: small tensors in full, big ones by shape."""
    if isinstance(x, torch.Tensor):
        if x.numel() <= 24:
            return f"tensor({x.tolist()}, shape={tuple(x.shape)}, dtype={x.dtype})"
        return f"tensor of shape {tuple(x.shape)}, dtype {x.dtype}"
    if isinstance(x, tuple):
        return "(" + ", ".join(_show(v) for v in x) + ")"
    return repr(x)


def _mismatch(expected: Any, got: Any, atol: float, rtol: float) -> str | None:
    """Why ``got`` does not match ``expected`` (None if it does): type, shape, dtype, values."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple) or len(got) != len(expected):
            return (f"expected a tuple of {len(expected)} values, got {type(got).__name__}"
                    + (f" of {len(got)}" if isinstance(got, tuple) else ""))
        for i, (e, g) in enumerate(zip(expected, got)):
            why = _mismatch(e, g, atol, rtol)
            if why:
                return f"in item {i} of the returned tuple: {why}"
        return None
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a torch.Tensor, got {type(got).__name__} (return a tensor, not a list or array)"
        if got.shape != expected.shape:
            return f"wrong shape\n  expected shape: {tuple(expected.shape)}\n  got shape:      {tuple(got.shape)}"
        if expected.dtype == torch.bool:
            if got.dtype != torch.bool:
                return f"expected a bool tensor, got dtype {got.dtype}"
            same = torch.equal(got.cpu(), expected)
        else:
            if not got.is_floating_point():
                return (f"expected a floating-point tensor, got dtype {got.dtype} "
                        "(use .float() or create it with dtype=torch.float32)")
            got = got.detach().to("cpu", expected.dtype)
            if torch.isnan(got).any() and not torch.isnan(expected).any():
                return f"wrong values: your result contains NaN\n  expected: {_show(expected)}\n  got:      {_show(got)}"
            same = torch.allclose(got, expected, atol=atol, rtol=rtol)
        if not same:
            return f"wrong values\n  expected: {_show(expected)}\n  got:      {_show(got)}"
        return None
    if isinstance(expected, (int, float)):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"expected a number ({type(expected).__name__}), got {type(got).__name__}"
        if isinstance(expected, int) and got != expected or not math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
            return f"wrong value\n  expected: {expected!r}\n  got:      {got!r}"
        return None
    return None if got == expected else f"wrong value\n  expected: {expected!r}\n  got:      {got!r}"


def compare(name: str, fn: Callable, cases: Cases, reference: Callable, hint: str,
            atol: float = 1e-5, rtol: float = 1e-5) -> int:
    """Run ``fn`` and ``reference`` on every case; raise a helpful AssertionError on the first
    difference. Return the number of cases."""
    if not callable(fn):
        raise AssertionError(f"{name}: expected a function, received {_show(fn)}. "
                             f"Pass the function itself, e.g. check.{name}({name}).")
    for label, args in cases:
        expected = reference(*args)
        where = f"  case: {label}\n  input: {', '.join(_show(a) for a in args)}\n"
        try:
            got = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        except NotImplementedError:
            raise AssertionError(f"{name}: not implemented yet (it raised NotImplementedError). "
                                 "Replace the raise NotImplementedError(...) line with your code.") from None
        except Exception as e:  # the student's code failed: say where and how
            raise AssertionError(f"{name}: your function raised {type(e).__name__}: {e}\n"
                                 f"{where}  hint: {hint}") from None
        why = _mismatch(expected, got, atol, rtol)
        if why:
            first, _, rest = why.partition("\n")
            raise AssertionError(f"{name}: {first}\n{where}{rest + chr(10) if rest else ''}  hint: {hint}")
    return len(cases)


@dataclass(frozen=True)
class Check:
    """The checker of one coding exercise; call it with the student's function."""

    exercise: str            # the exercise's label in the chapter, e.g. "ch01-one-hot"
    function: str            # the name of the function the student writes
    cases: Callable[[], Cases]
    reference: Callable
    hint: str
    covers: str              # the edge cases tried, shown on success
    points: int = 1
    atol: float = 1e-5
    rtol: float = 1e-5

    def __call__(self, fn: Callable) -> None:
        n = compare(self.function, fn, self.cases(), self.reference, self.hint, self.atol, self.rtol)
        print(f"check.{self.function}: all {n} cases passed ({self.covers}).")


CHECKS: dict[str, Check] = {}


def _register(check: Check) -> Check:
    CHECKS[check.exercise] = check
    return check


# ---------------------------------------------------------------- chapter 1

def _one_hot_cases() -> Cases:
    g = torch.Generator().manual_seed(1)
    cases = [
        ("the sentence of chapter 1", (torch.tensor([0, 1, 2, 3, 4, 5]), 6)),
        ("repeated ids, id V-1 included", (torch.tensor([3, 3, 0, 9]), 10)),
        ("a single token", (torch.tensor([0]), 1)),
        ("no tokens at all (T = 0)", (torch.zeros(0, dtype=torch.long), 5)),
        ("a batch (B, T) = (2, 3)", (torch.tensor([[1, 0, 2], [2, 2, 1]]), 3)),
    ]
    for i in range(5):
        V = int(torch.randint(1, 50, (1,), generator=g))
        shape = tuple(int(s) for s in torch.randint(1, 6, (1 + i % 2,), generator=g))
        cases.append((f"random ids, shape {shape}, V={V}", (torch.randint(0, V, shape, generator=g), V)))
    return cases


one_hot_rows = _register(Check(
    exercise="ch01-one-hot", function="one_hot_rows", cases=_one_hot_cases, reference=one_hot,
    hint="row i has a single 1, in column ids[i]; the result has one more axis, of size V",
    covers="shapes (T,) and (B, T), T = 0, V = 1"))


def _mean_embedding_cases() -> Cases:
    g = torch.Generator().manual_seed(2)
    cases = [
        ("one token", (torch.tensor([2]), torch.arange(8.0).reshape(4, 2))),
        ("a token repeated", (torch.tensor([1, 1, 3]), torch.arange(8.0).reshape(4, 2))),
        ("large values", (torch.tensor([0, 1]), torch.tensor([[1e6, -1e6], [1e6, 3e6]]))),
    ]
    for _ in range(5):
        V, d, T = (int(s) for s in torch.randint(1, 20, (3,), generator=g))
        cases.append((f"random, T={T}, V={V}, d={d}",
                      (torch.randint(0, V, (T,), generator=g), torch.randn(V, d, generator=g))))
    return cases


def _mean_embedding(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return embed(ids, table).mean(dim=0)  # (T, d_model) -> (d_model,)


mean_embedding = _register(Check(
    exercise="ch01-mean-embedding", function="mean_embedding", cases=_mean_embedding_cases,
    reference=_mean_embedding, atol=1e-4,
    hint="average the rows table[ids]; written as a product it is (counts / T) @ table",
    covers="repeated tokens, T = 1, large values"))


# ---------------------------------------------------------------- chapter 2
# (chapter 2 checkers go here)


# ---------------------------------------------------------------- chapter 3
# (chapter 3 checkers go here)


# ---------------------------------------------------------------- chapter 4
# (chapter 4 checkers go here)


# ---------------------------------------------------------------- chapter 5
# (chapter 5 checkers go here)


# ---------------------------------------------------------------- chapter 6
# (chapter 6 checkers go here)


# ---------------------------------------------------------------- chapter 7
# (chapter 7 checkers go here)
