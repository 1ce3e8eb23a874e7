"""Chapter 7's checker: attention_params_heads accepts every correct count and explains wrong ones."""

import pytest

from attnlib import attention_params, check
from attnlib.check import CHECKS


def _formula(d_model, n_heads, d_head):
    width = n_heads * d_head
    return 4 * d_model * width + 3 * width + d_model


def test_registered_under_its_exercise():
    assert CHECKS["ch07-head-width"] is check.attention_params_heads
    assert check.attention_params_heads.function == "attention_params_heads"


def test_reference_walks_modules_and_matches_the_closed_forms():
    """The reference counts nn.Linear layers; it must agree with 4 d w + 3 w + d, and with
    attnlib's 4 d^2 + 4 d wherever the heads fill d_model."""
    entry = CHECKS["ch07-head-width"]
    for _, (d_model, n_heads, d_head) in entry.cases():
        assert entry.reference(d_model, n_heads, d_head) == _formula(d_model, n_heads, d_head)
        if n_heads * d_head == d_model:
            assert entry.reference(d_model, n_heads, d_head) == attention_params(d_model)


def test_cases_cover_every_kind_of_head_width():
    cases = [args for _, args in CHECKS["ch07-head-width"].cases()]
    assert any(n * dh == d for d, n, dh in cases), "a case where the heads fill d_model"
    assert any(n * dh > d for d, n, dh in cases), "a case where the heads are wider than d_model"
    assert any(n * dh < d for d, n, dh in cases), "a case where the heads are narrower than d_model"
    assert any(dh == 1 for _, _, dh in cases) and any(n == 1 for _, n, _ in cases)
    assert (2048, 24, 128) in cases, "GPT-3 XL as its table prints it"


def test_a_correct_formula_passes(capsys):
    check.attention_params_heads(_formula)
    assert (
        f"check.attention_params_heads: all {len(CHECKS['ch07-head-width'].cases())} cases passed"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "wrong, first_failure",
    [
        # heads never matter: 4 d^2 + 4 d whatever n_heads * d_head is
        (lambda d, n, dh: 4 * d * d + 4 * d, "GPT-3 XL"),
        # forgot the biases
        (lambda d, n, dh: 4 * d * n * dh, "GPT-2 small"),
        # W_O's bias taken as wide as the heads instead of d_model
        (lambda d, n, dh: 4 * d * n * dh + 4 * n * dh, "GPT-3 XL"),
        # counted one head's projections only
        (lambda d, n, dh: 3 * (d * dh + dh) + n * dh * d + d, "GPT-2 small"),
    ],
)
def test_wrong_counts_are_caught_at_the_telling_case(wrong, first_failure):
    with pytest.raises(AssertionError, match=rf"(?s)wrong value.*case: {first_failure}.*hint:"):
        check.attention_params_heads(wrong)


def test_a_float_count_is_rejected_only_if_wrong():
    check.attention_params_heads(lambda d, n, dh: float(_formula(d, n, dh)))
    with pytest.raises(AssertionError, match="expected a number"):
        check.attention_params_heads(lambda d, n, dh: str(_formula(d, n, dh)))
