"""Chapter 5's checkers: `shifted_output`'s reference is what attention with shifted values
measurably returns, its cases include the ones that tell, and the classic mistakes are caught."""

import pytest
import torch
from _solutions import fails

from attnlib import attention, check
from attnlib.check import CHECKS
from attnlib.check.ch05 import _shifted_values_setups
from attnlib.examples import ILLUSTRATED_PUBLISHED


def test_registered_under_their_exercises_and_the_old_restatement_is_gone():
    assert CHECKS["ch05-shifted-values"] is check.shifted_output
    assert CHECKS["ch05-stable-softmax"] is check.stable_softmax
    assert "ch05-attend" not in CHECKS and not hasattr(check, "attend")


def test_reference_equals_attention_run_again_with_shifted_values():
    cases = CHECKS["ch05-shifted-values"].cases()
    setups = _shifted_values_setups()
    assert [label for label, _ in cases] == [label for label, _ in setups]
    for (label, (out, weights, shift)), (_, (q, k, v, mask, scale, c)) in zip(cases, setups):
        expected, w_again = attention(q, k, v + c, attn_mask=mask, scale=scale)  # attention, run again
        assert torch.equal(w_again, weights), f"{label}: shifting the values moved the weights"
        got = CHECKS["ch05-shifted-values"].reference(out, weights, shift)
        assert got.dtype == out.dtype, label
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=label)


def test_cases_include_the_telling_ones():
    cases = dict(CHECKS["ch05-shifted-values"].cases())
    # a query with no key: its weights sum to 0, so `out + shift` must fail there
    assert any((w.sum(dim=-1) == 0).any() and (s != 0).any() for _, w, s in cases.values())
    assert any(o.dtype == torch.float64 for o, _, _ in cases.values())
    assert any(o.dim() > 2 for o, _, _ in cases.values())
    scores = CHECKS["ch05-stable-softmax"].cases()[0][1][0]
    assert scores.tolist() == ILLUSTRATED_PUBLISHED["scores"]


def test_a_correct_solution_passes(capsys):
    def shifted_output(out, weights, shift):
        return out + weights.sum(dim=-1, keepdim=True) * shift

    check.shifted_output(shifted_output)
    assert (
        f"check.shifted_output: all {len(CHECKS['ch05-shifted-values'].cases())} cases passed"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "wrong, first_failure",
    [
        # every row's weights sum to 1, forgetting the queries with no key
        (lambda out, w, s: out + s, "query 1 has every key masked"),
        # the shift ignored: "attention normalises it away"
        (lambda out, w, s: out, "the worked example"),
        # the shift weighted by the mean weight instead of the sum
        (lambda out, w, s: out + w.mean(dim=-1, keepdim=True) * s, "the worked example"),
        # the dtype lost
        (lambda out, w, s: (out + w.sum(dim=-1, keepdim=True) * s).float(), "float64"),
    ],
)
def test_classic_mistakes_are_caught(wrong, first_failure):
    with pytest.raises(AssertionError, match=rf"(?s)case: {first_failure}.*(hint|diagnosis):"):
        check.shifted_output(wrong)


def _no_max(x):
    e = x.exp()
    return e / e.sum(-1, keepdim=True)


def _max_without_guard(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


@pytest.mark.parametrize(
    "wrong, diagnosis", [(_no_max, "subtract each row's maximum"), (_max_without_guard, "all -inf")]
)
def test_a_wrong_softmax_is_told_what_it_got_wrong(wrong, diagnosis):
    fails(check.stable_softmax, wrong, diagnosis=diagnosis)
