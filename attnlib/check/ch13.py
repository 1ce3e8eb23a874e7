"""Checkers for chapter 13's coding exercises."""

from __future__ import annotations

import torch

from ._core import Cases, Check, _register

NEG_INF = float("-inf")


def _state(s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The online-softmax state of one part of the keys, computed directly (not online).

    ``s`` are the scores ``(..., T_q, n)`` of the part's ``n`` keys (``-inf`` = masked) and
    ``v`` their values ``(..., n, d_v)``. Returns ``m = rowmax(s)`` ``(..., T_q, 1)``,
    ``l = rowsum(e^(s - m))`` and ``o = e^(s - m) @ v`` ``(..., T_q, d_v)``; a row with no
    key (``n = 0`` or all ``-inf``) has ``m = -inf``, ``l = 0``, ``o = 0``.
    """
    shape = s.shape[:-1] + (1,)
    if s.shape[-1] == 0:
        return (s.new_full(shape, NEG_INF), s.new_zeros(shape), s.new_zeros(s.shape[:-1] + (v.shape[-1],)))
    m = s.amax(dim=-1, keepdim=True)  # (..., T_q, 1)
    e = torch.exp(s - m.masked_fill(m == NEG_INF, 0.0))  # (..., T_q, n)
    return m, e.sum(dim=-1, keepdim=True), e @ v  # (..., T_q, n) @ (..., n, d_v)


def _merge_cases() -> Cases:
    """(m1, l1, o1, m2, l2, o2): the states of two parts of the keys of the same queries, seeded."""
    g = torch.Generator().manual_seed(13)

    def case(label, batch, T_q, n1, n2, d_v, dtype=torch.float32, scale=1.0, shift=0.0, shift2=0.0, mask1_rows=()):
        s = scale * torch.randn(*batch, T_q, n1 + n2, generator=g, dtype=dtype) + shift  # the scores of all keys
        s[..., n1:] += shift2  # part 2's scores moved
        for row in mask1_rows:
            s[..., row, :n1] = NEG_INF  # row sees no key of part 1
        v = torch.randn(*batch, n1 + n2, d_v, generator=g, dtype=dtype)
        return label, (*_state(s[..., :n1], v[..., :n1, :]), *_state(s[..., n1:], v[..., n1:, :]))

    cases = [
        case("4 queries, keys split 4 + 6, d_v = 3", (), 4, 4, 6, 3),
        case("part 2's maximum is larger by 20: part 1 must be rescaled", (2,), 3, 5, 5, 2, shift2=20.0),
        case("part 1's maximum is larger by 20: part 2 must be rescaled", (2,), 3, 5, 5, 2, shift2=-20.0),
        case("scores near 1000: e^m overflows in float32", (2,), 3, 4, 4, 2, shift=1000.0, shift2=3.0),
        case("part 2 has no keys: its state is (-inf, 0, 0)", (2,), 3, 5, 0, 2),
        case("part 1 has no keys: its state is (-inf, 0, 0)", (2,), 3, 0, 5, 2),
        case("neither part has keys: no NaN, the state stays (-inf, 0, 0)", (2,), 3, 0, 0, 2),
        case("rows 0 and 2 see no key of part 1 (all -inf there)", (2,), 4, 3, 4, 2, mask1_rows=(0, 2)),
        case("float64: the result must stay float64", (2,), 3, 4, 5, 3, dtype=torch.float64),
        case("one query, one key in each part, d_v = 1", (), 1, 1, 1, 1),
    ]
    for _ in range(3):
        B, T_q, n1, n2, d_v = (int(x) for x in torch.randint(1, 7, (5,), generator=g))
        cases.append(
            case(f"random: batch ({B},), T_q={T_q}, keys {n1} + {n2}, d_v={d_v}", (B,), T_q, n1, n2, d_v, scale=3.0)
        )
    return cases


def _merge_partials(m1, l1, o1, m2, l2, o2):
    """Merge two online-softmax states of the same queries over disjoint sets of keys.

    ``m = max(m1, m2)``, ``l = e^(m1 - m) l1 + e^(m2 - m) l2``, ``o = e^(m1 - m) o1 + e^(m2 - m) o2``;
    an ``-inf`` maximum is replaced by 0 in the exponents, so a part without keys
    (``m = -inf``, ``l = 0``, ``o = 0``) contributes nothing and two of them merge into one.
    ``m``, ``l``: ``(..., T_q, 1)``; ``o``: ``(..., T_q, d_v)``.
    """
    m = torch.maximum(m1, m2)
    m_safe = m.masked_fill(m == NEG_INF, 0.0)
    a1, a2 = torch.exp(m1 - m_safe), torch.exp(m2 - m_safe)  # each <= 1: no overflow
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2


merge_partials = _register(
    Check(
        exercise="ch13-merge-partials",
        function="merge_partials",
        cases=_merge_cases,
        reference=_merge_partials,
        atol=1e-5,
        rtol=1e-5,
        hint="bring both parts to the common maximum m = max(m1, m2): multiply part 1's l and o by "
        "e^(m1 - m) and part 2's by e^(m2 - m), then add (never e^m1 or e^m2 alone: they overflow); "
        "a part with no keys has m = -inf, l = 0, o = 0: where m is -inf use 0 in the exponents, since "
        "e^(-inf - (-inf)) is NaN; do not divide o by l (that happens once, at the very end); return "
        "(m, l, o) in the inputs' dtype",
        covers="a larger maximum on either side, scores near 1000, a part without keys on either side and "
        "on both, rows without keys, float64, one query, random shapes",
        forbids=("online_softmax", "tiled_attention"),
    )
)
