"""Chapter 20's checkers: one step of linear attention, one step of Gated DeltaNet, the causal top-k mask. Each
reference is checked against an independent one, attnlib's ``linear_attention_step``, ``gated_delta_rule`` (itself
equal to transformers' Qwen3-Next functions, tests/test_recurrent.py) and ``topk_mask``. The notebook's solutions
pass, and the classic mistakes fail with their diagnosis."""

import math

import pytest
import torch
import torch.nn.functional as F
from _solutions import fails, notebook_solution

from attnlib import check, gated_delta_rule, linear_attention_step, topk_mask
from attnlib.check import CHECKS

LINEAR = CHECKS["ch20-linear-step"]
DELTA = CHECKS["ch20-gated-delta-step"]
TOPK = CHECKS["ch20-topk-mask"]
NOTEBOOK = "20_beyond_softmax.ipynb"


def test_registered_under_their_exercises():
    assert LINEAR is check.linear_step and LINEAR.function == "linear_step"
    assert DELTA is check.gated_delta_step and DELTA.function == "gated_delta_step"
    assert TOPK is check.causal_topk_mask and TOPK.function == "causal_topk_mask"


def test_the_notebooks_solutions_pass(capsys):
    for entry in (LINEAR, DELTA, TOPK):
        entry(notebook_solution(NOTEBOOK, entry.function))
    out = capsys.readouterr().out
    for entry in (LINEAR, DELTA, TOPK):
        assert f"check.{entry.function}: all {len(entry.cases())} cases passed" in out


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    LINEAR.cases(), DELTA.cases(), TOPK.cases()
    assert torch.equal(torch.random.get_rng_state(), before)


# ------------------------------------------------------------------ references against attnlib


def test_linear_reference_is_attnlibs_step():
    for label, (q, k, v, S, z) in LINEAR.cases():
        out, S_new, z_new = LINEAR.reference(q, k, v, S, z)
        state = None if not z.any() else (S, z)  # attnlib starts from None, the zero state
        theirs, (S_theirs, z_theirs) = linear_attention_step(q, k, v, state, eps=0.0)
        torch.testing.assert_close(out, theirs, msg=label)
        torch.testing.assert_close(S_new, S_theirs, msg=label)
        torch.testing.assert_close(z_new, z_theirs, msg=label)


def test_delta_reference_is_one_token_of_attnlibs_gated_delta_rule():
    for label, (S, q, k, v, g, beta) in DELTA.cases():
        o, S_t = DELTA.reference(S, q, k, v, g, beta)
        d_k, d_v = k.shape[-1], v.shape[-1]

        def seq(x, d):  # (..., d) -> (1, H, 1, d): every leading index a head, one token
            return x.reshape(1, -1, 1, d)

        # gated_delta_rule divides q by sqrt(d_k) itself; the cases' q is divided already
        theirs, S_theirs = gated_delta_rule(seq(q * math.sqrt(d_k), d_k), seq(k, d_k), seq(v, d_v), g.reshape(1, -1, 1),
                                            beta.reshape(1, -1, 1), initial_state=S.reshape(1, -1, d_k, d_v),
                                            output_final_state=True, use_qk_l2norm=False)  # fmt: skip
        torch.testing.assert_close(o, theirs.reshape(o.shape), msg=label)
        torch.testing.assert_close(S_t, S_theirs.reshape(S_t.shape), msg=label)


def test_deltanet_overwrites_a_key():
    """g = 0, beta = 1, |k| = 1: after the step, S_t^T k_t is v_t, whatever S held."""
    (_, (S, q, k, v, g, beta)) = next(c for c in DELTA.cases() if c[0].startswith("DeltaNet"))
    _, S_t = DELTA.reference(S, q, k, v, g, beta)
    torch.testing.assert_close(S_t.T @ k, v)


def test_topk_reference_is_attnlibs_topk_mask():
    for label, (scores, k) in TOPK.cases():
        expected = topk_mask(scores, k)
        assert torch.equal(TOPK.reference(scores, k), expected), label
        T = scores.shape[-1]
        counts = expected.sum(-1).reshape(-1, T)  # (rows of every batch, T): keys per query
        assert counts.tolist() == [[min(k, t + 1) for t in range(T)]] * counts.shape[0], label


# ------------------------------------------------------------------ classic mistakes


def _phi(x):
    return F.elu(x) + 1


def _linear(q, k, v, S, z, read_old=False, normalise=True, features=True):
    phi_q, phi_k = (_phi(q), _phi(k)) if features else (q, k)
    S_new, z_new = S + phi_k.unsqueeze(-1) * v.unsqueeze(-2), z + phi_k
    S_r, z_r = (S, z) if read_old else (S_new, z_new)
    out = (phi_q.unsqueeze(-2) @ S_r).squeeze(-2)
    if normalise:
        out = out / (phi_q * z_r).sum(-1, keepdim=True)
    return out, S_new, z_new


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda *a: _linear(*a, read_old=True), "your output reads the state from before this token"),
        (lambda *a: _linear(*a, normalise=False), "your output is not normalised"),
        (lambda *a: _linear(*a, features=False), "your features are the raw q_t and k_t"),
        (lambda q, k, v, S, z: (torch.zeros_like(v), S, z), None),  # nothing written, nothing read
    ],
)
def test_linear_classic_mistakes_are_caught(wrong, diagnosis):
    fails(check.linear_step, wrong, r"wrong (values|shape).*case: ", diagnosis)


def test_linear_step_may_not_call_linear_attention_step():
    def cheat(q, k, v, S, z):
        out, (S, z) = linear_attention_step(q, k, v, (S, z), eps=0.0)
        return out, S, z

    with pytest.raises(AssertionError, match="without attnlib.linear_attention_step"):
        check.linear_step(cheat)


def _delta(S, q, k, v, g, beta, delta=True, decay_read=True, new_out=True):
    a = torch.exp(g)[..., None, None]
    read = ((a if decay_read else 1.0) * S * k.unsqueeze(-1)).sum(-2)
    write = v - read if delta else v
    S_t = a * S + k.unsqueeze(-1) * (beta.unsqueeze(-1) * write).unsqueeze(-2)
    return ((S_t if new_out else S) * q.unsqueeze(-1)).sum(-2), S_t


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda *a: _delta(*a, delta=False), "your state only adds"),
        (lambda *a: _delta(*a, decay_read=False), "you read S^T k_t from the state before its decay"),
        (lambda *a: _delta(*a, new_out=False), "your output reads the state from before this token"),
        (lambda S, q, k, v, g, beta: (q[..., :1].expand(*q.shape[:-1], v.shape[-1]), S), None),
    ],
)
def test_delta_classic_mistakes_are_caught(wrong, diagnosis):
    fails(check.gated_delta_step, wrong, r"wrong (values|shape).*case: ", diagnosis)


def test_delta_step_may_not_call_gated_delta_rule():
    def cheat(S, q, k, v, g, beta):
        d_k, d_v = k.shape[-1], v.shape[-1]
        o, S_t = gated_delta_rule((q * math.sqrt(d_k)).reshape(1, -1, 1, d_k), k.reshape(1, -1, 1, d_k),
                                  v.reshape(1, -1, 1, d_v), g.reshape(1, -1, 1), beta.reshape(1, -1, 1),
                                  initial_state=S.reshape(1, -1, d_k, d_v), output_final_state=True,
                                  use_qk_l2norm=False)  # fmt: skip
        return o.reshape(v.shape), S_t.reshape(S.shape)

    with pytest.raises(AssertionError, match="without attnlib.gated_delta_rule"):
        check.gated_delta_step(cheat)


def _topk(scores, k, causal=True, and_allowed=True, as_float=False):
    T = scores.shape[-1]
    allowed = torch.ones(T, T, dtype=torch.bool).tril() if causal else torch.ones(T, T, dtype=torch.bool)
    chosen = scores.masked_fill(~allowed, float("-inf")).topk(min(k, T), dim=-1).indices
    mask = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, chosen, True)
    mask = mask & allowed if and_allowed else mask
    return mask.float() if as_float else mask


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda s, k: _topk(s, k, causal=False), "your mask chooses among future keys too"),
        (lambda s, k: _topk(s, k, and_allowed=False), "your first rows keep keys from the future"),
        (lambda s, k: _topk(s, k, as_float=True), "your mask is not boolean"),
        (lambda s, k: torch.ones_like(s, dtype=torch.bool).tril(), None),  # every causal key: no choice made
    ],
)
def test_topk_classic_mistakes_are_caught(wrong, diagnosis):
    fails(check.causal_topk_mask, wrong, r"(wrong (values|shape)|expected a bool tensor).*case: ", diagnosis)


def test_topk_may_not_call_topk_mask():
    with pytest.raises(AssertionError, match="without attnlib.topk_mask"):
        check.causal_topk_mask(lambda scores, k: topk_mask(scores, k))
