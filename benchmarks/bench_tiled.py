"""Benchmark tiled attention against the explicit full-matrix attention, on CPU (not a test).

Run from the repository root:

    python benchmarks/bench_tiled.py [--runs 5] [--warmup 1] [--blocks 64 128 256 512]

Cases (one head, ``d_head = 64``, fp32, no grad, ``torch.manual_seed(0)``, q/k/v of shape
``(B, n_heads, T, d_head) = (1, 1, T, 64)``), for ``tiled_attention`` at every block size of
``--blocks`` and for the explicit ``attention`` (which builds the full ``(T, T)`` scores and
weights):

* **peak extra memory at T = 8192**: the most bytes allocated at any moment during one call,
  counted from 0 at its start, temporaries and result included, measured by
  ``attnlib.cost.peak_memory`` (every allocation and free recorded by ``torch.profiler``).
  ``F.scaled_dot_product_attention`` is measured too, for reference, on the 4-D tensors and
  on the same numbers as 3-D tensors ``(1, T, 64)``: in torch 2.13.0 on the CPU the first go
  to its tiled ("flash") kernel, the second to the math path, which builds the full matrix.
* **time at T = 4096**: median wall time of ``--runs`` runs after ``--warmup``, the tiled and
  the explicit attention alternating run by run; and the same with ``is_causal=True`` at the
  default block size, where the tiled attention skips the tiles above the diagonal.

Targets (the course's issue): tiled at the default block size uses at most 1/16 of the
full path's peak extra memory at T = 8192, and runs within 2x of the explicit
``attention``'s time at T = 4096. The ratios are tiled / explicit (lower is better).
Both results are checked against each other before anything is measured.

**Training** (chapter 14; ``--threads``, default 1 and 2, each a run of its own): one step,
the forward pass and ``backward(dO)``, at the default block size, for the explicit
``attention`` under autograd (which keeps the ``(T, T)`` weights), ``flash_attention``
(FlashAttention-2's tiled backward, which keeps O and L), ``tiled_attention`` under plain
autograd (which keeps every tile) and SDPA's own backward, on q/k/v ``(1, 1, T, 64)``:
the peak extra memory at T = 8192 and the median time at T = 4096, side by side, after
checking that all four give the same gradients. Target: ``flash_attention``'s peak at
T = 8192 at most 1/16 of the explicit path's.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone, uninstalled

from _machine import cpu_model

from attnlib.attention import attention
from attnlib.backward import flash_attention
from attnlib.cost import peak_memory
from attnlib.tiled import DEFAULT_BLOCK_SIZE, tiled_attention

MiB = 2**20
T_MEMORY, T_TIME, D_HEAD = 8192, 4096, 64
TARGET_MEMORY, TARGET_TIME = 1 / 16, 2.0


def qkv(T: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(1, 1, T, D_HEAD) for _ in range(3))  # (B, n_heads, T, d_head) = (1, 1, T, 64)


def median_ms(fns: dict, runs: int, warmup: int) -> dict:
    """Median wall times (ms) of each function, the functions alternating run by run so that
    load from other processes hits them alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


TRAINING = {  # one forward pass each; the step below adds backward(dO)
    "`attention` + autograd (keeps P)": lambda q, k, v: attention(q, k, v)[0],
    "`flash_attention` (FlashAttention-2 backward)": lambda q, k, v: flash_attention(q, k, v),
    "`tiled_attention` + autograd (keeps every tile)": lambda q, k, v: tiled_attention(q, k, v),
    "`F.scaled_dot_product_attention` backward (for reference)": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v
    ),
}


def train_step(forward, q, k, v, dout):
    """The forward pass and backward(dout) from fresh leaves: returns (dq, dk, dv)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    forward(q, k, v).backward(dout)
    return q.grad, k.grad, v.grad


def training(threads: int, runs: int, warmup: int) -> None:
    """Chapter 14's table: a training step's peak memory (T = 8192) and time (T = 4096)."""
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    dout = torch.randn(1, 1, T_TIME, D_HEAD)
    q, k, v = qkv(T_TIME)
    want = train_step(TRAINING["`attention` + autograd (keeps P)"], q, k, v, dout)
    for name, forward in TRAINING.items():  # same gradients first
        for got, ref in zip(train_step(forward, q, k, v, dout), want):
            torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-3, msg=lambda m, name=name: f"{name}: {m}")
    del want
    ms = median_ms(
        {name: (lambda f=forward: train_step(f, q, k, v, dout)) for name, forward in TRAINING.items()}, runs, warmup
    )
    q, k, v = qkv(T_MEMORY)
    dout = torch.randn(1, 1, T_MEMORY, D_HEAD)
    peak_memory(lambda: None)  # start the profiler once, untimed
    peaks = {name: peak_memory(lambda f=forward: train_step(f, q, k, v, dout))[1] for name, forward in TRAINING.items()}

    full = "`attention` + autograd (keeps P)"
    print(
        f"\nTraining step (forward + backward), {torch.get_num_threads()} thread(s), block_size {DEFAULT_BLOCK_SIZE}:\n"
    )
    print(f"| case | peak extra MiB, T = {T_MEMORY} | / explicit | median ms, T = {T_TIME} | / explicit |")
    print("|---|---:|---:|---:|---:|")
    for name in TRAINING:
        print(
            f"| {name} | {peaks[name] / MiB:.1f} | {peaks[name] / peaks[full]:.3f}"
            f" | {ms[name]:.1f} | {ms[name] / ms[full]:.2f} |"
        )
    flash = "`flash_attention` (FlashAttention-2 backward)"
    ok = peaks[flash] <= TARGET_MEMORY * peaks[full]
    print(
        f"\nTarget: `flash_attention`'s peak at T = {T_MEMORY} <= 1/16 of the explicit path's: {'met' if ok else 'NOT met'}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--blocks", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts of the training table")
    parser.add_argument("--only-training", action="store_true", help="skip the forward-only table")
    args = parser.parse_args()
    blocks = sorted(set(args.blocks) | {DEFAULT_BLOCK_SIZE})
    if args.only_training:
        for threads in args.threads:
            training(threads, args.runs, args.warmup)
        return

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU: {cpu_model()} "
        f"({os.cpu_count()} cores visible), {platform.system()} {platform.machine()}; float32, no grad; "
        f"one head, d_head {D_HEAD}; default block size {DEFAULT_BLOCK_SIZE}\n"
    )
    peaks = {}
    with torch.no_grad():
        # Same numbers first: a small or fast result that is wrong is worthless.
        q, k, v = qkv(T_TIME)
        full = attention(q, k, v)[0]
        for b in blocks:
            torch.testing.assert_close(tiled_attention(q, k, v, block_size=b), full, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(
                tiled_attention(q, k, v, block_size=b, is_causal=True),
                attention(q, k, v, is_causal=True)[0],
                atol=1e-5,
                rtol=1e-4,
            )
        del full

        # Time at T = 4096, every case alternating with the others; timed before the memory is
        # measured, since the profiler's threads can slow the next calls down for a while.
        fns = {"attention": lambda: attention(q, k, v)}
        fns.update({b: (lambda b=b: tiled_attention(q, k, v, block_size=b)) for b in blocks})
        fns["sdpa"] = lambda: F.scaled_dot_product_attention(q, k, v)
        ms = median_ms(fns, args.runs, args.warmup)
        # Causal at T = 4096: the explicit path computes every score and masks half of them;
        # the tiled one skips the tiles above the diagonal.
        causal_ms = median_ms(
            {
                "attention": lambda: attention(q, k, v, is_causal=True),
                "tiled": lambda: tiled_attention(q, k, v, is_causal=True),
            },
            args.runs,
            args.warmup,
        )

        # Peak extra memory at T = 8192: one call each, measured.
        q, k, v = qkv(T_MEMORY)
        peak_memory(lambda: None)  # start the profiler once, untimed
        full_out, full_peak = peak_memory(lambda: attention(q, k, v)[0])
        _, sdpa_peak = peak_memory(lambda: F.scaled_dot_product_attention(q, k, v))
        # the same numbers as 3-D tensors (T, d_head) with one batch axis: SDPA takes another path
        _, sdpa_3d_peak = peak_memory(lambda: F.scaled_dot_product_attention(q[0], k[0], v[0]))
        for b in blocks:
            out, peak = peak_memory(lambda: tiled_attention(q, k, v, block_size=b))
            torch.testing.assert_close(out, full_out, atol=1e-5, rtol=1e-4)
            peaks[b] = peak
        del full_out

    print(f"| case | peak extra MiB, T = {T_MEMORY} | / full | median ms, T = {T_TIME} | / attention |")
    print("|---|---:|---:|---:|---:|")
    print(f"| `attention` (explicit, full matrix) | {full_peak / MiB:.1f} | 1 | {ms['attention']:.1f} | 1.00 |")
    for b in blocks:
        name = f"`tiled_attention`, block_size={b}" + (" (default)" if b == DEFAULT_BLOCK_SIZE else "")
        print(
            f"| {name} | {peaks[b] / MiB:.2f} | 1/{full_peak / peaks[b]:.0f}"
            f" | {ms[b]:.1f} | {ms[b] / ms['attention']:.2f} |"
        )
    print(
        f"| `F.scaled_dot_product_attention`, q/k/v (1, 1, T, 64) (for reference) | {sdpa_peak / MiB:.2f}"
        f" | 1/{full_peak / sdpa_peak:.0f} | {ms['sdpa']:.1f} | {ms['sdpa'] / ms['attention']:.2f} |"
    )
    print(
        f"| `F.scaled_dot_product_attention`, q/k/v (1, T, 64) (for reference) | {sdpa_3d_peak / MiB:.2f}"
        f" | 1/{full_peak / sdpa_3d_peak:.1f} | | |"
    )
    print(
        f"| causal: `attention(is_causal=True)` vs `tiled_attention(is_causal=True)`, block_size="
        f"{DEFAULT_BLOCK_SIZE} | | | {causal_ms['attention']:.1f} vs {causal_ms['tiled']:.1f} |"
        f" {causal_ms['tiled'] / causal_ms['attention']:.2f} |"
    )

    memory_ok = peaks[DEFAULT_BLOCK_SIZE] <= TARGET_MEMORY * full_peak
    time_ok = ms[DEFAULT_BLOCK_SIZE] <= TARGET_TIME * ms["attention"]
    print(
        f"\nTargets at the default block size {DEFAULT_BLOCK_SIZE}: peak extra memory <= 1/16 of the full "
        f"path's: {'met' if memory_ok else 'NOT met'}; time within {TARGET_TIME:g}x of `attention`: "
        f"{'met' if time_ok else 'NOT met'}."
    )
    for threads in args.threads:
        training(threads, args.runs, args.warmup)


if __name__ == "__main__":
    main()
