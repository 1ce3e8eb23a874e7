"""Chapter 14: how attention learns, its backward pass by hand and in tiles (FlashAttention-2).

Training needs the gradient of a loss with respect to q, k and v. With ``dO`` the gradient
of the loss with respect to the output ``O = P V`` (``P = softmax(S)``, ``S = q k^T * scale``,
row vectors as everywhere in the course), the chain rule gives, one line per step:

    dV = P^T dO                          # (..., T_k, d_v)
    dP = dO V^T                          # (..., T_q, T_k)
    dS = P * (dP - rowsum(dP * P))       # the softmax's backward, row by row
    dQ = dS K * scale                    # (..., T_q, d_k)
    dK = dS^T Q * scale                  # (..., T_k, d_k)

The softmax's Jacobian for one row ``p`` is ``diag(p) - p p^T`` (``softmax_jacobian``);
multiplying it by a row of ``dP`` gives the row-wise form above (``softmax_backward``),
which never builds the ``T_k x T_k`` matrix. ``rowsum(dP * P)`` equals
``D = rowsum(dO * O)`` (since ``O = P V`` and ``dP = dO V^T``), which needs no ``T x T``
tensor at all.

``attention_backward`` is these five lines with the whole ``P``: what autograd does for
the explicit ``attention`` (it saves ``P`` from the forward pass, ``T_q x T_k`` numbers).
``tiled_attention_backward`` is FlashAttention-2's backward (Dao 2023, Algorithm 2): from
the forward pass it keeps only ``O`` and each row's log-sum-exp ``L``
(``tiled_attention(..., return_lse=True)``), rebuilds each tile's weights as
``P = exp(S - L)`` (one more ``q k^T`` per tile: the recomputation), and sums ``dK``, ``dV``
over the query blocks of each key block and ``dQ`` over the key blocks. ``FlashAttention2``
is the ``torch.autograd.Function`` that pairs the two tiled passes, so that ``loss.backward()``
never holds a ``T_q x T_k`` tensor; ``flash_attention`` calls it.
"""

from __future__ import annotations

import math

import torch

from ._checks import batch_shape, check_qkv, check_scale
from ._validate import describe, ensure_block_size, ensure_bool, ensure_float, fail
from .attention import attention
from .tiled import DEFAULT_BLOCK_SIZE, mask_future, tiled_attention

__all__ = [
    "FlashAttention2",
    "attention_backward",
    "flash_attention",
    "softmax_backward",
    "softmax_jacobian",
    "tiled_attention_backward",
]


def _check_like(name: str, x, shape: torch.Size, like: torch.Tensor, what: str) -> None:
    """``x`` must be a float tensor of ``shape``, with ``like``'s dtype and device."""
    ensure_float(name, x)
    if x.shape != shape or x.dtype != like.dtype or x.device != like.device:
        raise fail(name, f"{what} of shape {tuple(shape)}, {like.dtype} on {like.device}", describe(x))


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """The Jacobian of the softmax at its output ``p``: ``J = diag(p) - p p^T``.

    ``J[i, j] = d p_i / d x_j = p_i (δ_ij - p_j)``. Each row and each column sums to 0
    (adding a constant to every ``x_j`` changes nothing), and ``J`` is symmetric.

    Args:
        p: softmax outputs ``(..., n)``, each row summing to 1.

    Returns:
        ``(..., n, n)``.

    Example:
        >>> softmax_jacobian(torch.tensor([0.5, 0.25, 0.25]))
        tensor([[ 0.2500, -0.1250, -0.1250],
                [-0.1250,  0.1875, -0.0625],
                [-0.1250, -0.0625,  0.1875]])
    """
    ensure_float("p", p, min_dim=1, expected="softmax outputs of shape (..., n)")
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (..., n, 1) * (..., 1, n) -> (..., n, n)


def softmax_backward(p: torch.Tensor, dp: torch.Tensor) -> torch.Tensor:
    """The gradient with respect to the softmax's input, row by row: ``dx = p * (dp - rowsum(dp * p))``.

    Equal to ``dp @ softmax_jacobian(p)`` (the Jacobian is symmetric) without building the
    ``n x n`` matrix: ``(dp J)_j = p_j dp_j - p_j sum_i dp_i p_i``.

    Args:
        p: softmax outputs ``(..., n)``.
        dp: gradient of the loss with respect to ``p``, ``(..., n)``.

    Returns:
        ``dx`` of shape ``(..., n)``; each row sums to 0.

    Example:
        >>> p, dp = torch.tensor([0.5, 0.25, 0.25]), torch.tensor([1.0, 0.0, 0.0])
        >>> softmax_backward(p, dp)
        tensor([ 0.2500, -0.1250, -0.1250])
        >>> torch.allclose(softmax_backward(p, dp), dp @ softmax_jacobian(p))
        True
    """
    ensure_float("p", p, min_dim=1, expected="softmax outputs of shape (..., n)")
    _check_like("dp", dp, p.shape, p, "the gradient with respect to p")
    return p * (dp - (dp * p).sum(dim=-1, keepdim=True))  # (..., n) - (..., 1)


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of attention written out, with the whole weight matrix ``P``.

    ``P = softmax(q k^T * scale + M)`` (rebuilt here by ``attention``), then
    ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - rowsum(dP * P))``,
    ``dQ = dS K * scale``, ``dK = dS^T Q * scale``. The same gradients as autograd through
    ``attention`` or ``F.scaled_dot_product_attention``.

    Args:
        q, k, v: as in ``attention``: ``(..., T_q, d_k)``, ``(..., T_k, d_k)``, ``(..., T_k, d_v)``.
        dout: gradient of the loss with respect to the output, ``(..., T_q, d_v)``.
        is_causal: query ``i`` attends to keys ``0 .. i`` only.
        scale: factor on the dot products; ``None`` means ``1/sqrt(d_k)``.

    Returns:
        ``(dq, dk, dv)`` of the shapes of ``q``, ``k``, ``v`` (summed over broadcast batch dims).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = (torch.randn(4, 8, requires_grad=True) for _ in range(3))
        >>> dout = torch.randn(4, 8)
        >>> attention(q, k, v)[0].backward(dout)
        >>> dq, dk, dv = attention_backward(q.detach(), k.detach(), v.detach(), dout)
        >>> all(torch.allclose(a, b.grad, atol=1e-6) for a, b in zip((dq, dk, dv), (q, k, v)))
        True
    """
    out, p = attention(q, k, v, is_causal=is_causal, scale=scale)  # p: (..., T_q, T_k), kept whole
    _check_like("dout", dout, out.shape, q, "the gradient with respect to the output")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    dv = p.transpose(-2, -1) @ dout  # (..., T_k, T_q) @ (..., T_q, d_v) -> (..., T_k, d_v)
    dp = dout @ v.transpose(-2, -1)  # (..., T_q, d_v) @ (..., d_v, T_k) -> (..., T_q, T_k)
    ds = softmax_backward(p, dp)  # (..., T_q, T_k)
    dq = ds @ k * scale  # (..., T_q, T_k) @ (..., T_k, d_k) -> (..., T_q, d_k)
    dk = ds.transpose(-2, -1) @ q * scale  # (..., T_k, T_q) @ (..., T_q, d_k) -> (..., T_k, d_k)
    return dq.sum_to_size(q.shape), dk.sum_to_size(k.shape), dv.sum_to_size(v.shape)


def _query_blocks(k_start: int, k_stop: int, T_q: int, block_size: int, is_causal: bool):
    """The query blocks that see keys ``k_start .. k_stop - 1``: ``(q_start, q_stop, masked)``.

    The same tiles as the forward pass visits (``tiled._key_blocks``, ``tile_plan``), in the
    other loop order: causal, a query block whose last query ``q_stop - 1`` comes before
    ``k_start`` sees none of these keys and is skipped; a tile that crosses the diagonal,
    ``k_stop - 1 > q_start``, needs the mask.
    """
    for q_start in range(0, T_q, block_size):
        q_stop = min(q_start + block_size, T_q)
        if not (is_causal and k_start > q_stop - 1):
            yield q_start, q_stop, is_causal and k_stop - 1 > q_start


def tiled_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    block_size: int = DEFAULT_BLOCK_SIZE,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention-2's backward pass (Dao 2023, Algorithm 2): the gradients, tile by tile.

    From the forward pass it needs only ``out`` and the log-sum-exp ``lse`` of each row,
    ``O(T d)`` numbers. First ``D = rowsum(dO * O)`` (``(..., T_q, 1)``; equal to
    ``rowsum(dP * P)``). Then for each block of keys (outer loop), with ``dK_j = dV_j = 0``,
    and each block of queries that sees it (inner loop):

        S    = q_i k_j^T * scale             # (..., b_q, b_k); causal: -inf where j > i
        P    = exp(S - L_i)                  # the tile's weights, recomputed from L
        dV_j += P^T dO_i                     # (..., b_k, d_v)
        dP   = dO_i v_j^T                    # (..., b_q, b_k)
        dS   = P * (dP - D_i)
        dQ_i += dS k_j * scale               # (..., b_q, d_k), summed over key blocks
        dK_j += dS^T q_i * scale             # (..., b_k, d_k)

    Only one tile of scores exists at a time. Causal, the tiles above the diagonal are
    skipped, as in the forward pass.

    Args:
        q, k, v: the forward pass's inputs, as in ``tiled_attention``.
        out: its output ``(..., T_q, d_v)``.
        lse: its log-sum-exp ``(..., T_q)`` (``tiled_attention(..., return_lse=True)``).
        dout: gradient of the loss with respect to ``out``, ``(..., T_q, d_v)``.
        block_size, is_causal, scale: as in the forward pass.

    Returns:
        ``(dq, dk, dv)`` of the shapes of ``q``, ``k``, ``v`` (summed over broadcast batch dims).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(5, 8), torch.randn(7, 8), torch.randn(7, 3)
        >>> out, lse = tiled_attention(q, k, v, block_size=2, is_causal=True, return_lse=True)
        >>> dout = torch.randn(5, 3)
        >>> grads = tiled_attention_backward(q, k, v, out, lse, dout, block_size=2, is_causal=True)
        >>> ref = attention_backward(q, k, v, dout, is_causal=True)
        >>> all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads, ref))
        True
    """
    check_qkv(q, k, v)
    b = ensure_block_size(block_size)
    ensure_bool("is_causal", is_causal)
    check_scale(scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch = batch_shape(("q", q), ("k", k), ("v", v))  # the broadcast leading dims ...
    T_q, T_k = q.shape[-2], k.shape[-2]
    _check_like("out", out, batch + (T_q, v.shape[-1]), q, "the forward pass's output")
    _check_like("lse", lse, batch + (T_q,), q, "the forward pass's log-sum-exp")
    _check_like("dout", dout, out.shape, q, "the gradient with respect to the output")

    D = (dout * out).sum(dim=-1, keepdim=True)  # (..., T_q, 1) = rowsum(dP * P)
    L = lse.unsqueeze(-1).masked_fill(lse.unsqueeze(-1) == float("-inf"), float("inf"))  # (..., T_q, 1); no key: P = 0
    dq = q.new_zeros(batch + q.shape[-2:])  # (..., T_q, d_k)
    dk = k.new_zeros(batch + k.shape[-2:])  # (..., T_k, d_k)
    dv = v.new_zeros(batch + v.shape[-2:])  # (..., T_k, d_v)
    for k_start in range(0, T_k, b):
        keys = slice(k_start, min(k_start + b, T_k))
        k_tile, v_tile = k[..., keys, :], v[..., keys, :]  # (..., b_k, d_k), (..., b_k, d_v)
        for q_start, q_stop, masked in _query_blocks(k_start, keys.stop, T_q, b, is_causal):
            rows = slice(q_start, q_stop)
            s = (
                q[..., rows, :] @ k_tile.transpose(-2, -1) * scale
            )  # (..., b_q, d_k) @ (..., d_k, b_k) -> (..., b_q, b_k)
            if masked:  # the tile crosses the diagonal, as in the forward pass
                mask_future(s, q_start, k_start)
            p = torch.exp(s - L[..., rows, :])  # the tile's weights, rebuilt: (..., b_q, b_k)
            dv[..., keys, :] += p.transpose(-2, -1) @ dout[..., rows, :]  # (..., b_k, b_q) @ (..., b_q, d_v)
            dp = dout[..., rows, :] @ v_tile.transpose(-2, -1)  # (..., b_q, d_v) @ (..., d_v, b_k) -> (..., b_q, b_k)
            ds = p * (dp - D[..., rows, :])  # (..., b_q, b_k)
            dq[..., rows, :] += ds @ k_tile * scale  # (..., b_q, b_k) @ (..., b_k, d_k) -> (..., b_q, d_k)
            dk[..., keys, :] += ds.transpose(-2, -1) @ q[..., rows, :] * scale  # (..., b_k, b_q) @ (..., b_q, d_k)
    return dq.sum_to_size(q.shape), dk.sum_to_size(k.shape), dv.sum_to_size(v.shape)


class FlashAttention2(torch.autograd.Function):
    """Tiled attention whose backward is tiled too: ``FlashAttention2.apply(q, k, v, block_size, is_causal, scale)``.

    ``forward`` runs ``tiled_attention(..., return_lse=True)`` and saves only ``q``, ``k``,
    ``v``, the output and the log-sum-exp (``O(T d)`` numbers, no ``T_q x T_k`` tensor);
    ``backward`` is ``tiled_attention_backward``. Use ``flash_attention``, which checks its
    arguments first. Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, q, k, v, block_size, is_causal, scale):
        out, lse = tiled_attention(q, k, v, block_size, is_causal, scale, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (block_size, is_causal, scale)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = tiled_attention_backward(q, k, v, out, lse, dout.contiguous(), *ctx.options)
        return dq, dk, dv, None, None, None  # no gradient for block_size, is_causal, scale


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_size: int = DEFAULT_BLOCK_SIZE,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """``tiled_attention`` with a tiled backward pass: training in ``O(T d)`` memory.

    The output of ``tiled_attention`` (and of ``attention`` and SDPA); ``loss.backward()``
    runs ``tiled_attention_backward`` from the saved output and log-sum-exp instead of
    autograd's record of every tile.

    Args:
        q, k, v, block_size, is_causal, scale: as in ``tiled_attention``.

    Returns:
        ``out`` of shape ``(..., T_q, d_v)``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = (torch.randn(6, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
        >>> torch.autograd.gradcheck(lambda q, k, v: flash_attention(q, k, v, 4, True), (q, k, v))
        True
    """
    check_qkv(q, k, v)
    ensure_block_size(block_size)
    ensure_bool("is_causal", is_causal)
    check_scale(scale)
    return FlashAttention2.apply(q, k, v, block_size, is_causal, scale)
