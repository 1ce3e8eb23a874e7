"""Chapter 9's checker: RoPE from the formula. The reference is right (against RoPE written as
complex multiplication with torch.polar / torch.view_as_complex, in float64), the notebook's
solution passes, and the classic mistakes fail."""

import pytest
import torch
from _solutions import notebook_solution

from attnlib import check
from attnlib.check import CHECKS

ENTRY = CHECKS["ch09-rope"]


def _complex_rope(x, positions):
    """Su et al. 2021: pair (2i, 2i+1) as x_2i + j x_2i+1, times exp(j t theta_i), theta_i = 10000^(-2i/d)."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    turn = torch.polar(
        torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * theta
    )  # (T, d/2), complex
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * turn).flatten(-2)  # (..., T, d)


def _plain(x, positions, *, halves=False, exponent=2.0, sign=1.0, ignore_positions=False, concat=False, cast=None):
    """RoPE from plain tensors, with switches for the classic mistakes."""
    d = x.shape[-1]
    T = x.shape[-2]
    pos = torch.arange(T) if ignore_positions else positions
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = 10000.0 ** (-exponent * i / d)  # right: exponent 2
    ang = pos.double()[:, None] * theta  # (T, d/2)
    cos, sin = ang.cos(), sign * ang.sin()
    xd = x.double()
    if halves:  # "rotate half": i with i + d/2
        a, b = xd[..., : d // 2], xd[..., d // 2 :]
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = xd[..., 0::2], xd[..., 1::2]
        new_a, new_b = a * cos - b * sin, a * sin + b * cos
        out = torch.cat([new_a, new_b], dim=-1) if concat else torch.stack([new_a, new_b], -1).flatten(-2)
    return out.to(x.dtype if cast is None else cast)


def test_registered_under_its_exercise():
    assert ENTRY is check.rope and ENTRY.function == "rope"


def test_reference_equals_complex_multiplication():
    for label, (x, positions) in ENTRY.cases():
        got = ENTRY.reference(x, positions)
        assert got.dtype == x.dtype and got.shape == x.shape, label
        # well inside the checker's tolerance: a correct float32 solution has room to pass
        torch.testing.assert_close(
            got.double(), _complex_rope(x, positions), atol=ENTRY.atol / 10, rtol=ENTRY.rtol / 10, msg=label
        )


def test_cases_include_the_edge_cases():
    args = [a for _, a in ENTRY.cases()]
    assert any(x.shape[-1] == 2 for x, _ in args)
    assert any(x.shape[-1] == 64 for x, _ in args)
    assert any(x.dim() == 4 for x, _ in args)
    assert any(x.dim() == 2 for x, _ in args)
    assert any(x.dtype == torch.float64 for x, _ in args)
    assert any(torch.all(p == 0) for _, p in args)
    assert any(p.min() >= 100 for _, p in args)
    assert any(p.is_floating_point() for _, p in args)
    assert any(len(set(p.tolist())) < len(p) or not torch.equal(p.sort().values, p) for _, p in args)


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    for _, args in ENTRY.cases():
        ENTRY.reference(*args)
    assert torch.equal(torch.random.get_rng_state(), before)


def _notebook_solution():
    """The function the chapter's solution cell defines."""
    return notebook_solution("09_positions.ipynb", "rope", ("attnlib", "apply_rope"))


def test_the_solutions_pass(capsys):
    n = len(ENTRY.cases())
    check.rope(_notebook_solution())
    check.rope(_plain)
    check.rope(_complex_rope_keeping_dtype)
    assert capsys.readouterr().out.count(f"check.rope: all {n} cases passed") == 3


def _complex_rope_keeping_dtype(x, positions):
    return _complex_rope(x, positions).to(x.dtype)


@pytest.mark.parametrize(
    "wrong, match",
    [
        # GPT-NeoX / HF LLaMA pairing: only d_head = 2 agrees
        (lambda x, p: _plain(x, p, halves=True), r"wrong values.*case: d_head = 4"),
        # theta_i = 10000^(-i/d): the frequencies fall too slowly
        (lambda x, p: _plain(x, p, exponent=1.0), r"wrong values.*case: d_head = 4"),
        # turned the other way: (cos t, -sin t)
        (lambda x, p: _plain(x, p, sign=-1.0), r"wrong values.*case: one pair"),
        # positions ignored: rows turned by 0 .. T-1 whatever positions says
        (lambda x, p: _plain(x, p, ignore_positions=True), r"wrong values.*case: all positions 0"),
        # the rotated evens and odds concatenated instead of put back in place
        (lambda x, p: _plain(x, p, concat=True), r"wrong values.*case: d_head = 4"),
        # the dtype lost
        (lambda x, p: _plain(x, p, cast=torch.float32), r"wrong dtype.*case: float64"),
    ],
)
def test_classic_mistakes_are_caught(wrong, match):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*(hint|diagnosis):"):
        check.rope(wrong)


def test_the_identity_fails_at_once():
    with pytest.raises(AssertionError, match=r"(?s)wrong values.*case: one pair.*hint:"):
        check.rope(lambda x, p: x.clone())


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda x, p: _plain(x, p, halves=True), "the two halves"),
        (lambda x, p: _plain(x, p, sign=-1.0), "turn the other way"),
        (lambda x, p: _plain(x, p, ignore_positions=True), "whatever the positions say"),
        (lambda x, p: _plain(x, p, concat=True), "concatenated"),
    ],
)
def test_a_wrong_rope_is_told_what_it_got_wrong(wrong, diagnosis):
    with pytest.raises(AssertionError) as info:
        check.rope(wrong)
    assert "diagnosis:" in str(info.value) and diagnosis in str(info.value), str(info.value)[-300:]
