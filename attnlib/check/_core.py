"""The machinery of the checkers: compare a student's function with a reference, case by case."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

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
            if got.dtype != expected.dtype:
                return (f"wrong dtype\n  expected dtype: {expected.dtype}\n  got dtype:      {got.dtype}\n"
                        "  (keep the dtype of the inputs, or the dtype the exercise asks for)")
            got = got.detach().to("cpu")
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
    for number, (label, args) in enumerate(cases, start=1):
        expected = reference(*args)
        where = f"  case: {label} [{number} of {len(cases)}]\n  input: {', '.join(_show(a) for a in args)}\n"
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

