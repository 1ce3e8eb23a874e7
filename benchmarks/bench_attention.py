"""Benchmark attnlib's attention against PyTorch's own, on CPU (not a test).

Run from the repository root:

    python benchmarks/bench_attention.py [--runs 20] [--warmup 5]

Cases (fp32, no grad, ``torch.manual_seed(0)``):

* ``MultiHeadAttention(need_weights=False)`` vs ``nn.MultiheadAttention(batch_first=True)``
  with the same weights (``MultiHeadAttention.from_torch``), self-attention on
  ``x`` of shape ``(B, T, d_model) = (4, 512, 768)``, 12 heads. Both take their fast path.
* ``attention`` (explicit weights) vs ``F.scaled_dot_product_attention`` on
  ``q, k, v`` of shape ``(4, 12, 512, 64)``.

Prints the median of ``--runs`` timed runs after ``--warmup`` untimed ones (attnlib and
torch alternate run by run), as a markdown table. The ratio is attnlib / torch (lower is better; 1.00 = same speed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone, uninstalled

from attnlib.attention import attention
from attnlib.multihead import MultiHeadAttention


def median_ms(ours, ref, runs: int, warmup: int) -> tuple[float, float]:
    """Median wall times (ms) of ``ours()`` and ``ref()``, measured alternately so that
    load from other processes hits both alike."""
    for _ in range(warmup):
        ours(), ref()
    times = {ours: [], ref: []}
    for _ in range(runs):
        for fn in (ours, ref):
            t0 = time.perf_counter()
            fn()
            times[fn].append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[ours]), statistics.median(times[ref])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    torch.manual_seed(0)
    B, T, d_model, n_heads = 4, 512, 768, 12
    d_head = d_model // n_heads
    x = torch.randn(B, T, d_model)
    theirs = nn.MultiheadAttention(d_model, n_heads, batch_first=True).eval()
    mine = MultiHeadAttention.from_torch(theirs).eval()
    q, k, v = (torch.randn(B, n_heads, T, d_head) for _ in range(3))

    cases = [
        (
            f"MultiHeadAttention fast path vs nn.MultiheadAttention, x {tuple(x.shape)}",
            lambda: mine(x, need_weights=False),
            lambda: theirs(x, x, x, need_weights=False),
        ),
        (
            f"attention vs F.scaled_dot_product_attention, q/k/v {tuple(q.shape)}",
            lambda: attention(q, k, v),
            lambda: F.scaled_dot_product_attention(q, k, v),
        ),
    ]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU, float32, no grad, "
        f"median of {args.runs} runs after {args.warmup} warmup runs\n"
    )
    print("| case | attnlib median ms | torch median ms | ratio |")
    print("|---|---:|---:|---:|")
    with torch.no_grad():
        # Same numbers first: a fast benchmark of a wrong result is worthless.
        torch.testing.assert_close(
            mine(x, need_weights=False)[0], theirs(x, x, x, need_weights=False)[0], atol=1e-5, rtol=1e-4
        )
        torch.testing.assert_close(attention(q, k, v)[0], F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-4)
        for name, ours, ref in cases:
            t_ours, t_ref = median_ms(ours, ref, args.runs, args.warmup)
            print(f"| {name} | {t_ours:.2f} | {t_ref:.2f} | {t_ours / t_ref:.2f} |")


if __name__ == "__main__":
    main()
