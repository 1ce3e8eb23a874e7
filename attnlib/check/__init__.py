"""Checkers for the coding exercises: instant, specific feedback.

Each coding exercise in a chapter ends with a call such as
``check.one_hot_rows(one_hot_rows)``. The checker runs the student's function
on random and edge cases (empty and size-1 axes, large values, ...) and compares
the results with attnlib's reference. It prints one line when every case passes,
or raises an ``AssertionError`` whose message gives the failing case, its input,
what was expected, what came back and a hint.

A checker is a :class:`Check`: its cases, the reference, a hint. They are
registered in ``CHECKS`` under the exercise's label (``ch01-one-hot``), with the
name of the function it checks, so that ``python -m coursetools.homework grade``
can grade a notebook whatever its check cells say: it runs the student's
function on the cases in the notebook's kernel and compares the results here.

Writing a checker for a new exercise::

    # in attnlib/check/chNN.py, the chapter's module (imported here automatically)
    my_function = _register(Check(
        exercise="ch02-...", function="my_function",
        cases=_my_cases,             # () -> [(label, args), ...], seeded
        reference=attnlib_function,  # same signature as the student's function
        hint="what to look at when the values are wrong",
        covers="the edge cases it tries, for the success line"))

With ``ATTNLIB_LANG=zh_CN`` every message, hint and success line is in Chinese
(``attnlib.i18n``): add the translations of a new checker's ``hint`` and ``covers``, and of
its case labels (under ``msgctxt "case"``, a label made from random values as a template,
``"random, B={B}, T={T}"``), to ``attnlib/locales/zh_CN/LC_MESSAGES/attnlib.po``
(``tests/test_i18n.py`` names the missing ones).
"""

import importlib
import pkgutil

from ._core import CHECKS, Cases, Check, ForbiddenCall, _register, compare, forbidding  # noqa: F401

# Each chapter's module, ch01.py, ch02.py, ..., registers its checkers when imported.
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module.startswith("ch") and _module[2:].isdigit():
        importlib.import_module(f"{__name__}.{_module}")

# check.<function name> is the checker of the exercise that asks for that function,
# e.g. check.one_hot_rows(one_hot_rows)
globals().update({c.function: c for c in CHECKS.values()})
