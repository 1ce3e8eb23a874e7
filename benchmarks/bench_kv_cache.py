"""Benchmark a cached decoding step against the time to read the weights once, and grouped-query attention, on CPU (not a test).

Run from the repository root:

    python benchmarks/bench_kv_cache.py [--runs 7] [--prompt 8] [--new 200] [--threads N]

Model: GPT-2 small's shapes (``attnlib.GPT2_SMALL``: 12 layers, ``d_model = 768``, 12 heads,
``vocab_size = 50257``), random weights (``torch.manual_seed(0)``, then every matrix redrawn
with std ``2 / sqrt(fan_in)``, so that the greedy tokens vary and a wrong cache would change
them), float32, no grad, one sequence (``B = 1``), a random prompt of ``--prompt`` tokens,
``--new`` new tokens.

* **A cached step against the memory limit.** ``GPT.generate(prompt, new, use_cache=True)``;
  its time per new token (the whole call divided by ``--new``: the prompt's step and the
  ``new - 1`` one-token steps) against the **weight read**: a streaming reduction (``p.sum()``)
  over every parameter tensor a step reads, each once: all of them but ``pos_emb.weight``
  (a step reads one row of it), the tied ``tok_emb.weight`` / ``lm_head.weight`` once (the
  step reads all of it in the output head and one row of it as the embedding). That is
  124,439,808 - 786,432 = 123,653,376 float32 numbers, 494.6 MB, far more than the CPU's
  caches, so both read from memory; a step also reads the KV cache, 14.6 MiB at the end of
  200 tokens (3% of the weights), which the weight read leaves out. Target (the course's
  issue 19): a step takes at most 1.5 times the weight read. For reference the script also
  times one ``sum`` over a single tensor of the same bytes (one call instead of 195).
  Cached and uncached generation must give identical tokens (asserted before anything is
  timed; the uncached run's time is printed for information).
* **Grouped-query attention**: the same shapes with ``n_kv_heads = n_heads / 4 = 3``
  (its own random weights). The cache's bytes, measured with ``KVCache.nbytes`` after the
  whole generated sequence is cached, must be ``n_heads / n_kv_heads = 4`` times smaller
  than plain multi-head attention's (and equal ``attnlib.kv_cache_bytes``); its cached
  generation should be no slower than plain multi-head attention's (ratio <= 1).

Times: ``--runs`` repetitions, each one cached MHA generation of ``--new`` tokens, then
``--new`` weight reads in a row, then one cached GQA generation, so that load from other
processes hits them alike; the correctness runs before them are the warm-up. A step's time
and a weight read's are both the mean over their ``--new`` repetitions in the run (the same
span of time: a median over short reads alone would leave out the interruptions by other
processes that a whole generation pays for). **The measure is each run's own ratio**, its
step over its weight read, measured side by side, and the table gives the median of those
ratios with their smallest and largest. The memory of a shared machine changes speed from
one run to the next (the weight read took 10 to 19 ms in the runs of ``benchmarks/README.md``),
so the median step and the median read can come from different runs: their ratio, which the
table also gives, pairs times taken under different conditions.

After the timed runs, one more cached generation times every product of the one-token steps
(each ``bmm`` / ``baddbmm`` of ``attnlib.Linear``, with ``time.perf_counter`` around it), so
the script says how much of a step is the products, which read the weights, and how much is
everything else (the small operations and the Python around them), against a weight read
taken right after it.

``--threads`` sets PyTorch's CPU threads (default: PyTorch's own choice,
one per core). On a shared machine, ``--threads 1`` gives steadier times: with one thread
per core, PyTorch's thread pool slows down many times over whenever another process takes
a core. The thread count changes both sides: a streaming ``sum`` uses every thread, and so
does attnlib's one-token product (``attnlib.Linear``: the rows of each weight in blocks, one
batched product), where ``nn.Linear``'s runs at one core's speed on the course's machine
(``benchmarks/README.md``).
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
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone, uninstalled

from _machine import cpu_model

from attnlib import GPT, GPT2_SMALL, KVCache, gpt_params, kv_cache_bytes

MiB = 2**20
TARGET_RATIO = 1.5  # a cached step / the weight read
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


def read_by_a_step(model: GPT) -> list[torch.Tensor]:
    """The parameter tensors a cached step reads whole, each once: every one but ``pos_emb.weight``
    (one row of it per step). ``named_parameters`` lists the tied embedding / output head once."""
    return [p for name, p in model.named_parameters() if name != "pos_emb.weight"]


def read_weights(params: list[torch.Tensor]) -> None:
    """Read every number of ``params`` once from memory: a streaming sum of each tensor."""
    for p in params:
        p.sum()


def cache_bytes(model: GPT, ids: torch.Tensor) -> int:
    """Bytes of every layer's KVCache after reading ``ids`` (B, T): what generation holds at the end."""
    cache = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(ids, kv_cache=cache)
    return sum(c.nbytes for c in cache)


def products_and_rest(model: GPT, prompt: torch.Tensor, new: int, params: list[torch.Tensor]) -> tuple[float, ...]:
    """One cached generation of ``new`` tokens with every product of ``attnlib.Linear`` timed, and
    one of a single token (the prompt's step and the first token), whose times are taken off: what
    is left are the ``new - 1`` one-token steps. Returns, per one-token step, its time and its
    products' time, then the time of a weight read right after (the mean of 20), in s."""
    spent = [0.0]

    def timing(op):
        def run(*args):
            t0 = time.perf_counter()
            out = op(*args)
            spent[0] += time.perf_counter() - t0
            return out

        return run

    times = {}
    with mock.patch.object(torch, "bmm", timing(torch.bmm)), mock.patch.object(torch, "baddbmm", timing(torch.baddbmm)):
        for n in (new, 1):
            spent[0] = 0.0
            times[n] = (timed(lambda: model.generate(prompt, n, use_cache=True)), spent[0])
    (t_new, p_new), (t_one, p_one) = times[new], times[1]
    read = timed(lambda: [read_weights(params) for _ in range(20)]) / 20
    return (t_new - t_one) / (new - 1), (p_new - p_one) / (new - 1), read


def timed(fn) -> float:
    """The wall time (s) of one call of fn."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--prompt", type=int, default=8, help="prompt tokens")
    parser.add_argument("--new", type=int, default=200, help="new tokens to generate")
    parser.add_argument("--threads", type=int, default=0, help="PyTorch CPU threads (default 0: PyTorch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    mha_cfg = GPT2_SMALL
    gqa_cfg = dataclasses.replace(GPT2_SMALL, n_kv_heads=GPT2_SMALL.n_heads // GQA_GROUP)
    now = datetime.datetime.now().isoformat(timespec="minutes")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    machine = (
        f"{platform.system()} {platform.machine()}, CPU: {cpu_model()} ({os.cpu_count()} cores visible), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {now}, load average {load}"
    )
    print(
        f"{machine}\nGPT-2 small shapes, random weights, float32, no grad, B = 1, "
        f"prompt {args.prompt} tokens, {args.new} new tokens, {args.runs} runs\n"
    )

    mha = build(mha_cfg, seed=0)
    gqa = build(gqa_cfg, seed=1)
    prompt = torch.randint(0, mha_cfg.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    params = read_by_a_step(mha)
    weight_bytes = sum(p.nbytes for p in params)
    flat = torch.cat([p.detach().flatten() for p in params])  # the same bytes in one tensor, for reference

    with torch.no_grad():
        # Same tokens first: a fast generation that is wrong is worthless.
        t0 = time.perf_counter()
        tokens = mha.generate(prompt, args.new, use_cache=True)
        t_cached = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert torch.equal(tokens, mha.generate(prompt, args.new, use_cache=False)), (
            "the cached and uncached generations differ"
        )
        t_uncached = time.perf_counter() - t0
        new = tokens[0, args.prompt :]
        print(
            f"MHA: cached == uncached tokens ({args.new} new, {new.unique().numel()} distinct ids; "
            f"first ones {new[:10].tolist()}); first runs: cached {t_cached:.2f} s, uncached {t_uncached:.2f} s"
        )
        short = min(args.new, 32)
        gqa_tokens = gqa.generate(prompt, args.new, use_cache=True)
        assert torch.equal(gqa_tokens[:, : args.prompt + short], gqa.generate(prompt, short, use_cache=False)), (
            "the cached and uncached GQA generations differ"
        )
        print(
            f"GQA: cached == uncached tokens over the first {short} new ones "
            f"({gqa_tokens[0, args.prompt :].unique().numel()} distinct ids in {args.new})"
        )

        # The caches at the end of generation: every token but the last one generated has been read.
        T_end = args.prompt + args.new - 1
        bytes_mha = cache_bytes(mha, tokens[:, :T_end])
        bytes_gqa = cache_bytes(gqa, gqa_tokens[:, :T_end])
        assert bytes_mha == kv_cache_bytes(mha_cfg, T=T_end) and bytes_gqa == kv_cache_bytes(gqa_cfg, T=T_end)

        # The timed runs, interleaved (the runs above were the warm-up).
        step, read, flat_read, gqa_step = [], [], [], []
        for _ in range(args.runs):
            step.append(timed(lambda: mha.generate(prompt, args.new, use_cache=True)) / args.new)
            read.append(timed(lambda: [read_weights(params) for _ in range(args.new)]) / args.new)
            flat_read.append(statistics.median(timed(flat.sum) for _ in range(10)))
            gqa_step.append(timed(lambda: gqa.generate(prompt, args.new, use_cache=True)) / args.new)
        one_step, products, read_after = products_and_rest(mha, prompt, args.new, params)

    med = {
        name: statistics.median(ts) * 1e3
        for name, ts in [("step", step), ("read", read), ("flat", flat_read), ("gqa", gqa_step)]
    }  # ms
    ratios = [s / r for s, r in zip(step, read)]  # each run's step / its own weight read: side by side
    ratio = statistics.median(ratios)
    of_medians = med["step"] / med["read"]  # pairs times of different runs (for reference)
    gqa_ratios = [g / s for g, s in zip(gqa_step, step)]
    gqa_ratio = statistics.median(gqa_ratios)
    mem_ratio = bytes_mha / bytes_gqa
    ms = lambda ts: ", ".join(f"{t * 1e3:.1f}" for t in ts)
    print(
        f"every run (ms): step {ms(step)}; weight read {ms(read)}; one-tensor sum {ms(flat_read)}; "
        f"GQA step {ms(gqa_step)}"
    )
    print(f"per-run ratios step / weight read: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(
        f"ratio of the medians (a step and a read of different runs): {of_medians:.2f}; "
        f"per-run GQA / MHA: {', '.join(f'{r:.2f}' for r in gqa_ratios)}"
    )
    print(
        f"one more generation, its {args.new - 1} one-token steps, every product timed: "
        f"{one_step * 1e3:.2f} ms per step = products {products * 1e3:.2f} ms "
        f"({products / read_after:.2f} x a weight read right after, {read_after * 1e3:.2f} ms) "
        f"+ the rest {(one_step - products) * 1e3:.2f} ms ({(one_step - products) / read_after:.2f} x)"
    )
    print()
    print(
        f"| case | median ms | / weight read, median of the runs' ratios | per-run ratios (min-max) "
        f"| KV cache at {T_end} tokens (MiB) |"
    )
    print("|---|---:|---:|---:|---:|")
    print(
        f"| weight read: `p.sum()` of every tensor a step reads, {weight_bytes / 1e6:.1f} MB "
        f"| {med['read']:.2f} | 1 | | |"
    )
    print(
        f"| (one `sum` over the same bytes in a single tensor) | {med['flat']:.2f} "
        f"| {med['flat'] / med['read']:.2f} | | |"
    )
    print(
        f"| cached step, `generate(use_cache=True)`, {args.new} tokens / {args.new}, 12 heads "
        f"| {med['step']:.2f} | **{ratio:.2f}** | {min(ratios):.2f}-{max(ratios):.2f} | {bytes_mha / MiB:.2f} |"
    )
    print(
        f"| cached step, `n_kv_heads=3` (GQA) | {med['gqa']:.2f} | {med['gqa'] / med['read']:.2f} "
        f"| {gqa_ratio:.2f} (GQA / MHA) | {bytes_gqa / MiB:.2f} (1/{mem_ratio:.0f}) |"
    )
    print()
    print(
        f"parameters: MHA {gpt_params(mha_cfg):,}, GQA {gpt_params(gqa_cfg):,}; "
        f"read by a step: {sum(p.numel() for p in params):,} ({weight_bytes / 1e6:.1f} MB)"
    )
    print(
        f"Targets: cached step <= {TARGET_RATIO:g} x weight read: {ratio:.2f}, "
        f"{'met' if ratio <= TARGET_RATIO else 'NOT met'}; GQA cache 1/{GQA_GROUP} of MHA's: "
        f"1/{mem_ratio:g}, {'met' if mem_ratio == GQA_GROUP else 'NOT met'}; GQA cached time <= MHA's: "
        f"{gqa_ratio:.2f}, {'met' if gqa_ratio <= 1 else 'NOT met'}."
    )


if __name__ == "__main__":
    main()
