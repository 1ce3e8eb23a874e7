"""Chapter 10's checker: the mean attention weight on an expected key. The reference is right
(against a loop over the queries and against torch.gather), the notebook's solution passes,
and the classic mistakes fail."""

import pytest
import torch
from _solutions import notebook_solution

from attnlib import check
from attnlib.check import CHECKS

ENTRY = CHECKS["ch10-weight-on"]


def _loop(weights, key):
    """The definition, one query at a time."""
    picked = [weights[..., t, int(k)] for t, k in enumerate(key) if k >= 0]
    return torch.stack(picked, dim=-1).mean(dim=-1)


def _gather(weights, key):
    """torch.gather on the key axis, then a mean over the scored queries only."""
    scored = key >= 0
    index = key.clamp(min=0).expand(*weights.shape[:-1])[..., None]  # (..., T_q, 1)
    on_key = weights.gather(-1, index)[..., 0]  # (..., T_q)
    return (on_key * scored).sum(dim=-1) / scored.sum()


def test_registered_under_its_exercise():
    assert ENTRY is check.weight_on and ENTRY.function == "weight_on"


def test_reference_equals_two_independent_implementations():
    for label, (w, key) in ENTRY.cases():
        got = ENTRY.reference(w, key)
        assert got.dtype == w.dtype and got.shape == w.shape[:-2], label
        torch.testing.assert_close(got, _loop(w, key), msg=label)
        torch.testing.assert_close(got, _gather(w, key), msg=label)


def test_cases_include_the_edge_cases():
    args = [a for _, a in ENTRY.cases()]
    assert any(w.shape == (4, 4, 13, 13) for w, _ in args), "the chapter's sizes"
    assert any(w.dim() == 2 for w, _ in args), "no leading axes"
    assert any(w.shape[-2] != w.shape[-1] for w, _ in args), "T_q != T_k"
    assert any(w.dtype == torch.float64 for w, _ in args)
    assert any((key == -1).sum() == len(key) - 1 for _, key in args), "a single scored query"
    assert any(key[0] == -1 and (key[1:] >= 0).all() for _, key in args), "a previous-token key"
    # every case has a scored query whose removal would matter, and a -1 that picks a nonzero weight
    # from the last key for some row: a solution that indexes with -1 cannot pass by luck
    assert any((key == -1).any() and (w[..., key == -1, -1] > 0.01).any() for w, key in args)


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    ENTRY.cases()
    assert torch.equal(torch.random.get_rng_state(), before)


def _notebook_solution():
    """The function the chapter's solution cell defines."""
    return notebook_solution("10_trained_attention.ipynb", "weight_on", ("attnlib",))


def test_the_solutions_pass(capsys):
    check.weight_on(_notebook_solution())
    check.weight_on(_loop)
    check.weight_on(_gather)
    out = capsys.readouterr().out
    assert out.count(f"check.weight_on: all {len(CHECKS['ch10-weight-on'].cases())} cases passed") == 3


@pytest.mark.parametrize(
    "wrong, match",
    [
        # -1 used as an index: the last key's weight counts for queries that are not scored
        (lambda w, key: w[..., torch.arange(len(key)), key].mean(dim=-1), r"wrong values"),
        # the right weights, but averaged over every query (zeros for the unscored ones)
        (lambda w, key: (w[..., torch.arange(len(key)), key.clamp(min=0)] * (key >= 0)).mean(dim=-1), r"wrong values"),
        # query and key swapped: weights[..., key[t], t]
        (
            lambda w, key: w[..., key[key >= 0], torch.arange(len(key))[key >= 0]].mean(dim=-1),
            r"(wrong values|raised IndexError)",
        ),
        # averaged over the batch and heads too: one number
        (lambda w, key: _loop(w, key).mean(), r"wrong shape"),
        # float64 lost
        (lambda w, key: _loop(w, key).float(), r"wrong dtype.*case: float64"),
    ],
)
def test_classic_mistakes_are_caught(wrong, match):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*hint:"):
        check.weight_on(wrong)
