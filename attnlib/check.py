"""Checkers for the coding exercises: instant, specific feedback.

Each coding exercise in a chapter ends with a call such as
``check.one_hot_rows(one_hot_rows)``. The checker runs the student's function on
random and edge cases (empty and size-1 axes, large values, ...) and compares it
with attnlib's reference. It prints one line when every case passes, or raises
an ``AssertionError`` whose message gives the failing input, what was expected,
what came back and a hint.

Every checker is registered in ``CHECKS`` under its exercise label, with the
name of the function it checks and its points: ``python -m attnlib.homework``
uses the registry to grade a notebook whatever its check cells say.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .embedding import embed, one_hot


@dataclass(frozen=True)
class Check:
    """One registered checker: exercise label, checked function's name, points."""

    exercise: str
    function: str
    points: int
    run: Callable


CHECKS: dict[str, Check] = {}


def _register(exercise: str, function: str, points: int = 1):
    def wrap(run):
        CHECKS[exercise] = Check(exercise, function, points, run)
        run.exercise, run.function, run.points = exercise, function, points
        return run
    return wrap


def _show(x) -> str:
    """Short text for a value in a message: small tensors in full, big ones by shape."""
    if isinstance(x, torch.Tensor):
        if x.numel() <= 24:
            return f"tensor({x.tolist()}, shape={tuple(x.shape)}, dtype={x.dtype})"
        return f"tensor of shape {tuple(x.shape)}, dtype {x.dtype}"
    return repr(x)


def _compare(name: str, fn: Callable, cases, reference: Callable, hint: str,
             atol: float = 1e-5, rtol: float = 1e-5) -> int:
    """Run ``fn`` and ``reference`` on every case and compare; return the number of cases."""
    if not callable(fn):
        raise AssertionError(f"{name}: expected a function, received {_show(fn)}. "
                             f"Pass the function itself, e.g. check.{name}({name}).")
    for label, args in cases:
        inputs = ", ".join(_show(a) for a in args)
        expected = reference(*args)
        try:
            got = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        except NotImplementedError:
            raise AssertionError(f"{name}: not implemented yet (it raised NotImplementedError). "
                                 f"Write your code between BEGIN SOLUTION and END SOLUTION.") from None
        except Exception as e:  # the student's code failed: say where and how
            raise AssertionError(f"{name}: your function raised {type(e).__name__}: {e}\n"
                                 f"  case: {label}\n  input: {inputs}\n  hint: {hint}") from None
        where = f"  case: {label}\n  input: {inputs}\n"
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"{name}: expected a torch.Tensor, got {type(got).__name__}\n"
                                 f"{where}  hint: return a tensor, not a list or NumPy array")
        if got.shape != expected.shape:
            raise AssertionError(f"{name}: wrong shape\n{where}  expected shape: "
                                 f"{tuple(expected.shape)}\n  got shape:      {tuple(got.shape)}\n"
                                 f"  hint: {hint}")
        if not got.is_floating_point():
            raise AssertionError(f"{name}: expected a floating-point tensor, got dtype {got.dtype}\n"
                                 f"{where}  hint: use .float() or create the tensor with dtype=torch.float32")
        if not torch.allclose(got.to(expected.dtype), expected, atol=atol, rtol=rtol, equal_nan=False):
            raise AssertionError(f"{name}: wrong values\n{where}  expected: {_show(expected)}\n"
                                 f"  got:      {_show(got)}\n  hint: {hint}")
    return len(cases)


def _ok(name: str, n: int, what: str) -> None:
    print(f"check.{name}: all {n} cases passed ({what}).")


# ---------------------------------------------------------------- chapter 1

@_register("ch01-one-hot", "one_hot_rows")
def one_hot_rows(fn: Callable) -> None:
    """Check ``fn(ids, vocab_size) -> (..., V)`` one-hot float rows against ``attnlib.one_hot``."""
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
    n = _compare("one_hot_rows", fn, cases, one_hot,
                 "row i has a single 1, in column ids[i]; the result has one more axis, of size V")
    _ok("one_hot_rows", n, "shapes (T,) and (B, T), T = 0, V = 1")


@_register("ch01-mean-embedding", "mean_embedding")
def mean_embedding(fn: Callable) -> None:
    """Check ``fn(ids (T,), table (V, d)) -> (d,)``, the mean of the tokens' embeddings."""
    g = torch.Generator().manual_seed(2)

    def reference(ids, table):
        return embed(ids, table).mean(dim=0)  # (T, d) -> (d,)

    cases = [
        ("one token", (torch.tensor([2]), torch.arange(8.0).reshape(4, 2))),
        ("a token repeated", (torch.tensor([1, 1, 3]), torch.arange(8.0).reshape(4, 2))),
        ("large values", (torch.tensor([0, 1]), torch.tensor([[1e6, -1e6], [1e6, 3e6]]))),
    ]
    for _ in range(5):
        V, d, T = (int(s) for s in torch.randint(1, 20, (3,), generator=g))
        cases.append((f"random, T={T}, V={V}, d={d}",
                      (torch.randint(0, V, (T,), generator=g), torch.randn(V, d, generator=g))))
    n = _compare("mean_embedding", fn, cases, reference,
                 "average the rows table[ids]; written as a product it is (counts / T) @ table",
                 rtol=1e-5, atol=1e-4)
    _ok("mean_embedding", n, "repeated tokens, T = 1, large values")
