"""Chapter 4's checker for `reach`: its reference is what a stack of attention layers measurably
does, and it catches the mistakes a learner makes."""

import pytest
import torch
from _solutions import fails

from attnlib import attention, causal_mask, check
from attnlib.check import CHECKS


def _measured_reach(mask: torch.Tensor, n_layers: int) -> torch.Tensor:
    """Change input token j of a stack of masked attention layers (random projections, queries,
    keys and values all from the previous layer's output) and record which outputs move."""
    g = torch.Generator().manual_seed(0)
    T, d = mask.shape[0], 4
    layers = [
        [0.5 * torch.randn(d, d, generator=g, dtype=torch.float64) for _ in range(3)]  # small: no weight
        for _ in range(n_layers)
    ]  # rounds to 0 or 1

    def run(x):
        for w_q, w_k, w_v in layers:
            x = attention(x @ w_q, x @ w_k, x @ w_v, attn_mask=mask)[0]  # (T, d)
        return x

    x = torch.randn(T, d, generator=g, dtype=torch.float64)
    base = run(x)
    moved = torch.zeros(T, T, dtype=torch.bool)
    for j in range(T):
        x_j = x.clone()
        x_j[j] = torch.randn(d, generator=g, dtype=torch.float64)
        moved[:, j] = (run(x_j) - base).abs().amax(dim=-1) > 1e-9
    return moved


def test_registered_under_its_exercise_and_the_old_restatement_is_gone():
    assert CHECKS["ch04-reach"] is check.reach
    assert check.reach.function == "reach"
    assert "ch04-causal-weights" not in CHECKS and not hasattr(check, "causal_attention_weights")


def test_reference_is_what_a_stack_of_attention_layers_does():
    for label, (mask, n_layers) in CHECKS["ch04-reach"].cases():
        assert mask.diagonal().all(), f"{label}: the exercise promises masks that keep their diagonal"
        assert torch.equal(CHECKS["ch04-reach"].reference(mask, n_layers), _measured_reach(mask, n_layers)), label


def test_cases_include_the_telling_ones():
    cases = dict(CHECKS["ch04-reach"].cases())
    causal, layers = cases["the causal mask, T = 6, three layers"]
    assert torch.equal(causal, causal_mask(6)) and layers == 3
    assert any(not torch.equal(m, m.tril()) and not torch.equal(m, m.T) for m, _ in cases.values()), (
        "a mask that is neither triangular nor symmetric, so that a transposed answer fails"
    )


def test_a_correct_solution_passes(capsys):
    def reach(mask, n_layers):
        return torch.linalg.matrix_power(mask.double(), n_layers) > 0

    check.reach(reach)
    assert f"check.reach: all {len(CHECKS['ch04-reach'].cases())} cases passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, first_failure",
    [
        # one layer only: a causal stack stays causal, so the first window case is the one that tells
        (lambda mask, n: mask.clone(), "a sliding window of width 2, T = 4, two layers"),
        # keys as rows: the transposed mask
        (lambda mask, n: torch.linalg.matrix_power(mask.double().T, n) > 0, "the causal mask, T = 4, one layer"),
        # one product too few
        (
            lambda mask, n: torch.linalg.matrix_power(mask.double(), max(n - 1, 1)) > 0,
            "a sliding window of width 2, T = 4, two layers",
        ),
        # path counts instead of True/False
        (lambda mask, n: torch.linalg.matrix_power(mask.double(), n), "the causal mask, T = 4, one layer"),
    ],
)
def test_classic_mistakes_are_caught(wrong, first_failure):
    with pytest.raises(AssertionError, match=rf"(?s)case: {first_failure}.*(hint|diagnosis):"):
        check.reach(wrong)


def _causal(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


def _padding(lengths, T):
    return (torch.arange(T)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda lengths, T: ~(_causal(T) & _padding(lengths, T)), "inverted"),
        (lambda lengths, T: _causal(T).expand(len(lengths), 1, T, T).clone(), "causal mask alone"),
        (lambda lengths, T: _padding(lengths, T).expand(len(lengths), 1, T, T).clone(), "not the future"),
    ],
)
def test_a_wrong_mask_is_told_what_it_got_wrong(wrong, diagnosis):
    fails(check.combine_masks, wrong, diagnosis=diagnosis)
