"""Chapter 20: attention as a recurrence: linear attention and Gated DeltaNet.

**Linear attention** (Katharopoulos et al. 2020, "Transformers are RNNs") replaces
``exp(q . k)`` by ``phi(q) . phi(k)`` with a feature map ``phi`` (``elu(x) + 1``, positive).
The weights are still ``phi(q_t) . phi(k_s)`` over their row's sum, but the sum over keys
can now be taken before the query arrives. Causal, one query at a time::

    S_t = S_{t-1} + phi(k_t)^T v_t        # (d_phi, d_v): the state, a sum of outer products
    z_t = z_{t-1} + phi(k_t)              # (d_phi,): the normaliser
    out_t = phi(q_t) S_t / (phi(q_t) . z_t)

so generating a token costs the same at every ``t``: the state does not grow with ``T``.

**Gated DeltaNet** (Yang et al. 2025, "Gated Delta Networks"; the delta rule of DeltaNet,
Yang et al. 2024) overwrites instead of only adding. Before writing ``v_t`` under the key
``k_t``, it removes what the decayed state already stores there::

    S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T    # (d_k, d_v)
    o_t = S_t^T q_t                                                        # (d_v,)

with ``g_t <= 0`` a decay in log space and ``beta_t`` in (0, 1) a write strength; ``q`` and
``k`` are L2-normalised and ``q`` is scaled by ``1/sqrt(d_k)``, as transformers' Qwen3-Next
code computes it. The chunked form computes the same outputs chunk by chunk (a matrix
product inside each chunk, the recurrence across chunks): the form that trains in parallel.

Layout: attnlib's ``(B, n_heads, T, d_head)``; transformers' functions take ``(B, T, H, d)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_qkv
from ._validate import (
    describe,
    ensure_bool,
    ensure_callable,
    ensure_float,
    ensure_int,
    ensure_number,
    fail,
)

__all__ = ["GatedDeltaNet", "GatedDeltaNetState", "elu_feature_map", "gated_delta_rule", "linear_attention",
           "linear_attention_step"]  # fmt: skip


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """Katharopoulos et al.'s feature map ``phi(x) = elu(x) + 1``: positive, so every weight is > 0.

    Example:
        >>> elu_feature_map(torch.tensor([-1.0, 0.0, 2.0]))
        tensor([0.3679, 1.0000, 3.0000])
    """
    return F.elu(x) + 1


def _features(feature_map, *xs: torch.Tensor) -> list[torch.Tensor]:
    """``phi`` applied to each of ``xs`` and checked: a tensor with the input's leading dimensions."""
    phi = elu_feature_map if feature_map is None else ensure_callable("feature_map", feature_map, "a function or None")
    out = [phi(x) for x in xs]
    for x, f in zip(xs, out):
        if not isinstance(f, torch.Tensor) or f.shape[:-1] != x.shape[:-1]:
            raise fail("feature_map", f"a tensor of shape {tuple(x.shape[:-1])} + (d_phi,)", describe(f))
    return out


def linear_attention(q, k, v, *, feature_map=None, is_causal=True, recurrent=False, eps=1e-6) -> torch.Tensor:
    """Linear attention, ``out_t = phi(q_t) S_t / (phi(q_t) . z_t + eps)`` (Katharopoulos et al. 2020).

    ``S_t = sum_s phi(k_s)^T v_s`` and ``z_t = sum_s phi(k_s)``, over ``s <= t`` (``is_causal``)
    or over every key. The weight of key ``s`` for query ``t`` is
    ``phi(q_t) . phi(k_s) / (sum_s' phi(q_t) . phi(k_s') + eps)``: each row sums to 1 (less eps).

    Two ways to the same numbers: ``recurrent=False`` builds the ``(T_q, T_k)`` matrix
    ``phi(Q) phi(K)^T``, masks it and normalises its rows; ``recurrent=True`` walks over ``t``
    with the state ``(S, z)`` (:func:`linear_attention_step`), or builds the one global state.

    Args:
        q: queries ``(..., T_q, d_k)``; ``T_q = T_k`` when ``is_causal``.
        k: keys ``(..., T_k, d_k)``.
        v: values ``(..., T_k, d_v)``.
        feature_map: ``phi``, ``(..., d_k) -> (..., d_phi)``; None: :func:`elu_feature_map`.
        is_causal: query ``t`` sees keys ``s <= t`` only.
        recurrent: the loop over ``t`` instead of the matrix.
        eps: added to the denominator (a number >= 0).

    Returns:
        ``(..., T_q, d_v)``.

    Example:
        >>> q, k, v = torch.randn(3, 2, 5, 4, dtype=torch.float64).unbind(0)
        >>> torch.allclose(linear_attention(q, k, v), linear_attention(q, k, v, recurrent=True))
        True
    """
    check_qkv(q, k, v)
    ensure_bool("is_causal", is_causal)
    ensure_bool("recurrent", recurrent)
    ensure_number("eps", eps, "a number >= 0", lambda e: e >= 0)
    if is_causal and q.shape[-2] != k.shape[-2]:
        raise fail("q", f"T_q = T_k = {k.shape[-2]} with is_causal=True", describe(q))
    phi_q, phi_k = _features(feature_map, q, k)  # (..., T_q, d_phi), (..., T_k, d_phi)
    if recurrent and is_causal:
        state, outs = None, []
        for t in range(q.shape[-2]):
            out_t, state = _step(phi_q[..., t, :], phi_k[..., t, :], v[..., t, :], state, eps)
            outs.append(out_t)
        return torch.stack(outs, dim=-2)  # T_q x (..., d_v) -> (..., T_q, d_v)
    if recurrent:  # one global state, summed over every key
        S = phi_k.transpose(-2, -1) @ v  # (..., d_phi, T_k) @ (..., T_k, d_v) -> (..., d_phi, d_v)
        z = phi_k.sum(-2)  # (..., d_phi)
        return (phi_q @ S) / ((phi_q @ z.unsqueeze(-1)) + eps)  # (..., T_q, d_v) / (..., T_q, 1)
    A = phi_q @ phi_k.transpose(-2, -1)  # (..., T_q, T_k): unnormalised weights, all > 0
    if is_causal:
        A = A.tril()  # the future: weight 0
    return (A @ v) / (A.sum(-1, keepdim=True) + eps)  # (..., T_q, d_v) / (..., T_q, 1)


def _step(phi_q, phi_k, v, state, eps):
    """One step of causal linear attention on features: ``(out_t, (S, z))``."""
    if state is None:
        S = phi_k.new_zeros(torch.broadcast_shapes(phi_k.shape[:-1], v.shape[:-1]) + (phi_k.shape[-1], v.shape[-1]))
        z = phi_k.new_zeros(phi_k.shape)
    else:
        S, z = state
    S = S + phi_k.unsqueeze(-1) * v.unsqueeze(-2)  # (..., d_phi, 1) * (..., 1, d_v) -> (..., d_phi, d_v)
    z = z + phi_k  # (..., d_phi)
    out = (phi_q.unsqueeze(-2) @ S).squeeze(-2)  # (..., 1, d_phi) @ (..., d_phi, d_v) -> (..., d_v)
    return out / ((phi_q * z).sum(-1, keepdim=True) + eps), (S, z)  # (..., d_v) / (..., 1)


def _check_step(q_t, k_t, v_t, state) -> None:
    """One token's query, key and value ``(..., d)``, and the state ``(S, z)`` or None."""
    check_qkv(q_t.unsqueeze(-2), k_t.unsqueeze(-2), v_t.unsqueeze(-2))  # as a sequence of one token
    if state is None:
        return
    ok = isinstance(state, tuple) and len(state) == 2 and all(isinstance(x, torch.Tensor) for x in state)
    if not ok or state[0].shape[:-1] != state[1].shape or state[0].shape[-1] != v_t.shape[-1]:
        got = describe(state) if not ok else f"S {tuple(state[0].shape)}, z {tuple(state[1].shape)}"
        raise fail("state", f"None or a pair (S (..., d_phi, d_v={v_t.shape[-1]}), z (..., d_phi))", got)


def linear_attention_step(q_t, k_t, v_t, state=None, *, feature_map=None, eps=1e-6):
    """One generated token of causal linear attention: ``(out_t, (S, z))``.

    ``S <- S + phi(k_t)^T v_t``, ``z <- z + phi(k_t)``, ``out_t = phi(q_t) S / (phi(q_t) . z + eps)``.
    The state has the same size at every step, whatever the number of tokens before.

    Args:
        q_t: the token's query ``(..., d_k)``.
        k_t: its key ``(..., d_k)``.
        v_t: its value ``(..., d_v)``.
        state: ``(S (..., d_phi, d_v), z (..., d_phi))`` from the step before, or None (no token yet).
        feature_map, eps: as in :func:`linear_attention`.

    Returns:
        ``out_t (..., d_v)`` and the new state ``(S, z)``.

    Example:
        >>> q, k, v = torch.randn(3, 6, 4, dtype=torch.float64).unbind(0)   # (T, d) each
        >>> state, outs = None, []
        >>> for t in range(6):
        ...     out_t, state = linear_attention_step(q[t], k[t], v[t], state)
        ...     outs.append(out_t)
        >>> torch.allclose(torch.stack(outs), linear_attention(q, k, v))
        True
        >>> [tuple(x.shape) for x in state]
        [(4, 4), (4,)]
    """
    for name, x in (("q_t", q_t), ("k_t", k_t), ("v_t", v_t)):
        ensure_float(name, x, min_dim=1, expected=f"a tensor of shape (..., d) for {name}")
    _check_step(q_t, k_t, v_t, state)
    ensure_number("eps", eps, "a number >= 0", lambda e: e >= 0)
    phi_q, phi_k = _features(feature_map, q_t, k_t)  # (..., d_phi) each
    return _step(phi_q, phi_k, v_t, state, eps)


# Gated DeltaNet ----------------------------------------------------------------------------------


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last axis, as the FLA library and transformers compute it."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def _check_delta(q, k, v, g, beta, chunk_size, initial_state) -> None:
    """Gated DeltaNet's inputs in attnlib's layout ``(B, H, T, d)``, and its options."""
    for name, x, shape in (("q", q, "(B, H_k, T, d_k)"), ("k", k, "(B, H_k, T, d_k)"), ("v", v, "(B, H, T, d_v)")):
        ensure_float(name, x, min_dim=4, expected=f"a 4-D tensor {shape}")
        if x.dim() != 4:
            raise fail(name, f"a 4-D tensor {shape}", describe(x))
    if k.shape != q.shape:
        raise fail("k", f"q's shape {tuple(q.shape)} (B, H_k, T, d_k)", describe(k))
    B, H_k, T, _ = q.shape
    if v.shape[:1] + v.shape[2:3] != (B, T) or v.shape[1] % H_k:
        raise fail("v", f"(B={B}, H, T={T}, d_v) with H a multiple of H_k={H_k}", describe(v))
    for name, x in (("g", g), ("beta", beta)):
        ensure_float(name, x)
        if x.shape != v.shape[:3]:
            raise fail(name, f"shape (B, H, T) = {tuple(v.shape[:3])}", describe(x))
    if chunk_size is not None:
        ensure_int("chunk_size", chunk_size, why="tokens per chunk, or None for the recurrent form")
    if initial_state is not None:
        want = (B, v.shape[1], q.shape[-1], v.shape[-1])
        if not isinstance(initial_state, torch.Tensor) or initial_state.shape != want:
            raise fail("initial_state", f"None or a tensor (B, H, d_k, d_v) = {want}", describe(initial_state))


def gated_delta_rule(q, k, v, g, beta, *, chunk_size=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm=True):  # fmt: skip
    """Gated DeltaNet's recurrence (Yang et al. 2025), as transformers' Qwen3-Next computes it.

    For each head, with ``q_t <- l2norm(q_t) / sqrt(d_k)``, ``k_t <- l2norm(k_t)`` (``use_qk_l2norm``)::

        S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T     # (d_k, d_v)
        o_t = S_t^T q_t                                                         # (d_v,)

    ``g = 0`` and ``beta = 1`` give DeltaNet's plain delta rule (Yang et al. 2024).
    ``chunk_size=None``: a loop over ``t`` (transformers' ``torch_recurrent_gated_delta_rule``).
    An int: the chunked form (``torch_chunk_gated_delta_rule``); ``T`` is padded with zeros to a
    multiple of ``chunk_size`` (``g = beta = 0``: the state passes through unchanged). Inside a
    chunk, with ``G_i = exp(g_1 + ... + g_i)`` and the chunk's start state ``S_0``, the values
    written, ``u_i = beta_i (v_i - (G_i/G_{i-1}) S_{i-1}^T k_i)``, solve one triangular system::

        (I + L) U = V_beta - (K_beta * G) S_0,   L_ij = beta_i (G_i/G_j) k_i . k_j  for j < i
        o_i = G_i S_0^T q_i + sum_{j<=i} (G_i/G_j) (q_i . k_j) u_j
        S_C = G_C S_0 + sum_j (G_C/G_j) k_j u_j^T

    (``T = (I + L)^-1``: the UT transform, the WY representation of the chunk's updates).

    Args:
        q, k: ``(B, H_k, T, d_k)``; each serves ``H / H_k`` consecutive value heads (transformers'
            ``repeat_interleave``).
        v: ``(B, H, T, d_v)``.
        g: ``(B, H, T)``, log decays (``<= 0``).  beta: ``(B, H, T)``, write strengths.
        chunk_size: None (recurrent) or a positive int.
        initial_state: ``(B, H, d_k, d_v)`` or None (zeros).
        output_final_state: also return ``S_T``.
        use_qk_l2norm: L2-normalise ``q`` and ``k`` first (eps 1e-6, as transformers).

    Returns:
        ``(o, S_T)``: ``o (B, H, T, d_v)`` in ``q``'s dtype, ``S_T (B, H, d_k, d_v)`` or None.
        The computation runs in float32, or float64 for float64 inputs.

    Example:
        >>> q, k, v = torch.randn(3, 1, 2, 7, 4, dtype=torch.float64).unbind(0)
        >>> g, beta = -torch.rand(1, 2, 7, dtype=torch.float64), torch.rand(1, 2, 7, dtype=torch.float64)
        >>> o, _ = gated_delta_rule(q, k, v, g, beta)
        >>> o_chunked, _ = gated_delta_rule(q, k, v, g, beta, chunk_size=3)
        >>> o.shape, torch.allclose(o, o_chunked)
        (torch.Size([1, 2, 7, 4]), True)
    """
    _check_delta(q, k, v, g, beta, chunk_size, initial_state)
    ensure_bool("output_final_state", output_final_state)
    ensure_bool("use_qk_l2norm", use_qk_l2norm)
    in_dtype, dtype = q.dtype, torch.promote_types(q.dtype, torch.float32)
    repeat = v.shape[1] // q.shape[1]
    q, k = (x.repeat_interleave(repeat, dim=1) for x in (q, k))  # (B, H_k, T, d_k) -> (B, H, T, d_k)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    if use_qk_l2norm:
        q, k = _l2norm(q), _l2norm(k)
    q = q / math.sqrt(q.shape[-1])
    B, H, T, d_k = k.shape
    S = q.new_zeros(B, H, d_k, v.shape[-1]) if initial_state is None else initial_state.to(dtype)
    if chunk_size is None:
        o, S = _delta_recurrent(q, k, v, g, beta, S)
    else:
        o, S = _delta_chunked(q, k, v, g, beta, S, chunk_size)
    return o.to(in_dtype), (S if output_final_state else None)


def _delta_recurrent(q, k, v, g, beta, S):
    """The loop over ``t``; ``q, k (B, H, T, d_k)``, ``v (B, H, T, d_v)``, ``g, beta (B, H, T)``."""
    outs = []
    for t in range(q.shape[2]):
        S = g[:, :, t, None, None].exp() * S  # decay: (B, H, 1, 1) * (B, H, d_k, d_v)
        k_t = k[:, :, t]  # (B, H, d_k)
        read = torch.einsum("bhkv,bhk->bhv", S, k_t)  # S^T k_t: what the state stores under k_t, (B, H, d_v)
        delta = beta[:, :, t, None] * (v[:, :, t] - read)  # (B, H, d_v)
        S = S + k_t.unsqueeze(-1) * delta.unsqueeze(-2)  # + k_t delta^T: (B, H, d_k, 1) * (B, H, 1, d_v)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))  # o_t = S_t^T q_t, (B, H, d_v)
    return torch.stack(outs, dim=2), S  # T x (B, H, d_v) -> (B, H, T, d_v)


def _delta_chunked(q, k, v, g, beta, S, C):
    """The chunked form (see :func:`gated_delta_rule`); chunks of ``C`` tokens."""
    T = q.shape[2]
    pad = -T % C  # zeros after the last token: g = beta = 0 leaves the state as it is
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))  # (B, H, T, d) -> (B, H, T + pad, d)
    g, beta = (F.pad(x, (0, pad)) for x in (g, beta))  # (B, H, T) -> (B, H, T + pad)
    q, k, v = (x.unflatten(2, (-1, C)) for x in (q, k, v))  # (B, H, T + pad, d) -> (B, H, N, C, d)
    g, beta = (x.unflatten(2, (-1, C)) for x in (g, beta))  # (B, H, T + pad) -> (B, H, N, C)
    log_G = g.cumsum(-1)  # (B, H, N, C): log G_i, the decay from the chunk's start to i
    future = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)  # j > i
    D = (log_G.unsqueeze(-1) - log_G.unsqueeze(-2)).masked_fill(future, float("-inf")).exp()  # (B, H, N, C, C): G_i/G_j
    k_beta, v_beta = k * beta.unsqueeze(-1), v * beta.unsqueeze(-1)  # (B, H, N, C, d)
    # (I + L): L_ij = beta_i (G_i/G_j) k_i . k_j below the diagonal (unitriangular ignores the diagonal)
    I_plus_L = (k_beta @ k.transpose(-1, -2)) * D  # (B, H, N, C, C)
    U0 = torch.linalg.solve_triangular(I_plus_L, v_beta, upper=False, unitriangular=True)  # T V_beta, (B, H, N, C, d_v)
    W = torch.linalg.solve_triangular(I_plus_L, k_beta * log_G.exp().unsqueeze(-1), upper=False, unitriangular=True)
    attn = (q @ k.transpose(-1, -2)) * D  # (B, H, N, C, C): (G_i/G_j) q_i . k_j, j <= i
    q_decayed = q * log_G.exp().unsqueeze(-1)  # G_i q_i, (B, H, N, C, d_k)
    k_decayed = k * (log_G[..., -1:] - log_G).exp().unsqueeze(-1)  # (G_C/G_j) k_j, (B, H, N, C, d_k)
    outs = []
    for n in range(q.shape[2]):
        U = U0[:, :, n] - W[:, :, n] @ S  # the values written, u_i: (B, H, C, d_v)
        outs.append(q_decayed[:, :, n] @ S + attn[:, :, n] @ U)  # old state read + this chunk: (B, H, C, d_v)
        S = log_G[:, :, n, -1, None, None].exp() * S + k_decayed[:, :, n].transpose(-1, -2) @ U  # (B, H, d_k, d_v)
    return torch.cat(outs, dim=2)[:, :, :T], S  # N x (B, H, C, d_v) -> (B, H, T, d_v), padding dropped


# The Gated DeltaNet layer of Qwen3-Next ----------------------------------------------------------


class GatedDeltaNetState(NamedTuple):
    """What :class:`GatedDeltaNet` keeps between calls: its size does not depend on ``T``."""

    conv: torch.Tensor  # (B, conv_size - 1, conv_dim): the last inputs of the causal convolution
    recurrent: torch.Tensor  # (B, n_heads, d_head_k, d_head_v): the delta rule's S


class GatedDeltaNet(nn.Module):
    """Qwen3-Next's Gated DeltaNet layer: projections, a causal convolution, the gated delta rule,
    a gated RMSNorm and the output projection (transformers' ``Qwen3NextGatedDeltaNet``).

    For ``x (B, T, d_model)``::

        q, k, v = silu(causal_conv1d([x W_q, x W_k, x W_v]))       # depthwise, conv_size taps
        beta = sigmoid(x W_b),  g = -exp(A_log) * softplus(x W_a + dt_bias)    # (B, T, n_heads)
        o = gated_delta_rule(q, k, v, g, beta)                       # per head, l2-normalised q, k
        y = (rmsnorm(o) * w * silu(x W_z)) W_o                       # the norm per head, over d_head_v

    ``forward(x, state)`` returns ``(y, new_state)``: ``state`` None starts from zeros; passing the
    returned state on continues the sequence (generation, one token or many per call).

    Args:
        d_model: the width of ``x``.
        n_heads: value heads ``H``; ``n_k_heads`` query/key heads (a divisor of ``H``; default ``H``).
        d_head_k, d_head_v: widths of one query/key head and one value head.
        conv_size: taps of the causal convolution.  eps: the RMSNorm's epsilon.
        chunk_size: the chunk of :func:`gated_delta_rule` when ``T > 1`` (one token: the recurrence).

    Example:
        >>> layer = GatedDeltaNet(16, n_heads=4, d_head_k=4, d_head_v=4, n_k_heads=2)
        >>> x = torch.randn(2, 5, 16)
        >>> y, state = layer(x)
        >>> y_1, state_1 = layer(x[:, :3])
        >>> y_2, _ = layer(x[:, 3:], state_1)
        >>> y.shape, torch.allclose(torch.cat([y_1, y_2], dim=1), y, atol=1e-6)
        (torch.Size([2, 5, 16]), True)
    """

    def __init__(self, d_model, n_heads, d_head_k, d_head_v, n_k_heads=None, conv_size=4, eps=1e-6, chunk_size=64):
        super().__init__()
        for name, n in (("d_model", d_model), ("n_heads", n_heads), ("d_head_k", d_head_k), ("d_head_v", d_head_v),
                        ("conv_size", conv_size), ("chunk_size", chunk_size)):  # fmt: skip
            ensure_int(name, n)
        n_k_heads = n_heads if n_k_heads is None else ensure_int("n_k_heads", n_k_heads)
        if n_heads % n_k_heads:
            raise fail(
                "n_k_heads",
                f"a divisor of n_heads={n_heads} (each q/k head serves n_heads / n_k_heads)",
                f"{n_k_heads}",
            )
        ensure_number("eps", eps, "a number >= 0", lambda e: e >= 0)
        self.n_heads, self.n_k_heads, self.d_head_k, self.d_head_v = n_heads, n_k_heads, d_head_k, d_head_v
        self.conv_size, self.eps, self.chunk_size = conv_size, eps, chunk_size
        d_k, d_v = n_k_heads * d_head_k, n_heads * d_head_v
        self.q_proj, self.k_proj = nn.Linear(d_model, d_k, bias=False), nn.Linear(d_model, d_k, bias=False)
        self.v_proj, self.z_proj = nn.Linear(d_model, d_v, bias=False), nn.Linear(d_model, d_v, bias=False)
        self.b_proj, self.a_proj = nn.Linear(d_model, n_heads, bias=False), nn.Linear(d_model, n_heads, bias=False)
        self.conv_weight = nn.Parameter(torch.randn(2 * d_k + d_v, conv_size) / math.sqrt(conv_size))
        self.A_log = nn.Parameter(torch.empty(n_heads).uniform_(0.01, 16).log())
        self.dt_bias = nn.Parameter(torch.ones(n_heads))
        self.norm_weight = nn.Parameter(torch.ones(d_head_v))
        self.out_proj = nn.Linear(d_v, d_model, bias=False)

    def forward(self, x: torch.Tensor, state: GatedDeltaNetState | None = None):
        ensure_float("x", x, min_dim=3, expected="a tensor of shape (B, T, d_model)")
        qkv, conv_state = self.convolve(torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1), state)
        q, k, v = self.split_heads(qkv)
        beta, g = self.gates(x)
        o, S = gated_delta_rule(q, k, v, g, beta, chunk_size=None if x.shape[1] == 1 else self.chunk_size,
                                initial_state=None if state is None else state.recurrent, output_final_state=True)  # fmt: skip
        return self.out_proj(self.gated_norm(o, self.z_proj(x))), GatedDeltaNetState(conv_state, S)

    def convolve(self, qkv, state):
        """Causal depthwise convolution then SiLU, ``(B, T, C) -> (B, T, C)``; the last ``conv_size - 1`` inputs kept."""
        B, T, C = qkv.shape
        before = qkv.new_zeros(B, self.conv_size - 1, C) if state is None else state.conv  # (B, K - 1, C)
        padded = torch.cat([before, qkv], dim=1)  # (B, K - 1 + T, C)
        out = F.conv1d(padded.transpose(1, 2), self.conv_weight.unsqueeze(1), groups=C)  # (B, C, T)
        return F.silu(out.transpose(1, 2)), padded[:, padded.shape[1] - (self.conv_size - 1) :]

    def split_heads(self, qkv):
        """``(B, T, 2 H_k d_k + H d_v) -> q, k (B, H_k, T, d_k), v (B, H, T, d_v)``."""
        d_k = self.n_k_heads * self.d_head_k
        q, k, v = qkv.split([d_k, d_k, self.n_heads * self.d_head_v], dim=-1)
        q, k = (x.unflatten(-1, (self.n_k_heads, self.d_head_k)).transpose(1, 2) for x in (q, k))  # (B, H_k, T, d_k)
        return q, k, v.unflatten(-1, (self.n_heads, self.d_head_v)).transpose(1, 2)  # (B, H, T, d_v)

    def gates(self, x):
        """``beta = sigmoid(x W_b)``, ``g = -exp(A_log) softplus(x W_a + dt_bias)``: ``(B, T, d) -> (B, H, T)`` each."""
        beta = torch.sigmoid(self.b_proj(x))  # (B, T, H)
        g = -self.A_log.float().exp() * F.softplus(self.a_proj(x).float() + self.dt_bias)  # (B, T, H)
        return beta.transpose(1, 2), g.transpose(1, 2)  # (B, T, H) -> (B, H, T)

    def gated_norm(self, o, z):
        """RMSNorm of each head's output, times its weight and ``silu(z)``: ``(B, H, T, d_v) -> (B, T, H d_v)``."""
        o = o.transpose(1, 2).float()  # (B, H, T, d_v) -> (B, T, H, d_v), normalised in float32 at least
        o = (o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps)).to(z.dtype) * self.norm_weight
        z = z.unflatten(-1, (self.n_heads, self.d_head_v))  # (B, T, H d_v) -> (B, T, H, d_v)
        return (o * F.silu(z.float())).to(z.dtype).flatten(-2)  # (B, T, H, d_v) -> (B, T, H d_v)

    @classmethod
    def from_hf(cls, layer: nn.Module, chunk_size: int = 64) -> GatedDeltaNet:
        """A copy of transformers' ``Qwen3NextGatedDeltaNet`` with its weights.

        transformers packs ``[q, k, v, z]`` per query/key head in ``in_proj_qkvz`` and ``[b, a]`` per
        query/key head in ``in_proj_ba``; here each has its own projection, heads in order.
        """
        names = ("in_proj_qkvz", "in_proj_ba", "conv1d", "A_log", "dt_bias", "norm", "out_proj")
        if not all(hasattr(layer, n) for n in names) or getattr(layer, "activation", "silu") != "silu":
            raise fail("layer", "a transformers Qwen3NextGatedDeltaNet (SiLU activation)", describe(layer))
        H, H_k, d_k, d_v = layer.num_v_heads, layer.num_k_heads, layer.head_k_dim, layer.head_v_dim
        r = H // H_k  # value heads per query/key head
        new = cls(layer.hidden_size, H, d_k, d_v, H_k, layer.conv_kernel_size, layer.layer_norm_epsilon, chunk_size)
        qkvz = layer.in_proj_qkvz.weight.unflatten(0, (H_k, -1))  # (2 H_k d_k + 2 H d_v, d) -> (H_k, ..., d)
        q, k, v, z = qkvz.split([d_k, d_k, r * d_v, r * d_v], dim=1)  # (H_k, width, d) each
        b, a = layer.in_proj_ba.weight.unflatten(0, (H_k, 2 * r)).split([r, r], dim=1)  # (H_k, r, d) each
        with torch.no_grad():
            for proj, w in zip((new.q_proj, new.k_proj, new.v_proj, new.z_proj, new.b_proj, new.a_proj),
                               (q, k, v, z, b, a)):  # fmt: skip
                proj.weight.copy_(w.flatten(0, 1))  # (H_k, width, d) -> (H_k width, d)
            new.conv_weight.copy_(layer.conv1d.weight.squeeze(1))  # (C, 1, K) -> (C, K)
            for mine, theirs in ((new.A_log, layer.A_log), (new.dt_bias, layer.dt_bias),
                                 (new.norm_weight, layer.norm.weight), (new.out_proj.weight, layer.out_proj.weight)):  # fmt: skip
                mine.copy_(theirs)
        return new.to(layer.out_proj.weight.dtype)
