"""The exercise checkers pass correct answers and explain wrong ones."""
import pytest
import torch

from attnlib import check, embed, one_hot


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


@pytest.mark.parametrize("student, match", [
    (lambda ids, V: one_hot(ids, V).tolist(), r"expected a torch.Tensor, got list"),
    (lambda ids, V: (ids[..., None] == torch.arange(V)), r"expected a floating-point tensor, got dtype torch.bool"),
    (lambda ids, V: one_hot(ids, V)[..., :-1], r"(?s)wrong shape.*expected shape.*got shape"),
    (lambda ids, V: 1 / 0, r"(?s)your function raised ZeroDivisionError.*input:"),
])
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
        check.mean_embedding(lambda ids, table: embed(ids, table).sum(0))          # forgot to divide
    with pytest.raises(AssertionError, match="wrong shape"):
        check.mean_embedding(lambda ids, table: embed(ids, table).mean(0, keepdim=True))


def test_checker_does_not_let_student_mutate_inputs():
    def mutating(ids, V):
        ids += 0   # in place on the checker's copy
        return one_hot(ids, V)
    check.one_hot_rows(mutating)


def test_book_homework_page_shows_a_real_message():
    """book/homework.md quotes the checker's message for a flattening one_hot: keep it true."""
    from pathlib import Path
    import re
    doc = (Path(__file__).resolve().parent.parent / "book" / "homework.md").read_text(encoding="utf-8")
    shown = re.search(r"```text\n(AssertionError: one_hot_rows: wrong shape\n.*?)\n```", doc, re.S).group(1)
    with pytest.raises(AssertionError) as info:
        check.one_hot_rows(lambda ids, V: one_hot(ids.flatten(), V))
    assert shown == f"AssertionError: {info.value}"


# ------------------------------------------------------------------ every registered checker

def _nudge(value):
    """A wrong answer close to the right one: each number moved, each bool flipped."""
    if isinstance(value, tuple):
        return tuple(_nudge(v) for v in value)
    if isinstance(value, torch.Tensor):
        return ~value if value.dtype == torch.bool else value + 0.5
    return value + 1


@pytest.mark.parametrize("label", sorted(check.CHECKS))
def test_every_checker_passes_its_reference_and_rejects_a_near_miss(label, capsys):
    entry = check.CHECKS[label]
    entry(entry.reference)
    assert f"check.{entry.function}: all" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"(?s)wrong value.*case:.*hint:"):
        entry(lambda *args: _nudge(entry.reference(*args)))
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


@pytest.mark.parametrize("name, wrong", [
    ("scaled_scores", _no_scale),
    ("scaled_scores", lambda q, k: _no_scale(q, k) / q.shape[-1]),         # divides by d_k, not sqrt(d_k)
    ("stable_softmax", _naive_softmax),
    ("stable_softmax", lambda x: torch.softmax(x, dim=-1)),                 # NaN for an all -inf row
    ("scores", lambda x, w_q, w_k: (x @ w_k) @ (x @ w_q).transpose(-2, -1)),  # K Q^T instead of Q K^T
])
def test_checkers_catch_the_classic_mistakes(name, wrong):
    with pytest.raises(AssertionError, match=r"(?s)case:.*hint:"):
        getattr(check, name)(wrong)
