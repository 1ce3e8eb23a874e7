"""Chapter 15's checkers: the permutation of Meta's conversion script, the largest score QK-norm
allows, and Qwen3's attention layer. Each reference is checked against an independent one:
the conversion script's own line and Hugging Face's rotate-half RoPE, RMSNorm layers pushed to
their largest score, and transformers' Qwen3Attention with the same weights. The notebook's
solutions pass, and the classic mistakes fail."""

import math

import pytest
import torch
from _solutions import notebook_solution

from attnlib import apply_rope, check
from attnlib.check import CHECKS

ROTATE_HALF = CHECKS["ch15-rotate-half"]
BOUND = CHECKS["ch15-qk-norm-bound"]
QWEN3 = CHECKS["ch15-qwen3-attention"]
F64 = torch.float64
NOTEBOOK = "15_modern_attention.ipynb"


def _told(info, diagnosis):
    """A first failed check: with a diagnosis, it says that and holds the hint back; without one, the hint."""
    message = str(info.value)
    if diagnosis is None:
        assert "diagnosis:" not in message and "hint:" in message
    else:
        said = message.partition("  diagnosis: ")[2]
        assert diagnosis in said.partition("\n")[0] and "next failed check" in message and "hint:" not in message


def test_registered_under_their_exercises():
    assert ROTATE_HALF is check.interleaved_to_rotate_half and ROTATE_HALF.function == "interleaved_to_rotate_half"
    assert BOUND is check.largest_score and BOUND.function == "largest_score"
    assert QWEN3 is check.qwen3_attention and QWEN3.function == "qwen3_attention"


# ------------------------------------------------------------------ ch15-rotate-half


def _script_permute(w, n_heads, dim1, dim2):
    """transformers' convert_llama_weights_to_hf.py, "permute for sliced rotary", as it is written there."""
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def test_rotate_half_reference_is_the_conversion_scripts_permutation():
    for label, (w, n_heads) in ROTATE_HALF.cases():
        got = ROTATE_HALF.reference(w, n_heads)
        matrix = w if w.dim() == 2 else w[:, None]  # the script permutes matrices: a vector as one column
        expected = _script_permute(matrix, n_heads, matrix.shape[0], matrix.shape[1]).reshape(w.shape)
        assert got.dtype == w.dtype and torch.equal(got, expected), label


def test_rotate_half_rows_give_hugging_faces_rope_the_same_scores():
    """Interleaved RoPE (attnlib) on x @ W^T, and transformers' rotate-half RoPE on x @ permuted(W)^T:
    the same scores, head by head."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    g = torch.Generator().manual_seed(0)
    n_heads, d_head, d_model, T = 3, 8, 12, 7
    x = torch.randn(1, T, d_model, generator=g, dtype=F64)
    w_q, w_k = (torch.randn(n_heads * d_head, d_model, generator=g, dtype=F64) for _ in range(2))  # (out, in)

    def heads(y):  # (1, T, n_heads * d_head) -> (1, n_heads, T, d_head)
        return y.view(1, T, n_heads, d_head).transpose(1, 2)

    q, k = apply_rope(heads(x @ w_q.T), base=500000.0), apply_rope(heads(x @ w_k.T), base=500000.0)
    theta = 500000.0 ** (-torch.arange(0, d_head, 2, dtype=F64) / d_head)  # (d_head/2,)
    angles = torch.arange(T, dtype=F64)[:, None] * theta  # (T, d_head/2)
    cos, sin = torch.cat([angles.cos()] * 2, -1)[None], torch.cat([angles.sin()] * 2, -1)[None]  # HF's (1, T, d_head)
    q_hf, k_hf = apply_rotary_pos_emb(
        heads(x @ ROTATE_HALF.reference(w_q, n_heads).T), heads(x @ ROTATE_HALF.reference(w_k, n_heads).T), cos, sin
    )
    torch.testing.assert_close(q_hf @ k_hf.transpose(-2, -1), q @ k.transpose(-2, -1))
    q_unpermuted, k_unpermuted = apply_rotary_pos_emb(heads(x @ w_q.T), heads(x @ w_k.T), cos, sin)
    assert not torch.allclose(q_unpermuted @ k_unpermuted.transpose(-2, -1), q @ k.transpose(-2, -1), atol=1e-3)


def test_rotate_half_undoes_attnlibs_conversion_from_hugging_face():
    hf = pytest.importorskip("attnlib.hf")
    for label, (w, n_heads) in ROTATE_HALF.cases():
        if w.dim() == 2:
            assert torch.equal(hf.rotate_half_to_interleaved(ROTATE_HALF.reference(w, n_heads), n_heads), w), label


# ------------------------------------------------------------------ ch15-qk-norm-bound


def _score(g_q, g_k, q, k):
    """A QK-normed head's score of q and k (RMSNorm without eps, as nn.RMSNorm with eps 0 computes it)."""
    d = g_q.shape[0]
    q_norm, k_norm = torch.nn.RMSNorm(d, eps=0.0).double(), torch.nn.RMSNorm(d, eps=0.0).double()
    with torch.no_grad():
        q_norm.weight.copy_(g_q)
        k_norm.weight.copy_(g_k)
        return (q_norm(q) @ k_norm(k).T / math.sqrt(d)).abs()


def test_bound_is_reached_and_never_passed():
    g = torch.Generator().manual_seed(1)
    for label, (g_q, g_k) in BOUND.cases():
        g_q, g_k = g_q.double(), g_k.double()
        bound = BOUND.reference(g_q, g_k)
        d = g_q.shape[0]
        axis = (g_q * g_k).abs().argmax()
        reached = _score(g_q, g_k, torch.eye(d, dtype=F64)[axis][None] * 3.0, torch.eye(d, dtype=F64)[axis][None])
        assert math.isclose(reached.item(), bound, rel_tol=1e-12), label
        q, k = (torch.randn(500, d, generator=g, dtype=F64) for _ in range(2))
        random = _score(g_q, g_k, q, k)
        assert random.max().item() <= bound * (1 + 1e-12), label


def test_bound_examples():
    assert BOUND.reference(torch.ones(128), torch.ones(128)) == pytest.approx(math.sqrt(128))
    assert BOUND.reference(torch.tensor([4.0, 1.0]), torch.tensor([0.1, 3.0])) == pytest.approx(3 * math.sqrt(2))


@pytest.mark.parametrize(
    "wrong, match, diagnosis",
    [
        (lambda g_q, g_k: math.sqrt(len(g_q)), r"wrong value.*case: g_q = 2", None),  # the gains forgotten
        (
            lambda g_q, g_k: math.sqrt(len(g_q)) * g_q.abs().max().item() * g_k.abs().max().item(),
            r"case: the largest",
            "you multiplied max|g_q| by max|g_k|",
        ),
        (
            lambda g_q, g_k: math.sqrt(len(g_q)) * (g_q * g_k).max().item(),
            r"case: a negative gain",
            "you kept the sign of the products",
        ),
        (
            lambda g_q, g_k: len(g_q) * (g_q * g_k).abs().max().item(),
            r"case: gains 1, as initialised",
            "you left out the score's 1 / sqrt(d_head)",
        ),
        (
            lambda g_q, g_k: 1.0 * (g_q * g_k).abs().max().item(),
            r"case: gains 1, as initialised",
            "q / rms(q) has mean square 1, so its length is sqrt(d_head), not 1",
        ),  # the lengths taken as 1
        (
            lambda g_q, g_k: (g_q * g_k).abs().max().item() / math.sqrt(len(g_q)),
            r"case: gains 1, as initialised",
            "q / rms(q) has mean square 1, so its length is sqrt(d_head), not 1",
        ),  # max / sqrt(d)
        (
            lambda g_q, g_k: math.sqrt(len(g_q)) * (g_q * g_k).abs().mean().item(),
            r"case: the largest",
            "take the max, not the mean",
        ),
    ],
)
def test_bound_classic_mistakes_are_caught_and_told(wrong, match, diagnosis):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*(hint|diagnosis):") as info:
        check.largest_score(wrong)
    _told(info, diagnosis)


def test_bound_a_0d_tensor_is_accepted_as_the_exercise_says(capsys):
    """The exercise asks for a number and says that a 0-d tensor is accepted too (the checkers turn a
    one-element tensor into a number); a wrong one is still rejected."""
    check.largest_score(lambda g_q, g_k: math.sqrt(len(g_q)) * (g_q.double() * g_k.double()).abs().max())
    assert "check.largest_score: all" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"(?s)wrong value.*diagnosis: you kept the sign"):
        check.largest_score(lambda g_q, g_k: math.sqrt(len(g_q)) * (g_q * g_k).max())
    exercise = next(cell for cell in _notebook_cells() if "label: ch15-qk-norm-bound" in cell and "{exercise}" in cell)
    assert "a 0-d tensor is accepted too" in " ".join(exercise.split())


def _notebook_cells():
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "notebooks" / NOTEBOOK
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]


# ------------------------------------------------------------------ ch15-qwen3-attention


def _hugging_face_qwen3(x, w_q, w_k, w_v, w_o, g_q, g_k):
    """transformers' Qwen3Attention with these weights: nn.Linear stores (out, in), so the transposes; its
    rotate-half RoPE wants the rows of W_Q, W_K and the QK-norm gains permuted as Meta's conversion does."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding

    B, T, d_model = x.shape
    d_head = g_q.shape[0]
    n_heads, n_kv = w_q.shape[1] // d_head, w_k.shape[1] // d_head
    config = Qwen3Config(
        vocab_size=8,
        hidden_size=d_model,
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv,
        head_dim=d_head,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        attn_implementation="eager",
    )
    layer = Qwen3Attention(config, layer_idx=0).to(x.dtype).eval()
    per_head = ROTATE_HALF.reference
    with torch.no_grad():
        layer.q_proj.weight.copy_(per_head(w_q.T, n_heads))
        layer.k_proj.weight.copy_(per_head(w_k.T, n_kv))
        layer.v_proj.weight.copy_(w_v.T)
        layer.o_proj.weight.copy_(w_o.T)
        layer.q_norm.weight.copy_(per_head(g_q, 1))
        layer.k_norm.weight.copy_(per_head(g_k, 1))
        cos, sin = Qwen3RotaryEmbedding(config)(x, torch.arange(T)[None].expand(B, T))
        mask = torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)[None, None]  # (1, 1, T, T): added
        return layer(x, position_embeddings=(cos, sin), attention_mask=mask)[0]


def test_qwen3_reference_equals_transformers_qwen3_attention():
    for label, args in QWEN3.cases():
        args64 = tuple(a.double() for a in args)
        theirs = _hugging_face_qwen3(*args64)  # its RMSNorm and its cos, sin are computed in float32
        torch.testing.assert_close(QWEN3.reference(*args64), theirs, atol=1e-5, rtol=1e-5, msg=label)
        assert QWEN3.reference(*args).dtype == args[0].dtype, label


def test_qwen3_reference_equals_attnlibs_layer():
    """attnlib's MultiHeadAttention with d_head, RoPE base 1e6 and QK-norm (eps 1e-6), loaded with the weights."""
    from attnlib import MultiHeadAttention

    label, (x, w_q, w_k, w_v, w_o, g_q, g_k) = QWEN3.cases()[0]
    d_head = g_q.shape[0]
    layer = MultiHeadAttention(
        x.shape[-1],
        w_q.shape[1] // d_head,
        n_kv_heads=w_k.shape[1] // d_head,
        bias=False,
        d_head=d_head,
        rope=True,
        rope_base=1e6,
        qk_norm=True,
        norm_eps=1e-6,
    ).eval()
    with torch.no_grad():
        for linear, w in ((layer.w_q, w_q), (layer.w_k, w_k), (layer.w_v, w_v), (layer.w_o, w_o)):
            linear.weight.copy_(w.T)
        layer.q_norm.weight.copy_(g_q)
        layer.k_norm.weight.copy_(g_k)
        out, _ = layer(x, is_causal=True)
    torch.testing.assert_close(out, QWEN3.reference(x, w_q, w_k, w_v, w_o, g_q, g_k), atol=1e-5, rtol=1e-5)


def test_cases_include_the_edge_cases():
    args = [a for _, a in QWEN3.cases()]
    assert any(w_q.shape[1] != x.shape[-1] for x, w_q, *_ in args), "n_heads * d_head != d_model"
    assert any(w_k.shape[1] == w_q.shape[1] for _, w_q, w_k, *_ in args), "plain multi-head"
    assert any(w_k.shape[1] == g_q.shape[0] < w_q.shape[1] for _, w_q, w_k, _, _, g_q, _ in args), "multi-query"
    assert any(x.shape[1] == 1 for x, *_ in args) and any(x.dtype == F64 for x, *_ in args)
    assert all(not torch.equal(g_q, torch.ones_like(g_q)) for *_, g_q, _ in args), "gains that are not 1"


RIGHT = dict(order="norm_rope", base=1e6, share="interleave", pairs="interleaved", per_head_norm=True, causal=True)
RIGHT["scale"] = "d_head"  # 1/sqrt(d_head), not 1/sqrt(d_model / n_heads)
RIGHT.update(eps=1e-6, gains=True, rope_values=False)


def _plain(x, w_q, w_k, w_v, w_o, g_q, g_k, **mistake):
    """The exercise's steps; ``mistake`` switches one of RIGHT's choices to a classic mistake."""
    opt = {**RIGHT, **mistake}
    order, base, share, pairs = opt["order"], opt["base"], opt["share"], opt["pairs"]
    per_head_norm, scale, causal, eps = opt["per_head_norm"], opt["scale"], opt["causal"], opt["eps"]
    B, T, d_model = x.shape
    d_head = g_q.shape[0]
    n_heads, n_kv = w_q.shape[1] // d_head, w_k.shape[1] // d_head

    def heads(y, n):
        return y.reshape(B, T, n, d_head).transpose(1, 2)

    def norm(y, gain):
        gain = gain if opt["gains"] else 1.0
        if per_head_norm:
            return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * gain
        flat = y.transpose(1, 2).flatten(-2)  # over all heads together: (B, T, n * d_head)
        flat = flat * torch.rsqrt(flat.pow(2).mean(-1, keepdim=True) + eps)
        return flat.unflatten(-1, (-1, d_head)).transpose(1, 2) * gain

    def rope(y):
        if pairs == "interleaved":
            return apply_rope(y, base=base)
        half = d_head // 2  # rotate half: dimension i with i + d_head/2
        theta = base ** (-torch.arange(0, d_head, 2, dtype=y.dtype) / d_head)
        angles = torch.cat([torch.arange(T, dtype=y.dtype)[:, None] * theta] * 2, -1)
        return y * angles.cos() + torch.cat([-y[..., half:], y[..., :half]], -1) * angles.sin()

    q, k, v = heads(x @ w_q, n_heads), heads(x @ w_k, n_kv), heads(x @ w_v, n_kv)
    if order == "norm_rope":
        q, k = rope(norm(q, g_q)), rope(norm(k, g_k))
    elif order == "rope_norm":
        q, k = norm(rope(q), g_q), norm(rope(k), g_k)
    else:  # no QK-norm
        q, k = rope(q), rope(k)
    if opt["rope_values"]:
        v = rope(v)
    if share == "interleave":
        k, v = (t.repeat_interleave(n_heads // n_kv, dim=1) for t in (k, v))
    else:
        k, v = (t.repeat(1, n_heads // n_kv, 1, 1) for t in (k, v))
    d_scale = d_head if scale == "d_head" else d_model // n_heads
    s = q @ k.transpose(-2, -1) / math.sqrt(d_scale)
    if causal:
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    y = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, n_heads * d_head)
    return y @ w_o


def test_qwen3_the_solutions_pass(capsys):
    solution = notebook_solution(NOTEBOOK, "qwen3_attention", ("scaled_dot_product_attention", "MultiHeadAttention"))
    check.qwen3_attention(solution)
    check.qwen3_attention(_plain)
    out = capsys.readouterr().out
    assert out.count(f"check.qwen3_attention: all {len(QWEN3.cases())} cases passed") == 2


FIRST = r"wrong values.*case: d_model = 32"
SMALL = r"wrong values.*case: W_Q and W_K 1000 times smaller"  # the case where eps counts


@pytest.mark.parametrize(
    "options, match, diagnosis",
    [
        ({"order": "rope_norm"}, FIRST, "you applied RoPE before QK-norm"),  # QK-norm after RoPE: the gains rotate
        ({"order": "none"}, FIRST, None),  # no QK-norm
        ({"base": 10000.0}, FIRST, "your RoPE base is 10,000"),  # Llama 2's base, not Qwen3's
        ({"pairs": "rotate_half"}, FIRST, "you paired dimension i with i + d_head/2"),  # HF's pairs, unpermuted weights
        ({"share": "tile"}, FIRST, "you shared the key/value heads with repeat"),  # .repeat: head h uses h % n_kv
        ({"per_head_norm": False}, FIRST, "you normalised the whole projection at once"),  # one RMS over all heads
        ({"scale": "d_model"}, FIRST, "you scaled the scores by 1/sqrt(d_model / n_heads)"),
        ({"causal": False}, FIRST, "your queries see later tokens"),  # the future seen
        ({"gains": False}, FIRST, "your QK-norm has no gains"),
        ({"rope_values": True}, FIRST, "you rotated the values too"),
        ({"eps": 1e-2}, FIRST, None),  # far from 1e-6: wrong at every scale
        ({"eps": 0.0}, SMALL, "your RMSNorm's eps is not Qwen3's 1e-6"),  # H3: passed every case before
        ({"eps": 1e-5}, SMALL, "your RMSNorm's eps is not Qwen3's 1e-6"),  # H3: passed every case before
    ],
)
def test_qwen3_classic_mistakes_are_caught_and_told(options, match, diagnosis):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*(hint|diagnosis):") as info:
        check.qwen3_attention(lambda *a: _plain(*a, **options))
    _told(info, diagnosis)


def test_qwen3_the_eps_case_has_mean_squares_near_eps():
    """The case that catches eps 0 and 1e-5: the mean square of q over each head is within 10x of 1e-6."""
    label, (x, w_q, *_rest, g_q, g_k) = next(c for c in QWEN3.cases() if "1000 times smaller" in c[0])
    d_head = g_q.shape[0]
    mean_square = (x @ w_q).unflatten(-1, (-1, d_head)).pow(2).mean(-1)  # (B, T, n_heads)
    assert 1e-7 < mean_square.median().item() < 1e-5, label


def test_qwen3_the_dtype_is_kept():
    with pytest.raises(AssertionError, match=r"(?s)wrong dtype.*case: float64"):
        check.qwen3_attention(lambda *a: _plain(*a).float())


def test_qwen3_forbids_attnlibs_layer():
    from attnlib import MultiHeadAttention

    def with_the_layer(x, w_q, w_k, w_v, w_o, g_q, g_k):
        d_head = g_q.shape[0]
        return MultiHeadAttention(x.shape[-1], w_q.shape[1] // d_head, d_head=d_head, bias=False)(x)[0]

    with pytest.raises(AssertionError, match="asks you to write qwen3_attention without attnlib.MultiHeadAttention"):
        check.qwen3_attention(with_the_layer)


# ------------------------------------------------------------------ the notebook's solutions


def test_rotate_half_and_bound_solutions_pass(capsys):
    check.interleaved_to_rotate_half(notebook_solution(NOTEBOOK, "interleaved_to_rotate_half"))
    check.largest_score(notebook_solution(NOTEBOOK, "largest_score"))
    out = capsys.readouterr().out
    assert f"all {len(ROTATE_HALF.cases())} cases passed" in out and f"all {len(BOUND.cases())} cases passed" in out


def _by_index(w, n_heads):
    """The right permutation, written as a list of rows: head h's even rows, then its odd rows."""
    d_head = w.shape[0] // n_heads
    rows = [h * d_head + i for h in range(n_heads) for i in [*range(0, d_head, 2), *range(1, d_head, 2)]]
    return w[rows]


def test_rotate_half_by_index_passes(capsys):
    check.interleaved_to_rotate_half(_by_index)
    assert "check.interleaved_to_rotate_half: all" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, match, diagnosis",
    [
        # the inverse permutation (rotate half -> interleaved): the same only for d_head = 2 and 4
        (
            lambda w, n: w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape),
            r"wrong values.*case: a QK-norm gain",
            "you applied the inverse permutation",
        ),
        # the permutation over all rows at once, not head by head
        (lambda w, n: _by_index(w, 1), r"wrong values.*case: rows numbered", "you permuted all the rows as one head"),
        # columns permuted instead of rows
        (lambda w, n: _by_index(w.T, n).T if w.dim() == 2 else w, r"case: rows numbered", None),
        # nothing moved
        (lambda w, n: w.clone(), r"case: rows numbered", "your rows have not moved"),
        # the dtype lost
        (lambda w, n: _by_index(w, n).float(), r"wrong dtype.*case: float64", "the dtype changed"),
        # the rows reversed within each head: no diagnosis fits, the hint comes at once
        (lambda w, n: w.unflatten(0, (n, -1)).flip(1).flatten(0, 1), r"case: rows numbered", None),
    ],
)
def test_rotate_half_classic_mistakes_are_caught_and_told(wrong, match, diagnosis):
    with pytest.raises(AssertionError, match=rf"(?s){match}.*(hint|diagnosis):") as info:
        check.interleaved_to_rotate_half(wrong)
    _told(info, diagnosis)


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    for entry in (ROTATE_HALF, BOUND, QWEN3):
        entry.cases()
    assert torch.equal(torch.random.get_rng_state(), before)


def test_sdpa_and_the_explicit_softmax_agree_on_the_reference():
    """The reference's F.scaled_dot_product_attention equals the explicit masked softmax (_plain)."""
    for label, args in QWEN3.cases():
        torch.testing.assert_close(QWEN3.reference(*args), _plain(*args), atol=1e-5, rtol=1e-5, msg=label)
