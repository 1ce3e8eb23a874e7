"""attnlib.positions against independent references: the paper's formula for the sinusoids
(section 3.5, written as plain Python loops with math.sin / math.cos), and RoPE as complex
multiplication (torch.polar, torch.view_as_complex), the form Su et al. 2021 derive it in."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib import AttnlibError, apply_rope, sinusoidal_positions

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# ---------------------------------------------------------------------------------------------
# sinusoidal_positions


def _paper_table(T, d_model):
    """Vaswani et al. 2017, section 3.5, entry by entry:
    PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    table = np.zeros((T, d_model))
    for pos in range(T):
        for i in range(d_model // 2):
            table[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d_model))
            table[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d_model))
    return table


@pytest.mark.parametrize("T, d_model", [(1, 2), (5, 4), (7, 6), (50, 512), (2048, 16)])
def test_sinusoidal_matches_the_papers_formula(T, d_model):
    P = sinusoidal_positions(T, d_model)
    assert P.shape == (T, d_model) and P.dtype == torch.float32
    np.testing.assert_allclose(P.numpy(), _paper_table(T, d_model), atol=1e-6, rtol=0)


def test_sinusoidal_interleaves_sin_and_cos():
    P = sinusoidal_positions(10, 8).double()
    assert torch.all(P[0, 0::2] == 0) and torch.all(P[0, 1::2] == 1)  # sin 0, cos 0
    torch.testing.assert_close(P[:, 0::2] ** 2 + P[:, 1::2] ** 2, torch.ones(10, 4, dtype=torch.float64))
    # column 0 is sin(pos): frequency 1; the last pair turns slowest
    torch.testing.assert_close(P[:, 0], torch.sin(torch.arange(10.0, dtype=torch.float64)), atol=1e-6, rtol=0)
    assert P.abs().max() <= 1


def test_sinusoidal_shift_is_a_linear_map():
    """The paper's reason: for a fixed offset k, PE[pos + k] is a linear function of PE[pos]
    (a rotation of every pair by k theta_i), the same for every pos."""
    T, d, k = 40, 16, 5
    P = sinusoidal_positions(T, d).double()
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    M = torch.zeros(d, d, dtype=torch.float64)
    for i, t in enumerate(theta):
        c, s = math.cos(k * t), math.sin(k * t)
        # row vectors: [sin(a + kt), cos(a + kt)] = [sin a, cos a] @ [[c, -s], [s, c]]
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    torch.testing.assert_close(P[:-k] @ M, P[k:], atol=1e-6, rtol=0)


def test_sinusoidal_dot_products_depend_on_the_offset_only():
    P = sinusoidal_positions(30, 32).double()
    G = P @ P.T  # (T, T)
    for off in range(-5, 6):
        diag = torch.diagonal(G, offset=off)
        torch.testing.assert_close(diag, diag[0].expand_as(diag), atol=1e-6, rtol=0)
    torch.testing.assert_close(G, G.T)  # symmetric: +k and -k alike


@pytest.mark.parametrize(
    "T, d_model, match",
    [
        (4, 5, "d_model: expected an even number"),
        (0, 4, "T: expected a positive int"),
        (4, 0, "d_model: expected a positive int"),
        (4.0, 4, "T: expected a positive int"),
        (True, 4, "T: expected a positive int"),
        (4, "8", "d_model: expected a positive int"),
    ],
)
def test_sinusoidal_rejects_bad_arguments(T, d_model, match):
    with pytest.raises(AttnlibError, match=match):
        sinusoidal_positions(T, d_model)


# ---------------------------------------------------------------------------------------------
# apply_rope


def _rope_complex(x, positions=None, base=10000.0):
    """RoPE as Su et al. 2021 write it: pair (2i, 2i+1) is the complex number x_2i + j x_2i+1,
    multiplied by exp(j m theta_i), theta_i = base^(-2i/d)."""
    T, d = x.shape[-2], x.shape[-1]
    pos = torch.arange(T, dtype=torch.float64) if positions is None else positions.double().cpu()
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    rot = torch.polar(torch.ones(T, d // 2, dtype=torch.float64), pos[:, None] * theta)  # (T, d/2) complex
    z = torch.view_as_complex(x.double().cpu().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * rot).flatten(-2)  # (..., T, d), float64


def _rope_halves(x, positions):
    """GPT-NeoX / Hugging Face LLaMA convention: dimension i pairs with i + d/2 ("rotate half")."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions.double()[:, None] * theta  # (T, d/2)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)  # (T, d)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


@pytest.mark.parametrize("shape", [(6, 8), (2, 3, 5, 16), (1, 1, 1, 2), (4, 7, 64)])
def test_rope_matches_complex_multiplication(shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x), _rope_complex(x), atol=1e-12, rtol=0)
    pos = torch.tensor([3, 0, 11, 7, 2, 9, 100][: shape[-2]] + [5] * max(0, shape[-2] - 7))
    torch.testing.assert_close(apply_rope(x, pos), _rope_complex(x, pos), atol=1e-12, rtol=0)
    torch.testing.assert_close(apply_rope(x, pos, base=500.0), _rope_complex(x, pos, base=500.0), atol=1e-12, rtol=0)


def test_rope_float32_close_to_float64():
    x = torch.randn(2, 4, 50, 32, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(1000, 1050)  # large positions too
    torch.testing.assert_close(apply_rope(x, pos).double(), _rope_complex(x, pos), atol=1e-4, rtol=0)


def test_rope_frequencies_are_base_to_the_minus_2i_over_d():
    """Position 1 turns pair i by exactly theta_i = base^(-2i/d) = 1 / base^(2i/d): read the angle off e_(2i)."""
    d = 12
    x = torch.zeros(d // 2, 2, d, dtype=torch.float64)  # one row per pair: e_2i at m = 0, 1
    for i in range(d // 2):
        x[i, :, 2 * i] = 1.0
    for base in (10000.0, 10.0):
        out = apply_rope(x, torch.tensor([0, 1]), base=base)  # (d/2, 2, d)
        angles = torch.stack([torch.atan2(out[i, 1, 2 * i + 1], out[i, 1, 2 * i]) for i in range(d // 2)])
        expected = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
        torch.testing.assert_close(angles, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("base, d_head", [(10000.0, 64), (500000.0, 128), (1000000.0, 128)])
def test_rope_float32_equals_transformers_to_the_bit_at_40000_positions(base, d_head):
    """transformers' Llama RoPE (cos/sin from ``1 / base^(2i/d)`` in float32, rotate-half pairs) and
    apply_rope (interleaved pairs) give the same float32 bits at every position up to 40,000, once
    the dimensions are permuted from one pair layout to the other (pair i: dims (2i, 2i+1) here,
    (i, i + d/2) there)."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    T = 40_000
    config = transformers.LlamaConfig(
        hidden_size=d_head * 2, num_attention_heads=2, head_dim=d_head, max_position_embeddings=T, rope_theta=base
    )
    x = torch.randn(1, 2, T, d_head, generator=torch.Generator().manual_seed(40))  # (B, n_heads, T, d_head)
    position_ids = torch.arange(T)[None]  # (1, T)
    rotary = LlamaRotaryEmbedding(config)
    assert rotary.inv_freq[1].item() == pytest.approx(base ** (-2 / d_head), rel=1e-6)  # the base was taken
    cos, sin = rotary(x, position_ids)  # (1, T, d_head) each
    halves = torch.cat((torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)))  # interleaved -> rotate-half
    theirs, _ = apply_rotary_pos_emb(x[..., halves], x[..., halves], cos, sin)
    ours = apply_rope(x, torch.arange(T), base=base)[..., halves]
    assert torch.equal(ours, theirs), f"{(ours != theirs).sum().item()} of {ours.numel()} numbers differ"


def test_rope_scores_depend_on_m_minus_n_only():
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(16, dtype=torch.float64, generator=g), torch.randn(16, dtype=torch.float64, generator=g)

    def score(m, n):  # q at position m, k at position n
        qm = apply_rope(q[None], torch.tensor([m]))[0]
        kn = apply_rope(k[None], torch.tensor([n]))[0]
        return qm @ kn

    for m, n in [(0, 0), (5, 2), (2, 5), (40, 7), (1000, 999)]:
        for shift in (1, 13, 500):
            torch.testing.assert_close(score(m + shift, n + shift), score(m, n), atol=1e-9, rtol=0)
        # q_m . k_n = q . R_(n - m) k: only the offset enters
        torch.testing.assert_close(score(m, n), q @ apply_rope(k[None], torch.tensor([n - m]))[0], atol=1e-9, rtol=0)
    assert not torch.allclose(score(5, 2), score(2, 5))  # the sign of m - n matters


def test_rope_attention_is_shift_invariant():
    """With RoPE on q and k, shifting every position by the same amount changes no attention output."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 9, 16, generator=g, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(9)
    out = F.scaled_dot_product_attention(apply_rope(q, pos), apply_rope(k, pos), v, is_causal=True)
    shifted = F.scaled_dot_product_attention(apply_rope(q, pos + 37), apply_rope(k, pos + 37), v, is_causal=True)
    torch.testing.assert_close(shifted, out, atol=1e-9, rtol=0)


def test_rope_keeps_norms_and_position_zero_is_the_identity():
    x = torch.randn(3, 2, 10, 32, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(apply_rope(x).norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)
    # and the norm of every pair, not only of the whole vector
    pairs = lambda t: t.reshape(*t.shape[:-1], -1, 2).norm(dim=-1)
    torch.testing.assert_close(pairs(apply_rope(x)), pairs(x), atol=1e-5, rtol=1e-5)
    assert torch.equal(apply_rope(x, torch.zeros(10)), x)  # cos 0 = 1, sin 0 = 0: exact
    assert torch.equal(apply_rope(x[..., :1, :]), x[..., :1, :])  # one token sits at position 0


def test_rope_default_positions_are_0_to_T_minus_1():
    x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(5))
    assert torch.equal(apply_rope(x), apply_rope(x, torch.arange(7)))
    assert torch.equal(apply_rope(x, torch.arange(7)), apply_rope(x, torch.arange(7).double()))


def test_rope_same_tensor_for_every_head_and_batch_entry():
    x = torch.randn(3, 4, 6, 8, generator=torch.Generator().manual_seed(6))  # (B, n_heads, T, d_head)
    out = apply_rope(x)
    for b in range(3):
        for h in range(4):
            torch.testing.assert_close(out[b, h], apply_rope(x[b, h]), atol=0, rtol=0)


def test_rope_is_rotate_half_after_a_permutation():
    """The interleaved pairs (2i, 2i+1) and GPT-NeoX's halves (i, i + d/2) differ by a fixed
    permutation of the dimensions: permute, rotate half, and it is apply_rope, permuted."""
    d = 16
    perm = list(range(0, d, 2)) + list(range(1, d, 2))  # pair i -> dimensions i, i + d/2
    x = torch.randn(2, 5, d, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    pos = torch.arange(3, 8)
    torch.testing.assert_close(_rope_halves(x[..., perm], pos), apply_rope(x, pos)[..., perm], atol=1e-12, rtol=0)
    assert not torch.allclose(_rope_halves(x, pos), apply_rope(x, pos))  # without it they differ


def test_rope_angles_are_the_sinusoidal_table():
    """RoPE at base 10000 turns pair i at position m by the angle of the table's column pair i."""
    T, d = 20, 16
    ones = torch.tensor([1.0, 0.0]).repeat(d // 2).expand(T, d)  # every pair (1, 0)
    rotated = apply_rope(ones)  # (cos, sin) per pair
    swap = [j + 1 if j % 2 == 0 else j - 1 for j in range(d)]  # (cos, sin) -> (sin, cos)
    torch.testing.assert_close(rotated[:, swap], sinusoidal_positions(T, d), atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("device", DEVICES)
def test_rope_keeps_dtype_and_device(dtype, device):
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(8)).to(device, dtype)
    out = apply_rope(x, torch.arange(3))  # positions on the CPU are fine
    assert out.dtype == dtype and out.device == x.device and out.shape == x.shape
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-5)
    torch.testing.assert_close(out.double().cpu(), _rope_complex(x), atol=tol, rtol=tol)


def test_rope_on_the_meta_device():
    x = torch.empty(2, 12, 1024, 64, device="meta")  # shapes only, no memory
    out = apply_rope(x)
    assert out.shape == x.shape and out.device.type == "meta"


def test_rope_leaves_its_input_alone_and_passes_gradients():
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(9), requires_grad=True)
    before = x.detach().clone()
    apply_rope(x).pow(2).sum().backward()  # |R x|^2 = |x|^2: gradient 2x
    assert torch.equal(x.detach(), before)
    torch.testing.assert_close(x.grad, 2 * before, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((torch.randn(4, 7),), {}, r"x: expected a last dimension d_head that is even"),
        ((torch.randn(4, 0),), {}, r"x: expected a last dimension d_head that is even"),
        ((torch.randn(8),), {}, r"x: expected a tensor with at least 2 dimensions"),
        (([[1.0, 0.0]],), {}, r"x: expected a torch.Tensor"),
        ((np.ones((2, 4)),), {}, r"x: expected a torch.Tensor"),
        ((torch.ones(2, 4, dtype=torch.long),), {}, r"x: expected a floating-point tensor"),
        ((torch.randn(5, 8), torch.arange(4)), {}, r"positions: expected a tensor of shape \(5,\) or \(\.\.\., 5\)"),
        (
            (torch.randn(2, 5, 8), torch.arange(15).reshape(3, 5)),
            {},
            r"positions: expected a tensor of shape \(5,\) or \(\.\.\., 5\) that broadcasts against x's leading axes \(2,\)",
        ),
        ((torch.randn(5, 8), torch.arange(10).reshape(2, 5)), {}, r"positions: expected .* leading axes \(\)"),
        ((torch.randn(5, 8), [0, 1, 2, 3, 4]), {}, r"positions: expected None or a tensor of T=5 positions"),
        ((torch.randn(5, 8), torch.ones(5, dtype=torch.bool)), {}, r"positions: expected integer or float positions"),
        ((torch.randn(5, 8),), {"base": 0.0}, r"base: expected a positive number"),
        ((torch.randn(5, 8),), {"base": "10000"}, r"base: expected a positive number"),
    ],
)
def test_rope_rejects_bad_input(args, kwargs, match):
    with pytest.raises(AttnlibError, match=match):
        apply_rope(*args, **kwargs)


# --- the layer's positions object (issue 34) ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rope_object_equals_apply_rope_to_the_bit(dtype):
    """RoPE(d_head, base)(x, positions) looks its angles up in a table; apply_rope computes them each call.
    Equal to the bit: default positions, offsets after a cache, one row per sequence, a table that grows,
    fractional and negative positions (computed directly)."""
    from attnlib.positions import RoPE

    rope = RoPE(16, base=500000.0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 16, generator=g, dtype=dtype)  # (B, n_heads, T, d_head)
    for positions in (
        torch.arange(5),
        torch.arange(40, 45),  # past the first table: it grows
        torch.tensor([[[0, 1, 2, 3, 4]], [[7, 8, 9, 10, 11]]]),  # (B, 1, T): one row per sequence
        torch.tensor([3.5, 0.0, 1.25, 2.0, 9.0]),
        torch.tensor([-2, -1, 0, 1, 2]),
        torch.arange(RoPE.TABLE_LIMIT - 2, RoPE.TABLE_LIMIT + 3),  # past the table's limit: computed directly
    ):
        assert torch.equal(rope(x, positions), apply_rope(x, positions, 500000.0)), positions


def test_rope_object_computes_its_table_once_per_length_and_device(monkeypatch):
    from attnlib import positions as positions_module
    from attnlib.positions import RoPE

    calls = []
    original = positions_module.rope_frequencies

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(positions_module, "rope_frequencies", counted)
    rope, x = RoPE(8), torch.randn(1, 2, 4, 8)
    for start in range(0, 20, 4):  # positions up to 3, 7, 11, 15, 19
        rope(x, torch.arange(start, start + 4))
    assert len(calls) == 4  # tables of 4, 8, 16 (twice 8) and 32 positions; 16 held positions 12 .. 15
    for _ in range(10):
        rope(x, torch.arange(20, 24))  # within the table: looked up, not computed
    rope(x.double(), torch.arange(4))  # another dtype: a table of its own
    assert len(calls) == 5


def test_nope_leaves_queries_and_keys_alone():
    from attnlib import MultiHeadAttention
    from attnlib.positions import NoPE, RoPE

    assert isinstance(MultiHeadAttention(8, 2).pos_enc, NoPE)
    layer = MultiHeadAttention(8, 2, rope=True, rope_base=500000.0)
    assert isinstance(layer.pos_enc, RoPE) and layer.rope and layer.rope_base == 500000.0
    assert (layer.pos_enc.d_head, layer.pos_enc.base) == (4, 500000.0)
    assert not MultiHeadAttention(8, 2, rope_base=3.0).rope and MultiHeadAttention(8, 2, rope_base=3.0).rope_base == 3.0


def test_rope_layers_run_on_the_meta_device():
    """A RoPE model built on the meta device (shapes only, chapter 11's FLOP counts) runs forward and
    generate: the layer's positions object computes no table there, it has no values to index."""
    from attnlib import GPT, GPTConfig
    from attnlib.positions import RoPE

    with torch.device("meta"):
        model = GPT(GPTConfig(100, 16, 32, 2, 4, positions="rope", n_kv_heads=2))
        ids = torch.zeros(1, 5, dtype=torch.long)
    assert model(ids).shape == (1, 5, 100) and model(ids).device.type == "meta"
    assert model.generate(ids, 2).shape == (1, 7)
    x = torch.empty(1, 2, 3, 8, device="meta")
    assert RoPE(8)(x, torch.arange(3, device="meta")).shape == x.shape
