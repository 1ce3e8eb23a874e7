"""Chapter 13's checker: merging the online-softmax states of two parts of the keys. The reference
is right (merged and normalised, it gives PyTorch's attention over all the keys), the notebook's
solution passes, and the classic mistakes fail."""

import math

import pytest
import torch
import torch.nn.functional as F
from _solutions import notebook_solution

from attnlib import check
from attnlib.check import CHECKS
from attnlib.check.ch13 import _state

ENTRY = CHECKS["ch13-merge-partials"]
NEG_INF = float("-inf")


def test_registered_under_its_exercise():
    assert ENTRY is check.merge_partials
    assert ENTRY.function == "merge_partials"


def test_reference_gives_sdpa_over_all_the_keys():
    """Split the keys of an attention problem in two, compute each part's state directly,
    merge with the reference and divide: the result is F.scaled_dot_product_attention over
    all the keys (float64), for every split, including an empty part."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 5, 4, generator=g, dtype=torch.float64),
        torch.randn(2, 9, 4, generator=g, dtype=torch.float64),
        torch.randn(2, 9, 3, generator=g, dtype=torch.float64),
    )
    expected = F.scaled_dot_product_attention(q, k, v)
    s = q @ k.transpose(-2, -1) / math.sqrt(4)  # (2, 5, 9)
    for split in range(0, 10):
        m, l, o = ENTRY.reference(
            *_state(s[..., :split], v[..., :split, :]), *_state(s[..., split:], v[..., split:, :])
        )
        torch.testing.assert_close(o / l, expected)
        torch.testing.assert_close(m, s.amax(dim=-1, keepdim=True))


def test_reference_on_the_cases_matches_a_direct_computation():
    """On every case: the merged state equals the state of all the keys computed at once, in
    float64 (the cases' parts are built from scores and values; here the merge is checked against
    m = max of both, l and o rescaled in float64 arithmetic)."""
    for label, (m1, l1, o1, m2, l2, o2) in ENTRY.cases():
        m, l, o = ENTRY.reference(m1, l1, o1, m2, l2, o2)
        assert m.dtype == l.dtype == o.dtype == m1.dtype, label
        assert not (m.isnan().any() or l.isnan().any() or o.isnan().any()), label
        M = torch.maximum(m1, m2).double()
        w1 = torch.where(m1 == NEG_INF, 0.0, torch.exp(m1.double() - torch.where(M == NEG_INF, 0.0, M)))
        w2 = torch.where(m2 == NEG_INF, 0.0, torch.exp(m2.double() - torch.where(M == NEG_INF, 0.0, M)))
        torch.testing.assert_close(l.double(), w1 * l1.double() + w2 * l2.double(), msg=label)
        torch.testing.assert_close(o.double(), w1 * o1.double() + w2 * o2.double(), msg=label, atol=1e-5, rtol=1e-5)


def test_cases_include_the_edge_cases():
    cases = dict(ENTRY.cases())
    args = list(cases.values())
    assert any(torch.isneginf(a[0]).all() and torch.isneginf(a[3]).all() for a in args), "both parts empty"
    assert any(torch.isneginf(a[0]).all() and not torch.isneginf(a[3]).any() for a in args), "part 1 empty"
    assert any(torch.isneginf(a[3]).all() and not torch.isneginf(a[0]).any() for a in args), "part 2 empty"
    assert any(torch.isneginf(a[0]).any() and not torch.isneginf(a[0]).all() for a in args), "some rows empty"
    assert any(a[0].min() > 900 for a in args), "scores near 1000"
    assert any((a[3] - a[0]).min() > 10 for a in args) and any((a[0] - a[3]).min() > 10 for a in args)
    assert any(a[0].dtype == torch.float64 for a in args)


def _notebook_solution():
    """The function the chapter's solution cell defines."""
    return notebook_solution("13_tiled_attention.ipynb", "merge_partials", ("attnlib",))


def test_the_solutions_pass(capsys):
    check.merge_partials(_notebook_solution())
    n = len(ENTRY.cases())
    assert capsys.readouterr().out.count(f"check.merge_partials: all {n} cases passed") == 1


def _no_rescaling(m1, l1, o1, m2, l2, o2):
    return torch.maximum(m1, m2), l1 + l2, o1 + o2


def _rescale_part_1_only(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1 = torch.exp(m1 - m)
    return m, a1 * l1 + l2, a1 * o1 + o2


def _keep_m1(m1, l1, o1, m2, l2, o2):
    a2 = torch.exp(m2 - m1)  # part 1's maximum as the common one
    return m1, l1 + a2 * l2, o1 + a2 * o2


def _unshifted(m1, l1, o1, m2, l2, o2):
    """Undo each part's shift with e^m: right in exact arithmetic, overflows for scores near 1000."""
    L = torch.exp(m1) * l1 + torch.exp(m2) * l2
    O = torch.exp(m1) * o1 + torch.exp(m2) * o2
    m = torch.maximum(m1, m2)
    return m, L * torch.exp(-m), O * torch.exp(-m)


def _no_guard(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(m1 - m), torch.exp(m2 - m)  # e^(-inf - (-inf)) = NaN for empty parts
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2


def _normalised(m1, l1, o1, m2, l2, o2):
    m, l, o = _notebook_solution()(m1, l1, o1, m2, l2, o2)
    return m, l, o / l  # the division belongs at the very end


def _float32(*args):
    return tuple(t.float() for t in _notebook_solution()(*args))


@pytest.mark.parametrize(
    "wrong, match",
    [
        (_no_rescaling, r"wrong values.*case: 4 queries"),
        (_rescale_part_1_only, r"wrong values.*case: 4 queries"),
        (_keep_m1, r"wrong values.*case: 4 queries"),
        (_unshifted, r"(wrong values|NaN).*case: scores near 1000"),
        (_no_guard, r"NaN.*case: neither part has keys"),
        (_normalised, r"wrong values.*case: 4 queries"),
        (_float32, r"wrong dtype.*case: float64"),
    ],
)
def test_classic_mistakes_are_caught(wrong, match):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*hint:"):
        check.merge_partials(wrong)
