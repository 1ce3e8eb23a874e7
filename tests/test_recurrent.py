"""Chapter 20's library: linear attention (parallel, recurrent, one step) and Gated DeltaNet
(recurrent, chunked, the layer), each against an independent reference: loops written out here,
softmax attention, and transformers' Qwen3-Next functions and layer given the same inputs and weights."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from attnlib._validate import AttnlibError
from attnlib.recurrent import (
    GatedDeltaNet,
    elu_feature_map,
    gated_delta_rule,
    linear_attention,
    linear_attention_step,
)


def _qwen3_next():
    """transformers' Qwen3-Next code (the tests that compare with it skip without transformers)."""
    pytest.importorskip("transformers")
    from transformers.models.qwen3_next import modeling_qwen3_next

    return modeling_qwen3_next


F64 = torch.float64
TOL32 = {"atol": 1e-5, "rtol": 1e-5}  # float32 against transformers: different orders of the same sums
TOL64 = {"atol": 1e-10, "rtol": 1e-10}  # float64, two forms of the same function


def _qkv(*shape, d_v=None, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(*shape, generator=g, dtype=dtype) for _ in range(2))
    v = torch.randn(*shape[:-1], d_v or shape[-1], generator=g, dtype=dtype)
    return q, k, v


# 1. Linear attention -----------------------------------------------------------------------------


def _quadratic_reference(q, k, v, phi, is_causal):
    """Linear attention one query and one key at a time: w_ts = phi(q_t) . phi(k_s), out_t = sum_s w_ts v_s / sum_s w_ts."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    out = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for t in range(T_q):
        num, den = 0.0, 0.0
        for s in range(t + 1 if is_causal else T_k):
            w = (phi(q[..., t, :]) * phi(k[..., s, :])).sum(-1, keepdim=True)
            num, den = num + w * v[..., s, :], den + w
        out[..., t, :] = num / den
    return out


@pytest.mark.parametrize("is_causal", [True, False])
def test_linear_attention_parallel_equals_recurrent_and_the_loops(is_causal):
    q, k, v = _qkv(2, 3, 9, 4, d_v=5)
    parallel = linear_attention(q, k, v, is_causal=is_causal, eps=0.0)
    recurrent = linear_attention(q, k, v, is_causal=is_causal, recurrent=True, eps=0.0)
    reference = _quadratic_reference(q, k, v, lambda x: F.elu(x) + 1, is_causal)
    assert parallel.shape == (2, 3, 9, 5)
    torch.testing.assert_close(parallel, recurrent, **TOL64)
    torch.testing.assert_close(parallel, reference, **TOL64)


def test_linear_attention_non_causal_takes_other_lengths_and_a_feature_map_of_another_width():
    q, _, _ = _qkv(2, 4, 3)
    _, k, v = _qkv(2, 7, 3, seed=1)
    phi = lambda x: torch.cat([F.relu(x), F.relu(-x)], dim=-1) + 0.1  # d_phi = 2 d_k
    out = linear_attention(q, k, v, feature_map=phi, is_causal=False, eps=0.0)
    torch.testing.assert_close(
        out, linear_attention(q, k, v, feature_map=phi, is_causal=False, recurrent=True, eps=0.0)
    )
    torch.testing.assert_close(out, _quadratic_reference(q, k, v, phi, is_causal=False), **TOL64)


def test_linear_attention_with_a_constant_feature_map_is_the_running_mean():
    """phi = 1 weighs every visible key alike: out_t is the mean of v_1 .. v_t (causal) or of all v."""
    q, k, v = _qkv(2, 6, 3)
    ones = lambda x: torch.ones_like(x)
    counts = torch.arange(1, 7, dtype=F64).unsqueeze(-1)
    for recurrent in (False, True):
        causal = linear_attention(q, k, v, feature_map=ones, recurrent=recurrent, eps=0.0)
        torch.testing.assert_close(causal, v.cumsum(-2) / counts, **TOL64)
        every = linear_attention(q, k, v, feature_map=ones, is_causal=False, recurrent=recurrent, eps=0.0)
        torch.testing.assert_close(every, v.mean(-2, keepdim=True).expand_as(v), **TOL64)
    torch.testing.assert_close(elu_feature_map(q), torch.where(q > 0, q + 1, q.exp()), **TOL64)


def _weights(q, k, **options):
    """The weights a linear attention implies: its output for the values I (row s of v = e_s)."""
    return linear_attention(q, k, torch.eye(k.shape[-2], dtype=k.dtype).expand(*k.shape[:-1], -1), **options)


def test_linear_attention_weights_sum_to_one_and_do_not_select_like_softmax():
    q, k, _ = _qkv(2, 8, 4)
    W = _weights(q, k, eps=0.0)
    torch.testing.assert_close(W.sum(-1), torch.ones(2, 8, dtype=F64), **TOL64)
    visible = torch.ones(8, 8, dtype=torch.bool).tril()
    assert (W[..., visible] > 0).all() and (W[..., ~visible] == 0).all()  # causal, and every visible key counts
    # Keys e_0 .. e_3 (times 6), each query one of them: softmax picks that key (weight > 0.99),
    # linear attention's elu + 1 spreads the weight (phi(k) is never 0): the largest weight stays small.
    keys = 6 * torch.eye(4, dtype=F64)  # (T_k = 4, d_k = 4)
    queries = keys[[2, 0, 3]]  # (T_q = 3, d_k)
    soft = torch.softmax(queries @ keys.T, dim=-1)
    linear = _weights(queries, keys, is_causal=False, eps=0.0)
    assert (soft.max(-1).values > 0.99).all(), soft
    assert (linear.max(-1).values < 0.6).all(), linear
    torch.testing.assert_close(soft.argmax(-1), linear.argmax(-1))  # same favourite, far less sharply


def test_linear_attention_is_not_softmax_attention():
    q, k, v = _qkv(1, 2, 16, 8, dtype=torch.float32)
    softmax = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    diff = (linear_attention(q, k, v) - softmax).abs().max()
    assert diff > 0.1, diff  # T = 1 aside (one key: both give v_1), the outputs differ
    torch.testing.assert_close(linear_attention(q, k, v)[..., 0, :], softmax[..., 0, :])


# 2. One step at a time ---------------------------------------------------------------------------


def test_linear_attention_step_equals_the_recurrent_form_with_a_state_of_constant_size():
    q, k, v = _qkv(2, 1000, 4, d_v=3, dtype=torch.float32)
    whole = linear_attention(q, k, v, recurrent=True)
    state, outs, sizes = None, [], set()
    for t in range(1000):
        out_t, state = linear_attention_step(q[:, t], k[:, t], v[:, t], state)
        outs.append(out_t)
        sizes.add(sum(x.nbytes for x in state))
    assert sizes == {2 * (4 * 3 + 4) * 4}, sizes  # B (d_k d_v + d_k) float32 bytes, from step 1 to 1000
    torch.testing.assert_close(torch.stack(outs, dim=1), whole, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(torch.stack(outs, dim=1), linear_attention(q, k, v), atol=1e-5, rtol=1e-4)


def test_linear_attention_bad_input():
    q, k, v = _qkv(5, 4)
    with pytest.raises(AttnlibError, match="is_causal"):
        linear_attention(q, k[:3], v[:3])
    with pytest.raises(AttnlibError, match="feature_map"):
        linear_attention(q, k, v, feature_map=lambda x: x[..., :2, :])
    with pytest.raises(AttnlibError, match="eps: expected a number >= 0"):
        linear_attention(q, k, v, eps=-1.0)
    with pytest.raises(AttnlibError, match="state: expected None or a pair"):
        linear_attention_step(q[0], k[0], v[0], state=torch.zeros(4, 4))


# 3. Gated DeltaNet -------------------------------------------------------------------------------


def _delta_inputs(B=2, H_k=2, H=4, T=12, d_k=8, d_v=6, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H_k, T, d_k, generator=gen, dtype=dtype)
    k = torch.randn(B, H_k, T, d_k, generator=gen, dtype=dtype)
    v = torch.randn(B, H, T, d_v, generator=gen, dtype=dtype)
    g = -torch.rand(B, H, T, generator=gen, dtype=dtype)  # decays exp(g) in (0.37, 1]
    beta = torch.rand(B, H, T, generator=gen, dtype=dtype)
    return q, k, v, g, beta


def _transformers(q, k, v, g, beta, chunk_size=None, initial_state=None, l2norm=True):
    """transformers' function on attnlib's inputs: (B, H, T, d) -> its (B, T, H, d) and back."""
    repeat = v.shape[1] // q.shape[1]
    hf = _qwen3_next()
    fn = hf.torch_recurrent_gated_delta_rule if chunk_size is None else hf.torch_chunk_gated_delta_rule
    if "repeat_interleave" not in inspect.getsource(fn):  # 4.57: the layer repeats the q/k heads, not the function
        q, k = (x.repeat_interleave(repeat, dim=1) for x in (q, k))
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # (B, H, T, d) -> (B, T, H, d)
    g, beta = (x.transpose(1, 2) for x in (g, beta))  # (B, H, T) -> (B, T, H)
    options = {} if chunk_size is None else {"chunk_size": chunk_size}
    o, S = fn(q, k, v, g=g, beta=beta, initial_state=initial_state, output_final_state=True,
              use_qk_l2norm_in_kernel=l2norm, **options)  # fmt: skip
    return o.transpose(1, 2), S  # (B, T, H, d_v) -> (B, H, T, d_v)


CHUNKS = [1, 3, 4, 5, 7, 12, 16]  # T = 12: 1, 3, 4, 12 divide it; 5, 7, 16 do not (padded)


def test_gated_delta_rule_chunked_equals_recurrent_in_float64():
    q, k, v, g, beta = _delta_inputs(dtype=F64)
    S0 = torch.randn(2, 4, 8, 6, generator=torch.Generator().manual_seed(1), dtype=F64)
    o, S = gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True)
    assert o.shape == (2, 4, 12, 6) and o.dtype == F64 and S.shape == (2, 4, 8, 6)
    for C in CHUNKS:
        o_c, S_c = gated_delta_rule(q, k, v, g, beta, chunk_size=C, initial_state=S0, output_final_state=True)
        torch.testing.assert_close(o_c, o, **TOL64, msg=f"chunk_size={C}")
        torch.testing.assert_close(S_c, S, **TOL64, msg=f"chunk_size={C}")


@pytest.mark.parametrize("chunk_size", [None, *CHUNKS])
@pytest.mark.parametrize("l2norm", [True, False])
def test_gated_delta_rule_equals_transformers(chunk_size, l2norm):
    q, k, v, g, beta = _delta_inputs()
    S0 = torch.randn(2, 4, 8, 6, generator=torch.Generator().manual_seed(2))
    for initial_state in (None, S0):
        o, S = gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size, initial_state=initial_state,
                                output_final_state=True, use_qk_l2norm=l2norm)  # fmt: skip
        o_hf, S_hf = _transformers(q, k, v, g, beta, chunk_size, initial_state, l2norm)
        torch.testing.assert_close(o, o_hf, **TOL32)
        torch.testing.assert_close(S, S_hf, **TOL32)


@pytest.mark.parametrize("chunk_size", [None, 4, 5])
def test_gated_delta_rule_state_carries_over_a_split(chunk_size):
    """The first 7 tokens' final state, given as the next 5 tokens' initial state: the whole 12 tokens."""
    q, k, v, g, beta = _delta_inputs(dtype=F64)
    o, S = gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size, output_final_state=True)
    first = gated_delta_rule(*(x[:, :, :7] for x in (q, k, v, g, beta)), chunk_size=chunk_size, output_final_state=True)
    second = gated_delta_rule(*(x[:, :, 7:] for x in (q, k, v, g, beta)), chunk_size=chunk_size,
                              initial_state=first[1], output_final_state=True)  # fmt: skip
    torch.testing.assert_close(torch.cat([first[0], second[0]], dim=2), o, **TOL64)
    torch.testing.assert_close(second[1], S, **TOL64)
    assert gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size)[1] is None


@pytest.mark.parametrize("chunk_size", [None, 5])
def test_gated_delta_rule_without_gate_is_the_plain_delta_rule(chunk_size):
    """g = 0 (no decay), beta = 1: S_t = S_{t-1} + k_t (v_t - S_{t-1}^T k_t)^T, written here one head at a time.
    With unit keys, S_t^T k_t = v_t: the state returns the value just written under its key."""
    q, k, v, _, _ = _delta_inputs(B=1, H_k=2, H=2, T=9, dtype=F64)
    zeros, ones = torch.zeros(1, 2, 9, dtype=F64), torch.ones(1, 2, 9, dtype=F64)
    o = gated_delta_rule(q, k, v, zeros, ones, chunk_size=chunk_size)[0]
    for h in range(2):
        S = torch.zeros(8, 6, dtype=F64)
        for t in range(9):
            q_t = q[0, h, t] / q[0, h, t].norm() / math.sqrt(8)  # l2norm's eps 1e-6 is below the tolerance
            k_t = k[0, h, t] / k[0, h, t].norm()
            S = S + torch.outer(k_t, v[0, h, t] - S.T @ k_t)
            torch.testing.assert_close(S.T @ k_t, v[0, h, t], **TOL64)
            torch.testing.assert_close(o[0, h, t], S.T @ q_t, atol=1e-6, rtol=1e-6)


def test_gated_delta_rule_bad_input():
    q, k, v, g, beta = _delta_inputs()
    with pytest.raises(AttnlibError, match=r"v: expected \(B=2, H, T=12, d_v\) with H a multiple of H_k=2"):
        gated_delta_rule(q, k, v[:, :3], g[:, :3], beta[:, :3])
    with pytest.raises(AttnlibError, match="beta: expected shape"):
        gated_delta_rule(q, k, v, g, beta[..., :5])
    with pytest.raises(AttnlibError, match="chunk_size: expected a positive int"):
        gated_delta_rule(q, k, v, g, beta, chunk_size=0)
    with pytest.raises(AttnlibError, match="initial_state"):
        gated_delta_rule(q, k, v, g, beta, initial_state=torch.zeros(2, 4, 6, 8))
    with pytest.raises(AttnlibError, match="q: expected a 4-D tensor"):
        gated_delta_rule(q[0], k, v, g, beta)


# 4. The layer ------------------------------------------------------------------------------------


def _hf_layer(seed=0):
    """A tiny transformers Qwen3NextGatedDeltaNet: 2 query/key heads, 4 value heads, random weights throughout."""
    hf = _qwen3_next()
    torch.manual_seed(seed)
    config = hf.Qwen3NextConfig(
        hidden_size=32, num_hidden_layers=1, layer_types=["linear_attention"], num_attention_heads=2,
        num_key_value_heads=1, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=6, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, hidden_act="silu",
    )  # fmt: skip
    layer = hf.Qwen3NextGatedDeltaNet(config, layer_idx=0).eval()
    layer.config = config  # for _hf_generate's cache
    with torch.no_grad():  # the defaults (ones) would hide a swapped or missing weight
        layer.dt_bias.normal_()
        layer.norm.weight.normal_()
    return layer


def _hf_generate(layer, x, n_prefill):
    """transformers' layer with its own cache: n_prefill tokens at once, then one token per call."""
    hf = _qwen3_next()
    if hasattr(hf, "Qwen3NextDynamicCache"):  # transformers 4.x: the model's own cache class, `cache_params`
        cache = {"cache_params": hf.Qwen3NextDynamicCache(layer.config)}
    else:
        from transformers import DynamicCache

        cache = {"cache": DynamicCache(config=layer.config)}
    outs, start = [], 0
    with torch.no_grad():
        for stop in [n_prefill, *range(n_prefill + 1, x.shape[1] + 1)]:
            # cache_position: 4.x decodes from the cache only when it is given (5.x ignores it)
            outs.append(layer(x[:, start:stop], **cache, cache_position=torch.arange(start, stop)))
            start = stop
    return torch.cat(outs, dim=1)


def test_gated_deltanet_equals_transformers_layer():
    hf = _hf_layer()
    x = torch.randn(2, 11, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = hf(x)
        for chunk_size in (4, 64):  # 4 pads 11 tokens to 12; 64 as transformers
            y, state = GatedDeltaNet.from_hf(hf, chunk_size=chunk_size)(x)
            torch.testing.assert_close(y, expected, **TOL32)
    assert state.conv.shape == (2, 3, 2 * 16 + 24) and state.recurrent.shape == (2, 4, 8, 6)


def test_gated_deltanet_step_by_step_equals_transformers_and_keeps_a_constant_state():
    """Generation: 5 tokens at once (prefill), then one token per call with the state: transformers' whole
    sequence, and transformers' layer generating with its own cache."""
    hf = _hf_layer(seed=1)
    layer = GatedDeltaNet.from_hf(hf)
    x = torch.randn(1, 12, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = hf(x)
        y, state = layer(x[:, :5])
        outs, sizes = [y], set()
        for t in range(5, 12):
            y, state = layer(x[:, t : t + 1], state)
            outs.append(y)
            sizes.add(sum(s.nbytes for s in state))
    torch.testing.assert_close(torch.cat(outs, dim=1), expected, **TOL32)
    torch.testing.assert_close(torch.cat(outs, dim=1), _hf_generate(hf, x, 5), **TOL32)
    assert sizes == {(3 * 56 + 4 * 8 * 6) * 4}, sizes  # (K - 1) conv_dim + H d_k d_v float32 numbers


def test_gated_deltanet_bad_input():
    with pytest.raises(AttnlibError, match="n_k_heads: expected a divisor of n_heads=4"):
        GatedDeltaNet(16, n_heads=4, d_head_k=4, d_head_v=4, n_k_heads=3)
    with pytest.raises(AttnlibError, match="layer: expected a transformers Qwen3NextGatedDeltaNet"):
        GatedDeltaNet.from_hf(torch.nn.Linear(2, 2))
