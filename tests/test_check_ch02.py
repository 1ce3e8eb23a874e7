"""Chapter 2's checker: `scores` is tried on [E]'s worked example (taken from attnlib.examples, not
retyped), on batches and on W_Q != W_K, and catches the mistakes the exercise warns about."""

import math

import pytest
import torch
from _solutions import fails

from attnlib import check, examples
from attnlib.check import CHECKS


def test_registered_under_its_exercise():
    assert CHECKS["ch02-scores"] is check.scores


def test_the_worked_example_comes_from_attnlib_examples_and_gives_the_published_scores():
    label, (x, w_q, w_k) = CHECKS["ch02-scores"].cases()[0]
    ex = examples.illustrated()
    assert "Illustrated" in label
    assert torch.equal(x, ex["X"]) and torch.equal(w_q, ex["W_Q"]) and torch.equal(w_k, ex["W_K"])
    assert CHECKS["ch02-scores"].reference(x, w_q, w_k).tolist() == examples.ILLUSTRATED_PUBLISHED["scores"]


def test_the_cases_cover_batches_and_unequal_weights():
    cases = CHECKS["ch02-scores"].cases()
    assert any(x.dim() >= 4 for _, (x, _, _) in cases), "two batch axes"
    assert any(x.dim() == 3 for _, (x, _, _) in cases), "one batch axis"
    assert any(
        not torch.allclose(wq, wk)
        and not torch.allclose(
            CHECKS["ch02-scores"].reference(x, wq, wk), CHECKS["ch02-scores"].reference(x, wq, wk).mT
        )
        for _, (x, wq, wk) in cases
    ), "a case whose S is not symmetric (catches K Q^T)"


@pytest.mark.parametrize(
    "solution",
    [
        lambda x, w_q, w_k: (x @ w_q) @ (x @ w_k).transpose(-2, -1),
        lambda x, w_q, w_k: torch.matmul(x @ w_q, (x @ w_k).mT),
        lambda x, w_q, w_k: torch.einsum("...id,...jd->...ij", x @ w_q, x @ w_k),
    ],
    ids=["transpose", "mT", "einsum"],
)
def test_correct_solutions_pass(solution, capsys):
    check.scores(solution)
    assert f"check.scores: all {len(CHECKS['ch02-scores'].cases())} cases passed" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors")
@pytest.mark.parametrize(
    "wrong, first_failure",
    [
        (lambda x, w_q, w_k: (x @ w_k) @ (x @ w_q).transpose(-2, -1), "W_Q != W_K"),  # K Q^T
        (lambda x, w_q, w_k: (x @ w_q) @ (x @ w_k).T, "a batch"),  # .T reverses every axis
        (
            lambda x, w_q, w_k: (x @ w_q) @ (x @ w_k).transpose(-2, -1) / math.sqrt(w_q.shape[-1]),
            "the worked example",
        ),  # scaled: not asked
        (lambda x, w_q, w_k: (x @ w_q) @ (x @ w_q).transpose(-2, -1), "the worked example"),  # W_Q used twice
    ],
)
def test_classic_mistakes_are_caught(wrong, first_failure):
    with pytest.raises(AssertionError, match=rf"(?s)case: {first_failure}.*(hint|diagnosis):"):
        check.scores(wrong)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda x, w_q, w_k: (x @ w_k) @ (x @ w_q).transpose(-2, -1), "the transpose of S"),
        (lambda x, w_q, w_k: (x @ w_q) @ (x @ w_k).transpose(-2, -1) / math.sqrt(w_q.shape[-1]), "sqrt(d_k)"),
    ],
)
def test_a_wrong_answer_is_told_what_it_got_wrong(wrong, diagnosis):
    fails(check.scores, wrong, diagnosis=diagnosis)
