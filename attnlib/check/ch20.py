"""Checkers for chapter 20's coding exercises: one step of linear attention, one step of Gated DeltaNet, and the
causal top-k mask of DeepSeek Sparse Attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._core import Cases, Check, _register, matches

# ------------------------------------------------------------------ ch20-linear-step


def _linear_step(q_t, k_t, v_t, S, z, update_first=True):
    """One token of causal linear attention (Katharopoulos et al. 2020), ``phi(x) = elu(x) + 1``:
    ``S + phi(k_t)^T v_t``, ``z + phi(k_t)``, ``out_t = phi(q_t) S / (phi(q_t) . z)`` from the new state
    (from the old one with ``update_first=False``, a classic mistake)."""
    phi_q, phi_k = F.elu(q_t) + 1, F.elu(k_t) + 1
    S_new = S + phi_k.unsqueeze(-1) * v_t.unsqueeze(-2)  # (..., d, 1) * (..., 1, d_v) -> (..., d, d_v)
    z_new = z + phi_k  # (..., d)
    S_read, z_read = (S_new, z_new) if update_first else (S, z)
    out = (phi_q.unsqueeze(-2) @ S_read).squeeze(-2) / (phi_q * z_read).sum(-1, keepdim=True)  # (..., d_v)
    return out, S_new, z_new


def _linear_reference(q_t, k_t, v_t, S, z):
    return _linear_step(q_t, k_t, v_t, S, z)


def _state(lead, d, d_v, generator, dtype=torch.float32):
    """A state reached by a few earlier tokens: ``S (*lead, d, d_v)`` and ``z (*lead, d)``, z > 0."""
    k = F.elu(torch.randn(*lead, 3, d, generator=generator, dtype=dtype)) + 1  # (*lead, 3, d): 3 tokens before
    v = torch.randn(*lead, 3, d_v, generator=generator, dtype=dtype)
    return k.mT @ v, k.sum(-2)


def _linear_cases() -> Cases:
    """(q_t, k_t, v_t, S, z), seeded."""
    g = torch.Generator().manual_seed(19)
    cases = []

    def add(label, lead, d, d_v, first=False, dtype=torch.float32, scale=1.0):
        q, k = (scale * torch.randn(*lead, d, generator=g, dtype=dtype) for _ in range(2))
        v = torch.randn(*lead, d_v, generator=g, dtype=dtype)
        S, z = _state(lead, d, d_v, g, dtype)
        if first:
            S, z = torch.zeros_like(S), torch.zeros_like(z)
        cases.append((label, (q, k, v, S, z)))

    add("one head, d = 4, a state of 3 tokens", (), 4, 4)
    add("the first token: S = 0, z = 0", (), 4, 4, first=True)
    add("d_v = 3 != d = 5", (), 5, 3)
    add("batched: (B=2, H=3)", (2, 3), 8, 8)
    add("large queries and keys (x 10): elu + 1 of large negatives ~ 0", (2,), 6, 6, scale=10.0)
    add("float64", (2,), 4, 4, dtype=torch.float64)
    add("d = 1", (), 1, 2)
    return cases


linear_step = _register(
    Check(
        exercise="ch20-linear-step",
        function="linear_step",
        cases=_linear_cases,
        reference=_linear_reference,
        hint="phi(x) = F.elu(x) + 1; S + phi(k_t)^T v_t is an outer product, "
        "torch.einsum('...i,...j->...ij', phi_k, v_t); "
        "z + phi(k_t); then out_t = phi(q_t) S / (phi(q_t) . z) with the NEW S and z; return (out_t, S, z)",
        covers="one head, the first token, d_v != d, batched heads, large inputs, float64, d = 1",
        forbids=("linear_attention", "linear_attention_step", "elu_feature_map"),
        diagnoses=(
            (
                "your output reads the state from before this token: update S and z with phi(k_t) and v_t first, "
                "then read them with phi(q_t) (query t sees key t, as in causal attention)",
                lambda got, e, *args: matches(got[0], _linear_step(*args, update_first=False)[0], 1e-5),
            ),
            (
                "your output is not normalised: divide phi(q_t) S by phi(q_t) . z, one number per token",
                lambda got, e, q, k, v, S, z: matches(got[0], ((F.elu(q) + 1).unsqueeze(-2) @ e[1]).squeeze(-2), 1e-5),
            ),
            (
                "your features are the raw q_t and k_t: linear attention applies phi(x) = elu(x) + 1 to both first",
                lambda got, e, q, k, v, S, z: matches(got[1], S + k.unsqueeze(-1) * v.unsqueeze(-2), 1e-5),
            ),
        ),
    )
)


# ------------------------------------------------------------------ ch20-gated-delta-step


def _delta_step(S, q_t, k_t, v_t, g_t, beta_t, decay_read=True):
    """One token of Gated DeltaNet (Yang et al. 2025): ``S_t = a S + beta_t k_t (v_t - a S^T k_t)^T``,
    ``a = exp(g_t)``, ``o_t = S_t^T q_t`` (``decay_read=False``: the read from the undecayed S, a mistake)."""
    a = torch.exp(g_t)[..., None, None]  # (..., 1, 1)
    read = ((a if decay_read else 1.0) * S * k_t.unsqueeze(-1)).sum(-2)  # S^T k_t: (..., d_v)
    S_t = a * S + k_t.unsqueeze(-1) * (beta_t.unsqueeze(-1) * (v_t - read)).unsqueeze(-2)  # (..., d_k, d_v)
    return (S_t * q_t.unsqueeze(-1)).sum(-2), S_t  # S_t^T q_t: (..., d_v)


def _delta_reference(S, q_t, k_t, v_t, g_t, beta_t):
    return _delta_step(S, q_t, k_t, v_t, g_t, beta_t)


def _delta_cases() -> Cases:
    """(S, q_t, k_t, v_t, g_t, beta_t), q_t and k_t of length 1 (q_t / sqrt(d_k)), seeded."""
    g = torch.Generator().manual_seed(1919)
    cases = []

    def add(label, lead, d_k, d_v, decay=None, beta=None, dtype=torch.float32, zero_state=False):
        S = torch.zeros(*lead, d_k, d_v, dtype=dtype) if zero_state else torch.randn(*lead, d_k, d_v, generator=g,
                                                                                      dtype=dtype)  # fmt: skip
        q, k = (F.normalize(torch.randn(*lead, d_k, generator=g, dtype=dtype), dim=-1) for _ in range(2))
        v = torch.randn(*lead, d_v, generator=g, dtype=dtype)
        g_t = -F.softplus(torch.randn(lead, generator=g, dtype=dtype)) if decay is None else torch.full(lead, decay,
                                                                                                         dtype=dtype)  # fmt: skip
        b_t = torch.rand(lead, generator=g, dtype=dtype) if beta is None else torch.full(lead, beta, dtype=dtype)
        cases.append((label, (S, q / d_k**0.5, k, v, g_t, b_t)))

    add("one head, random decay and strength", (), 4, 4)
    add("the first token: S = 0", (), 4, 4, zero_state=True)
    add("DeltaNet: g = 0, beta = 1 (S^T k_t = v_t after)", (), 8, 8, decay=0.0, beta=1.0)
    add("beta = 0: only the decay", (), 4, 3, beta=0.0)
    add("a strong decay, g = -5", (), 6, 6, decay=-5.0)
    add("d_v = 3 != d_k = 5", (), 5, 3)
    add("batched: (B=2, H=3)", (2, 3), 8, 4)
    add("float64", (2,), 4, 4, dtype=torch.float64)
    return cases


gated_delta_step = _register(
    Check(
        exercise="ch20-gated-delta-step",
        function="gated_delta_step",
        cases=_delta_cases,
        reference=_delta_reference,
        hint="a = exp(g_t)[..., None, None]; decay first, S = a S; read = S^T k_t = (S * k_t.unsqueeze(-1)).sum(-2); "
        "S_t = S + k_t (beta_t (v_t - read))^T as an outer product; o_t = S_t^T q_t; return (o_t, S_t)",
        covers="one head, the first token, DeltaNet's g = 0 and beta = 1, beta = 0, a strong decay, d_v != d_k, "
        "batched heads, float64",
        forbids=("gated_delta_rule", "GatedDeltaNet"),
        diagnoses=(
            (
                "your state only adds beta_t k_t v_t^T: the delta rule writes the difference v_t - a S^T k_t, what "
                "the decayed state already stores under k_t taken away",
                lambda got, e, S, q, k, v, g_t, b: (
                    not matches(got[1], e[1], 1e-5)
                    and matches(
                        got[1],
                        torch.exp(g_t)[..., None, None] * S + k.unsqueeze(-1) * (b.unsqueeze(-1) * v).unsqueeze(-2),
                        1e-5,
                    )
                ),
            ),
            (
                "you read S^T k_t from the state before its decay: decay S by exp(g_t) first, then read and write",
                lambda got, e, *args: matches(got[1], _delta_step(*args, decay_read=False)[1], 1e-5),
            ),
            (
                "your output reads the state from before this token: o_t = S_t^T q_t, with the new state",
                lambda got, e, S, q, *args: (
                    matches(
                        got[0], (torch.exp(args[2])[..., None, None] * S * q.unsqueeze(-1)).sum(-2), 1e-5
                    )  # fmt: skip
                    or matches(got[0], (S * q.unsqueeze(-1)).sum(-2), 1e-5)
                ),
            ),
        ),
    )
)


# ------------------------------------------------------------------ ch20-topk-mask


def _topk(scores, k, causal=True):
    """Each query's ``k`` highest-scoring keys among ``s <= t`` (all of them while fewer), boolean
    ``(..., T, T)``; ``causal=False`` chooses among every key (a mistake)."""
    T = scores.shape[-1]
    allowed = torch.ones(T, T, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    chosen = scores.masked_fill(~allowed, float("-inf")).topk(min(k, T), dim=-1).indices
    return torch.zeros_like(scores, dtype=torch.bool).scatter(-1, chosen, True) & allowed


def _topk_reference(scores, k):
    return _topk(scores, k)


def _topk_cases() -> Cases:
    """(scores (..., T, T), k), scores distinct (no ties), seeded."""
    g = torch.Generator().manual_seed(190)

    def scores(*shape):
        return torch.randn(*shape, generator=g)

    return [
        ("T = 8, k = 3", (scores(8, 8), 3)),
        ("k = 1: the one best key", (scores(6, 6), 1)),
        ("k = T: the causal mask", (scores(5, 5), 5)),
        ("k > T: every allowed key", (scores(4, 4), 10)),
        ("the future scores highest", (scores(6, 6) + 10 * torch.ones(6, 6).triu(1), 2)),
        ("negative scores", (-scores(7, 7).abs() - 1, 3)),
        ("batched: (B=2, T=9), k = 4", (scores(2, 9, 9), 4)),
        ("T = 1", (scores(1, 1), 2)),
    ]


causal_topk_mask = _register(
    Check(
        exercise="ch20-topk-mask",
        function="causal_topk_mask",
        cases=_topk_cases,
        reference=_topk_reference,
        hint="fill the future (s > t) with -inf, take .topk(min(k, T), dim=-1).indices, scatter True at them into a "
        "boolean tensor of zeros, and AND it with the causal mask (a short row 'chooses' some -inf keys too)",
        covers="k = 3, k = 1, k = T, k > T, the future scoring highest, negative scores, batched, T = 1",
        forbids=("topk_mask", "sparse_attention"),
        diagnoses=(
            (
                "your mask chooses among future keys too: only keys s <= t are allowed; fill the others with -inf "
                "before topk",
                lambda got, e, scores, k: matches(got, _topk(scores, k, causal=False), 0.0),
            ),
            (
                "your first rows keep keys from the future: a query with fewer than k allowed keys keeps those "
                "alone; AND the chosen keys with the causal mask",
                lambda got, e, scores, k: (
                    isinstance(got, torch.Tensor)
                    and got.shape == e.shape
                    and bool((got & ~e).any())
                    and torch.equal(got & torch.ones_like(got).tril(), e)
                ),
            ),
            (
                "your mask is not boolean: return True where the query attends (torch.bool)",
                lambda got, e, *args: (
                    isinstance(got, torch.Tensor) and got.dtype != torch.bool and torch.equal(got.bool(), e)
                ),  # fmt: skip
            ),
        ),
    )
)
