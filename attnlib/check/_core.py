"""The machinery of the checkers: compare a student's function with a reference, case by case.

While a student's function runs under a checker (``check.softmax(...)`` in the notebook,
or the grader in the student's kernel), it may not call the answer: the function the
exercise asks for where attnlib already has it (``Check.forbids``), or any checker's
reference. ``forbidding(check)`` watches every Python call made during the student's
function (``sys.setprofile``), so the answer is caught however it was reached: by name,
through an alias, ``getattr`` or the ``CHECKS`` registry.
"""
from __future__ import annotations

import contextlib
import functools
import math
import sys
from dataclasses import dataclass
from types import CodeType
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
            atol: float = 1e-5, rtol: float = 1e-5, check: Check | None = None) -> int:
    """Run ``fn`` and ``reference`` on every case; raise a helpful AssertionError on the first
    difference. Return the number of cases. With ``check``, ``fn`` runs under
    ``forbidding(check)``: a call of the answer fails the check."""
    if not callable(fn):
        raise AssertionError(f"{name}: expected a function, received {_show(fn)}. "
                             f"Pass the function itself, e.g. check.{name}({name}).")
    guard = (lambda: forbidding(check)) if check is not None else contextlib.nullcontext
    for number, (label, args) in enumerate(cases, start=1):
        expected = reference(*args)
        where = f"  case: {label} [{number} of {len(cases)}]\n  input: {', '.join(_show(a) for a in args)}\n"
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        forbidden: list[str] = []
        try:
            with guard() as forbidden:
                got = fn(*copies)
        except NotImplementedError:
            raise AssertionError(f"{name}: not implemented yet (it raised NotImplementedError). "
                                 "Replace the raise NotImplementedError(...) line with your code.") from None
        except Exception as e:  # the student's code failed: say where and how
            if forbidden:
                raise AssertionError(f"{name}: {forbidden[0]}") from None
            raise AssertionError(f"{name}: your function raised {type(e).__name__}: {e}\n"
                                 f"{where}  hint: {hint}") from None
        if forbidden:          # called the answer, and caught the error it raised
            raise AssertionError(f"{name}: {forbidden[0]}")
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
    forbids: tuple[str, ...] = ()   # attnlib names the exercise asks the learner to write, e.g. ("causal_mask",)
    allows: tuple[str, ...] = ()    # attnlib names the exercise lets the learner use, though another
    #                                 exercise's reference (e.g. ("one_hot",))

    def __call__(self, fn: Callable) -> None:
        n = compare(self.function, fn, self.cases(), self.reference, self.hint, self.atol, self.rtol, check=self)
        print(f"check.{self.function}: all {n} cases passed ({self.covers}).")


CHECKS: dict[str, Check] = {}


def _register(check: Check) -> Check:
    CHECKS[check.exercise] = check
    return check


# ------------------------------------------------------------------ not calling the answer

class ForbiddenCall(Exception):
    """Raised inside a student's function that calls the answer (see ``forbidding``)."""


def _functions(obj) -> list[Callable]:
    """The Python functions that run when ``obj`` is called: itself, or a class's methods."""
    if isinstance(obj, functools.partial):
        return _functions(obj.func)
    if isinstance(obj, type):
        return [f for attr in vars(obj).values() for f in _functions(getattr(attr, "__func__", attr))]
    obj = getattr(obj, "__func__", obj)      # a bound method: its function
    return [obj] if isinstance(getattr(obj, "__code__", None), CodeType) else []


def _public_name(obj) -> str | None:
    import attnlib

    return next((f"attnlib.{n}" for n in attnlib.__all__ if getattr(attnlib, n) is obj), None)


@functools.lru_cache(maxsize=None)
def forbidden_spec(exercise: str) -> tuple[tuple[str, str, str], ...]:
    """What a solution of ``exercise`` may not call: ``(module, qualname, message)`` per function.

    The exercise's own reference and the attnlib names in its ``forbids`` (it asks the
    learner to write them), and every other checker's reference (each is the answer to
    its own exercise), less the attnlib names in its ``allows``. Names, not objects, so
    that the grader can hand them to the student's kernel.
    """
    import attnlib

    check = CHECKS[exercise]
    entries: dict[tuple[str, str], str] = {}

    def add(obj, message):
        for f in _functions(obj):
            if "<locals>" not in f.__qualname__:
                entries.setdefault((f.__module__, f.__qualname__), message)

    own = _public_name(check.reference) or f"attnlib.check.CHECKS[{exercise!r}].reference"
    add(check.reference, f"write {check.function} yourself; {own} is what your answer is checked against")
    for name in check.forbids:
        add(getattr(attnlib, name), f"exercise {exercise} asks you to write {check.function} without "
                                    f"attnlib.{name}: write it yourself, with tensor operations")
    for other in CHECKS.values():
        what = _public_name(other.reference) or f"attnlib.check.CHECKS[{other.exercise!r}].reference"
        add(other.reference, f"{what} is the answer to exercise {other.exercise}; "
                             f"write {check.function} yourself, with tensor operations")
    for name in check.allows:
        for f in _functions(getattr(attnlib, name)):
            entries.pop((f.__module__, f.__qualname__), None)
    return tuple((module, qualname, message) for (module, qualname), message in entries.items())


# The guard, as source: the grader runs the same lines in the student's kernel, with the
# spec as a literal, so that it does not depend on what the notebook did to attnlib.check.
GUARD_SOURCE = """
def _resolve(spec):
    import importlib
    codes = {}
    for module, qualname, message in spec:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        codes[getattr(obj, "__func__", obj).__code__] = message
    return codes


def _watching(codes, calls, error):
    def watch(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            calls.append(codes[frame.f_code])
            raise error(codes[frame.f_code])
    return watch
"""
_guard: dict = {}
exec(GUARD_SOURCE, _guard)


@contextlib.contextmanager
def forbidding(check: Check):
    """While the block runs, a call of what ``check``'s exercise forbids raises ``ForbiddenCall``.

    Yields a list that receives the message of each forbidden call, so that a student's
    ``try``/``except`` around the call cannot hide it. Every Python-level call made in the
    block is watched with ``sys.setprofile`` (the previous profile function is restored),
    so the answer is caught however it was reached: by name, through an alias, ``getattr``
    or the ``CHECKS`` registry.
    """
    calls: list[str] = []
    previous = sys.getprofile()
    sys.setprofile(_guard["_watching"](_guard["_resolve"](forbidden_spec(check.exercise)), calls, ForbiddenCall))
    try:
        yield calls
    finally:
        sys.setprofile(previous)
