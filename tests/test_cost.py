"""Chapter 11: the cost formulas against independent counts.

FLOPs: torch.utils.flop_counter.FlopCounterMode counts every matrix product PyTorch runs
(2 m k n for (m, k) @ (k, n)); memory: numel() * element_size() of the real tensors, and
the peak that PyTorch's allocator reports while the explicit path runs.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from attnlib import (
    AttnlibError,
    MultiHeadAttention,
    attention,
    attention_flops,
    attention_memory,
    loglog_slope,
    peak_memory,
    split_heads,
)


def raises(*fragments):
    """pytest.raises(AttnlibError) whose message contains every fragment, in order."""
    return pytest.raises(AttnlibError, match=".*".join(re.escape(f) for f in fragments))


def counted(fn) -> dict[str, int]:
    """{op name: FLOPs} that FlopCounterMode records while fn() runs."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return {str(op).removeprefix("aten."): n for op, n in counter.get_flop_counts()["Global"].items()}


def plain_layer(x, ctx, w_q, w_k, w_v, w_o, n_heads):
    """Multi-head attention from plain matmuls (no attnlib): (B, T_q, d) -> (B, T_q, d)."""
    B, T_q, d = x.shape
    T_k = ctx.shape[1]
    q = (x @ w_q).view(B, T_q, n_heads, d // n_heads).transpose(1, 2)  # (B, h, T_q, d_head)
    k = (ctx @ w_k).view(B, T_k, n_heads, d // n_heads).transpose(1, 2)  # (B, h, T_k, d_head)
    v = (ctx @ w_v).view(B, T_k, n_heads, d // n_heads).transpose(1, 2)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // n_heads), dim=-1)  # (B, h, T_q, T_k)
    return (w @ v).transpose(1, 2).reshape(B, T_q, d) @ w_o


SIZES = [  # (B, T_q, d_model, n_heads, T_k)
    (1, 16, 8, 2, None),
    (3, 10, 12, 3, None),
    (2, 7, 16, 4, 13),  # cross-attention: T_k != T_q
    (1, 1, 6, 6, None),  # one token, heads of width 1
    (4, 33, 64, 1, 5),
]


@pytest.mark.parametrize("B, T_q, d, h, T_k", SIZES)
def test_flops_equal_the_counter_on_plain_matmuls(B, T_q, d, h, T_k):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, T_q, d, generator=g)
    ctx = x if T_k is None else torch.randn(B, T_k, d, generator=g)
    ws = [torch.randn(d, d, generator=g) for _ in range(4)]
    total = sum(counted(lambda: plain_layer(x, ctx, *ws, h)).values())
    assert total == attention_flops(T_q, d, h, B=B, T_k=T_k)["total"]


@pytest.mark.parametrize("B, T_q, d, h, T_k", SIZES)
@pytest.mark.parametrize("bias", [True, False])
def test_flops_equal_the_counter_on_attnlib_term_by_term(B, T_q, d, h, T_k, bias):
    """addmm/mm are the four projections, bmm the scores and the weighted sum."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(d, h, bias=bias)
    x = torch.randn(B, T_q, d)
    ctx = None if T_k is None else torch.randn(B, T_k, d)
    with torch.no_grad():
        ops = counted(lambda: layer(x, context=ctx, need_weights=True))
    f = attention_flops(T_q, d, h, B=B, T_k=T_k)
    projections = ops.get("addmm", 0) + ops.get("mm", 0)
    assert projections == f["q_proj"] + f["k_proj"] + f["v_proj"] + f["out_proj"]
    assert ops["bmm"] == f["scores"] + f["weighted_sum"]
    assert set(ops) <= {"addmm", "mm", "bmm"}


def test_flops_at_gpt2_small_sizes_on_the_meta_device():
    with torch.device("meta"):
        layer, x = MultiHeadAttention(768, 12), torch.empty(2, 1024, 768)
        total = sum(counted(lambda: layer(x, need_weights=True)).values())
        causal = sum(counted(lambda: layer(x, is_causal=True)).values())
    f = attention_flops(1024, 768, 12, B=2)
    assert total == causal == f["total"] == 2 * (8 * 1024 * 768**2 + 4 * 1024**2 * 768)


def test_flops_closed_form_and_heads_cancel():
    for T, d in [(1, 8), (100, 64), (4096, 1024)]:
        f = attention_flops(T, d, 1, B=3)
        assert f["total"] == 3 * (8 * T * d * d + 4 * T * T * d)
        assert f == attention_flops(T, d, d, B=3)  # n_heads changes no term
        assert f["total"] == sum(v for k, v in f.items() if k != "total")


def test_the_quadratic_part_overtakes_the_projections_at_2d():
    for d in (64, 768, 1600):
        quad = lambda T: attention_flops(T, d, 1)["scores"] * 2
        proj = lambda T: attention_flops(T, d, 1)["q_proj"] * 4
        assert quad(2 * d) == proj(2 * d)
        assert quad(2 * d - 1) < proj(2 * d - 1) and quad(2 * d + 1) > proj(2 * d + 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B, T_q, d, h, T_k", SIZES)
def test_memory_equals_the_real_tensors(B, T_q, d, h, T_k, dtype):
    torch.manual_seed(0)
    layer = MultiHeadAttention(d, h).to(dtype)
    x = torch.randn(B, T_q, d, dtype=dtype)
    ctx = x if T_k is None else torch.randn(B, T_k, d, dtype=dtype)
    nbytes = lambda t: t.numel() * t.element_size()
    with torch.no_grad():
        q, k, v = (
            split_heads(lin(inp), h) for lin, inp in ((layer.w_q, x), (layer.w_k, ctx), (layer.w_v, ctx))
        )  # (B, h, T, d_head)
        heads, weights = attention(q, k, v)
        out, weights_mha = layer(x, context=None if T_k is None else ctx)
        scores = q @ k.transpose(-2, -1)
    real = {"q": q, "k": k, "v": v, "scores": scores, "weights": weights, "heads": heads, "out": out}
    m = attention_memory(T_q, d, h, B=B, T_k=T_k, dtype=dtype)
    assert m == {name: nbytes(t) for name, t in real.items()}
    assert m["weights"] == nbytes(weights_mha)


@pytest.mark.parametrize(
    "dtype, size", [(torch.float16, 2), (torch.bfloat16, 2), (torch.float32, 4), (torch.float64, 8)]
)
def test_memory_bytes_per_number(dtype, size):
    m = attention_memory(10, 8, 2, B=3, dtype=dtype)
    assert m["weights"] == torch.empty(3, 2, 10, 10, dtype=dtype).nbytes == 3 * 2 * 100 * size


def test_measured_peak_of_the_explicit_path_grows_like_t_squared_and_sdpa_slower():
    """Measured by the allocator (not from shapes): 4x the memory when T doubles, and at least
    the scores and the weights; SDPA, which never holds the (T, T) matrix, far less."""
    g = torch.Generator().manual_seed(0)
    peaks = {"explicit": [], "sdpa": []}
    Ts = [256, 512, 1024]
    with torch.no_grad():
        for T in Ts:
            q, k, v = (torch.randn(1, 1, T, 64, generator=g) for _ in range(3))
            peaks["explicit"].append(peak_memory(lambda: attention(q, k, v))[1])
            peaks["sdpa"].append(peak_memory(lambda: F.scaled_dot_product_attention(q, k, v))[1])
    assert 1.95 <= loglog_slope(Ts, peaks["explicit"]) <= 2.05
    assert loglog_slope(Ts, peaks["sdpa"]) < 1.5
    for T, peak in zip(Ts, peaks["explicit"]):
        m = attention_memory(T, 64, 1)
        assert peak >= m["scores"] + m["weights"]
        assert peak < 5 * m["weights"]


def test_loglog_slope_recovers_powers():
    xs = [128, 256, 512, 1024]
    for p in (0.5, 1.0, 2.0, 3.0):
        assert loglog_slope(xs, [7.0 * x**p for x in xs]) == pytest.approx(p, abs=1e-12)
    g = torch.Generator().manual_seed(0)
    noisy = [3.0 * x**2 * float(1 + 0.05 * torch.randn(1, generator=g)) for x in xs]
    assert loglog_slope(xs, noisy) == pytest.approx(2.0, abs=0.15)
    assert loglog_slope(torch.tensor([1.0, 2.0]), (3, 6)) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "call, fragments",
    [
        (lambda: attention_flops(0, 8, 2), ("T_q: expected a positive int", "received int 0")),
        (lambda: attention_flops(10.0, 8, 2), ("T_q: expected a positive int", "float 10.0")),
        (lambda: attention_flops(10, 8, 3), ("d_model: expected a multiple of n_heads=3", "d_model=8")),
        (lambda: attention_flops(10, 8, 2, B=True), ("B: expected a positive int",)),
        (lambda: attention_flops(10, 8, 2, T_k=0), ("T_k: expected a positive int",)),
        (lambda: attention_memory(10, 8, 2, dtype=torch.int64), ("dtype: expected a floating-point torch.dtype",)),
        (lambda: attention_memory(10, 8, 2, dtype="float32"), ("dtype: expected a floating-point torch.dtype",)),
        (lambda: loglog_slope([1, 2], [1, 2, 3]), ("xs, ys: expected two sequences of the same length",)),
        (lambda: loglog_slope([1], [1]), ("at least 2",)),
        (lambda: loglog_slope([1, 2], [0, 2]), ("finite positive numbers",)),
        (lambda: loglog_slope([2, 2], [1, 2]), ("xs: expected at least two different values",)),
        (lambda: loglog_slope(["a", 2], [1, 2]), ("xs, ys: expected two sequences of numbers",)),
    ],
)
def test_bad_input_is_named(call, fragments):
    with raises(*fragments):
        call()


def test_peak_memory_lives_with_the_cost_tools():
    """Chapter 11 measures with peak_memory first: it is defined in attnlib.cost, re-exported as attnlib.peak_memory."""
    import attnlib
    import attnlib.tiled

    assert attnlib.peak_memory is peak_memory and peak_memory.__module__ == "attnlib.cost"
    assert not hasattr(attnlib.tiled, "peak_memory")
