"""Benchmark cached generation: a step against the weight read, against LLMs-from-scratch, and GQA (CPU, not a test).

Run from the repository root (``make benchmark`` installs the pinned comparison, ``benchmarks/requirements.txt``):

    python benchmarks/bench_kv_cache.py [--runs 7] [--prompt 8] [--new 200] [--threads 1 2]

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
  issues 19 and 34): a step takes at most 1.5 times the weight read. For reference the script also
  times one ``sum`` over a single tensor of the same bytes (one call instead of 195).
  Cached and uncached generation must give identical tokens (asserted before anything is
  timed; the uncached run's time is printed for information).
* **Against LLMs-from-scratch** (Raschka, the ``llms-from-scratch`` package, pinned in
  ``benchmarks/requirements.txt``): its GPT-2 model with a KV cache (``llms_from_scratch.kv_cache.gpt2.GPTModel``,
  ``qkv_bias=True``, no dropout) loaded with the same weights (its output head untied, a copy of the
  embedding), and its cached greedy loop (:func:`llms_generate`), the same prompt and token count.
  Both must give the same tokens (asserted before timing). Tokens per second: ``--new`` over the
  wall time of the whole call, prompt included, for both. Target (issue 34): attnlib's at least theirs.
* **Grouped-query attention**: the same shapes with ``n_kv_heads = n_heads / 4 = 3``
  (its own random weights). The cache's bytes, measured with ``KVCache.nbytes`` after the
  whole generated sequence is cached, must be ``n_heads / n_kv_heads = 4`` times smaller
  than plain multi-head attention's (and equal ``attnlib.kv_cache_bytes``); its cached
  generation should be no slower than plain multi-head attention's (ratio <= 1).

Times, for each thread count of ``--threads`` in turn (``torch.set_num_threads``, in the same
process): ``--runs`` repetitions, each one cached MHA generation of ``--new`` tokens, then
one of LLMs-from-scratch, then ``--new`` weight reads in a row, then one cached GQA generation,
so that load from other processes hits them alike; the correctness runs before them are the
warm-up. A step's time and a weight read's are both the mean over their ``--new`` repetitions in
the run (the same span of time: a median over short reads alone would leave out the interruptions
by other processes that a whole generation pays for). **The measure is each run's own ratio**, its
step over its weight read (and attnlib's tokens/s over LLMs-from-scratch's), measured side by side,
and the table gives the median of those ratios with their smallest and largest. The memory of a
shared machine changes speed from one run to the next, so the median step and the median read can
come from different runs: their ratio, which the script also prints, pairs times taken under
different conditions.

After the timed runs, one more cached generation times every product of the one-token steps
(each ``F.linear``: the 72 matrices of the layers and the output head, 73 in all, with ``time.perf_counter``
around it), so the script says how much of a step is the products, which read the weights, and how
much is everything else (the small operations and the Python around them), against a weight read
taken right after it.

On a shared machine, 1 thread gives steadier times: with one thread per core, PyTorch's thread
pool slows down many times over whenever another process takes a core.
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
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone, uninstalled

from _machine import cpu_model

from attnlib import GPT, GPT2_SMALL, KVCache, gpt_params, kv_cache_bytes

try:  # the pinned comparison: a benchmark dependency only (benchmarks/requirements.txt)
    from llms_from_scratch.kv_cache.gpt2 import GPTModel as LlmsGPT
    from llms_from_scratch.kv_cache.gpt2 import MultiHeadAttention as LlmsAttention
    from llms_from_scratch.kv_cache.utils import KVCache as LlmsKVCache
except ImportError as e:
    raise SystemExit(
        f"bench_kv_cache.py compares with LLMs-from-scratch, which is not installed ({e}): run "
        "`make benchmark`, or `pip install --no-deps -r benchmarks/requirements.txt` (its module "
        "llms_from_scratch.kv_cache needs torch only; --no-deps skips TensorFlow and the book's other tools)"
    ) from None

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


class LlmsAttentionFixed(LlmsAttention):
    """LLMs-from-scratch's GPT-2 attention with a KV cache (1.0.19), with its causal mask fixed for cached steps.

    The package's ``forward`` takes the mask's last ``num_tokens`` *columns*
    (``triu(ones(T, T), 1)[:, -num_tokens:]``), where the new queries are the last *rows*: at the
    second one-token step, ``(T, 1)`` does not broadcast against the scores ``(b, h, 1, T)`` and it
    raises (the package's own test skips cached generation for this model; upstream's pull request
    #1048 fixes it after 1.0.19). This is the same computation, operation for operation, with the rows."""

    def forward(self, x, use_cache=False, start_pos=0, cache=None):
        b, num_tokens, _ = x.shape
        heads = lambda t: t.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, d_h)
        keys, values, queries = heads(self.W_key(x)), heads(self.W_value(x)), heads(self.W_query(x))
        if use_cache:
            if cache is not None:  # their cache: a new (keys, values) pair, concatenated at every step
                keys = torch.cat([cache[0], keys], dim=2)
                values = torch.cat([cache[1], values], dim=2)
            next_cache = (keys, values)
        else:
            next_cache = None
        seq_len = keys.size(2)
        causal_mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=x.device), diagonal=1)
        causal_mask = causal_mask[-num_tokens:, :][None, None, :, :]  # the fix: rows, not columns
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores.masked_fill_(causal_mask, -torch.inf)
        attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        context_vec = (attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec), next_cache


def llms_model(model: GPT) -> LlmsGPT:
    """LLMs-from-scratch's GPT-2 with a KV cache, holding a copy of ``model``'s weights: the same
    architecture (learned positions, pre-LayerNorm with eps 1e-5, tanh GELU, biases everywhere but the
    output head), its head untied, so a copy of the embedding; its attention's mask fixed
    (:class:`LlmsAttentionFixed`)."""
    c = model.config
    cfg = dict(vocab_size=c.vocab_size, context_length=c.context_length, emb_dim=c.d_model)
    theirs = LlmsGPT(cfg | dict(n_heads=c.n_heads, n_layers=c.n_layers, drop_rate=0.0, qkv_bias=True))
    names = {"tok_emb.weight": "tok_emb.weight", "pos_emb.weight": "pos_emb.weight"}
    names |= {"final_norm.scale": "ln_f.weight", "final_norm.shift": "ln_f.bias", "out_head.weight": "lm_head.weight"}
    for i in range(c.n_layers):
        ours = {"att.W_query": "attn.w_q", "att.W_key": "attn.w_k", "att.W_value": "attn.w_v"}
        ours |= {"att.out_proj": "attn.w_o", "ff.layers.0": "mlp.0", "ff.layers.2": "mlp.2"}
        for t, o in ours.items():
            for p in ("weight", "bias"):
                names[f"trf_blocks.{i}.{t}.{p}"] = f"blocks.{i}.{o}.{p}"
        for t, o in [("norm1", "ln1"), ("norm2", "ln2")]:
            names |= {
                f"trf_blocks.{i}.{t}.scale": f"blocks.{i}.{o}.weight",
                f"trf_blocks.{i}.{t}.shift": f"blocks.{i}.{o}.bias",
            }
    state = model.state_dict()
    assert set(names) == set(theirs.state_dict()), "LLMs-from-scratch's GPT-2 has other parameters than expected"
    theirs.load_state_dict({t: state[o].clone() for t, o in names.items()})
    for block in theirs.trf_blocks:
        block.att.__class__ = LlmsAttentionFixed  # the same module and weights, the mask fixed
    return theirs.eval()


def llms_generate(model: LlmsGPT, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """LLMs-from-scratch's cached greedy loop, ``llms_from_scratch.kv_cache.generate.generate_text_simple``
    (1.0.19) with ``use_cache=True``, line for line, for the package's GPT-2 model. That function
    serves its Llama 3 / Qwen3 models: it reads ``model.cfg``, calls ``model.reset_kv_cache()`` and
    calls the model without ``use_cache=True``, and the GPT-2 ``GPTModel`` has neither attribute
    and ignores the cache without the flag. So: its ``KVCache``, its position counter reset to 0,
    ``use_cache=True``. Like the original, the loop runs one step more than it needs (its last
    logits are unused): ``max_new_tokens`` one-token steps where ``GPT.generate`` runs ``max_new_tokens - 1``."""
    model.eval()
    with torch.no_grad():
        cache = LlmsKVCache(n_layers=len(model.trf_blocks))
        model.current_pos = 0  # what reset_kv_cache() does for the package's other models
        logits = model(idx, use_cache=True, cache=cache)
        for _ in range(max_new_tokens):
            next_idx = logits[:, -1].argmax(dim=-1, keepdim=True)
            idx = torch.cat([idx, next_idx], dim=1)
            logits = model(next_idx, use_cache=True, cache=cache)
    return idx


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
    """One cached generation of ``new`` tokens with every product (``F.linear``, which ``nn.Linear``
    calls) timed, and one of a single token (the prompt's step and the first token), whose times are
    taken off: what is left are the ``new - 1`` one-token steps. Returns, per one-token step, its time
    and its products' time, then the time of a weight read right after (the mean of 20), in s."""
    spent = [0.0]
    linear = F.linear

    def timed_linear(*args):
        t0 = time.perf_counter()
        out = linear(*args)
        spent[0] += time.perf_counter() - t0
        return out

    times = {}
    with mock.patch.object(F, "linear", timed_linear):
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


def spread(xs: list[float], fmt: str = ".2f") -> str:
    """The median of ``xs`` in bold, then their smallest and largest."""
    return f"**{statistics.median(xs):{fmt}}** ({min(xs):{fmt}}-{max(xs):{fmt}})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--prompt", type=int, default=8, help="prompt tokens")
    parser.add_argument("--new", type=int, default=200, help="new tokens to generate")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="PyTorch CPU threads, each in turn")
    args = parser.parse_args()

    mha_cfg = GPT2_SMALL
    gqa_cfg = dataclasses.replace(GPT2_SMALL, n_kv_heads=GPT2_SMALL.n_heads // GQA_GROUP)
    now = datetime.datetime.now().isoformat(timespec="minutes")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    machine = (
        f"{platform.system()} {platform.machine()}, CPU: {cpu_model()} ({os.cpu_count()} cores visible), "
        f"torch {torch.__version__}, threads {' and '.join(map(str, args.threads))}, {now}, load average {load}"
    )
    print(
        f"{machine}\nGPT-2 small shapes, random weights, float32, no grad, B = 1, "
        f"prompt {args.prompt} tokens, {args.new} new tokens, {args.runs} runs per thread count\n"
    )

    mha = build(mha_cfg, seed=0)
    gqa = build(gqa_cfg, seed=1)
    theirs = llms_model(mha)
    prompt = torch.randint(0, mha_cfg.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    params = read_by_a_step(mha)
    weight_bytes = sum(p.nbytes for p in params)
    flat = torch.cat([p.detach().flatten() for p in params])  # the same bytes in one tensor, for reference

    with torch.no_grad():
        # Same tokens first: a fast generation that is wrong is worthless.
        torch.set_num_threads(args.threads[0])
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
        theirs_tokens = llms_generate(theirs, prompt, args.new)
        same = (theirs_tokens[0, args.prompt :] == new).int().cumprod(0).sum().item()  # how many agree from the start
        assert torch.equal(theirs_tokens, tokens), (
            f"LLMs-from-scratch's cached generation differs from attnlib's after {same} of {args.new} tokens: "
            "the comparison needs the same weights and the same architecture"
        )
        print(f"LLMs-from-scratch: the same {args.new} tokens as attnlib's, cached, with the same weights")
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
        mem_ratio = bytes_mha / bytes_gqa

        rows, met = [], []
        for threads in args.threads:
            torch.set_num_threads(threads)
            llms_generate(theirs, prompt, args.new)  # warm-up at this thread count
            mha.generate(prompt, args.new, use_cache=True)
            # The timed runs, interleaved.
            step, llms, read, flat_read, gqa_step = [], [], [], [], []
            for _ in range(args.runs):
                step.append(timed(lambda: mha.generate(prompt, args.new, use_cache=True)) / args.new)
                llms.append(timed(lambda: llms_generate(theirs, prompt, args.new)) / args.new)
                read.append(timed(lambda: [read_weights(params) for _ in range(args.new)]) / args.new)
                flat_read.append(statistics.median(timed(flat.sum) for _ in range(10)))
                gqa_step.append(timed(lambda: gqa.generate(prompt, args.new, use_cache=True)) / args.new)
            one_step, products, read_after = products_and_rest(mha, prompt, args.new, params)

            ms = lambda ts: ", ".join(f"{t * 1e3:.1f}" for t in ts)
            ratios = [s / r for s, r in zip(step, read)]  # each run's step / its own weight read: side by side
            speedups = [t / s for s, t in zip(step, llms)]  # attnlib's tokens/s / LLMs-from-scratch's
            gqa_ratios = [g / s for g, s in zip(gqa_step, step)]
            print(
                f"\n{threads} thread(s), every run (ms): step {ms(step)}; LLMs-from-scratch {ms(llms)}; "
                f"weight read {ms(read)}; one-tensor sum {ms(flat_read)}; GQA step {ms(gqa_step)}"
            )
            print(
                f"ratio of the medians step / read (a step and a read of different runs): "
                f"{statistics.median(step) / statistics.median(read):.2f}"
            )
            print(
                f"one more generation, its {args.new - 1} one-token steps, every product timed: "
                f"{one_step * 1e3:.2f} ms per step = products {products * 1e3:.2f} ms "
                f"({products / read_after:.2f} x a weight read right after, {read_after * 1e3:.2f} ms) "
                f"+ the rest {(one_step - products) * 1e3:.2f} ms ({(one_step - products) / read_after:.2f} x)"
            )
            rows.append(
                f"| {threads} | {statistics.median(read) * 1e3:.2f} | {statistics.median(flat_read) * 1e3:.2f} "
                f"| {statistics.median(step) * 1e3:.2f} | {spread(ratios)} "
                f"| {statistics.median(1 / s for s in step):.1f} "
                f"| {statistics.median(1 / t for t in llms):.1f} | {spread(speedups)} "
                f"| {products / read_after:.2f}, {(one_step - products) / read_after:.2f} "
                f"| {statistics.median(gqa_ratios):.2f} |"
            )
            ratio, speedup, gqa_ratio = (statistics.median(xs) for xs in (ratios, speedups, gqa_ratios))
            met.append(
                f"{threads} thread(s): step <= {TARGET_RATIO:g} x weight read: {ratio:.2f}, "
                f"{'met' if ratio <= TARGET_RATIO else 'NOT met'}; tokens/s >= LLMs-from-scratch's: "
                f"{speedup:.2f} x, {'met' if speedup >= 1 else 'NOT met'}; GQA cached time <= MHA's: "
                f"{gqa_ratio:.2f}, {'met' if gqa_ratio <= 1 else 'NOT met'}."
            )

    print()
    print(
        "| threads | weight read, median ms | one-tensor `sum`, median ms | attnlib cached step, median ms "
        "| **step / weight read**, median of runs (min-max) | attnlib tokens/s | LLMs-from-scratch tokens/s "
        "| **attnlib / LLMs-from-scratch**, tokens/s, median of runs (min-max) "
        "| a one-token step: products, rest (x read) | GQA / MHA step |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print()
    print(
        f"parameters: MHA {gpt_params(mha_cfg):,}, GQA {gpt_params(gqa_cfg):,}; read by a step: "
        f"{sum(p.numel() for p in params):,} ({weight_bytes / 1e6:.1f} MB); KV cache at {T_end} tokens: "
        f"MHA {bytes_mha / MiB:.2f} MiB, GQA {bytes_gqa / MiB:.2f} MiB (1/{mem_ratio:g})"
    )
    print(
        f"Targets: GQA cache 1/{GQA_GROUP} of MHA's: 1/{mem_ratio:g}, {'met' if mem_ratio == GQA_GROUP else 'NOT met'}"
    )
    print("\n".join(met))


if __name__ == "__main__":
    main()
