"""Benchmark greedy generation with and without a KV cache, and grouped-query attention, on CPU (not a test).

Run from the repository root:

    python benchmarks/bench_kv_cache.py [--runs 3] [--prompt 8] [--new 200] [--threads N]

Model: GPT-2 small's shapes (``attnlib.GPT2_SMALL``: 12 layers, ``d_model = 768``, 12 heads,
``vocab_size = 50257``), random weights (``torch.manual_seed(0)``, then every matrix redrawn
with std ``2 / sqrt(fan_in)``, so that the greedy tokens vary and a wrong cache would change
them), float32, no grad, one sequence (``B = 1``), a random prompt of ``--prompt`` tokens,
``--new`` new tokens.

* **KV cache**: ``GPT.generate(prompt, new, use_cache=True)`` against ``use_cache=False``,
  which runs the whole sequence through the model again at every step. Both compute the
  output head for the last position only. The two must give identical tokens (asserted
  before anything is timed). Target (the course's issue): the cache at least 5x faster.
* **Grouped-query attention**: the same shapes with ``n_kv_heads = n_heads / 4 = 3``
  (its own random weights). The cache's bytes, measured with ``KVCache.nbytes`` after the
  whole generated sequence is cached, must be ``n_heads / n_kv_heads = 4`` times smaller
  than plain multi-head attention's (and equal ``attnlib.kv_cache_bytes``); its cached
  generation should be no slower than plain multi-head attention's (ratio <= 1).

Times: ``--runs`` runs of each case, the cases alternating run by run (cached MHA, uncached
MHA, cached GQA, ...) so that load from other processes hits them alike; the correctness
runs before them are the warm-up. ``--threads`` sets PyTorch's CPU threads (default: PyTorch's
own choice, one per core). On a shared machine, ``--threads 1`` gives steadier times: with one
thread per core, PyTorch's thread pool slows down many times over whenever another process
takes a core (on the course's shared 2-core machine one cached generation took from 4 s to
26 s with 2 threads). A cached step does little arithmetic per weight it reads (one token's
worth), an uncached step much more, so the two scale differently with the number of threads,
and so does the speed-up. The table gives the fastest run of each case, the least disturbed
by other programs, and the median; the ratios and targets use the fastest runs. Every run's
time is printed too.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone, uninstalled

from attnlib import GPT, GPT2_SMALL, KVCache, gpt_params, kv_cache_bytes  # noqa: E402
from _machine import cpu_model  # noqa: E402  (benchmarks/_machine.py, next to this script)

MiB = 2**20
TARGET_SPEEDUP = 5.0
GQA_GROUP = 4  # n_heads / n_kv_heads



def build(config, seed: int) -> GPT:
    """GPT(config) with seeded random weights of unit scale (std 2 / sqrt(fan_in) per matrix).

    GPT-2's own initialisation (std 0.02) makes a random model repeat one token, which a
    broken cache could reproduce; larger weights make the greedy tokens depend on the whole
    context. The time per step does not depend on the values."""
    torch.manual_seed(seed)
    model = GPT(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:  # every weight matrix and the (tied) embeddings
                p.copy_(torch.randn(p.shape, generator=g) * 2 / math.sqrt(p.shape[1]))
    return model.eval()


def cache_bytes(model: GPT, ids: torch.Tensor) -> int:
    """Bytes of every layer's KVCache after reading ``ids`` (B, T): what generation holds at the end."""
    cache = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(ids, kv_cache=cache)
    return sum(c.nbytes for c in cache)


def wall_times(fns: dict, runs: int) -> dict[str, list[float]]:
    """Every run's wall time (s) of each function, the functions alternating run by run."""
    times = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=8, help="prompt tokens")
    parser.add_argument("--new", type=int, default=200, help="new tokens to generate")
    parser.add_argument("--threads", type=int, default=0, help="PyTorch CPU threads (default 0: PyTorch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    mha_cfg = GPT2_SMALL
    gqa_cfg = dataclasses.replace(GPT2_SMALL, n_kv_heads=GPT2_SMALL.n_heads // GQA_GROUP)
    today = datetime.date.today().isoformat()
    machine = (f"{platform.system()} {platform.machine()}, CPU: {cpu_model()} ({os.cpu_count()} cores visible), "
               f"torch {torch.__version__}, {torch.get_num_threads()} threads, {today}")
    print(f"{machine}\nGPT-2 small shapes, random weights, float32, no grad, B = 1, "
          f"prompt {args.prompt} tokens, {args.new} new tokens, {args.runs} runs of each case\n")

    mha = build(mha_cfg, seed=0)
    gqa = build(gqa_cfg, seed=1)
    prompt = torch.randint(0, mha_cfg.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(0))

    with torch.no_grad():
        # Same tokens first: a fast generation that is wrong is worthless.
        t0 = time.perf_counter()
        tokens = mha.generate(prompt, args.new, use_cache=True)
        t_check = time.perf_counter() - t0
        assert torch.equal(tokens, mha.generate(prompt, args.new, use_cache=False)), \
            "the cached and uncached generations differ"
        new = tokens[0, args.prompt:]
        print(f"MHA: cached == uncached tokens ({args.new} new, {new.unique().numel()} distinct ids; "
              f"first ones {new[:10].tolist()}); first cached run {t_check:.2f} s")
        short = min(args.new, 32)
        gqa_tokens = gqa.generate(prompt, args.new, use_cache=True)
        assert torch.equal(gqa_tokens[:, :args.prompt + short], gqa.generate(prompt, short, use_cache=False)), \
            "the cached and uncached GQA generations differ"
        print(f"GQA: cached == uncached tokens over the first {short} new ones "
              f"({gqa_tokens[0, args.prompt:].unique().numel()} distinct ids in {args.new})")

        # The caches at the end of generation: every token but the last one generated has been read.
        T_end = args.prompt + args.new - 1
        bytes_mha = cache_bytes(mha, tokens[:, :T_end])
        bytes_gqa = cache_bytes(gqa, gqa_tokens[:, :T_end])
        assert bytes_mha == kv_cache_bytes(mha_cfg, T=T_end) and bytes_gqa == kv_cache_bytes(gqa_cfg, T=T_end)

        # The timed runs, alternating (the runs above were the warm-up).
        fns = {"mha_cached": lambda: mha.generate(prompt, args.new, use_cache=True),
               "mha_uncached": lambda: mha.generate(prompt, args.new, use_cache=False),
               "gqa_cached": lambda: gqa.generate(prompt, args.new, use_cache=True)}
        times = wall_times(fns, args.runs)

    s = {name: min(ts) for name, ts in times.items()}                # the fastest run of each case
    med = {name: statistics.median(ts) for name, ts in times.items()}
    speedup = s["mha_uncached"] / s["mha_cached"]
    gqa_ratio = s["gqa_cached"] / s["mha_cached"]
    mem_ratio = bytes_mha / bytes_gqa
    per_tok = lambda name: s[name] / args.new * 1e3
    print("every run (s): " + "; ".join(f"{k} " + ", ".join(f"{t:.2f}" for t in v) for k, v in times.items()))
    print(f"median ratios: uncached / cached {med['mha_uncached'] / med['mha_cached']:.1f}, "
          f"GQA / MHA cached {med['gqa_cached'] / med['mha_cached']:.2f}")
    print()
    print(f"| case | fastest s, {args.new} tokens | median s | ms per token (fastest) | ratio (fastest) "
          f"| KV cache at {T_end} tokens (MiB) |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| `generate(use_cache=False)`, 12 heads | {s['mha_uncached']:.2f} | {med['mha_uncached']:.2f}"
          f" | {per_tok('mha_uncached'):.1f} | {speedup:.1f} (uncached / cached) | none kept |")
    print(f"| `generate(use_cache=True)`, 12 heads | {s['mha_cached']:.2f} | {med['mha_cached']:.2f}"
          f" | {per_tok('mha_cached'):.1f} | 1 | {bytes_mha / MiB:.2f} |")
    print(f"| `generate(use_cache=True)`, `n_kv_heads=3` (GQA) | {s['gqa_cached']:.2f} | {med['gqa_cached']:.2f}"
          f" | {per_tok('gqa_cached'):.1f} | {gqa_ratio:.2f} (GQA / MHA, cached) "
          f"| {bytes_gqa / MiB:.2f} (1/{mem_ratio:.0f}) |")
    print()
    print(f"parameters: MHA {gpt_params(mha_cfg):,}, GQA {gpt_params(gqa_cfg):,}")
    print(f"Targets: cache speed-up >= {TARGET_SPEEDUP:g}x: {speedup:.1f}x, "
          f"{'met' if speedup >= TARGET_SPEEDUP else 'NOT met'}; GQA cache 1/{GQA_GROUP} of MHA's: "
          f"1/{mem_ratio:g}, {'met' if mem_ratio == GQA_GROUP else 'NOT met'}; GQA cached time <= MHA's: "
          f"{gqa_ratio:.2f}, {'met' if gqa_ratio <= 1 else 'NOT met'}.")


if __name__ == "__main__":
    main()
