"""Chapter 5: attnlib's explicit attention against F.scaled_dot_product_attention."""

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib._validate import AttnlibError
from attnlib.attention import attention, attention_weights
from attnlib.masks import causal_mask, padding_mask
from attnlib.tiled import tiled_attention

FAST = settings(max_examples=50, deadline=None, derandomize=True, database=None)  # deterministic CI
NEG_INF = float("-inf")


def raises(*fragments):
    """pytest.raises(AttnlibError) whose message contains every fragment, in order."""
    return pytest.raises(AttnlibError, match=".*".join(re.escape(f) for f in fragments))


def reference_weights(q, k, mask, scale):
    """Weights by torch alone: torch.softmax of the masked scores, nan (fully masked row) -> 0."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("...id,...jd->...ij", q, k) * scale
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, NEG_INF)
    elif mask is not None:
        scores = scores + mask
    return torch.softmax(scores, dim=-1).nan_to_num(nan=0.0)


@st.composite
def cases(draw):
    """Random shapes (batch dims, T_q != T_k, d_k != d_v, sizes 1 included), a mask kind, a scale."""
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    T_q, T_k, d_k, d_v = (draw(st.integers(1, 6)) for _ in range(4))
    kind = draw(st.sampled_from(["none", "bool", "float", "causal"]))
    full = batch + [T_q, T_k]
    drop = draw(st.integers(0, len(batch)))  # the mask may leave out leading batch dims
    mask_shape = [n if draw(st.booleans()) else 1 for n in full[drop:-2]] + full[-2:]
    scale = draw(st.one_of(st.none(), st.just(1.0), st.floats(0.05, 3.0)))
    p_blocked = draw(st.sampled_from([0.0, 0.4, 0.8]))  # 0.8: many rows fully masked
    return batch, T_q, T_k, d_k, d_v, kind, mask_shape, scale, p_blocked, draw(st.integers(0, 2**16))


def make(case, dtype):
    batch, T_q, T_k, d_k, d_v, kind, mask_shape, scale, p_blocked, seed = case
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, T_q, d_k, generator=g, dtype=dtype)
    k = torch.randn(*batch, T_k, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, T_k, d_v, generator=g, dtype=dtype)
    blocked = torch.rand(mask_shape, generator=g) < p_blocked
    mask = None
    if kind == "bool":
        mask = ~blocked  # True = may attend
    elif kind == "float":  # finite biases, with -inf where blocked
        mask = (torch.randn(mask_shape, generator=g, dtype=dtype)).masked_fill(blocked, NEG_INF)
    return q, k, v, mask, kind == "causal", scale


@FAST
@given(case=cases())
def test_attention_matches_sdpa_float64(case):
    q, k, v, mask, is_causal, scale = make(case, torch.float64)
    out, weights = attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
    assert out.shape == expected.shape and not torch.isnan(out).any()
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-8)
    ref_mask = causal_mask(q.shape[-2], k.shape[-2]) if is_causal else mask
    torch.testing.assert_close(weights, reference_weights(q, k, ref_mask, scale), atol=1e-12, rtol=1e-10)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(case=cases())
def test_attention_matches_sdpa_float32(case):
    q, k, v, mask, is_causal, scale = make(case, torch.float32)
    out, _ = attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)


def test_weights_rows_sum_to_one_and_out_is_weighted_values():
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g), torch.randn(5, 2, generator=g)
    out, weights = attention(q, k, v)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4))
    for i in range(4):  # output row i = sum_j weights[i, j] * v[j]
        torch.testing.assert_close(out[i], sum(weights[i, j] * v[j] for j in range(5)))


def test_batch_dims_broadcast_like_sdpa():
    # keys and values shared by every head: (B, 1, T_k, d) against queries (B, H, T_q, d)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)
    k = torch.randn(2, 1, 6, 5, generator=g, dtype=torch.float64)
    v = torch.randn(2, 1, 6, 7, generator=g, dtype=torch.float64)
    out, weights = attention(q, k, v, is_causal=True)
    assert out.shape == (2, 3, 4, 7) and weights.shape == (2, 3, 4, 6)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("kind", ["bool", "float", "padding"])
def test_fully_masked_rows_give_zeros_never_nan(kind):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, 3, 4, generator=g) for _ in range(3))
    if kind == "padding":
        mask = padding_mask(torch.tensor([0, 2]), 3)  # sequence 0 has no real token at all
        dead = (0, slice(None), slice(None))
    else:
        mask = torch.ones(3, 3, dtype=torch.bool)
        mask[1] = False  # query 1 may attend to nothing
        if kind == "float":
            mask = torch.zeros(3, 3).masked_fill(~mask, NEG_INF)
        dead = (slice(None), slice(None), 1)
    qg = q.clone().requires_grad_()
    out, weights = attention(qg, k, v, attn_mask=mask)
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    assert (out[dead] == 0).all() and (weights[dead] == 0).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    out.sum().backward()
    assert torch.isfinite(qg.grad).all()


@pytest.mark.parametrize("is_causal", [False, True])
def test_no_keys_gives_zeros_like_sdpa(is_causal):
    """T_k = 0: no key to attend to, as a fully masked row: zeros, as SDPA returns, with or
    without is_causal; and tiled_attention agrees (one behaviour across the three)."""
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 3, 4, generator=g)
    k, v = torch.empty(2, 0, 4), torch.empty(2, 0, 5)
    out, weights = attention(q, k, v, is_causal=is_causal)
    assert out.shape == (2, 3, 5) and weights.shape == (2, 3, 0)
    assert (out == 0).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal))
    torch.testing.assert_close(out, tiled_attention(q, k, v, is_causal=is_causal))


@pytest.mark.parametrize("is_causal", [False, True])
def test_no_queries_gives_an_empty_output_like_sdpa(is_causal):
    g = torch.Generator().manual_seed(7)
    q, k, v = torch.empty(2, 0, 4), torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 5, generator=g)
    out, weights = attention(q, k, v, is_causal=is_causal)
    assert out.shape == (2, 0, 5) and weights.shape == (2, 0, 3)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal))
    torch.testing.assert_close(out, tiled_attention(q, k, v, is_causal=is_causal))


def test_attention_is_causal():
    # Changing the tokens after position t leaves the outputs up to t unchanged.
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 8, 4, generator=g) for _ in range(3))
    out, _ = attention(q, k, v, is_causal=True)
    for t in range(7):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        for x in (q2, k2, v2):
            x[:, t + 1 :] = torch.randn(2, 7 - t, 4, generator=g)
        out2, _ = attention(q2, k2, v2, is_causal=True)
        torch.testing.assert_close(out2[:, : t + 1], out[:, : t + 1], atol=0, rtol=0)
        assert not torch.allclose(out2[:, t + 1 :], out[:, t + 1 :])  # the change was seen later on


def test_attention_weights_is_the_weights_of_attention():
    g = torch.Generator().manual_seed(7)
    q, k, v = torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)
    mask = torch.rand(3, 5, generator=g) > 0.3
    assert torch.equal(attention_weights(q, k, mask), attention(q, k, v, mask)[1])


def test_attention_bad_input():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with raises("k:", "d_k = 4", "d_k = 8"):
        attention(q, torch.randn(2, 5, 8), v)
    with raises("v:", "T_k = 5", "T_k = 7"):
        attention(q, k, torch.randn(2, 7, 6))
    with raises("k:", "same rank", "(5, 4)"):
        attention(q, torch.randn(5, 4), v)
    with raises("v:", "same rank", "(1, 2, 5, 6)"):
        attention(q, k, torch.randn(1, 2, 5, 6))
    with raises("q:", "(..., T_q, d_k)", "(4,)"):
        attention(torch.randn(4), torch.randn(4), torch.randn(4))
    with raises("v:", "torch.float32", "torch.float64"):
        attention(q, k, v.double())
    with raises("attn_mask:", "bool", "floating-point", "torch.int64"):
        attention(q, k, v, attn_mask=torch.ones(3, 5, dtype=torch.long))
    with raises("attn_mask:", "scores' shape (2, 3, 5)", "(3, 4)"):
        attention(q, k, v, attn_mask=torch.ones(3, 4, dtype=torch.bool))
    with raises("attn_mask:", "scores' shape (2, 3, 5)", "(7, 3, 5)"):
        attention(q, k, v, attn_mask=torch.ones(7, 3, 5, dtype=torch.bool))
    with raises("attn_mask:", "None when is_causal=True", "(3, 5)"):
        attention(q, k, v, attn_mask=torch.ones(3, 5, dtype=torch.bool), is_causal=True)
    with raises("is_causal:", "True or False", "int 1"):
        attention(q, k, v, is_causal=1)


def _fully_masked_case(device):
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 3, 4, 8, generator=g).to(device) for _ in range(3))  # (B, n_heads, T, d_head)
    mask = torch.ones(4, 4, dtype=torch.bool).tril().to(device)
    mask[0] = False  # query 0 may see no key
    return q, k, v, mask


def _sdpa_backends(device):
    from torch.nn.attention import SDPBackend

    names = ["MATH"] + (["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"] if device == "cuda" else [])
    return [getattr(SDPBackend, n) for n in names if hasattr(SDPBackend, n)]


def _assert_fully_masked_rows_are_zero(device):
    """What the chapters state: SDPA returns zeros (not NaN) for a query whose keys are all masked,
    on this torch version, with the default dispatch and with each backend that accepts a mask."""
    from torch.nn.attention import sdpa_kernel

    q, k, v, mask = _fully_masked_case(device)
    outs = {"default": F.scaled_dot_product_attention(q, k, v, attn_mask=mask)}
    for backend in _sdpa_backends(device):
        try:
            with sdpa_kernel(backend):
                outs[backend.name] = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        except RuntimeError:  # this backend does not take a boolean mask on this device
            continue
    ours, _ = attention(q, k, v, attn_mask=mask)
    for name, out in outs.items():
        assert not out.isnan().any(), f"SDPA ({name}, torch {torch.__version__}, {device}) returned NaN"
        assert torch.equal(out[:, :, 0], torch.zeros_like(out[:, :, 0])), f"{name}: fully masked row is not zero"
        torch.testing.assert_close(out, ours)


def test_sdpa_fully_masked_row_is_zero_on_cpu():
    assert torch.__version__.startswith("2.13.0"), "the chapters state this for torch 2.13.0: re-check on upgrade"
    _assert_fully_masked_rows_are_zero("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sdpa_fully_masked_row_is_zero_on_cuda():
    _assert_fully_masked_rows_are_zero("cuda")
