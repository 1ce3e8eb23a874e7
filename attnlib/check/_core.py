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
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

import torch

from ..i18n import language, tr, tr_case

Cases = list[tuple[str, tuple]]
# What a wrong answer got wrong, where it can be told from the answer: (message, applies), where
# applies(got, expected, *args) is True for an answer that made that mistake on that case
Diagnosis = tuple[str, Callable[..., bool]]
_failed: dict[str, int] = {}  # failed checks per function in this process: the full hint comes second


def _diagnose(diagnoses: tuple[Diagnosis, ...], got: Any, expected: Any, args: tuple) -> str | None:
    """The message of the first diagnosis that applies to this wrong answer (None if none does)."""
    for message, applies in diagnoses:
        try:
            if applies(got, expected, *args):
                return message
        except Exception:  # a diagnosis that cannot read this answer does not apply to it
            continue
    return None


def matches(got: Any, expected: torch.Tensor, atol: float = 0.0) -> bool:
    """Whether a wrong answer is what a given mistake gives (for a diagnosis): a tensor of ``expected``'s
    shape and kind (bool or float) with its values, to ``atol`` (absolute and relative; 0: exactly)."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return False
    if expected.dtype == torch.bool or got.dtype == torch.bool:
        return got.dtype == expected.dtype and torch.equal(got.cpu(), expected.cpu())
    if got.is_floating_point() != expected.is_floating_point():
        return False
    return bool(torch.allclose(got.detach().cpu().to(expected.dtype), expected.cpu(), atol=atol, rtol=atol))


def advice(name: str, hint: str, diagnosis: str | None, hold_hint: bool = True) -> str:
    """The lines that end a failure message of ``name``'s check, counted as one failed check: the
    hint (``hint``: the English text of the Check's hint); or, where a diagnosis applies, the diagnosis,
    and the hint only from the second failed check in this process (at once with ``hold_hint=False``)."""
    _failed[name] = _failed.get(name, 0) + 1
    hint = tr("  hint: {hint}").format(hint=tr(hint))
    if diagnosis is None:
        return hint
    said = tr("  diagnosis: {diagnosis}").format(diagnosis=tr(diagnosis))
    later = tr("  (the full hint comes with the next failed check)")
    return f"{said}\n{later if hold_hint and _failed[name] == 1 else hint}"


def _show(x: Any) -> str:
    """Short text for a value in a message: small tensors in full, big ones by shape."""
    if isinstance(x, torch.Tensor):
        if x.numel() <= 24:
            return f"tensor({x.tolist()}, shape={tuple(x.shape)}, dtype={x.dtype})"
        return tr("tensor of shape {shape}, dtype {dtype}").format(shape=tuple(x.shape), dtype=x.dtype)
    if isinstance(x, tuple):
        return "(" + ", ".join(_show(v) for v in x) + ")"
    return repr(x)


def _mismatch(expected: Any, got: Any, atol: float, rtol: float) -> str | None:
    """Why ``got`` does not match ``expected`` (None if it does): type, shape, dtype, values."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple):
            return tr("expected a tuple of {n} values, got {type}").format(n=len(expected), type=type(got).__name__)
        if len(got) != len(expected):
            return tr("expected a tuple of {n} values, got tuple of {m}").format(n=len(expected), m=len(got))
        for i, (e, g) in enumerate(zip(expected, got)):
            why = _mismatch(e, g, atol, rtol)
            if why:
                return tr("in item {i} of the returned tuple: {why}").format(i=i, why=why)
        return None
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return tr("expected a torch.Tensor, got {type} (return a tensor, not a list or array)").format(
                type=type(got).__name__
            )
        if got.shape != expected.shape:
            return tr("wrong shape\n  expected shape: {expected}\n  got shape:      {got}").format(
                expected=tuple(expected.shape), got=tuple(got.shape)
            )
        if expected.dtype == torch.bool:
            if got.dtype != torch.bool:
                return tr("expected a bool tensor, got dtype {dtype}").format(dtype=got.dtype)
            same = torch.equal(got.cpu(), expected)
        else:
            if not got.is_floating_point():
                return tr(
                    "expected a floating-point tensor, got dtype {dtype} "
                    "(use .float() or create it with dtype=torch.float32)"
                ).format(dtype=got.dtype)
            if got.dtype != expected.dtype:
                return tr(
                    "wrong dtype\n  expected dtype: {expected}\n  got dtype:      {got}\n"
                    "  (keep the dtype of the inputs, or the dtype the exercise asks for)"
                ).format(expected=expected.dtype, got=got.dtype)
            got = got.detach().to("cpu")
            if torch.isnan(got).any() and not torch.isnan(expected).any():
                return tr("wrong values: your result contains NaN\n  expected: {expected}\n  got:      {got}").format(
                    expected=_show(expected), got=_show(got)
                )
            same = torch.allclose(got, expected, atol=atol, rtol=rtol)
        if not same:
            return tr("wrong values\n  expected: {expected}\n  got:      {got}").format(
                expected=_show(expected), got=_show(got)
            )
        return None
    if isinstance(expected, (int, float)):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return tr("expected a number ({type}), got {got}").format(
                type=type(expected).__name__, got=type(got).__name__
            )
        if isinstance(expected, int) and got != expected or not math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
            return tr("wrong value\n  expected: {expected}\n  got:      {got}").format(
                expected=repr(expected), got=repr(got)
            )
        return None
    return (
        None
        if got == expected
        else tr("wrong value\n  expected: {expected}\n  got:      {got}").format(expected=repr(expected), got=repr(got))
    )


def compare(
    name: str,
    fn: Callable,
    cases: Cases,
    reference: Callable,
    hint: str,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    check: Check | None = None,
    diagnoses: tuple[Diagnosis, ...] = (),
    hold_hint: bool = True,
) -> int:
    """Run ``fn`` and ``reference`` on every case; raise a helpful AssertionError on the first
    difference. Return the number of cases. With ``check``, ``fn`` runs under
    ``forbidding(check)``: a call of the answer fails the check. The messages, and ``hint``,
    are in the language of ``ATTNLIB_LANG`` (``attnlib.i18n``), the case's label too (``tr_case``).

    Where one of ``diagnoses`` applies to the wrong answer, the message says what it got wrong;
    the hint (the whole method) is then kept for the next failed check of the same function in
    this process (with ``hold_hint=False``, as the grader reports, it follows at once)."""
    if not callable(fn):
        raise AssertionError(
            tr(
                "{name}: expected a function, received {got}. Pass the function itself, e.g. check.{name}({name})."
            ).format(name=name, got=_show(fn))
        )
    hint_line = tr("  hint: {hint}").format(hint=tr(hint))
    guard = (lambda: forbidding(check)) if check is not None else contextlib.nullcontext
    for number, (label, args) in enumerate(cases, start=1):
        expected = reference(*args)
        where = tr("  case: {label} [{number} of {total}]\n  input: {input}\n").format(
            label=tr_case(label), number=number, total=len(cases), input=", ".join(_show(a) for a in args)
        )
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        forbidden: list[str] = []
        try:
            with guard() as forbidden:
                got = fn(*copies)
        except NotImplementedError:
            raise AssertionError(
                tr(
                    "{name}: not implemented yet (it raised NotImplementedError). "
                    "Replace the raise NotImplementedError(...) line with your code."
                ).format(name=name)
            ) from None
        except Exception as e:  # the student's code failed: say where and how
            if forbidden:
                raise AssertionError(tr("{name}: {problem}").format(name=name, problem=forbidden[0])) from None
            raise AssertionError(
                tr("{name}: your function raised {error}: {message}").format(
                    name=name, error=type(e).__name__, message=e
                )
                + f"\n{where}{hint_line}"
            ) from None
        if forbidden:  # called the answer, and caught the error it raised
            raise AssertionError(tr("{name}: {problem}").format(name=name, problem=forbidden[0]))
        why = _mismatch(expected, got, atol, rtol)
        if why:
            first, _, rest = why.partition("\n")
            told = advice(name, hint, _diagnose(diagnoses, got, expected, args), hold_hint)
            raise AssertionError(
                tr("{name}: {problem}").format(name=name, problem=first)
                + f"\n{where}{rest + chr(10) if rest else ''}{told}"
            )
    return len(cases)


@dataclass(frozen=True)
class Check:
    """The checker of one coding exercise; call it with the student's function."""

    exercise: str  # the exercise's label in the chapter, e.g. "ch01-one-hot"
    function: str  # the name of the function the student writes
    cases: Callable[[], Cases]
    reference: Callable
    hint: str
    covers: str  # the edge cases tried, shown on success
    points: int = 1
    partial: bool = False  # its cases test independent things: each passed case earns points / len(cases)
    atol: float = 1e-5
    rtol: float = 1e-5
    forbids: tuple[str, ...] = ()  # attnlib names the exercise asks the learner to write, e.g. ("causal_mask",)
    allows: tuple[str, ...] = ()  # attnlib names the exercise lets the learner use, though another
    #                                 exercise's reference (e.g. ("one_hot",))
    diagnoses: tuple[Diagnosis, ...] = ()  # mistakes told from the answer, shown before the hint

    def run(self, fn: Callable) -> int:
        """Every case against the reference (``compare``): the number of cases, or an AssertionError."""
        return compare(
            self.function, fn, self.cases(), self.reference, self.hint, self.atol, self.rtol, self, self.diagnoses
        )

    def __call__(self, fn: Callable) -> None:
        n = self.run(fn)
        print(
            tr("check.{function}: all {n} cases passed ({covers}).").format(
                function=self.function, n=n, covers=tr(self.covers)
            )
        )


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
    obj = getattr(obj, "__func__", obj)  # a bound method: its function
    return [obj] if isinstance(getattr(obj, "__code__", None), CodeType) else []


def _public_name(obj) -> str | None:
    import attnlib

    return next((f"attnlib.{n}" for n in attnlib.__all__ if getattr(attnlib, n) is obj), None)


def forbidden_spec(exercise: str) -> tuple[tuple[str, str, str], ...]:
    """What a solution of ``exercise`` may not call: ``(module, qualname, message)`` per function.

    The exercise's own reference and the attnlib names in its ``forbids`` (it asks the
    learner to write them), and every other checker's reference (each is the answer to
    its own exercise), less the attnlib names in its ``allows``. Names, not objects, so
    that the grader can hand them to the student's kernel. The messages are in the
    language of ``ATTNLIB_LANG``.
    """
    return _forbidden_spec(exercise, language())


@functools.cache
def _forbidden_spec(exercise: str, lang: str) -> tuple[tuple[str, str, str], ...]:
    import attnlib

    check = CHECKS[exercise]
    entries: dict[tuple[str, str], str] = {}

    def add(obj, message):
        for f in _functions(obj):
            if "<locals>" not in f.__qualname__:
                entries.setdefault((f.__module__, f.__qualname__), message)

    own = _public_name(check.reference) or f"attnlib.check.CHECKS[{exercise!r}].reference"
    add(
        check.reference,
        tr("write {function} yourself; {answer} is what your answer is checked against", lang).format(
            function=check.function, answer=own
        ),
    )
    for name in check.forbids:
        add(
            getattr(attnlib, name),
            tr(
                "exercise {exercise} asks you to write {function} without attnlib.{name}: "
                "write it yourself, with tensor operations",
                lang,
            ).format(exercise=exercise, function=check.function, name=name),
        )
    for other in CHECKS.values():
        what = _public_name(other.reference) or f"attnlib.check.CHECKS[{other.exercise!r}].reference"
        add(
            other.reference,
            tr(
                "{answer} is the answer to exercise {exercise}; write {function} yourself, with tensor operations", lang
            ).format(answer=what, exercise=other.exercise, function=check.function),
        )
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
