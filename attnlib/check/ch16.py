"""Checkers for chapter 16's coding exercises."""

from __future__ import annotations

import torch

from ._core import Cases, Check, _register, matches

# ------------------------------------------------------------------ ch16-streaming-mask


def _streaming_cases() -> Cases:
    """(T, window, sinks): a sequence read through ``KVCache(window=window, sinks=sinks)``, seeded."""
    g = torch.Generator().manual_seed(15)
    # the small cases come first: a message shows a tensor in full up to 24 entries
    cases = [
        ("T = 4, window = 2, no sinks: the band", (4, 2, 0)),
        ("T = 4, window = 2, 2 sinks", (4, 2, 2)),
        ("T = 8, window = 3, 2 sinks", (8, 3, 2)),
        ("window = 1, no sinks: each query sees itself only", (6, 1, 0)),
        ("window = 1, 2 sinks: itself and the first two tokens", (6, 1, 2)),
        ("window = T: the causal mask", (5, 5, 0)),
        ("window larger than T", (5, 9, 1)),
        ("sinks + window = T: the causal mask, though the window is shorter", (7, 3, 4)),
        ("more sinks than tokens", (4, 2, 6)),
        ("one token (T = 1)", (1, 1, 1)),
    ]
    for _ in range(3):
        T, window = (int(s) for s in torch.randint(2, 13, (2,), generator=g))
        sinks = int(torch.randint(0, 5, (1,), generator=g))
        cases.append((f"random: T = {T}, window = {window}, sinks = {sinks}", (T, window, sinks)))
    return cases


def _streaming_mask(T: int, window: int, sinks: int) -> torch.Tensor:
    """The keys a query sees through a StreamingLLM cache, ``(T, T)`` bool, True = may attend:
    ``mask[i, j] = j <= i and (i - j < window or j < sinks)``; the band
    (:func:`attnlib.sliding_window_mask`) with its first ``sinks`` columns kept below the diagonal."""
    band = torch.ones(T, T, dtype=torch.bool).tril() & ~torch.ones(T, T, dtype=torch.bool).tril(-window)  # (T, T)
    first = torch.zeros(T, T, dtype=torch.bool)
    first[:, :sinks] = True  # (T, T): the sink columns
    return band | (first & torch.ones(T, T, dtype=torch.bool).tril())  # (T, T)


streaming_mask = _register(
    Check(
        exercise="ch16-streaming-mask",
        function="streaming_mask",
        cases=_streaming_cases,
        reference=_streaming_mask,
        hint="query i (row) may attend to key j (column) when j <= i (never the future) and either i - j < window "
        "(the window counts the query itself: i - window + 1 .. i) or j < sinks (the first tokens, kept however far "
        "back); with i = torch.arange(T)[:, None] and j = torch.arange(T)[None, :], combine the comparisons with & "
        "and |; a sink after the query stays hidden; return a bool tensor of shape (T, T)",
        covers="the band without sinks, window 1, window = T and larger, sinks + window = T, more sinks than tokens, "
        "T = 1, random sizes",
        forbids=("sliding_window_mask", "sliding_window_mod", "mask_from_mod"),
        diagnoses=(
            (
                "your mask lets a query see sinks that come after it: a sink j < sinks is seen only when j <= i too",
                lambda got, m, T, w, s: matches(got, _streaming_mask(T, w, 0) | (torch.arange(T)[None, :] < s)),
            ),
            (
                "your window holds window + 1 keys (i - j <= window): the window counts the query itself, "
                "i - j < window",
                lambda got, m, T, w, s: matches(got, _streaming_mask(T, w + 1, s)),
            ),
            (
                "your window holds window - 1 keys: it counts the query itself, i - window + 1 .. i, so i - j < window",
                lambda got, m, T, w, s: matches(got, _streaming_mask(T, w - 1, s)),
            ),
            (
                "you keep sinks + 1 first tokens (j <= sinks): the sinks are j < sinks",
                lambda got, m, T, w, s: matches(got, _streaming_mask(T, w, s + 1)),
            ),
            (
                "your mask has no sinks: the first sinks tokens stay visible however far back (j < sinks)",
                lambda got, m, T, w, s: s > 0 and matches(got, _streaming_mask(T, w, 0)),
            ),
            (
                "your mask is transposed: rows are queries i, columns keys j",
                lambda got, m, T, w, s: matches(got, m.T),
            ),
        ),
    )
)


def _wider(got, expected, widest) -> bool:
    """Whether a wrong answer holds every entry of ``expected`` and more, all of them within ``widest`` (the
    same mask without its window): a window too wide, or none at all."""
    return (
        isinstance(got, torch.Tensor)
        and got.dtype == expected.dtype
        and got.shape == expected.shape
        and not bool((got & ~widest).any())  # nothing outside the same document's causal triangle
        and not bool((expected & ~got).any())  # everything the window allows
        and not torch.equal(got, expected)
    )


# ------------------------------------------------------------------ ch16-sink-softmax


def _sink_cases() -> Cases:
    """(scores, sinks): scores (B, n_heads, T_q, T_k) with -inf where masked, sinks (n_heads,), seeded."""
    g = torch.Generator().manual_seed(151)
    inf = float("-inf")

    def causal(scores):
        T_q, T_k = scores.shape[-2:]
        allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)  # (T_q, T_k), bottom right
        return scores.masked_fill(~allowed, inf)

    def randn(*shape, dtype=torch.float32, std=1.0):
        return torch.randn(*shape, generator=g, dtype=dtype) * std

    cases = [
        (
            "one row: scores 0, ln 2, ln 3 and a sink of 0",
            (torch.tensor([[[[0.0, 0.6931472, 1.0986123]]]]), torch.zeros(1)),
        ),
        ("a sink of -inf: the plain softmax", (randn(1, 1, 2, 4), torch.tensor([inf]))),
        (
            "a row whose keys are all masked: weights 0, not NaN",
            (torch.tensor([[[[inf, inf, inf], [0.5, inf, inf]]]]), torch.tensor([1.0])),
        ),
        (
            "4 heads with sinks -2, 0, 2, 8, causal, T = 5",
            (causal(randn(2, 4, 5, 5)), torch.tensor([-2.0, 0.0, 2.0, 8.0])),
        ),
        (
            "scores near 1000: exp overflows unless the maximum comes off first",
            (1000 + randn(1, 2, 3, 4), torch.tensor([999.0, 1001.0])),
        ),
        ("a sink near 1000, scores near 0", (randn(1, 2, 3, 4), torch.tensor([1000.0, -1000.0]))),
        (
            "float16, scores 0 and a sink of 12: each key gets about 6.1e-6, not 0 (exp(12) overflows float16)",
            (torch.zeros(1, 1, 2, 3, dtype=torch.float16), torch.tensor([12.0])),
        ),
        ("one key (T_k = 1)", (randn(2, 3, 4, 1), randn(3))),
        ("new queries after cached keys: T_q = 2, T_k = 6, causal", (causal(randn(1, 2, 2, 6)), randn(2))),
        (
            "float64 scores, float32 sinks: the weights stay float64",
            (causal(randn(1, 2, 4, 4, dtype=torch.float64)), randn(2)),
        ),
    ]
    for _ in range(3):
        B, H, T_q, T_k = (int(s) for s in torch.randint(1, 6, (4,), generator=g))
        T_k = max(T_k, T_q)
        cases.append(
            (
                f"random: B = {B}, n_heads = {H}, T_q = {T_q}, T_k = {T_k}",
                (causal(randn(B, H, T_q, T_k, std=3.0)), randn(H, std=3.0)),
            )
        )
    return cases


def _sums_to_one(weights: torch.Tensor) -> bool:
    """Whether every row of ``weights`` sums to 1, as a softmax without a sink gives."""
    rows = weights.double().sum(-1)
    return bool(torch.allclose(rows, torch.ones_like(rows), atol=1e-3))


def _softmax_with_sink(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """A softmax whose row has one more logit, ``sinks[h]``, whose weight is dropped (gpt-oss's learned sinks):
    ``w[b, h, i, j] = exp(s[b, h, i, j]) / (exp(sinks[h]) + sum_k exp(s[b, h, i, k]))``.
    ``scores``: ``(B, n_heads, T_q, T_k)``, ``-inf`` where masked; ``sinks``: ``(n_heads,)``. Computed as
    ``torch.softmax`` of the row with the sink appended as its last column, which is then cut off."""
    B, H, T_q, _ = scores.shape
    sink = sinks.to(scores.dtype).view(1, H, 1, 1).expand(B, H, T_q, 1)  # (n_heads,) -> (B, n_heads, T_q, 1)
    extended = torch.cat([scores, sink], dim=-1)  # (B, n_heads, T_q, T_k + 1)
    return torch.softmax(extended, dim=-1)[..., :-1]  # (B, n_heads, T_q, T_k)


softmax_with_sink = _register(
    Check(
        exercise="ch16-sink-softmax",
        function="softmax_with_sink",
        cases=_sink_cases,
        reference=_softmax_with_sink,
        atol=1e-6,
        rtol=1e-5,
        hint="w = exp(s) / (exp(b) + sum over the row of exp(s)), b = sinks[h] for head h: reshape sinks to "
        "(1, n_heads, 1, 1) so that head h of every row gets its own sink, and do not add the sink to the scores; "
        "subtract from every exponent m = max(the row's largest score, b), which is finite when b is, so that "
        "exp never overflows: exp(s - m) / (exp(b - m) + sum exp(s - m)); a row of -inf then gives 0, not NaN; "
        "the weights sum to less than 1: the sink's share is not returned; keep the scores' dtype",
        covers="one row by hand, a sink of -inf, a row with every key masked, 4 heads with their own sinks, scores "
        "and sinks near 1000, a large sink in float16, T_k = 1, T_q < T_k, float64, random shapes",
        forbids=("MultiHeadAttention", "TransformerBlock", "GPT"),
        diagnoses=(
            (
                "a row whose keys are all masked gives NaN: subtract m = max(the row's largest score, b), which is "
                "finite when b is, not the row's maximum alone (-inf there)",
                lambda got, w, s, b: bool((torch.isnan(got) & torch.isneginf(s).all(-1, keepdim=True)).any()),
            ),
            (
                "exp overflowed (inf, then NaN): subtract m = max(the row's largest score, b) from every exponent",
                lambda got, w, s, b: bool(torch.isnan(got).any()),
            ),
            (
                "your weights underflow to 0 where the sink is far larger than the scores: exp(b - m) overflowed; "
                "subtract m = max(the row's largest score, b), not the row's maximum alone",
                lambda got, w, s, b: bool(((got == 0) & (w > 0)).any()),
            ),
            (
                "your rows sum to 1: the sink must not be added to the scores, nor the row renormalised; it is one "
                "more term, exp(b), in the denominator, and its share is not returned",
                lambda got, w, s, b: _sums_to_one(got) and not _sums_to_one(w),
            ),
            (
                "your last column is the sink's weight and the first key's is missing: append the sink as the last "
                "column and drop that one, [..., :-1]",
                lambda got, w, s, b: w.shape[-1] > 1 and bool(torch.allclose(got[..., :-1], w[..., 1:], atol=1e-5)),
            ),
            (
                "you used a sink of 0 for every head (softmax1): each head h has its own sinks[h], reshaped to "
                "(1, n_heads, 1, 1)",
                lambda got, w, s, b: (
                    bool((b != 0).any())
                    and bool(torch.allclose(got, _softmax_with_sink(s, torch.zeros_like(b)), atol=1e-5))
                ),
            ),
        ),
    )
)


# ------------------------------------------------------------------ ch16-packed-window


def _packed_cases() -> Cases:
    """(document_ids, window): document_ids (B, T) int64 in contiguous runs, seeded."""
    g = torch.Generator().manual_seed(1515)

    def runs(*lengths, first=0):
        return torch.cat([torch.full((n,), first + d) for d, n in enumerate(lengths)])  # (T,)

    cases = [
        ("documents of 3 and 2 tokens, window = 2", (runs(3, 2)[None], 2)),
        ("documents of 5 and 3 tokens, window = 4", (runs(5, 3)[None], 4)),
        ("one document: the band alone", (runs(6)[None], 3)),
        ("window = 1: each token sees itself", (runs(2, 3)[None], 1)),
        ("a window longer than the row: the documents' triangles", (runs(4, 1, 3)[None], 20)),
        ("one token per document: each token sees itself", (runs(1, 1, 1, 1)[None], 3)),
        ("document numbers that do not start at 0 nor go up: 7, 7, 3, 3, 3", (torch.tensor([[7, 7, 3, 3, 3]]), 2)),
        ("two rows packed differently, B = 2", (torch.stack([runs(2, 6), runs(5, 3)]), 3)),
        ("one token (T = 1)", (torch.zeros(1, 1, dtype=torch.long), 1)),
    ]
    for _ in range(3):
        B, window = (int(s) for s in torch.randint(1, 5, (2,), generator=g))
        T = int(torch.randint(4, 13, (1,), generator=g))
        rows = []
        for _ in range(B):
            starts = torch.rand(T, generator=g) < 0.3  # a new document starts here
            starts[0] = False
            rows.append(starts.long().cumsum(0))  # (T,): 0, 0, 1, 1, 1, 2, ...
        cases.append((f"random: B = {B}, T = {T}, window = {window}", (torch.stack(rows), window)))
    return cases


def _packed_window_mask(document_ids: torch.Tensor, window: int) -> torch.Tensor:
    """Documents packed into rows, read with a sliding window: ``(B, T, T)`` bool, True = may attend,
    ``mask[b, i, j] = document_ids[b, i] == document_ids[b, j] and i - window < j <= i``. The AND of
    :func:`attnlib.document_mask` and :func:`attnlib.sliding_window_mask`."""
    from ..flex import document_mask
    from ..masks import sliding_window_mask

    T = document_ids.shape[1]
    return document_mask(document_ids)[:, 0] & sliding_window_mask(T, window=window)  # (B, T, T) & (T, T)


packed_window_mask = _register(
    Check(
        exercise="ch16-packed-window",
        function="packed_window_mask",
        cases=_packed_cases,
        reference=_packed_window_mask,
        hint="three conditions, all needed (AND): the same document, document_ids[:, :, None] == "
        "document_ids[:, None, :] of shape (B, T, T) (compare the numbers, whatever they are); j <= i; and "
        "i - j < window (the window counts the query itself); the two positional conditions are (T, T) and "
        "broadcast against (B, T, T); return a bool tensor of shape (B, T, T), rows are queries",
        covers="two and three documents, one document, window 1, a window longer than the row, one token per "
        "document, document numbers in any order, B = 2, T = 1, random packings",
        forbids=("document_mask", "document_mod", "sliding_window_mask", "sliding_window_mod", "mask_from_mod"),
        diagnoses=(
            (
                "your mask has shape (B, 1, T, T), as document_mask returns: return (B, T, T)",
                lambda got, m, ids, w: tuple(got.shape) == (m.shape[0], 1, *m.shape[1:]),
            ),
            (
                "your mask lets a query see later keys: add j <= i",
                lambda got, m, ids, w: bool(got.bool().triu(1).any()),
            ),
            (
                "your mask lets a query see keys window or more tokens back: the window counts the query itself, "
                "i - j < window",
                lambda got, m, ids, w: _wider(got, m, _packed_window_mask(ids, ids.shape[1] + 1)),
            ),
            (
                "your mask lets a query see the document before its own: add the same-document condition",
                lambda got, m, ids, w: matches(got, _packed_window_mask(torch.zeros_like(ids), w)),
            ),
        ),
    )
)
