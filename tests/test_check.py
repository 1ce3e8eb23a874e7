"""The exercise checkers pass correct answers and explain wrong ones."""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnlib import check, embed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _solutions import solution_of


def one_hot(ids, V):
    """A right answer to ch01-one-hot that is not attnlib's (which the checker forbids)."""
    return F.one_hot(ids, V).float()


def test_registry_names_exercises_and_functions():
    assert check.CHECKS["ch01-one-hot"].function == "one_hot_rows"
    assert check.CHECKS["ch01-one-hot"] is check.one_hot_rows
    assert check.CHECKS["ch01-mean-embedding"].function == "mean_embedding"
    for label, entry in check.CHECKS.items():
        assert entry.exercise == label and entry.points > 0 and callable(entry)
        assert entry.cases() and all(isinstance(lbl, str) and isinstance(args, tuple) for lbl, args in entry.cases())


def test_one_hot_rows_passes_reference(capsys):
    check.one_hot_rows(one_hot)
    assert "check.one_hot_rows: all" in capsys.readouterr().out


def test_one_hot_rows_wrong_values():
    def off_by_one(ids, V):
        return one_hot((ids + 1) % V, V)

    with pytest.raises(AssertionError, match=r"(?s)wrong values.*case:.*input:.*expected:.*got:.*hint:"):
        check.one_hot_rows(off_by_one)


def test_one_hot_rows_fails_on_batches_if_only_1d_works():
    def only_1d(ids, V):
        out = torch.zeros(len(ids), V)
        out[torch.arange(len(ids)), ids] = 1
        return out

    with pytest.raises(AssertionError, match=r"(?s)(wrong shape|raised).*case: a batch"):
        check.one_hot_rows(only_1d)


@pytest.mark.parametrize(
    "student, match",
    [
        (lambda ids, V: one_hot(ids, V).tolist(), r"expected a torch.Tensor, got list"),
        (lambda ids, V: ids[..., None] == torch.arange(V), r"expected a floating-point tensor, got dtype torch.bool"),
        (lambda ids, V: one_hot(ids, V)[..., :-1], r"(?s)wrong shape.*expected shape.*got shape"),
        (lambda ids, V: 1 / 0, r"(?s)your function raised ZeroDivisionError.*input:"),
    ],
)
def test_one_hot_rows_messages(student, match):
    with pytest.raises(AssertionError, match=match):
        check.one_hot_rows(student)


def test_stub_is_reported_as_not_implemented():
    def stub(ids, V):
        raise NotImplementedError("write one_hot_rows")

    with pytest.raises(AssertionError, match="not implemented yet"):
        check.one_hot_rows(stub)


def test_not_a_function():
    with pytest.raises(AssertionError, match="expected a function"):
        check.one_hot_rows(None)


def test_mean_embedding():
    check.mean_embedding(lambda ids, table: embed(ids, table).mean(0))
    with pytest.raises(AssertionError, match="wrong values"):
        check.mean_embedding(lambda ids, table: embed(ids, table).sum(0))  # forgot to divide
    with pytest.raises(AssertionError, match="wrong shape"):
        check.mean_embedding(lambda ids, table: embed(ids, table).mean(0, keepdim=True))


def test_checker_does_not_let_student_mutate_inputs():
    def mutating(ids, V):
        ids += 0  # in place on the checker's copy
        return one_hot(ids, V)

    check.one_hot_rows(mutating)


def test_book_homework_page_shows_a_real_message():
    """book/homework.md quotes the checker's message for a flattening one_hot: keep it true."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "book" / "homework.md").read_text(encoding="utf-8")
    shown = re.search(r"```text\n(AssertionError: one_hot_rows: wrong shape\n.*?)\n```", doc, re.S).group(1)
    with pytest.raises(AssertionError) as info:
        check.one_hot_rows(lambda ids, V: one_hot(ids.flatten(), V))
    assert shown == f"AssertionError: {info.value}"


def test_book_homework_page_shows_a_real_diagnosis():
    """book/homework.md quotes what an inverted mask (True = blocked) is told at its first failure, and
    the hint follows at the second."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "book" / "homework.md").read_text(encoding="utf-8")
    shown = re.search(r"```text\n(AssertionError: combine_masks: wrong values\n.*?)\n```", doc, re.S).group(1)

    def combine_masks(lengths, T):
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        padding = torch.arange(T) < lengths[:, None, None, None]
        return ~(causal & padding)

    with pytest.raises(AssertionError) as info:
        check.combine_masks(combine_masks)
    assert shown == f"AssertionError: {info.value}"
    with pytest.raises(AssertionError, match=r"(?s)diagnosis: your mask is inverted.*\n  hint: "):
        check.combine_masks(combine_masks)


# ------------------------------------------------------------------ every registered checker


def _nudge(value):
    """A wrong answer close to the right one: each number moved, each bool flipped."""
    if isinstance(value, tuple):
        return tuple(_nudge(v) for v in value)
    if isinstance(value, torch.Tensor):
        return ~value if value.dtype == torch.bool else value + 0.5
    return value + 1


@pytest.mark.parametrize("label", sorted(check.CHECKS))
def test_every_checker_passes_the_notebooks_solution_and_rejects_a_near_miss(label, capsys):
    entry = check.CHECKS[label]
    solution = solution_of(label)
    entry(solution)
    assert f"check.{entry.function}: all {len(entry.cases())} cases passed" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"(?s)wrong value.*case:.*(hint|diagnosis):"):
        entry(lambda *args: _nudge(solution(*args)))
    with pytest.raises(AssertionError, match="not implemented yet"):
        entry(lambda *args: (_ for _ in ()).throw(NotImplementedError()))


@pytest.mark.parametrize("label", sorted(check.CHECKS))
def test_every_checker_tries_edge_cases(label):
    """Each checker runs several cases, seeded: the same cases every time."""
    entry = check.CHECKS[label]
    cases = entry.cases()
    assert len(cases) >= 5, f"{label}: only {len(cases)} cases"
    again = entry.cases()
    for (l1, a1), (l2, a2) in zip(cases, again):
        assert l1 == l2
        for x, y in zip(a1, a2):
            assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y


def _no_scale(q, k):
    return q @ k.transpose(-2, -1)


def _naive_softmax(x):
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize(
    "name, wrong",
    [
        ("scaled_scores", _no_scale),
        ("scaled_scores", lambda q, k: _no_scale(q, k) / q.shape[-1]),  # divides by d_k, not sqrt(d_k)
        ("stable_softmax", _naive_softmax),
        ("stable_softmax", lambda x: torch.softmax(x, dim=-1)),  # NaN for an all -inf row
        ("scores", lambda x, w_q, w_k: (x @ w_k) @ (x @ w_q).transpose(-2, -1)),  # K Q^T instead of Q K^T
    ],
)
def test_checkers_catch_the_classic_mistakes(name, wrong):
    with pytest.raises(AssertionError, match=r"(?s)case:.*(hint|diagnosis):"):
        getattr(check, name)(wrong)


# ------------------------------------------------------------------ not calling the answer


@pytest.mark.parametrize("label", sorted(check.CHECKS))
def test_every_checker_rejects_its_own_reference(label):
    """Handing the checker its reference scores nothing: it is what the answer is checked against."""
    entry = check.CHECKS[label]
    with pytest.raises(
        AssertionError,
        match=rf"^{entry.function}: write {entry.function} yourself; "
        r".* is what your answer is checked against$",
    ):
        entry(entry.reference)


def _softmax_by_alias(x):
    from attnlib.softmax import softmax as my_softmax  # an aliased import

    return my_softmax(x)


def _softmax_by_getattr(x):
    import attnlib

    return getattr(attnlib, "soft" + "max")(x)


def _softmax_by_registry(x):
    return check.CHECKS["ch05-stable-softmax"].reference(x)


def _softmax_caught(x):
    """Calls the answer, swallows the error, and returns a right answer anyway."""
    try:
        import attnlib

        return attnlib.softmax(x)
    except Exception:
        return _softmax_by_hand(x)


def _softmax_by_hand(x):
    top = x.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    e = torch.exp(x - top)
    s = e.sum(dim=-1, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)


@pytest.mark.parametrize(
    "student",
    [
        __import__("attnlib").softmax,  # directly
        lambda x: __import__("attnlib").softmax(x),  # called inside the student's function
        _softmax_by_alias,
        _softmax_by_getattr,
        _softmax_by_registry,
        _softmax_caught,
        lambda x: __import__("functools").partial(__import__("attnlib").softmax, dim=-1)(x),
    ],
)
def test_calling_the_answer_fails_however_it_is_reached(student):
    with pytest.raises(
        AssertionError,
        match=r"^stable_softmax: write stable_softmax yourself; attnlib.softmax "
        r"is what your answer is checked against$",
    ):
        check.stable_softmax(student)
    check.stable_softmax(_softmax_by_hand)  # the honest answer still passes, and the guard is gone
    import sys

    assert sys.getprofile() is None


def test_declared_functions_and_other_references_are_forbidden_with_their_reason():
    import attnlib

    def combine_masks(lengths, T):  # the exercise says: neither causal_mask nor padding_mask
        return attnlib.causal_mask(T) & attnlib.padding_mask(lengths, T)

    with pytest.raises(AssertionError, match="asks you to write combine_masks without attnlib.causal_mask"):
        check.combine_masks(combine_masks)

    def attend_with_cache(q_new, k_cache, v_cache):  # another exercise's answer, attnlib.softmax, inside
        group = q_new.shape[1] // k_cache.shape[1]
        k, v = k_cache.repeat_interleave(group, 1), v_cache.repeat_interleave(group, 1)
        T_new, T_k = q_new.shape[2], k.shape[2]
        allowed = torch.ones(T_new, T_k, dtype=torch.bool).tril(T_k - T_new)
        scores = (q_new @ k.transpose(-2, -1) / q_new.shape[-1] ** 0.5).masked_fill(~allowed, float("-inf"))
        return attnlib.softmax(scores) @ v

    with pytest.raises(AssertionError, match="attnlib.softmax is the answer to exercise ch05-stable-softmax"):
        check.attend_with_cache(attend_with_cache)


def test_allowed_helpers_keep_working(capsys):
    """ch01-mean-embedding may use attnlib.one_hot (ch01-one-hot's answer) and attnlib.embed."""
    import attnlib

    check.mean_embedding(
        lambda ids, table: (attnlib.one_hot(ids, table.shape[0], dtype=table.dtype).sum(0) / len(ids)) @ table
    )
    check.mean_embedding(lambda ids, table: attnlib.embed(ids, table).mean(0))
    assert capsys.readouterr().out.count("check.mean_embedding: all") == 2


def test_every_forbidden_name_resolves_in_a_fresh_namespace():
    """The grader sends (module, qualname) pairs to the student's kernel: each must resolve."""
    from attnlib.check._core import GUARD_SOURCE, forbidden_spec

    guard = {}
    exec(GUARD_SOURCE, guard)
    for label, entry in check.CHECKS.items():
        spec = forbidden_spec(label)
        codes = guard["_resolve"](spec)
        assert len(codes) == len(spec) and entry.reference.__code__ in codes
        for name in entry.forbids:
            assert name in __import__("attnlib").__all__, f"{label}: forbids an unknown name {name}"


def test_book_homework_page_shows_the_real_forbidden_message():
    """book/homework.md quotes what a stable softmax that returns attnlib.softmax(x) is told."""
    import re

    import attnlib

    doc = (Path(__file__).resolve().parent.parent / "book" / "homework.md").read_text(encoding="utf-8")
    shown = re.search(r"```text\n(AssertionError: stable_softmax: write .*?)\n```", doc, re.S).group(1)
    with pytest.raises(AssertionError) as info:
        check.stable_softmax(lambda x: attnlib.softmax(x))
    assert shown == f"AssertionError: {info.value}"


def test_a_diagnosis_comes_first_and_the_hint_with_the_next_failure():
    """Where a checker can tell what a wrong answer got wrong, its first failure says that, not the whole
    method; the hint follows with the next failed check; an answer the diagnosis does not fit gets the hint."""
    from attnlib.check import _core

    def doubled(x):
        return 2 * x

    def swapped(x):
        return -x

    cases = [("a vector", (torch.tensor([1.0, -2.0, 3.0]),))]
    diagnoses = (
        ("never applies: it raises", lambda got, expected, x: 1 / 0),
        ("your result is twice the input", lambda got, expected, x: torch.allclose(got, 2 * x)),
    )

    def run(fn, hold_hint=True):
        with pytest.raises(AssertionError) as info:
            _core.compare("identity_demo", fn, cases, torch.clone, "return x as it is",
                          diagnoses=diagnoses, hold_hint=hold_hint)  # fmt: skip
        return str(info.value)

    _core._failed.pop("identity_demo", None)
    first = run(doubled)
    assert "diagnosis: your result is twice the input" in first
    assert "hint:" not in first and "next failed check" in first
    second = run(doubled)
    assert "diagnosis: your result is twice the input" in second and "hint: return x as it is" in second
    other = run(swapped)
    assert "diagnosis" not in other and "hint: return x as it is" in other
    _core._failed.pop("identity_demo", None)
    graded = run(doubled, hold_hint=False)  # the grader's report: both at once
    assert "diagnosis: your result is twice" in graded and "hint: return x" in graded
