"""Chapter 11: what one attention layer costs, in FLOPs and in bytes.

Counting convention: only the matrix products are counted, and a multiply-add
counts as 2 FLOPs (floating-point operations), so ``(m, k) @ (k, n)`` costs
``2 m k n``, the convention of ``torch.utils.flop_counter.FlopCounterMode``. Bias
additions, the scale, the mask and the softmax are left out: each touches every
entry once or a few times, a factor of about ``d_head`` fewer operations than the
product that made the entry.

One multi-head self-attention layer, ``d = d_model`` (``n_heads`` heads of
``d_head = d / n_heads``; ``T_k = T_q = T`` in self-attention):

    Q = X W_Q                       2 B T_q d^2
    K = X W_K, V = X W_V            2 B T_k d^2 each
    S = Q K^T   (every head)        2 B T_q T_k d          # n_heads * 2 T_q T_k d_head
    A V         (every head)        2 B T_q T_k d
    out = concat(heads) W_O         2 B T_q d^2
    total (T_q = T_k = T)           8 B T d^2 + 4 B T^2 d

The projections grow like ``T``, the scores and the weighted sum like ``T^2``; the
two are equal at ``T = 2 d``. The number of heads changes neither. In memory, the
weights tensor holds ``B n_heads T_q T_k`` numbers, while ``Q``, ``K``, ``V`` and the
output hold ``B T d`` each: the weights are the larger as soon as ``T > d_head``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Sequence

import torch

from ._checks import check_fit_points, ensure_cpu_or_cuda
from ._validate import check_layer_sizes, ensure_callable, ensure_float_dtype, fail

__all__ = ["attention_flops", "attention_memory", "loglog_slope", "peak_memory"]


def attention_flops(T_q: int, d_model: int, n_heads: int, B: int = 1, T_k: int | None = None) -> dict[str, int]:
    """FLOPs of one multi-head attention layer, term by term (a multiply-add = 2 FLOPs).

    Only the matrix products count (``torch.utils.flop_counter`` counts the same way);
    with ``d = d_model``:

    ``q_proj = out_proj = 2 B T_q d^2``, ``k_proj = v_proj = 2 B T_k d^2``,
    ``scores = weighted_sum = 2 B T_q T_k d`` (``n_heads`` heads of ``2 T_q T_k d_head``),
    ``total`` their sum, ``8 B T d^2 + 4 B T^2 d`` in self-attention.

    The explicit path computes every score, also those a causal mask then blocks, so the
    count is the same with and without a mask.

    Args:
        T_q: number of queries (tokens of ``x``).
        d_model: model width ``d``, a multiple of ``n_heads``.
        n_heads: number of heads; it changes no term (``n_heads * d_head = d``), and is
            checked only because it must divide ``d_model``.
        B: batch size.
        T_k: number of keys and values (tokens of the ``context``); ``None``: ``T_q``
            (self-attention).

    Returns:
        ``{"q_proj", "k_proj", "v_proj", "scores", "weighted_sum", "out_proj", "total"}``,
        ints.

    Example:
        >>> f = attention_flops(T_q=1024, d_model=768, n_heads=12)     # GPT-2 small, one layer
        >>> f["q_proj"] == 2 * 1024 * 768**2, f["scores"] == 2 * 1024**2 * 768
        (True, True)
        >>> f["total"]
        8053063680
        >>> attention_flops(1536, 768, 12)["scores"] * 2 == 4 * attention_flops(1536, 768, 12)["q_proj"]
        True
    """
    B, T_q, T_k, d, _ = check_layer_sizes(T_q, d_model, n_heads, B, T_k)  # T_k None -> T_q
    flops = {
        "q_proj": 2 * B * T_q * d * d,  # (B, T_q, d) @ (d, d)
        "k_proj": 2 * B * T_k * d * d,  # (B, T_k, d) @ (d, d)
        "v_proj": 2 * B * T_k * d * d,
        "scores": 2 * B * T_q * T_k * d,  # (B, h, T_q, d_head) @ (B, h, d_head, T_k), h d_head = d
        "weighted_sum": 2 * B * T_q * T_k * d,  # (B, h, T_q, T_k) @ (B, h, T_k, d_head)
        "out_proj": 2 * B * T_q * d * d,  # (B, T_q, d) @ (d, d)
    }
    flops["total"] = sum(flops.values())
    return flops


def attention_memory(
    T_q: int, d_model: int, n_heads: int, B: int = 1, T_k: int | None = None, dtype: torch.dtype = torch.float32
) -> dict[str, int]:
    """Bytes of each tensor the explicit path of one attention layer creates.

    ``numel * bytes per number`` of: ``q`` ``(B, n_heads, T_q, d_head)``, ``k`` and ``v``
    ``(B, n_heads, T_k, d_head)``, ``scores`` and ``weights`` ``(B, n_heads, T_q, T_k)``,
    ``heads`` (weights @ v) ``(B, n_heads, T_q, d_head)`` and ``out`` ``(B, T_q, d_model)``.
    The weights take ``B n_heads T_q T_k`` numbers; every other tensor ``B T d_model``.
    How many of them exist at the same moment depends on the code: measure it (chapter 11
    does, with ``attnlib.peak_memory``).

    Args:
        T_q: number of queries; ``T_k``: number of keys and values (``None``: ``T_q``).
        d_model: model width, a multiple of ``n_heads``.
        n_heads: number of heads.
        B: batch size.
        dtype: a floating-point ``torch.dtype``; its size in bytes is
            ``torch.finfo(dtype).bits // 8`` (float32: 4, float16 and bfloat16: 2).

    Returns:
        ``{"q", "k", "v", "scores", "weights", "heads", "out"}``: bytes, ints.

    Example:
        >>> m = attention_memory(T_q=1024, d_model=768, n_heads=12)   # GPT-2 small, float32
        >>> m["weights"] == 12 * 1024 * 1024 * 4, m["weights"] / 2**20   # MiB
        (True, 48.0)
        >>> m["q"] / 2**20
        3.0
        >>> attention_memory(1024, 768, 12, dtype=torch.bfloat16)["weights"] / 2**20
        24.0
    """
    B, T_q, T_k, d, h = check_layer_sizes(T_q, d_model, n_heads, B, T_k)  # T_k None -> T_q
    ensure_float_dtype("dtype", dtype, "a floating-point torch.dtype, e.g. torch.float32")
    size = torch.finfo(dtype).bits // 8  # bytes per number
    return {
        "q": B * T_q * d * size,  # (B, n_heads, T_q, d_head)
        "k": B * T_k * d * size,  # (B, n_heads, T_k, d_head)
        "v": B * T_k * d * size,
        "scores": B * h * T_q * T_k * size,  # (B, n_heads, T_q, T_k)
        "weights": B * h * T_q * T_k * size,
        "heads": B * T_q * d * size,  # (B, n_heads, T_q, d_head)
        "out": B * T_q * d * size,  # (B, T_q, d_model)
    }


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The exponent ``p`` of ``y ≈ c x^p``: the least-squares slope of ``log y`` against ``log x``.

    On log-log axes ``y = c x^p`` is a straight line, ``log y = log c + p log x``: a cost
    that grows like ``T^2`` has slope 2, one that grows like ``T`` slope 1.

    Args:
        xs, ys: at least two positive numbers each, as many ys as xs, not all xs equal.

    Example:
        >>> round(loglog_slope([128, 256, 512], [3 * 128**2, 3 * 256**2, 3 * 512**2]), 6)
        2.0
        >>> round(loglog_slope([1, 2, 4, 8], [5, 5, 5, 5]), 6)        # constant: slope 0
        0.0
    """
    x, y = check_fit_points(xs, ys)  # lists of floats
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    if sxx == 0:
        raise fail("xs", "at least two different values", f"{x}")
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx


@contextlib.contextmanager
def _quiet_stderr():
    """Send what C++ code writes to file descriptor 2 to /dev/null for the block (not Python's
    warnings: they are raised by ``fn``, outside these blocks)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2: nothing to hide
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory(fn, device=None) -> tuple:
    """Run ``fn()`` and measure the peak of the memory it allocates: ``(result, peak_bytes)``.

    ``peak_bytes`` is the largest total, at any moment during the call, of the bytes that
    PyTorch's allocator handed out on ``device`` minus those it took back, counted from 0
    at the start: every temporary tensor counts while it lives, and so does the result.
    It is measured, not computed from shapes. On the CPU, where PyTorch keeps no peak
    statistic, ``torch.profiler`` with ``profile_memory=True`` records each allocation
    and each free with its size and time, and the running sum's maximum is the peak (the
    first profiled call in a process takes a second or two to start the profiler).
    On a CUDA device it is ``torch.cuda.max_memory_allocated`` minus the memory allocated
    before the call. Memory that Python objects or the allocator's caches hold is not counted.

    Args:
        fn: a function of no arguments, e.g. ``lambda: attention(q, k, v)``.
        device: where to measure, ``"cpu"`` (default) or a CUDA device, e.g. ``q.device``.

    Returns:
        ``(fn(), peak_bytes)``, ``peak_bytes`` an int.

    Example:
        >>> _, peak = peak_memory(lambda: torch.empty(256, 1024))   # float32: 1 MiB
        >>> peak == 2**20
        True
        >>> _, peak = peak_memory(lambda: torch.zeros(256, 1024).exp())   # the input and the result
        >>> peak == 2 * 2**20
        True
    """
    ensure_callable("fn", fn, "a function of no arguments (e.g. lambda: attention(q, k, v))")
    device = ensure_cpu_or_cuda(torch.device("cpu" if device is None else device))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():  # the profiler logs "profiler_start" there
        prof.start()
    try:
        result = fn()
    finally:
        with _quiet_stderr():
            prof.stop()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    total = peak = 0
    for _, nbytes in events:  # allocations > 0, frees < 0, in time order
        total += nbytes
        peak = max(peak, total)
    return result, peak
