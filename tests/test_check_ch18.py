"""Chapter 18's checkers: the induction score of a head, the previous-token heads of a model, and the bytes of a
KV cache at T tokens. Each reference is checked against an independent one: the definitions written from the
tokens themselves (where did this token occur before?) and as loops, heads planted in random weights, and the
bytes attnlib's KVCache holds after a real forward pass. The notebook's solutions pass, and the classic mistakes
fail with their diagnosis."""

import dataclasses

import pytest
import torch
from _solutions import fails, notebook_solution

from attnlib import GPT, GPTConfig, KVCache, check, kv_cache_bytes
from attnlib.check import CHECKS

INDUCTION = CHECKS["ch18-induction-score"]
PREVIOUS = CHECKS["ch18-previous-token-heads"]
CACHE = CHECKS["ch18-cache-bytes"]
ALL = (INDUCTION, PREVIOUS, CACHE)
NOTEBOOK = "18_real_model.ipynb"


def test_registered_under_their_exercises():
    assert INDUCTION is check.induction_score and INDUCTION.function == "induction_score"
    assert PREVIOUS is check.previous_token_heads and PREVIOUS.function == "previous_token_heads"
    assert CACHE is check.cache_bytes and CACHE.function == "cache_bytes"


def test_the_notebooks_solutions_pass(capsys):
    for entry in ALL:
        entry(notebook_solution(NOTEBOOK, entry.function))
    out = capsys.readouterr().out
    for entry in ALL:
        assert f"check.{entry.function}: all {len(entry.cases())} cases passed" in out


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    for entry in ALL:
        entry.cases()
    assert torch.equal(torch.random.get_rng_state(), before)


# ------------------------------------------------------------------ ch18-induction-score


def _induction_from_tokens(weights, period):
    """The definition from the tokens: the sequence repeats `period` distinct tokens; for each query whose token
    occurred before, the weight on the token right after its latest earlier occurrence, averaged per head."""
    B, n_heads, T, _ = weights.shape
    tokens = [t % period for t in range(T)]  # distinct within a period
    scores = torch.zeros(n_heads, dtype=torch.float64)
    queries = 0
    for i in range(T):
        earlier = [j for j in range(i) if tokens[j] == tokens[i]]
        if not earlier:
            continue
        queries += 1
        for h in range(n_heads):
            scores[h] += sum(weights[b, h, i, earlier[-1] + 1].item() for b in range(B)) / B
    return scores / queries


def test_induction_reference_is_the_definition_from_the_tokens():
    for label, (weights, period) in INDUCTION.cases():
        got = INDUCTION.reference(weights, period)
        assert got.shape == (weights.shape[1],) and got.dtype == weights.dtype, label
        torch.testing.assert_close(got.double(), _induction_from_tokens(weights, period), atol=1e-6, rtol=1e-6)


def test_an_exact_induction_head_scores_1_and_a_previous_token_head_less():
    weights, period = INDUCTION.cases()[0][1]
    scores = INDUCTION.reference(weights, period)
    assert scores[0].item() == 1.0 and scores[1].item() < 0.5


def _induction_by_hand(weights, period):
    i = torch.arange(period, weights.shape[-1])
    return weights[..., i, i - period + 1].mean(dim=(0, -1))


def _picked(weights, first, back):
    i = torch.arange(first, weights.shape[-1])
    return weights[..., i, i - back]  # (B, n_heads, n_queries)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        # the earlier occurrence itself, not the token after it
        (lambda w, p: _picked(w, p, p).mean(dim=(0, -1)), "you took key i - period"),
        # from query period - 1: the last token of the first copy, whose key is token 0
        (lambda w, p: _picked(w, p - 1, p - 1).mean(dim=(0, -1)), "you started at query period - 1"),
        # the sum over the second copy divided by every query
        (lambda w, p: _picked(w, p, p - 1).sum(dim=-1).mean(dim=0) / w.shape[-1], "you averaged over every query"),
        # no mean over the batch
        (lambda w, p: _picked(w, p, p - 1).mean(dim=-1), "your scores are per sequence"),
        # the batch and the queries averaged, but the mean over the whole row of weights: no diagnosis fits
        (lambda w, p: w[..., p:, :].mean(dim=(0, -2, -1)), None),
    ],
)
def test_induction_classic_mistakes_are_caught(wrong, diagnosis):
    fails(check.induction_score, wrong, r"wrong (values|shape).*case: ", diagnosis)


def test_induction_by_hand_passes(capsys):
    check.induction_score(_induction_by_hand)
    assert "check.induction_score: all" in capsys.readouterr().out


# ------------------------------------------------------------------ ch18-previous-token-heads


def _previous_by_loops(weights, threshold):
    """The definition as loops over layers, heads, sequences and queries, in Python floats."""
    n_layers, B, n_heads, T, _ = weights.shape
    found = torch.zeros(n_layers, n_heads, dtype=torch.bool)
    for layer in range(n_layers):
        for h in range(n_heads):
            total = sum(weights[layer, b, h, i, i - 1].item() for b in range(B) for i in range(1, T))
            found[layer, h] = total / (B * (T - 1)) > threshold
    return found


def test_previous_reference_is_the_definition_as_loops():
    for label, (weights, threshold) in PREVIOUS.cases():
        got = PREVIOUS.reference(weights, threshold)
        assert got.dtype == torch.bool and torch.equal(got, _previous_by_loops(weights, threshold)), label


def test_previous_finds_the_planted_heads():
    cases = dict(PREVIOUS.cases())
    weights, threshold = cases["3 layers, 4 heads, two planted previous-token heads"]
    assert PREVIOUS.reference(weights, threshold).nonzero().tolist() == [[0, 2], [2, 1]]
    weights, threshold = cases["two heads in one layer"]
    assert PREVIOUS.reference(weights, threshold).nonzero().tolist() == [[1, 0], [1, 3]]
    weights, threshold = cases["no head above the threshold"]
    assert not PREVIOUS.reference(weights, threshold).any()
    weights, threshold = cases["one layer: head 0 on the current token, head 1 on the previous one, head 2 uniform"]
    assert PREVIOUS.reference(weights, threshold).tolist() == [[False, True, False]]


def _scores(weights, first=1, back=1):
    i = torch.arange(first, weights.shape[-1])
    return weights[..., i, i - back].mean(dim=(1, -1))  # (n_layers, B, n_heads, n) -> (n_layers, n_heads)


def _previous_by_hand(weights, threshold):
    return _scores(weights) > threshold


def test_previous_by_hand_passes(capsys):
    check.previous_token_heads(_previous_by_hand)
    assert "check.previous_token_heads: all" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, match, diagnosis",
    [
        # the diagonal: heads that attend to the current token
        (lambda w, t: _scores(w, 0, 0) > t, "case: one layer", "attend to the current"),
        # query 0 counted (its key -1 does not exist: counted as 0)
        (
            lambda w, t: _scores(w) * (w.shape[-1] - 1) / w.shape[-1] > t,
            "case: a planted head just above the threshold",
            "you counted query 0",
        ),
        # the comparison reversed
        (lambda w, t: _scores(w) <= t, "case: one layer", "you kept the heads at or below the threshold"),
        # no mean over the batch
        (lambda w, t: w[..., 1:, :-1].diagonal(dim1=-2, dim2=-1).mean(-1) > t, "case: one layer", "not one entry"),
        # >= instead of >, and the weights on key i - 2: no diagnosis fits
        (lambda w, t: _scores(w, 2, 2) >= t, "case: one layer", None),
    ],
)
def test_previous_classic_mistakes_are_caught(wrong, match, diagnosis):
    fails(check.previous_token_heads, wrong, rf"wrong (values|shape).*{match}", diagnosis)


# ------------------------------------------------------------------ ch18-cache-bytes


def _measured(config, T):
    """The bytes attnlib's KVCache holds after a forward pass of T tokens through a small model of config's
    attention shapes (the vocabulary and the MLP shrunk: they cache nothing)."""
    small = dataclasses.replace(config, vocab_size=50, d_ff=8, context_length=max(T, 1))
    torch.manual_seed(0)
    model = GPT(small).eval()
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.zeros(1, T, dtype=torch.long), kv_cache=caches)
    return sum(cache.nbytes for cache in caches)


@pytest.mark.parametrize(
    "config",
    [
        GPTConfig(vocab_size=10, context_length=16, d_model=24, n_layers=3, n_heads=6, n_kv_heads=2, bias=False),
        GPTConfig(vocab_size=10, context_length=16, d_model=16, n_layers=2, n_heads=4),  # n_kv_heads None
        GPTConfig(
            vocab_size=10,
            context_length=16,
            d_model=16,
            n_layers=2,
            n_heads=4,
            n_kv_heads=2,
            d_head=12,
            positions="rope",
            norm="rmsnorm",
            mlp="swiglu",
            bias=False,
        ),  # fmt: skip
    ],
    ids=["gqa", "mha", "d_head-on-its-own"],
)
@pytest.mark.parametrize("T", [1, 7])
def test_cache_reference_is_what_kv_cache_holds(config, T):
    assert CACHE.reference(config, T, torch.float32) == _measured(config, T)


def test_cache_reference_equals_attnlib_kv_cache_bytes_on_every_case():
    for label, (config, T, dtype) in CACHE.cases():
        got = CACHE.reference(config, T, dtype)
        expected = kv_cache_bytes(config, T=T, dtype=dtype) if T > 0 else 0  # kv_cache_bytes wants T >= 1
        assert type(got) is int and got == expected, label


def test_cache_smollm2_per_token():
    smol = dict(CACHE.cases())["SmolLM2-135M, 1 token, float32"][0]
    assert CACHE.reference(smol, 1, torch.float32) == 2 * 30 * 3 * 64 * 4  # 46,080: 45 KiB


def _cache_with(n_kv=None, factor=2, d_head=None, size=None):
    def answer(config, T, dtype):
        kv = n_kv(config) if n_kv else (config.n_kv_heads or config.n_heads)
        width = d_head(config) if d_head else config.head_dim
        return factor * config.n_layers * kv * width * T * (size or dtype.itemsize)

    return answer


@pytest.mark.parametrize(
    "wrong, match, diagnosis",
    [
        (_cache_with(n_kv=lambda c: c.n_heads), "SmolLM2-135M, 1 token", "a key/value head per query head"),
        (_cache_with(factor=1), "SmolLM2-135M, 1 token", "the keys or the values only"),
        (_cache_with(d_head=lambda c: c.d_model // c.n_heads), "Qwen3-0.6B", "your head width is d_model // n_heads"),
        (_cache_with(size=4), "8,192 tokens, bfloat16", "your bytes per number do not follow dtype"),
        # kibibytes instead of bytes: no diagnosis fits
        (lambda c, T, d: _cache_with()(c, T, d) / 1024, "SmolLM2-135M, 1 token", None),
    ],
)
def test_cache_classic_mistakes_are_caught(wrong, match, diagnosis):
    fails(check.cache_bytes, wrong, rf"wrong value.*{match}", diagnosis)


def test_cache_forbids_kv_cache_bytes():
    def with_attnlib(config, T, dtype):
        return kv_cache_bytes(config, T=T, dtype=dtype)

    with pytest.raises(AssertionError, match="asks you to write cache_bytes without attnlib.kv_cache_bytes"):
        check.cache_bytes(with_attnlib)
