"""Checkers for chapter 18's coding exercises: the induction score of a head, the previous-token heads
of a model, and the bytes of a KV cache at T tokens."""

from __future__ import annotations

import torch

from ..model import GPTConfig
from ._core import Cases, Check, _register, matches

# ------------------------------------------------------------------ ch18-induction-score


def _weights(B: int, n_heads: int, T: int, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """Random causal attention weights ``(B, n_heads, T, T)``: each row a softmax over keys 0 .. i."""
    scores = 3 * torch.randn(B, n_heads, T, T, generator=g, dtype=torch.float64)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T), True = may attend
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).to(dtype)


def _induction_cases() -> Cases:
    """(weights (B, n_heads, T, T), period): a batch of sequences that repeat ``period`` tokens, seeded."""
    g = torch.Generator().manual_seed(17)
    exact = torch.zeros(1, 2, 6, 6)  # head 0 an exact induction head on period 3, head 1 a previous-token head
    for i in range(6):
        exact[0, 0, i, i - 3 + 1 if i >= 3 else 0] = 1.0
        exact[0, 1, i, max(i - 1, 0)] = 1.0
    cases = [
        ("period 3, T = 6: an exact induction head and a previous-token head", (exact, 3)),
        ("period 2, T = 4, one head", (_weights(1, 1, 4, g), 2)),
        ("period 4, T = 8, 3 heads, B = 2", (_weights(2, 3, 8, g), 4)),
        ("three copies: period 3, T = 9", (_weights(2, 2, 9, g), 3)),
        ("the last copy cut short: period 4, T = 10", (_weights(1, 2, 10, g), 4)),
        ("T = period + 1: one query", (_weights(3, 2, 6, g), 5)),
        ("period 1: every token the same", (_weights(1, 2, 5, g), 1)),
        ("float64 weights", (_weights(2, 2, 8, g, torch.float64), 4)),
        ("SmolLM2's batch: 4 sequences of 25 tokens twice, 9 heads", (_weights(4, 9, 50, g), 25)),
    ]
    for _ in range(3):
        B, n_heads, period, extra = (int(s) for s in torch.randint(1, 6, (4,), generator=g))
        T = period + extra
        cases.append(
            (f"random: B={B}, n_heads={n_heads}, period={period}, T={T}", (_weights(B, n_heads, T, g), period))
        )
    return cases


def _diagonal_score(weights: torch.Tensor, first_query: int, back: int) -> torch.Tensor:
    """The mean over the batch and the queries ``i >= first_query`` of ``weights[..., i, i - back]``:
    ``(B, n_heads, T, T) -> (n_heads,)``, written as a loop over the queries."""
    T = weights.shape[-1]
    picked = [weights[:, :, i, i - back] for i in range(first_query, T)]  # each (B, n_heads)
    return torch.stack(picked, dim=-1).mean(dim=(0, -1))  # (B, n_heads, n_queries) -> (n_heads,)


def _induction_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """Induction scores ``(n_heads,)`` of one layer's weights ``(B, n_heads, T, T)`` on sequences that repeat
    ``period`` tokens (Olsson et al. 2022): the mean weight of every query ``i >= period`` on key
    ``i - period + 1``, the token after the previous occurrence of token ``i``."""
    return _diagonal_score(weights, period, period - 1)


induction_score = _register(
    Check(
        exercise="ch18-induction-score",
        function="induction_score",
        cases=_induction_cases,
        reference=_induction_score,
        hint="the queries with an earlier occurrence are i = period .. T - 1 (i = torch.arange(period, T)); the "
        "token after that occurrence is key i - period + 1; weights[..., i, i - period + 1] picks one weight per "
        "query (two index tensors, aligned), shape (B, n_heads, T - period); average it over the batch (dim 0) "
        "and the queries (the last dim): (n_heads,), in the weights' dtype",
        covers="an exact induction head, period 1 and 2, three copies, a last copy cut short, one query, B > 1, "
        "float64, SmolLM2's batch, random shapes",
        diagnoses=(
            (
                "you took key i - period, the earlier occurrence of the same token: that finds heads that look for "
                "the same token; an induction head looks at the token after it, i - period + 1",
                lambda got, e, w, p: matches(got, _diagonal_score(w, p, p), 1e-5),
            ),
            (
                "you started at query period - 1: it has no earlier occurrence, and its key i - period + 1 is "
                "token 0, the sink; start at query period",
                lambda got, e, w, p: matches(got, _diagonal_score(w, p - 1, p - 1), 1e-5),
            ),
            (
                "you averaged over every query, the first copy's too: average over the queries i >= period only",
                lambda got, e, w, p: matches(got, _mean_over_every_query(w, p), 1e-5),
            ),
            (
                "your scores are per sequence, or per query: average over the batch (dim 0) and the queries, "
                "to one score per head, (n_heads,)",
                lambda got, e, w, p: isinstance(got, torch.Tensor) and got.ndim > e.ndim,
            ),
        ),
    )
)


def _mean_over_every_query(weights: torch.Tensor, period: int) -> torch.Tensor:
    """A wrong answer's score: the picked weights of the second copy, divided by every query of the sequence
    (``T`` rows), the first copy's counted as 0."""
    T = weights.shape[-1]
    return _diagonal_score(weights, period, period - 1) * (T - period) / T


# ------------------------------------------------------------------ ch18-previous-token-heads


def _previous_cases() -> Cases:
    """(weights (n_layers, B, n_heads, T, T): every layer's weights stacked, threshold), seeded."""
    g = torch.Generator().manual_seed(171)

    def planted(B, n_heads, T, n_layers, heads, share=0.8, dtype=torch.float32):
        """Random causal weights, with ``share`` of each row of the heads in ``heads`` moved to key i - 1."""
        layers = []
        for layer in range(n_layers):
            w = _weights(B, n_heads, T, g, dtype)
            for lay, head in heads:
                if lay == layer:
                    shifted = torch.zeros(T, T, dtype=dtype)
                    shifted[1:, :-1] = torch.eye(T - 1, dtype=dtype)  # row i: 1 on key i - 1
                    shifted[0, 0] = 1.0  # query 0 has only itself
                    w[:, head] = (1 - share) * w[:, head] + share * shifted
            layers.append(w)
        return torch.stack(layers)  # (n_layers, B, n_heads, T, T)

    diagonal = torch.zeros(1, 1, 3, 5, 5)
    diagonal[0, 0, 0] = torch.eye(5)  # head 0: the current token
    diagonal[0, 0, 1, 0, 0] = 1.0
    diagonal[0, 0, 1, 1:, :-1] = torch.eye(4)  # head 1: the previous token
    diagonal[0, 0, 2] = torch.ones(5, 5).tril() / torch.arange(1, 6)[:, None]  # head 2: every earlier token alike
    cases = [
        ("one layer: head 0 on the current token, head 1 on the previous one, head 2 uniform", (diagonal, 0.5)),
        ("3 layers, 4 heads, two planted previous-token heads", (planted(2, 4, 8, 3, [(0, 2), (2, 1)]), 0.5)),
        ("no head above the threshold", (planted(1, 3, 6, 2, []), 0.9)),
        ("two heads in one layer", (planted(1, 4, 7, 2, [(1, 3), (1, 0)]), 0.5)),
        (
            "a planted head just above the threshold: query 0 must not count",
            (planted(1, 2, 4, 1, [(0, 1)], share=1.0), 0.99),
        ),
        ("T = 2: one query with a previous token", (planted(2, 3, 2, 2, [(1, 1)]), 0.6)),
        ("float64 weights", (planted(2, 3, 6, 2, [(0, 0)], dtype=torch.float64), 0.5)),
        ("threshold 0: every head with any weight on the previous token", (planted(1, 2, 5, 2, [(0, 1)]), 0.0)),
    ]
    for _ in range(3):
        n_layers, n_heads, T = (int(s) for s in torch.randint(2, 7, (3,), generator=g))
        heads = [
            (int(torch.randint(0, n_layers, (1,), generator=g)), int(torch.randint(0, n_heads, (1,), generator=g)))
        ]
        cases.append(
            (f"random: {n_layers} layers, {n_heads} heads, T={T}", (planted(2, n_heads, T, n_layers, heads), 0.5))
        )
    return cases


def _previous_scores(weights: torch.Tensor, first_query: int = 1, back: int = 1) -> torch.Tensor:
    """``(n_layers, n_heads)``: each layer's :func:`_diagonal_score` of ``weights`` ``(n_layers, B, n_heads, T, T)``."""
    return torch.stack([_diagonal_score(w, first_query, back) for w in weights])


def _previous_token_heads(weights: torch.Tensor, threshold: float) -> torch.Tensor:
    """Which heads are previous-token heads: bool ``(n_layers, n_heads)``, True where the mean over the batch and
    the queries ``i >= 1`` of the weight on key ``i - 1`` is greater than ``threshold``. ``weights``:
    ``(n_layers, B, n_heads, T, T)``, every layer's weights stacked."""
    return _previous_scores(weights) > threshold


previous_token_heads = _register(
    Check(
        exercise="ch18-previous-token-heads",
        function="previous_token_heads",
        cases=_previous_cases,
        reference=_previous_token_heads,
        hint="i = torch.arange(1, T) (query 0 has no previous token); weights[..., i, i - 1] is each query's weight "
        "on the token before it, (n_layers, B, n_heads, T - 1); its mean over the batch (dim 1) and the queries "
        "(dim -1) is the score of each head, (n_layers, n_heads); return score > threshold, a bool tensor",
        covers="the current token against the previous one, planted heads, none found, two in a layer, a head "
        "just above the threshold, T = 2, float64, threshold 0, random models",
        diagnoses=(
            (
                "you found the heads that attend to the current token (the diagonal, key i); a previous-token "
                "head attends to key i - 1",
                lambda got, e, w, t: matches(got, _previous_scores(w, 0, 0) > t),
            ),
            (
                "you counted query 0, whose only key is itself: average over the queries i >= 1",
                lambda got, e, w, t: matches(got, _previous_scores(w) * (w.shape[-1] - 1) / w.shape[-1] > t),
            ),
            (
                "you kept the heads at or below the threshold: keep those whose score is greater than it",
                lambda got, e, w, t: matches(got, ~e),
            ),
            (
                "your result is not one entry per (layer, head): average over the batch (dim 1) and the queries "
                "(the last dim), to (n_layers, n_heads)",
                lambda got, e, w, t: isinstance(got, torch.Tensor) and got.shape != e.shape,
            ),
        ),
    )
)


# ------------------------------------------------------------------ ch18-cache-bytes

SMOLLM2_135M = GPTConfig(
    vocab_size=49152,
    context_length=8192,
    d_model=576,
    n_layers=30,
    n_heads=9,
    d_ff=1536,
    bias=False,
    n_kv_heads=3,
    positions="rope",
    rope_base=100000.0,
    norm="rmsnorm",
    mlp="swiglu",
)  # SmolLM2-135M's shapes (its config.json), for the cases


def _cache_cases() -> Cases:
    """(config, T, dtype), seeded."""
    from ..model import GPT2_SMALL, LLAMA3_8B, QWEN3_8B

    g = torch.Generator().manual_seed(172)
    qwen06 = GPTConfig(
        vocab_size=151936,
        context_length=40960,
        d_model=1024,
        n_layers=28,
        n_heads=16,
        d_ff=3072,
        bias=False,
        n_kv_heads=8,
        positions="rope",
        norm="rmsnorm",
        mlp="swiglu",
        d_head=128,
        qk_norm=True,
    )  # Qwen3-0.6B: d_head 128, not d_model / n_heads = 64
    cases = [
        ("SmolLM2-135M, 1 token, float32", (SMOLLM2_135M, 1, torch.float32)),
        ("SmolLM2-135M, 8,192 tokens, bfloat16", (SMOLLM2_135M, 8192, torch.bfloat16)),
        ("GPT-2 small: n_kv_heads = None, one key/value head per query head", (GPT2_SMALL, 1024, torch.float32)),
        ("Llama 3 8B, 8,192 tokens, bfloat16", (LLAMA3_8B, 8192, torch.bfloat16)),
        ("Qwen3 8B, 100 tokens, float16", (QWEN3_8B, 100, torch.float16)),
        ("Qwen3-0.6B: d_head = 128 set on its own, not d_model / n_heads = 64", (qwen06, 10, torch.bfloat16)),
        ("no token yet: T = 0", (SMOLLM2_135M, 0, torch.float32)),
        ("float64: 8 bytes a number", (SMOLLM2_135M, 3, torch.float64)),
    ]
    for _ in range(3):
        n_kv, group, n_layers = (int(s) for s in torch.randint(1, 5, (3,), generator=g))
        T = int(torch.randint(1, 5000, (1,), generator=g))
        config = GPTConfig(
            vocab_size=100,
            context_length=8192,
            d_model=64 * n_kv * group,
            n_layers=n_layers,
            n_heads=n_kv * group,
            n_kv_heads=n_kv,
        )
        cases.append(
            (
                f"random: {n_layers} layers, {n_kv * group} heads, {n_kv} key/value heads, T={T}",
                (config, T, torch.float32),
            )
        )
    return cases


def _cache_bytes(config: GPTConfig, T: int, dtype: torch.dtype) -> int:
    """Bytes of one sequence's KV cache at ``T`` tokens: ``2 n_layers n_kv_heads d_head T`` numbers of
    ``dtype`` (a key and a value per layer, key/value head and token); ``n_kv_heads = None``: ``n_heads``."""
    n_kv = config.n_kv_heads if config.n_kv_heads is not None else config.n_heads
    per_number = torch.empty((), dtype=dtype).element_size()
    return 2 * config.n_layers * n_kv * config.head_dim * T * per_number


def _cache_bytes_with(**changes):
    """A diagnosis: the answer is what the formula gives with one factor wrong."""

    def applies(got, expected, config, T, dtype):
        n_kv = changes.get("n_kv", config.n_kv_heads or config.n_heads)
        d_head = changes.get("d_head", config.head_dim)
        size = changes.get("size", torch.empty((), dtype=dtype).element_size())
        factor = changes.get("factor", 2)
        wrong = (
            factor
            * config.n_layers
            * (n_kv(config) if callable(n_kv) else n_kv)
            * (d_head(config) if callable(d_head) else d_head)
            * T
            * size
        )
        return got == wrong and got != expected

    return applies


cache_bytes = _register(
    Check(
        exercise="ch18-cache-bytes",
        function="cache_bytes",
        cases=_cache_cases,
        reference=_cache_bytes,
        hint="per token and per layer, each key/value head caches a key and a value of config.head_dim numbers: "
        "2 * n_layers * n_kv_heads * head_dim * T numbers; n_kv_heads = config.n_kv_heads, or config.n_heads when "
        "it is None; config.head_dim is d_head when set, else d_model // n_heads; bytes per number: "
        "dtype.itemsize (4 for float32, 2 for bfloat16); return an int",
        covers="SmolLM2-135M, GPT-2 small without n_kv_heads, Llama 3 8B, Qwen3 8B, d_head set on its own, "
        "T = 0, bfloat16, float16, float64, random configurations",
        forbids=("kv_cache_bytes",),
        diagnoses=(
            (
                "you counted a key/value head per query head (n_heads): grouped-query attention caches "
                "n_kv_heads of them",
                _cache_bytes_with(n_kv=lambda cfg: cfg.n_heads),
            ),
            (
                "your head width is d_model // n_heads: with d_head set on its own the keys are config.head_dim wide",
                _cache_bytes_with(d_head=lambda cfg: cfg.d_model // cfg.n_heads),
            ),
            (
                "you counted the keys or the values only: the cache holds both, a factor 2",
                _cache_bytes_with(factor=1),
            ),
            (
                "your bytes per number do not follow dtype: float32 takes 4, bfloat16 and float16 2, float64 8 "
                "(dtype.itemsize)",
                lambda got, e, config, T, dtype: (
                    dtype != torch.float32 and _cache_bytes_with(size=4)(got, e, config, T, dtype)
                ),
            ),
        ),
    )
)
