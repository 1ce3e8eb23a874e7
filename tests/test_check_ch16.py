"""Chapter 16's checkers: the keys a StreamingLLM cache lets a query see, the softmax with a learned
sink, and packed documents read through a sliding window. Each reference is checked against an
independent one: the definitions written as loops, what attnlib's KVCache holds step by step,
transformers' gpt-oss attention, attnlib's layer with learned sinks, and PyTorch's FlexAttention
rules combined with and_masks. The notebook's solutions pass, and the classic mistakes fail."""

import math
from types import SimpleNamespace

import pytest
import torch
from _solutions import fails, notebook_solution

from attnlib import KVCache, MultiHeadAttention, check, merge_heads, sliding_window_mask, split_heads
from attnlib.check import CHECKS

STREAMING = CHECKS["ch16-streaming-mask"]
SINK = CHECKS["ch16-sink-softmax"]
PACKED = CHECKS["ch16-packed-window"]
NOTEBOOK = "16_local_attention.ipynb"


def _fails(checker, wrong, match, diagnosis):
    fails(checker, wrong, match, diagnosis)


def test_registered_under_their_exercises():
    assert STREAMING is check.streaming_mask and STREAMING.function == "streaming_mask"
    assert SINK is check.softmax_with_sink and SINK.function == "softmax_with_sink"
    assert PACKED is check.packed_window_mask and PACKED.function == "packed_window_mask"


def test_the_notebooks_solutions_pass(capsys):
    for entry in (STREAMING, SINK, PACKED):
        entry(notebook_solution(NOTEBOOK, entry.function))
    out = capsys.readouterr().out
    for entry in (STREAMING, SINK, PACKED):
        assert f"check.{entry.function}: all {len(entry.cases())} cases passed" in out


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    for entry in (STREAMING, SINK, PACKED):
        entry.cases()
    assert torch.equal(torch.random.get_rng_state(), before)


# ------------------------------------------------------------------ ch16-streaming-mask


def test_streaming_reference_is_its_definition():
    for label, (T, window, sinks) in STREAMING.cases():
        expected = torch.tensor(
            [[j <= i and (i - j < window or j < sinks) for j in range(T)] for i in range(T)], dtype=torch.bool
        )
        got = STREAMING.reference(T, window, sinks)
        assert got.dtype == torch.bool and torch.equal(got, expected), label


def test_streaming_reference_is_what_the_cache_holds():
    """A sequence fed one token at a time through KVCache(window, sinks): query t attends to the
    positions the cache held before it, and to itself."""
    for label, (T, window, sinks) in STREAMING.cases():
        cache = KVCache(window=window, sinks=sinks)
        mask = STREAMING.reference(T, window, sinks)
        for t in range(T):
            seen = torch.zeros(T, dtype=torch.bool)
            seen[cache.positions] = True
            seen[t] = True
            assert torch.equal(mask[t], seen), (label, t)
            cache.update(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))


def test_streaming_without_sinks_is_the_band_and_with_enough_sinks_the_causal_mask():
    for T, window in [(6, 1), (8, 3), (5, 5), (4, 9)]:
        assert torch.equal(STREAMING.reference(T, window, 0), sliding_window_mask(T, window=window))
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        assert torch.equal(STREAMING.reference(T, window, max(T - window, 0)), causal)
        if T - window > 0:
            assert not torch.equal(STREAMING.reference(T, window, T - window - 1), causal)


def _streaming_by_hand(T, window, sinks):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) & ((i - j < window) | (j < sinks))


def test_streaming_an_answer_by_index_passes(capsys):
    check.streaming_mask(_streaming_by_hand)
    assert "check.streaming_mask: all" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, match, diagnosis",
    [
        # the window one token too wide: i - j <= window
        (
            lambda T, w, s: _streaming_by_hand(T, w + 1, s),
            r"wrong values.*case: T = 4, window = 2, no sinks",
            "your window holds window + 1 keys",
        ),
        # the window one token too short: i - j < window - 1
        (
            lambda T, w, s: _streaming_by_hand(T, w - 1, s),
            r"wrong values.*case: T = 4, window = 2, no sinks",
            "your window holds window - 1 keys",
        ),
        # the sink columns kept above the diagonal too: the first tokens seen before they exist
        (
            lambda T, w, s: _streaming_by_hand(T, w, 0) | (torch.arange(T)[None, :] < s).expand(T, T),
            r"wrong values.*case: T = 4, window = 2, 2 sinks",
            "your mask lets a query see sinks that come after it",
        ),
        # j <= sinks: one sink too many
        (
            lambda T, w, s: _streaming_by_hand(T, w, s + 1),
            r"wrong values.*case: T = 4, window = 2, no sinks",
            "you keep sinks + 1 first tokens",
        ),
        # the sinks forgotten
        (
            lambda T, w, s: _streaming_by_hand(T, w, 0),
            r"wrong values.*case: T = 4, window = 2, 2 sinks",
            "your mask has no sinks",
        ),
        # rows and columns swapped
        (
            lambda T, w, s: _streaming_by_hand(T, w, s).T,
            r"wrong values.*case: T = 4, window = 2, no sinks",
            "your mask is transposed",
        ),
        # the band and the sinks joined with AND: no diagnosis fits, the hint comes at once
        (
            lambda T, w, s: _streaming_by_hand(T, w, 0) & (torch.arange(T)[None, :] < s),
            r"wrong values.*case: T = 4, window = 2, no sinks",
            None,
        ),
        # 0 and 1 instead of False and True
        (lambda T, w, s: _streaming_by_hand(T, w, s).int(), r"expected a bool tensor", None),
    ],
)
def test_streaming_classic_mistakes_are_caught(wrong, match, diagnosis):
    _fails(check.streaming_mask, wrong, match, diagnosis)


def test_streaming_forbids_the_band_mask():
    def with_the_band(T, window, sinks):
        return sliding_window_mask(T, window=window) | (_streaming_by_hand(T, 1, sinks))

    with pytest.raises(AssertionError, match="asks you to write streaming_mask without attnlib.sliding_window_mask"):
        check.streaming_mask(with_the_band)


# ------------------------------------------------------------------ ch16-sink-softmax


def _gpt_oss(scores, sinks):
    """transformers' gpt-oss eager attention, its weights for these scores: zero queries and keys, and the
    scores given as the additive mask; the module holds the sinks."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    B, H, T_q, T_k = scores.shape
    module = SimpleNamespace(num_key_value_groups=1, sinks=sinks.to(scores.dtype), training=False)
    zeros = scores.new_zeros
    _, weights = eager_attention_forward(
        module, zeros(B, H, T_q, 1), zeros(B, H, T_k, 1), zeros(B, H, T_k, 1), scores, scaling=1.0
    )
    return weights


def test_sink_reference_equals_transformers_gpt_oss():
    for label, (scores, sinks) in SINK.cases():
        got = SINK.reference(scores, sinks)
        assert got.dtype == scores.dtype, label
        torch.testing.assert_close(got, _gpt_oss(scores, sinks), atol=1e-6, rtol=1e-5, msg=label)


def test_sink_reference_is_the_formula():
    """exp(s) / (exp(b) + sum exp(s)) in float64, for the cases whose exponentials do not overflow."""
    for label, (scores, sinks) in SINK.cases():
        s, b = scores.double(), sinks.double().view(1, -1, 1, 1)
        finite = torch.cat([s[torch.isfinite(s)], b[torch.isfinite(b)]])
        if finite.abs().max() > 50:
            continue
        e = torch.exp(s)
        expected = e / (torch.exp(b) + e.sum(-1, keepdim=True))
        torch.testing.assert_close(SINK.reference(scores, sinks).double(), expected, atol=1e-6, rtol=1e-5, msg=label)


def test_sink_reference_gives_attnlibs_layer():
    """MultiHeadAttention(learned_sinks=True): its weights are the reference applied to its scores."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, learned_sinks=True).eval()
    with torch.no_grad():
        layer.sinks.copy_(torch.tensor([-3.0, 0.0, 1.5, 4.0]))
        x = torch.randn(2, 5, 16)
        out, weights = layer(x, is_causal=True)
        q, k, v = (split_heads(proj(x), 4) for proj in (layer.w_q, layer.w_k, layer.w_v))
        scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
        expected = SINK.reference(scores, layer.sinks)
    torch.testing.assert_close(weights, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, layer.w_o(merge_heads(expected @ v)), atol=1e-5, rtol=1e-5)


def test_sink_examples():
    half = SINK.reference(torch.zeros(1, 1, 1, 6), torch.log(torch.tensor([6.0])))  # b = s + ln T_k
    assert half.sum().item() == pytest.approx(0.5)
    masked = SINK.reference(torch.full((1, 1, 1, 3), float("-inf")), torch.zeros(1))
    assert torch.equal(masked, torch.zeros(1, 1, 1, 3))


def _naive(scores, sinks):
    e = torch.exp(scores)
    return e / (torch.exp(sinks.to(scores.dtype)).view(1, -1, 1, 1) + e.sum(-1, keepdim=True))


def _stable(scores, sinks):
    """A right answer, written as the notebook's: every exponent less the larger of the row's maximum and b."""
    b = sinks.to(scores.dtype).view(1, -1, 1, 1)
    top = torch.maximum(scores.amax(-1, keepdim=True), b)
    e = torch.exp(scores - top)
    return e / (torch.exp(b - top) + e.sum(-1, keepdim=True))


def _row_max_only(scores, sinks, guard=False):
    """Stable for large scores, but exp(b - m) with m the row's maximum alone: 0/0 on a row of -inf (or, with
    a guard that sets those rows to 0, a sink far above the scores overflows and every weight becomes 0)."""
    b = sinks.to(scores.dtype).view(1, -1, 1, 1)
    top = scores.amax(-1, keepdim=True)
    if guard:
        top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)  # the all-masked rows: no NaN
    e = torch.exp(scores - top)
    return e / (torch.exp(b - top) + e.sum(-1, keepdim=True))


def _first_key_dropped(s, b):
    """The sink appended as the last column, then the first column dropped instead of the sink's."""
    B, H, T_q, _ = s.shape
    sink = b.to(s.dtype).view(1, H, 1, 1).expand(B, H, T_q, 1)
    return torch.softmax(torch.cat([s, sink], -1), -1)[..., 1:]


@pytest.mark.parametrize(
    "wrong, match, diagnosis",
    [
        (_naive, r"contains NaN.*case: scores near 1000", "exp overflowed"),  # exp without the maximum taken off
        # the sink added to the scores instead of joining the row
        (
            lambda s, b: torch.softmax(s + b.to(s.dtype).view(1, -1, 1, 1), -1),
            r"wrong values.*case: one row",
            "your rows sum to 1: the sink must not be added to the scores",
        ),
        # a plain softmax: the sink forgotten
        (lambda s, b: torch.softmax(s, -1), r"wrong values.*case: one row", "your rows sum to 1"),
        # the row renormalised to 1 after the sink took its share
        (
            lambda s, b: (lambda w: w / w.sum(-1, keepdim=True))(_stable(s, b)),
            r"wrong values.*case: one row",
            "your rows sum to 1",
        ),
        # the first key dropped instead of the sink's column
        (_first_key_dropped, r"wrong values.*case: one row", "your last column is the sink's weight"),
        # softmax1: a sink of 0 for every head (right on the first case, whose sink is 0)
        (
            lambda s, b: _stable(s, torch.zeros_like(b)),
            r"wrong values.*case: a sink of -inf",
            "you used a sink of 0 for every head",
        ),
        # the row's maximum alone: NaN on an all-masked row
        (_row_max_only, r"contains NaN.*case: a row whose keys are all masked", "a row whose keys are all masked"),
        # the row's maximum alone, with a guard against NaN: the float16 case catches it (H2)
        (
            lambda s, b: _row_max_only(s, b, guard=True),
            r"wrong values.*case: float16, scores 0 and a sink of 12",
            "your weights underflow to 0",
        ),
        # one sink for every head: sinks[0] (no diagnosis: the hint)
        (lambda s, b: _stable(s, b[:1].expand_as(b)), r"wrong values.*case: 4 heads", None),
        # float32 whatever the input
        (lambda s, b: _stable(s.float(), b), r"wrong dtype.*case: float16", None),
    ],
)
def test_sink_classic_mistakes_are_caught(wrong, match, diagnosis):
    _fails(check.softmax_with_sink, wrong, match, diagnosis)


def test_sink_the_float16_case_separates_the_two_maxima():
    """H2: scores 0 and a sink of 12 in float16. The reference, and transformers' gpt-oss attention, give
    e^0 / (e^12 + 3) = 6.1e-6 per key; subtracting the row's maximum alone gives 0 (exp(12) is inf in
    float16), a difference above the checker's atol of 1e-6."""
    label, (scores, sinks) = next(c for c in SINK.cases() if c[0].startswith("float16"))
    expected = 1 / (math.exp(12) + 3)
    got = SINK.reference(scores, sinks)
    assert got.dtype == torch.float16 and torch.allclose(
        got.double(), torch.full_like(got.double(), expected), rtol=1e-2
    )
    assert expected > 6e-6 and SINK.atol < expected
    assert torch.equal(_row_max_only(scores, sinks, guard=True), torch.zeros_like(scores))


def test_sink_a_stable_answer_passes(capsys):
    check.softmax_with_sink(_stable)
    assert "check.softmax_with_sink: all" in capsys.readouterr().out


# ------------------------------------------------------------------ ch16-packed-window


def test_packed_reference_is_its_definition():
    for label, (ids, window) in PACKED.cases():
        B, T = ids.shape
        expected = torch.tensor(
            [
                [[bool(ids[b, i] == ids[b, j]) and j <= i and i - j < window for j in range(T)] for i in range(T)]
                for b in range(B)
            ],
            dtype=torch.bool,
        ).reshape(B, T, T)
        got = PACKED.reference(ids, window)
        assert got.dtype == torch.bool and torch.equal(got, expected), label


def test_packed_reference_is_flex_attentions_and_masks():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    for label, (ids, window) in PACKED.cases():
        B, T = ids.shape

        def same_document(b, h, q_idx, kv_idx):
            return ids[b, q_idx] == ids[b, kv_idx]

        def in_window(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (q_idx - kv_idx < window)

        mask = flex.create_mask(flex.and_masks(same_document, in_window), B, 1, T, T, device="cpu")  # (B, 1, T, T)
        assert torch.equal(PACKED.reference(ids, window), mask[:, 0]), label


def _packed_by_hand(ids, window):
    T = ids.shape[1]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (ids[:, :, None] == ids[:, None, :]) & (j <= i) & (i - j < window)


def _starts(ids):
    """The documents by where they start: a token's document is the number of starts up to it."""
    return torch.cat([torch.zeros_like(ids[:, :1]), (ids[:, 1:] != ids[:, :-1]).long()], 1).cumsum(1)


def _no_window(ids, w):
    """The documents' causal triangles, the window forgotten."""
    return _packed_by_hand(ids, ids.shape[1] + 1)


@pytest.mark.parametrize(
    "wrong, match, diagnosis",
    [
        # the window counted without the query: i - j <= window
        (
            lambda ids, w: _packed_by_hand(ids, w + 1),
            r"wrong values.*case: documents of 3 and 2",
            "your mask lets a query see keys window or more tokens back",
        ),
        # the window on both sides, no causality
        (
            lambda ids, w: _packed_by_hand(ids, w) | _packed_by_hand(ids, w).transpose(1, 2),
            r"wrong values.*case: documents of 3 and 2",
            "your mask lets a query see later keys",
        ),
        # the documents forgotten: the band alone
        (
            lambda ids, w: _packed_by_hand(ids * 0, w),
            r"wrong values.*case: documents of 3 and 2",
            "your mask lets a query see the document before its own",
        ),
        # the window forgotten: the documents' triangles alone
        (_no_window, r"wrong values.*case: documents of 3 and 2", "your mask lets a query see keys window or more"),
        # documents compared by order, ids[i] > ids[j] seen too: on the first case, the band across documents
        (
            lambda ids, w: (
                _packed_by_hand(ids, w) | ((ids[:, :, None] > ids[:, None, :]) & _packed_by_hand(ids * 0, w))
            ),
            r"wrong values.*case: documents of 3 and 2",
            "your mask lets a query see the document before its own",
        ),
        # the document mask and the band joined with OR: no diagnosis fits, the hint at once
        (
            lambda ids, w: _packed_by_hand(ids, ids.shape[1] + 1) | _packed_by_hand(ids * 0, w),
            r"wrong values.*case: documents of 3 and 2",
            None,
        ),
        # (B, 1, T, T), as document_mask returns
        (
            lambda ids, w: _packed_by_hand(ids, w)[:, None],
            r"wrong shape.*case: documents of 3 and 2",
            "your mask has shape (B, 1, T, T)",
        ),
    ],
)
def test_packed_classic_mistakes_are_caught(wrong, match, diagnosis):
    _fails(check.packed_window_mask, wrong, match, diagnosis)


def test_packed_answers_by_starts_or_by_equality_pass(capsys):
    check.packed_window_mask(_packed_by_hand)
    check.packed_window_mask(lambda ids, w: _packed_by_hand(_starts(ids), w))
    assert capsys.readouterr().out.count("check.packed_window_mask: all") == 2


def test_packed_forbids_attnlibs_masks():
    from attnlib import document_mask

    def with_document_mask(ids, window):
        return document_mask(ids)[:, 0] & _packed_by_hand(ids * 0, window)

    with pytest.raises(AssertionError, match="asks you to write packed_window_mask without attnlib.document_mask"):
        check.packed_window_mask(with_document_mask)
