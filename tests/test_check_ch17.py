"""Chapter 17's checkers: the keys and values an MLA latent can give a multi-head layer, and one
step of absorbed attention. Each reference is checked against an independent one: the
Eckart-Young bound and the rank of the result, checked by brute force against other rank-r
candidates; attnlib's MultiHeadLatentAttention (both forms) and transformers' DeepseekV3Attention.
The notebook's solutions pass, and the classic mistakes fail."""

import math

import pytest
import torch
import torch.nn.functional as F
from _solutions import fails, notebook_solution

from attnlib import MultiHeadLatentAttention, apply_rope, check, split_heads
from attnlib.check import CHECKS

LATENT = CHECKS["ch17-latent-from-mha"]
ABSORBED = CHECKS["ch17-absorbed-attention"]
F64 = torch.float64
NOTEBOOK = "17_latent_attention.ipynb"


def _fails(checker, wrong, match, diagnosis):
    fails(checker, wrong, match, diagnosis)


def test_registered_under_their_exercises():
    assert LATENT is check.latent_from_mha and LATENT.function == "latent_from_mha"
    assert ABSORBED is check.absorbed_attention and ABSORBED.function == "absorbed_attention"


# ------------------------------------------------------------------ ch17-latent-from-mha


def test_latent_reference_has_the_rank_and_the_error_of_eckart_young():
    """The result has rank at most kv_rank, and misses exactly the singular values after the first kv_rank."""
    for label, (w_k, w_v, kv_rank) in LATENT.cases():
        a_k, a_v = LATENT.reference(w_k, w_v, kv_rank)
        assert a_k.shape == w_k.shape and a_v.shape == w_v.shape and a_k.dtype == w_k.dtype, label
        stacked, approx = torch.cat([w_k, w_v], 1).double(), torch.cat([a_k, a_v], 1).double()
        s = torch.linalg.svdvals(stacked)
        assert torch.linalg.matrix_rank(approx, rtol=1e-5).item() <= kv_rank, label
        error = (stacked - approx).norm()
        assert math.isclose(error.item(), s[kv_rank:].norm().item(), rel_tol=1e-4, abs_tol=1e-4), label


def test_latent_reference_beats_other_rank_r_pairs():
    """Any W_DKV of kv_rank columns, with its best W_UK, W_UV (least squares), does no better; in particular
    neither W_DKV from the keys alone nor random ones."""
    g = torch.Generator().manual_seed(0)
    for label, (w_k, w_v, kv_rank) in LATENT.cases():
        stacked = torch.cat([w_k, w_v], 1).double()  # (d_model, d_k + d_v)
        best = (stacked - torch.cat(LATENT.reference(w_k, w_v, kv_rank), 1).double()).norm()
        d_model = stacked.shape[0]
        keys_only = torch.linalg.svd(w_k.double(), full_matrices=False)[0][:, :kv_rank]
        candidates = [keys_only] + [torch.randn(d_model, kv_rank, generator=g, dtype=F64) for _ in range(5)]
        for W_dkv in candidates:  # the projection of [W_K | W_V] onto W_DKV's columns: the best up-projection
            Q, _ = torch.linalg.qr(W_dkv)
            assert (stacked - Q @ (Q.T @ stacked)).norm() >= best - 1e-6, label


def test_gqa_and_wide_latents_are_reproduced_exactly():
    for label, (w_k, w_v, kv_rank) in LATENT.cases():
        if "grouped-query" in label or "nothing is lost" in label or "more than d_model" in label or "rank 4" in label:
            a_k, a_v = LATENT.reference(w_k, w_v, kv_rank)
            torch.testing.assert_close(a_k, w_k, atol=1e-5, rtol=1e-5, msg=label)
            torch.testing.assert_close(a_v, w_v, atol=1e-5, rtol=1e-5, msg=label)


def _separate(w_k, w_v, kv_rank):
    """The classic mistake: one latent for the keys and another for the values (rank up to 2 kv_rank)."""

    def one(w):
        U, S, Vh = torch.linalg.svd(w, full_matrices=False)
        return (U[:, :kv_rank] * S[:kv_rank]) @ Vh[:kv_rank]

    return one(w_k), one(w_v)


def _stacked_svd(w_k, w_v, kv_rank, keep=None, dtype=None):
    U, S, Vh = torch.linalg.svd(torch.cat([w_k, w_v], 1), full_matrices=False)
    r = min(kv_rank if keep is None else keep, S.shape[0])
    out = (U[:, :r] * S[:r]) @ Vh[:r]
    out = out if dtype is None else out.to(dtype)
    return out[:, : w_k.shape[1]], out[:, w_k.shape[1] :]


def _split_in_half(w_k, w_v, kv_rank):
    k, v = _stacked_svd(w_k, w_v, kv_rank)
    both = torch.cat([k, v], 1)
    half = both.shape[1] // 2
    return both[:, :half], both[:, half:]


def test_latent_solutions_pass(capsys):
    check.latent_from_mha(notebook_solution(NOTEBOOK, "latent_from_mha"))
    check.latent_from_mha(_stacked_svd)  # float32 all the way: within the tolerance
    assert capsys.readouterr().out.count(f"all {len(LATENT.cases())} cases passed") == 2


def _smallest(w_k, w_v, kv_rank):
    """The last kv_rank terms of the decomposition: svd's values come largest first."""
    U, S, Vh = torch.linalg.svd(torch.cat([w_k, w_v], 1), full_matrices=False)
    out = (U[:, -kv_rank:] * S[-kv_rank:]) @ Vh[-kv_rank:]
    return out[:, : w_k.shape[1]], out[:, w_k.shape[1] :]


def _rows_stacked(w_k, w_v, kv_rank):
    """[W_K; W_V] (only when d_k = d_v) approximated, then split by rows: a shared up-projection."""
    U, S, Vh = torch.linalg.svd(torch.cat([w_k, w_v], 0), full_matrices=False)
    out = (U[:, :kv_rank] * S[:kv_rank]) @ Vh[:kv_rank]
    return out[: w_k.shape[0]], out[w_k.shape[0] :]


@pytest.mark.parametrize(
    "wrong, match, diagnosis",
    [
        (_separate, r"wrong values.*case: d_model = 4, one head", "you approximated w_k and w_v each with its own"),
        (_rows_stacked, r"wrong values.*case: d_model = 4, one head", "you stacked w_k and w_v as rows"),
        (_smallest, r"wrong values.*case: d_model = 4, one head", "you kept the smallest singular values"),
        (
            lambda w_k, w_v, r: _stacked_svd(w_k, w_v, r, keep=r - 1),
            r"wrong values.*case: d_model = 4, one head",
            None,  # kv_rank = 1: no terms at all, zeros; not told apart from other wrong answers
        ),
        (
            lambda w_k, w_v, r: _stacked_svd(w_k, w_v, r, keep=max(r - 1, 1)),
            r"wrong values.*case: DeepSeek|wrong values.*case: kv_rank = d_model = 8",
            "you kept kv_rank - 1 terms",
        ),
        (
            lambda w_k, w_v, r: _stacked_svd(w_k, w_v, r, keep=r + 1),
            r"wrong values.*case: d_model = 4, one head",
            "you kept kv_rank + 1 terms",
        ),
        (
            lambda w_k, w_v, r: (w_k, w_v),
            r"wrong values.*case: d_model = 4, one head",
            "your answer returns w_k and w_v unchanged",
        ),
        (lambda w_k, w_v, r: _stacked_svd(w_k, w_v, r, dtype=torch.float32), r"wrong dtype.*case: float64", None),
        (_split_in_half, r"wrong shape.*case: d_head_v = 4", None),  # as if d_k = d_v
    ],
)
def test_latent_classic_mistakes_are_caught(wrong, match, diagnosis):
    _fails(check.latent_from_mha, wrong, match, diagnosis)


def test_latent_cases_include_a_kv_rank_above_the_rank():
    """kv_rank larger than min(d_model, d_k + d_v): the first kv_rank singular values are all of them."""
    assert any(kv_rank > min(w_k.shape[0], w_k.shape[1] + w_v.shape[1]) for _, (w_k, w_v, kv_rank) in LATENT.cases())


# ------------------------------------------------------------------ ch17-absorbed-attention


def test_absorbed_reference_equals_attnlibs_layer_in_both_forms():
    """The reference on a layer's own queries, latents and rotated keys gives, after W_O, the layer's
    output for the new tokens, naive and absorbed, through a LatentCache."""
    from attnlib.latent import LatentCache

    torch.manual_seed(3)
    H, n, r, d_v = 3, 8, 4, 6
    x = torch.randn(2, 9, 24, dtype=F64)
    for absorb in (False, True):
        mla = MultiHeadLatentAttention(24, H, kv_rank=12, d_head_nope=n, d_head_rope=r, d_head_v=d_v, absorb=absorb)
        mla = mla.double().eval()
        with torch.no_grad():
            whole, _ = mla(x, is_causal=True)
            cache = LatentCache()
            mla(x[:, :5], is_causal=True, kv_cache=cache)  # 5 cached, then 4 new at once
            expected, _ = mla(x[:, 5:], is_causal=True, kv_cache=cache)
            q_nope, q_rope = split_heads(mla.w_q(x[:, 5:]), H).split([n, r], dim=-1)
            q_rope = apply_rope(q_rope, torch.arange(5, 9))
            c, k_rope = cache.c[:, 0], cache.k_rope[:, 0]  # (B, 9, kv_rank), (B, 9, d_rope)
            y = ABSORBED.reference(q_nope, q_rope, c, k_rope, mla.w_uk.weight, mla.w_uv.weight)  # (B, H, 4, d_v)
            got = mla.w_o(y.transpose(1, 2).flatten(2))
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(got, whole[:, 5:])


def test_absorbed_reference_equals_transformers_deepseek_v3():
    """transformers' DeepseekV3Attention, eager, with its own cache: the reference on its weights (split as
    from_hf does) gives its output for the new tokens."""
    transformers = pytest.importorskip("transformers")
    from _transformers import rope
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    import attnlib

    config = transformers.DeepseekV3Config(
        vocab_size=50, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10,
        **rope(), first_k_dense_replace=1,
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    layer = ds.DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.3) if p.dim() > 1 else p.normal_(1, 0.1)
    x = torch.randn(2, 7, 32)
    positions = torch.arange(7)[None].expand(2, 7)
    cos_sin = ds.DeepseekV3RotaryEmbedding(config)(x, positions)
    mask = attnlib.float_mask(attnlib.causal_mask(7, 7))[None, None]
    with torch.no_grad():
        expected, _ = layer(x, cos_sin, mask)
        H, n, r, rank = 4, 12, 8, 16
        q_nope, q_rope = layer.q_proj(x).view(2, 7, H, n + r).transpose(1, 2).split([n, r], dim=-1)
        q_rope = apply_rope(q_rope)  # DeepSeek-V3's pairs are interleaved, as attnlib's
        kv = layer.kv_a_proj_with_mqa(x)  # (B, T, rank + r): the latent's rows, then the rotated key's
        c, k_rope = layer.kv_a_layernorm(kv[..., :rank]), apply_rope(kv[..., rank:])
        kv_b = layer.kv_b_proj.weight.view(H, n + 10, rank)  # each head: its key rows, then its value rows
        w_uk, w_uv = kv_b[:, :n].reshape(H * n, rank), kv_b[:, n:].reshape(H * 10, rank)
        y = ABSORBED.reference(q_nope, q_rope, c, k_rope, w_uk, w_uv)  # (B, H, T, d_v)
        got = layer.o_proj(y.transpose(1, 2).flatten(2))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def _absorbed(
    q_nope, q_rope, c, k_rope, w_uk, w_uv, scale="model", mask="bottom_right", view="right", rope=True, expand=""
):
    """The absorbed form by hand, right or with one classic mistake; ``expand`` "keys", "values" or "both" (form 1)
    computes those from the latents instead (the same outputs, more multiply-adds)."""
    B, H, T_new, n = q_nope.shape
    T_k, rank = c.shape[1:]
    r = q_rope.shape[-1]
    W_uk = w_uk.view(H, n, rank) if view == "right" else w_uk.T.reshape(H, rank, n).transpose(-2, -1)
    if expand in ("keys", "both"):
        scores = q_nope @ (c[:, None] @ W_uk.mT).mT  # keys expanded: (B, H, T_k, n)
    else:
        scores = (q_nope @ W_uk) @ c[:, None].mT
    if rope:
        scores = scores + q_rope @ k_rope[:, None].mT
    width = {"model": n + r, "nope": n, "latent": rank + r}[scale]
    scores = scores / math.sqrt(width)
    if mask != "none":
        diagonal = T_k - T_new if mask == "bottom_right" else 0
        allowed = torch.ones(T_new, T_k, dtype=torch.bool).tril(diagonal=diagonal)
        scores = scores.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    W_uv = w_uv.view(H, -1, rank).mT  # (H, rank, d_v): W_UV,h
    if expand in ("values", "both"):
        return w @ (c[:, None] @ W_uv)  # values expanded: (B, H, T_k, d_v)
    return (w @ c[:, None]) @ W_uv


def test_absorbed_solutions_pass(capsys):
    check.absorbed_attention(notebook_solution(NOTEBOOK, "absorbed_attention"))
    check.absorbed_attention(_absorbed)
    assert capsys.readouterr().out.count(f"all {len(ABSORBED.cases())} cases passed") == 2


def test_absorbed_the_solution_spends_far_less_than_expanding():
    """The notebook's solution on the counted step: well under the budget, and equal to form 2's closed form,
    n_heads (d_nope kv_rank + T_k (2 kv_rank + d_rope) + kv_rank d_v) for one new token."""
    from attnlib.check.ch17 import _cost_case

    args = _cost_case()
    q_nope, q_rope, c, _, _, w_uv = args
    H, n, r, (T_k, rank) = q_nope.shape[1], q_nope.shape[-1], q_rope.shape[-1], c.shape[1:]
    d_v = w_uv.shape[0] // H
    form_2 = H * (n * rank + T_k * (2 * rank + r) + rank * d_v)
    spent = ABSORBED.count(notebook_solution(NOTEBOOK, "absorbed_attention"))
    assert spent == form_2 and spent * 4 < ABSORBED.budget(*args) == T_k * rank * H * n


@pytest.mark.parametrize("expand", ["keys", "values", "both"])
def test_absorbed_expanding_from_the_latents_fails(expand):
    """Form 1 (or half of it) gives the right outputs and fails on its multiply-adds, with a diagnosis."""
    _fails(
        check.absorbed_attention,
        lambda *a: _absorbed(*a, expand=expand),
        r"right outputs, but too many multiply-adds for form 2.*case: one new token after 255 cached.*counted: ",
        "you expand keys or values from the latents (form 1)",
    )


def test_absorbed_expanding_with_sdpa_fails():
    """Form 1 written with F.scaled_dot_product_attention, as the reference computes it."""

    def expanded(q_nope, q_rope, c, k_rope, w_uk, w_uv):
        B, H, T_new, n = q_nope.shape
        T_k, r = c.shape[1], k_rope.shape[-1]
        k_nope = (c @ w_uk.T).unflatten(-1, (H, n)).transpose(1, 2)  # (B, H, T_k, n)
        k = torch.cat([k_nope, k_rope[:, None].expand(B, H, T_k, r)], -1)
        v = (c @ w_uv.T).unflatten(-1, (H, -1)).transpose(1, 2)  # (B, H, T_k, d_v)
        allowed = torch.ones(T_new, T_k, dtype=torch.bool).tril(diagonal=T_k - T_new)
        return F.scaled_dot_product_attention(torch.cat([q_nope, q_rope], -1), k, v, attn_mask=allowed)

    _fails(check.absorbed_attention, expanded, r"too many multiply-adds", "you expand keys or values")


@pytest.mark.parametrize(
    "options, match, diagnosis",
    [
        ({"scale": "nope"}, r"wrong values.*case: a decoding step", "your scale is 1/sqrt(d_head_nope)"),
        ({"scale": "latent"}, r"wrong values.*case: a decoding step", "your scale is 1/sqrt(kv_rank + d_head_rope)"),
        ({"mask": "top_left"}, r"wrong values.*case: a decoding step", "your causal mask is aligned at the top left"),
        ({"mask": "none"}, r"wrong values.*case: the prompt", "your answer has no causal mask"),
        ({"view": "wrong"}, r"wrong values.*case: a decoding step", "your w_uk mixes the heads"),
        ({"rope": False}, r"wrong values.*case: a decoding step", "the rotated part is missing"),
    ],
)
def test_absorbed_classic_mistakes_are_caught(options, match, diagnosis):
    _fails(check.absorbed_attention, lambda *a: _absorbed(*a, **options), match, diagnosis)


def test_absorbed_the_dtype_is_kept():
    with pytest.raises(AssertionError, match=r"(?s)wrong dtype.*case: float64"):
        check.absorbed_attention(lambda *a: _absorbed(*a).float())


def test_absorbed_forbids_attnlibs_layer():
    def with_the_layer(q_nope, q_rope, c, k_rope, w_uk, w_uv):
        MultiHeadLatentAttention(8, 2, kv_rank=4)
        return _absorbed(q_nope, q_rope, c, k_rope, w_uk, w_uv)

    with pytest.raises(AssertionError, match="asks you to write absorbed_attention without attnlib.MultiHeadLatent"):
        check.absorbed_attention(with_the_layer)


def test_the_reference_is_sdpa_and_the_hand_form_agrees():
    """The reference (keys and values expanded, F.scaled_dot_product_attention) equals the absorbed form by hand
    in float64, case by case: two independent computations of the same numbers."""
    for label, args in ABSORBED.cases():
        a64 = [a.double() for a in args]
        torch.testing.assert_close(ABSORBED.reference(*a64), _absorbed(*a64), atol=1e-9, rtol=1e-9, msg=label)


def test_the_large_case_overflows_a_softmax_without_its_maximum():
    label, args = next((label, args) for label, args in ABSORBED.cases() if label.startswith("large queries"))
    q_nope, q_rope, c, k_rope, w_uk, w_uv = args
    H, n, rank = q_nope.shape[1], q_nope.shape[-1], c.shape[-1]
    scores = ((q_nope @ w_uk.view(H, n, rank)) @ c[:, None].mT + q_rope @ k_rope[:, None].mT) / math.sqrt(
        n + q_rope.shape[-1]
    )
    assert scores.abs().max() > 88  # exp(88.7) is float32's largest finite number
    assert torch.isinf(scores.exp()).any()
    assert not torch.isnan(F.softmax(scores, dim=-1)).any()


# ------------------------------------------------------------------ both


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    for entry in (LATENT, ABSORBED):
        entry.cases()
    assert torch.equal(torch.random.get_rng_state(), before)
