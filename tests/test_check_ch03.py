"""Chapter 3's checkers enforce what their exercises ask: `scaled_scores` keeps the inputs' dtype
(a float64 case that a float32 answer fails), works on batches, and divides by sqrt(d_k)."""

import math

import pytest
import torch
from _solutions import fails

from attnlib import check, qk_scores
from attnlib.check import CHECKS


def test_registered_under_their_exercises():
    assert CHECKS["ch03-scaled-scores"] is check.scaled_scores
    assert CHECKS["ch03-unit-variance-scale"] is check.unit_variance_scale


def test_the_cases_include_float64_inputs():
    float64 = [
        label for label, args in CHECKS["ch03-scaled-scores"].cases() if all(a.dtype == torch.float64 for a in args)
    ]
    assert float64, "the exercise promises that the function keeps the input's dtype: try float64"
    for label, (q, k) in CHECKS["ch03-scaled-scores"].cases():
        assert qk_scores(q, k).dtype == q.dtype, f"{label}: the reference must keep the dtype itself"


@pytest.mark.parametrize(
    "solution",
    [
        lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]),
        lambda q, k: torch.matmul(q, k.mT) * q.shape[-1] ** -0.5,
        # a 0-d float32 tensor does not promote float64 (or demote it): this keeps the dtype too
        lambda q, k: q @ k.transpose(-2, -1) / torch.sqrt(torch.tensor(float(q.shape[-1]))),
    ],
    ids=["math.sqrt", "power", "0-d tensor"],
)
def test_correct_solutions_pass(solution, capsys):
    check.scaled_scores(solution)
    assert (
        f"check.scaled_scores: all {len(CHECKS['ch03-scaled-scores'].cases())} cases passed" in capsys.readouterr().out
    )


def test_a_solution_that_casts_to_float32_fails_on_the_float64_case():
    def casts(q, k):
        q, k = q.float(), k.float()  # the mistake: float64 in, float32 out
        return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])

    # the values are right to float32 precision: only the dtype gives it away
    for _, (q, k) in CHECKS["ch03-scaled-scores"].cases():
        assert torch.allclose(casts(q, k).double(), qk_scores(q, k).double(), atol=1e-5, rtol=1e-5)
    with pytest.raises(
        AssertionError,
        match=r"(?s)wrong dtype.*case: float64 inputs.*"
        r"expected dtype: torch\.float64.*got dtype: +torch\.float32.*hint:",
    ):
        check.scaled_scores(casts)


@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors")
@pytest.mark.parametrize(
    "wrong, first_failure",
    [
        (lambda q, k: q @ k.T / math.sqrt(q.shape[-1]), "a batch"),  # k.T reverses every axis
        (lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1], "d_k = 4"),  # d_k, not sqrt(d_k)
        (lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2]), "d_k = 1"),  # T_k, not d_k
    ],
)
def test_classic_mistakes_are_caught(wrong, first_failure):
    with pytest.raises(AssertionError, match=rf"(?s)case: {first_failure}.*(hint|diagnosis):"):
        check.scaled_scores(wrong)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1], "divided by d_k"),
        (lambda q, k: q @ k.transpose(-2, -1), "not scaled"),
    ],
)
def test_a_wrong_answer_is_told_what_it_got_wrong(wrong, diagnosis):
    fails(check.scaled_scores, wrong, diagnosis=diagnosis)
