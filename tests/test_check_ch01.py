"""Chapter 1's checkers enforce what their exercises ask: `one_hot_rows` returns float32 (the
exercise says so, and the checker compares dtypes exactly), for ids of shape (T,) and (B, T)."""

import pytest
import torch

from attnlib import check, one_hot
from attnlib.check import CHECKS


def test_registered_under_their_exercises():
    assert CHECKS["ch01-one-hot"] is check.one_hot_rows
    assert CHECKS["ch01-mean-embedding"] is check.mean_embedding


def test_the_reference_is_float32_on_every_case():
    for label, (ids, vocab_size) in CHECKS["ch01-one-hot"].cases():
        assert one_hot(ids, vocab_size).dtype == torch.float32, label


@pytest.mark.parametrize(
    "solution",
    [
        lambda ids, vocab_size: (ids[..., None] == torch.arange(vocab_size)).float(),
        lambda ids, vocab_size: torch.zeros(*ids.shape, vocab_size).scatter_(-1, ids[..., None], 1.0),
        lambda ids, vocab_size: torch.eye(vocab_size)[ids],
    ],
    ids=["broadcast ==", "scatter", "rows of eye"],
)
def test_correct_float32_solutions_pass(solution, capsys):
    check.one_hot_rows(solution)
    assert f"check.one_hot_rows: all {len(CHECKS['ch01-one-hot'].cases())} cases passed" in capsys.readouterr().out


def test_a_float64_one_hot_fails_on_its_dtype():
    def float64(ids, vocab_size):
        return (ids[..., None] == torch.arange(vocab_size)).double()  # the mistake: float64, not float32

    # the values are exactly right: only the dtype gives it away
    for _, (ids, vocab_size) in CHECKS["ch01-one-hot"].cases():
        assert torch.equal(float64(ids, vocab_size).float(), one_hot(ids, vocab_size))
    with pytest.raises(
        AssertionError,
        match=r"(?s)wrong dtype.*case: the sentence of chapter 1.*"
        r"expected dtype: torch\.float32.*got dtype: +torch\.float64.*"
        r"hint:.*float32",
    ):
        check.one_hot_rows(float64)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64], ids=["bool", "int64"])
def test_a_one_hot_that_is_not_floating_point_fails(dtype):
    def not_float(ids, vocab_size):
        return (ids[..., None] == torch.arange(vocab_size)).to(dtype)

    with pytest.raises(AssertionError, match=r"expected a floating-point tensor"):
        check.one_hot_rows(not_float)
