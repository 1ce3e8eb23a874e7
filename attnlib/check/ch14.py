"""Checkers for chapter 14's coding exercises: the softmax's backward from its row-wise form, and one tile's
``dS`` in FlashAttention-2's backward pass, from the log-sum-exp ``L`` and ``D`` of all the keys."""

from __future__ import annotations

import math

import torch

from ..backward import softmax_backward
from ._core import Cases, Check, _register, matches

NEG_INF = float("-inf")

# ------------------------------------------------------------------ ch14-softmax-grad


def _softmax_grad_cases() -> Cases:
    """(p, dp): softmax outputs of seeded scores (``-inf`` = a masked key, weight 0) and a gradient."""
    g = torch.Generator().manual_seed(14)

    def case(label, shape, dtype=torch.float32, size=1.0, masked=()):
        x = size * torch.randn(*shape, generator=g, dtype=dtype)
        x[..., list(masked)] = NEG_INF
        dp = torch.randn(*shape, generator=g, dtype=dtype)
        return label, (torch.softmax(x, dim=-1), dp)

    cases = [
        case("one row of 3 weights", (3,)),
        case("4 rows of 4 weights: a row sum broadcast along the wrong axis still has the right shape", (4, 4)),
        case("5 rows of 7 weights", (5, 7)),
        case("batched: (2, 3, 6)", (2, 3, 6)),
        case("keys 1 and 4 masked: p = 0 there, and so is the gradient", (3, 6), masked=(1, 4)),
        case("peaked rows (scores x 8): p close to one-hot", (2, 5), size=8.0),
        case("one key per row: p = 1, the gradient is 0", (4, 1)),
        case("float64: the result must stay float64", (3, 5), dtype=torch.float64),
    ]
    for _ in range(2):
        shape = tuple(int(n) for n in torch.randint(1, 7, (3,), generator=g))
        cases.append(case(f"random: shape {shape}", shape, size=3.0))
    return cases


softmax_grad = _register(
    Check(
        exercise="ch14-softmax-grad",
        function="softmax_grad",
        cases=_softmax_grad_cases,
        reference=softmax_backward,
        hint="`dx = p * (dp - rowsum(dp * p))`: multiply dp and p entry by entry, sum each row over the last axis "
        "with `keepdim=True` (a column of shape `(..., 1)`, one number per row), subtract it from dp, then multiply "
        "by p; no n x n matrix, no loop, no autograd; keep the inputs' dtype",
        covers="one row, square and batched inputs, masked keys, peaked rows, one key per row, float64, random shapes",
        forbids=("softmax_backward", "softmax_jacobian", "attention_backward", "tiled_attention_backward"),
        diagnoses=(
            (
                "you left out the row sum: `p * dp` is only the diagonal of the Jacobian diag(p) - p p^T; "
                "subtract `rowsum(dp * p)` from dp before multiplying by p",
                lambda got, e, p, dp: matches(got, p * dp, 1e-5),
            ),
            (
                "your row sums are subtracted along the wrong axis: `(dp * p).sum(dim=-1)` has one number per row; "
                "keep it as a column with `keepdim=True`, so that each row subtracts its own sum",
                lambda got, e, p, dp: matches(got, p * (dp - (dp * p).sum(dim=-1).unsqueeze(-2)), 1e-5),
            ),
            (
                "you summed over the whole tensor: each row has its own sum, rowsum(dp * p) over the last axis",
                lambda got, e, p, dp: matches(got, p * (dp - (dp * p).sum()), 1e-5),
            ),
            (
                "you subtracted rowsum(dp), not rowsum(dp * p): each dp_i is weighted by its p_i in the sum",
                lambda got, e, p, dp: matches(got, p * (dp - dp.sum(dim=-1, keepdim=True)), 1e-5),
            ),
            (
                "you left out the last factor p: `dx = p * (dp - rowsum(dp * p))`, and a masked key (p = 0) "
                "gets no gradient",
                lambda got, e, p, dp: matches(got, dp - (dp * p).sum(dim=-1, keepdim=True), 1e-5),
            ),
            (
                "your signs are flipped: `dx = p * (dp - rowsum(dp * p))`, not `p * (rowsum(dp * p) - dp)`",
                lambda got, e, p, dp: matches(got, -e, 1e-5),
            ),
        ),
    )
)


# ------------------------------------------------------------------ ch14-tile-grad-scores


def _tile_grad_scores(q_tile, k_tile, v_tile, dout_tile, lse_tile, D_tile, scale, weights=None):
    """One tile's ``dS = P * (dO V^T - D)`` with ``P = exp(q k^T * scale - L)`` (``weights``: another ``P``,
    for the diagnoses). ``L`` and ``D`` are one number per query, over all the keys: columns here."""
    s = q_tile @ k_tile.transpose(-2, -1) * scale  # (..., b_q, d_k) @ (..., d_k, b_k) -> (..., b_q, b_k)
    p = torch.exp(s - lse_tile.unsqueeze(-1)) if weights is None else weights(s)
    dp = dout_tile @ v_tile.transpose(-2, -1)  # (..., b_q, d_v) @ (..., d_v, b_k) -> (..., b_q, b_k)
    return p * (dp - D_tile.unsqueeze(-1))


def _reference(q_tile, k_tile, v_tile, dout_tile, lse_tile, D_tile, scale):
    return _tile_grad_scores(q_tile, k_tile, v_tile, dout_tile, lse_tile, D_tile, scale)


def _tile_cases() -> Cases:
    """(q_tile, k_tile, v_tile, dout_tile, lse_tile, D_tile, scale): one tile of a seeded attention problem,
    with the log-sum-exp and D of each of its queries computed over all the problem's keys."""
    g = torch.Generator().manual_seed(1414)

    def case(label, batch, T_q, T_k, rows, keys, d_k=4, d_v=3, dtype=torch.float32, scale=None, size=1.0):
        q = size * torch.randn(*batch, T_q, d_k, generator=g, dtype=dtype)
        k = size * torch.randn(*batch, T_k, d_k, generator=g, dtype=dtype)
        v = torch.randn(*batch, T_k, d_v, generator=g, dtype=dtype)
        dout = torch.randn(*batch, T_q, d_v, generator=g, dtype=dtype)
        scale = 1 / math.sqrt(d_k) if scale is None else scale
        s = q.double() @ k.double().transpose(-2, -1) * scale  # all the scores, in float64: (..., T_q, T_k)
        out = torch.softmax(s, dim=-1) @ v.double()  # (..., T_q, d_v)
        lse = torch.logsumexp(s, dim=-1).to(dtype)  # (..., T_q)
        D = (dout.double() * out).sum(dim=-1).to(dtype)  # (..., T_q) = rowsum(dO * O)
        r, c = slice(*rows), slice(*keys)
        return label, (q[..., r, :], k[..., c, :], v[..., c, :], dout[..., r, :], lse[..., r], D[..., r], scale)

    cases = [
        case("a 4 x 4 tile of 12 queries and 12 keys", (), 12, 12, (4, 8), (0, 4)),
        case("a 3 x 5 tile of 9 queries and 10 keys (b_q != b_k)", (), 9, 10, (3, 6), (5, 10)),
        case("scale 0.1, not 1/sqrt(d_k)", (), 8, 8, (0, 4), (4, 8), scale=0.1),
        case("scores near 100: exp(S) overflows in float32 without L", (), 8, 8, (4, 8), (4, 8), size=10.0),
        case("batched: (2, 3) heads, a 4 x 2 tile", (2, 3), 8, 6, (4, 8), (2, 4)),
        case("float64: the result must stay float64", (2,), 6, 6, (0, 3), (3, 6), dtype=torch.float64),
        case("one query, one key, of 5 keys", (), 3, 5, (1, 2), (2, 3)),
    ]
    for _ in range(2):
        T_q, T_k, d = (int(n) for n in torch.randint(2, 9, (3,), generator=g))
        a, c = int(torch.randint(0, T_q - 1, (1,), generator=g)), int(torch.randint(0, T_k - 1, (1,), generator=g))
        rows, keys = (a, a + 1 + int(torch.randint(0, T_q - a - 1, (1,), generator=g))), (c, T_k)
        cases.append(
            case(
                f"random: a {rows[1] - rows[0]} x {keys[1] - keys[0]} tile of {T_q} queries and {T_k} keys, d_k {d}",
                (2,),
                T_q,
                T_k,
                rows,
                keys,
                d_k=d,
                size=2.0,
            )
        )
    return cases


def _variant(**change):
    """A diagnosis: the answer is what ``_tile_grad_scores`` gives with one argument replaced,
    ``change[name](args)`` computing the replacement from the case's arguments (a dict)."""

    def applies(got, expected, q, k, v, dout, lse, D, scale):
        args = dict(q_tile=q, k_tile=k, v_tile=v, dout_tile=dout, lse_tile=lse, D_tile=D, scale=scale)
        args.update({name: make(args) for name, make in change.items()})
        return matches(got, _tile_grad_scores(**args), 1e-4)

    return applies


def _tile_rowsum(a: dict) -> torch.Tensor:
    """``rowsum(dP * P)`` over the tile's keys only, ``(..., b_q)``: what the softmax's backward of the tile
    alone would subtract."""
    p = torch.exp(a["q_tile"] @ a["k_tile"].transpose(-2, -1) * a["scale"] - a["lse_tile"].unsqueeze(-1))
    return (p * (a["dout_tile"] @ a["v_tile"].transpose(-2, -1))).sum(dim=-1)


def _wrong_axis(got, expected, q, k, v, dout, lse, D, scale) -> bool:
    """A diagnosis: ``L`` and/or ``D`` broadcast as rows ``(..., 1, b_q)`` instead of columns, what
    ``s - lse_tile`` gives without ``[..., None]`` in a square tile."""
    s = q @ k.transpose(-2, -1) * scale  # (..., b_q, b_k)
    dp = dout @ v.transpose(-2, -1)
    for on_l, on_d in ((True, True), (True, False), (False, True)):
        p = torch.exp(s - (lse.unsqueeze(-2) if on_l else lse.unsqueeze(-1)))
        if matches(got, p * (dp - (D.unsqueeze(-2) if on_d else D.unsqueeze(-1))), 1e-4):
            return True
    return False


tile_grad_scores = _register(
    Check(
        exercise="ch14-tile-grad-scores",
        function="tile_grad_scores",
        cases=_tile_cases,
        reference=_reference,
        atol=1e-4,
        rtol=1e-4,
        hint="`S = q_tile @ k_tile^T * scale`, shape `(..., b_q, b_k)`; the tile's weights are `P = exp(S - L)` "
        "with `L = lse_tile[..., None]`, a column, one number per query (not torch.softmax of the tile: its keys are "
        "only part of each row); `dP = dout_tile @ v_tile^T`; `dS = P * (dP - D_tile[..., None])`; the scale is not "
        "applied to dS (it enters dQ and dK); keep the inputs' dtype",
        covers="square and non-square tiles, a scale that is not 1/sqrt(d_k), scores near 100, batched heads, "
        "float64, one query and one key, random tiles",
        forbids=("softmax_backward", "attention_backward", "tiled_attention_backward", "flash_attention"),
        diagnoses=(
            (
                "your weights are a softmax over this tile's keys only: each row of P is a share of ALL the keys' "
                "weights; rebuild it as exp(S - L) with the row's log-sum-exp L",
                _variant(weights=lambda a: lambda s: torch.softmax(s, dim=-1)),
            ),
            (
                "you used exp(S) without subtracting L: exp(S - L) are the weights (and exp(S) alone overflows "
                "for large scores)",
                _variant(weights=lambda a: torch.exp),
            ),
            (
                "you left out the scale: `S = q_tile @ k_tile^T * scale`, the scores L was computed from",
                _variant(scale=lambda a: 1.0),
            ),
            (
                "you multiplied dS by the scale: dS is the gradient with respect to the scaled scores S; the "
                "scale enters only in `dQ = dS K * scale` and `dK = dS^T Q * scale`",
                lambda got, e, *args: matches(got, e * args[-1], 1e-4),
            ),
            (
                "you left out D: `dS = P * (dP - D)`, where `D = rowsum(dO * O)` is the row sum over all the keys",
                _variant(D_tile=lambda a: torch.zeros_like(a["D_tile"])),
            ),
            (
                "you used the row sum of `dP * P` over this tile's keys: the softmax's row sum runs over ALL the "
                "keys, and `D = rowsum(dO * O)` holds it; subtract `D_tile[..., None]`",
                _variant(D_tile=_tile_rowsum),
            ),
            (
                "lse_tile and D_tile are one number per query: make them columns, lse_tile[..., None], so that "
                "each row (query) subtracts its own; yours were subtracted along the keys",
                _wrong_axis,
            ),
        ),
    )
)
