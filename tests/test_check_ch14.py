"""Chapter 14's checkers: the softmax's backward from its row-wise form, and one tile's dS from the log-sum-exp.
Each reference is checked against torch.autograd; the notebook's solutions pass, and the classic mistakes
fail with their diagnosis."""

import math

import pytest
import torch
from _solutions import fails, notebook_solution

from attnlib import check, softmax_jacobian, tiled_attention_backward
from attnlib.check import CHECKS

GRAD = CHECKS["ch14-softmax-grad"]
TILE = CHECKS["ch14-tile-grad-scores"]
NOTEBOOK = "14_attention_backward.ipynb"


def test_registered_under_their_exercises():
    assert GRAD is check.softmax_grad and GRAD.function == "softmax_grad"
    assert TILE is check.tile_grad_scores and TILE.function == "tile_grad_scores"


def test_the_notebooks_solutions_pass(capsys):
    for entry in (GRAD, TILE):
        entry(notebook_solution(NOTEBOOK, entry.function))
    out = capsys.readouterr().out
    for entry in (GRAD, TILE):
        assert f"check.{entry.function}: all {len(entry.cases())} cases passed" in out


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    GRAD.cases(), TILE.cases()
    assert torch.equal(torch.random.get_rng_state(), before)


# ------------------------------------------------------------------ references against autograd


def test_softmax_grad_reference_is_autograds_gradient():
    """On every case: the gradient that autograd gives through torch.softmax at scores log(p) (whose softmax is
    p; a masked key, p = 0, is a score of -inf), in float64."""
    for label, (p, dp) in GRAD.cases():
        x = torch.log(p.double()).requires_grad_()
        torch.softmax(x, dim=-1).backward(dp.double())
        got = GRAD.reference(p, dp)
        assert got.dtype == p.dtype, label
        torch.testing.assert_close(got.double(), x.grad, atol=1e-6, rtol=1e-5, msg=label)


def test_the_softmax_cases_hold_masked_keys_and_a_square_batch():
    cases = dict(GRAD.cases())
    assert any((p == 0).any() for p, _ in cases.values()), "a masked key"
    assert any(p.dim() == 2 and p.shape[0] == p.shape[1] > 1 for p, _ in cases.values()), "n rows of n entries"
    assert any(p.dtype == torch.float64 for p, _ in cases.values())


def test_tile_reference_assembles_autograds_dS():
    """Cut a float64 attention problem into tiles, causal mask aside: the reference's dS of every tile, from the
    log-sum-exp of each row (torch.logsumexp) and D = rowsum(dO * O), is autograd's gradient with respect to
    the scaled scores there."""
    g = torch.Generator().manual_seed(0)
    T_q, T_k, d_k, d_v, b_q, b_k, scale = 7, 9, 4, 3, 3, 4, 0.7
    q, k = (
        torch.randn(2, T_q, d_k, generator=g, dtype=torch.float64),
        torch.randn(2, T_k, d_k, generator=g, dtype=torch.float64),
    )
    v, dout = (
        torch.randn(2, T_k, d_v, generator=g, dtype=torch.float64),
        torch.randn(2, T_q, d_v, generator=g, dtype=torch.float64),
    )
    s = (q @ k.transpose(-2, -1) * scale).requires_grad_()
    out = torch.softmax(s, dim=-1) @ v
    out.backward(dout)
    lse, D = torch.logsumexp(s.detach(), dim=-1), (dout * out.detach()).sum(-1)
    dS = torch.zeros_like(s)
    for i in range(0, T_q, b_q):
        for j in range(0, T_k, b_k):
            r, c = slice(i, i + b_q), slice(j, j + b_k)
            dS[:, r, c] = TILE.reference(q[:, r], k[:, c], v[:, c], dout[:, r], lse[:, r], D[:, r], scale)
    torch.testing.assert_close(dS, s.grad)


def test_the_tile_cases_are_parts_of_larger_rows():
    """In at least one case the tile's weights exp(S - L) sum to less than 1 in a row (its keys are part of the
    row), so a softmax over the tile alone is wrong; nowhere more than 1 (L is over all the keys)."""
    shares = []
    for label, (q, k, _, _, lse, _, scale) in TILE.cases():
        share = torch.exp(q @ k.transpose(-2, -1) * scale - lse[..., None]).sum(-1)
        assert (share <= 1 + 1e-5).all(), label
        shares.append(share.min().item())
    assert min(shares) < 0.9
    (q, k, *_), overflow = TILE.cases()[3][1], TILE.cases()[3][0]
    assert "overflows" in overflow and torch.isinf(torch.exp(q @ k.transpose(-2, -1) / 2)).any()


# ------------------------------------------------------------------ softmax_grad: the classic mistakes


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda p, dp: p * dp, "you left out the row sum"),
        (lambda p, dp: p * (dp - (dp * p).sum(dim=-1)), "your row sums are subtracted along the wrong axis"),
        (lambda p, dp: p * (dp - (dp * p).sum()), "you summed over the whole tensor"),
        (lambda p, dp: p * (dp - dp.sum(dim=-1, keepdim=True)), "you subtracted rowsum(dp), not rowsum(dp * p)"),
        (lambda p, dp: dp - (dp * p).sum(dim=-1, keepdim=True), "you left out the last factor p"),
        (lambda p, dp: p * ((dp * p).sum(dim=-1, keepdim=True) - dp), "your signs are flipped"),
        (lambda p, dp: dp, None),  # the gradient passed through unchanged
    ],
)
def test_softmax_grad_classic_mistakes_are_caught(wrong, diagnosis):
    fails(check.softmax_grad, wrong, r"wrong values.*case: ", diagnosis)


def test_softmax_grad_keeps_the_dtype():
    def float32(p, dp):
        return (p * (dp - (dp * p).sum(dim=-1, keepdim=True))).float()

    fails(check.softmax_grad, float32, r"wrong dtype.*case: float64")


def test_softmax_grad_may_not_use_the_jacobian():
    def through_jacobian(p, dp):
        return (dp.unsqueeze(-2) @ softmax_jacobian(p)).squeeze(-2)

    with pytest.raises(AssertionError, match=r"ch14-softmax-grad asks you to write softmax_grad without attnlib\."):
        check.softmax_grad(through_jacobian)


# ------------------------------------------------------------------ tile_grad_scores: the classic mistakes


def _tile(q, k, v, dout, lse, D, scale, weights=None, subtract=None, ds_scale=1.0, s_scale=None):
    """A first attempt at a tile's dS with one step changed: ``weights(s, lse)`` for P, ``subtract(p, dp, D)`` for
    what dP loses, ``s_scale`` for the scale on the scores, ``ds_scale`` on dS."""
    s = q @ k.transpose(-2, -1) * (scale if s_scale is None else s_scale)
    p = torch.exp(s - lse[..., None]) if weights is None else weights(s, lse)
    dp = dout @ v.transpose(-2, -1)
    return p * (dp - (D[..., None] if subtract is None else subtract(p, dp, D))) * ds_scale


@pytest.mark.parametrize(
    "change, diagnosis",
    [
        (dict(weights=lambda s, lse: torch.softmax(s, dim=-1)), "your weights are a softmax over this tile's keys"),
        (dict(weights=lambda s, lse: torch.exp(s)), "you used exp(S) without subtracting L"),
        (dict(s_scale=1.0), "you left out the scale"),
        (dict(ds_scale="scale"), "you multiplied dS by the scale"),
        (dict(subtract=lambda p, dp, D: 0.0), "you left out D"),
        (dict(subtract=lambda p, dp, D: (dp * p).sum(-1, keepdim=True)), "you used the row sum of `dP * P` over this"),
        (dict(weights=lambda s, lse: torch.exp(s - lse)), "lse_tile and D_tile are one number per query"),  # no None
        (dict(subtract=lambda p, dp, D: D), "lse_tile and D_tile are one number per query"),
        (dict(subtract=lambda p, dp, D: dp), None),  # dS = 0
    ],
)
def test_tile_grad_scores_classic_mistakes_are_caught(change, diagnosis):
    def wrong(q, k, v, dout, lse, D, scale):
        options = {key: (scale if value == "scale" else value) for key, value in change.items()}
        return _tile(q, k, v, dout, lse, D, scale, **options)

    fails(check.tile_grad_scores, wrong, r"wrong (values|shape).*case: ", diagnosis)


def test_tile_grad_scores_may_not_call_the_tiled_backward():
    def cheat(q, k, v, dout, lse, D, scale):
        tiled_attention_backward(q, k, v, torch.zeros_like(dout), lse, dout, scale=scale)
        return torch.zeros(q.shape[:-1] + k.shape[-2:-1], dtype=q.dtype)

    with pytest.raises(AssertionError, match=r"without attnlib\.tiled_attention_backward"):
        check.tile_grad_scores(cheat)


def test_tile_cases_use_scales_other_than_one_over_sqrt_dk():
    assert any(not math.isclose(scale, 1 / math.sqrt(q.shape[-1])) for _, (q, *_, scale) in TILE.cases())
