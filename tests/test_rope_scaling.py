"""attnlib.rope_scaling and RoPE's chapter-18 options against Hugging Face transformers (5.24 and 4.57):
the inverse frequencies and attention factor of every scaling type equal to ``ROPE_INIT_FUNCTIONS`` to the
bit, RoPE at 40,000 positions equal to transformers' rotary embedding and ``apply_rotary_pos_emb`` to the
bit, and partial rotary against its definition (the passed dimensions untouched, scores that depend on
``m - n`` only)."""

import math

import pytest
import torch

from attnlib import AttnlibError, apply_rope
from attnlib.positions import RoPE
from attnlib.rope_scaling import RopeScaling, attention_factor, scaled_frequencies

transformers = pytest.importorskip("transformers")
from _transformers import V5, rope  # noqa: E402  (after the skip: it imports transformers)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402


def _factors(n, top):
    """LongRoPE's per-pair divisors as Phi-3's config has them: 1 for the fast pairs, growing to ``top``."""
    return [round(1.0 + (top - 1.0) * (i / (n - 1)) ** 2, 4) for i in range(n)]


# name: (head_dim, rope_theta, max_position_embeddings, rope_type, scaling keys, top-level config keys).
# The numbers are those of the models' config.json files.
CONFIGS = {
    "default": (128, 500000.0, 131072, "default", {}, {}),
    "llama3.1": (128, 500000.0, 131072, "llama3", dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                       original_max_position_embeddings=8192), {}),
    "llama3.2": (64, 500000.0, 131072, "llama3", dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                      original_max_position_embeddings=8192), {}),
    "qwen3-yarn": (128, 1000000.0, 131072, "yarn", dict(factor=4.0, original_max_position_embeddings=32768), {}),
    "gpt-oss": (64, 150000.0, 131072, "yarn", dict(factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                                                   original_max_position_embeddings=4096), {}),
    "deepseek-v3": (64, 10000.0, 163840, "yarn", dict(factor=40.0, mscale=1.0, mscale_all_dim=1.0, beta_fast=32,
                                                      beta_slow=1, original_max_position_embeddings=4096), {}),
    "yarn-mscale": (64, 10000.0, 163840, "yarn", dict(factor=40.0, mscale=0.707, mscale_all_dim=1.0,
                                                      original_max_position_embeddings=4096), {}),
    "phi3-longrope": (96, 10000.0, 131072, "longrope", dict(short_factor=_factors(48, 1.2), long_factor=_factors(48, 60.0)),
                      dict(original_max_position_embeddings=4096)),
    "phi4-mini": (128, 10000.0, 131072, "longrope", dict(short_factor=_factors(48, 1.1), long_factor=_factors(48, 40.0)),
                  dict(original_max_position_embeddings=4096, partial_rotary_factor=0.75)),
    "gemma3-linear": (256, 1000000.0, 131072, "linear", dict(factor=8.0), {}),
    "dynamic": (64, 10000.0, 2048, "dynamic", dict(factor=2.0), {}),
    "dynamic-partial": (80, 10000.0, 4096, "dynamic", dict(factor=4.0), dict(partial_rotary_factor=0.5)),
}  # fmt: skip


def _hf_config(name):
    head_dim, theta, max_pos, rope_type, scaling, top = CONFIGS[name]
    return transformers.LlamaConfig(
        hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim, max_position_embeddings=max_pos,
        **rope(theta, rope_type, **scaling), **top,
    )  # fmt: skip


def _ours(name):
    """(rotary_dim, base, RopeScaling) as a loader reads them from the transformers config."""
    head_dim, theta, max_pos, rope_type, scaling, top = CONFIGS[name]
    config = _hf_config(name)
    params = config.rope_parameters if V5 else config.rope_scaling
    s = RopeScaling.from_hf(params, max_pos, getattr(config, "original_max_position_embeddings", None))
    return int(head_dim * top.get("partial_rotary_factor", 1.0)), theta, s


def _lengths(name):
    """seq_len None, below and above the length where the type changes (dynamic: max_position_embeddings)."""
    head_dim, theta, max_pos, rope_type, scaling, top = CONFIGS[name]
    key = "original_max_position_embeddings"
    L0 = scaling.get(key) or top.get(key) or max_pos  # dynamic's is max_position_embeddings
    return [None, 1, L0 // 2, L0, L0 + 1, 3 * L0]


@pytest.mark.parametrize("name", [name for name in CONFIGS if name != "default"])
def test_frequencies_and_attention_factor_equal_transformers_to_the_bit(name):
    config, (d, base, scaling) = _hf_config(name), _ours(name)
    assert scaling.rope_type == CONFIGS[name][3]
    for seq_len in _lengths(name):
        theirs, their_factor = ROPE_INIT_FUNCTIONS[scaling.rope_type](config, None, seq_len)
        ours, our_factor = scaled_frequencies(d, base, scaling, seq_len)
        assert ours.dtype == torch.float32 and ours.shape == (d // 2,)
        assert torch.equal(ours, theirs), (name, seq_len, (ours != theirs).sum().item())
        assert our_factor == their_factor and type(our_factor) is float, (name, our_factor, their_factor)
        assert attention_factor(scaling) == their_factor


def test_default_frequencies_equal_transformers_and_from_hf_gives_none():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    d, base, scaling = _ours("default")
    assert scaling is None
    theirs = LlamaRotaryEmbedding(_hf_config("default")).inv_freq
    assert torch.equal(scaled_frequencies(d, base, None)[0], theirs) and scaled_frequencies(d, base, None)[1] == 1.0


def test_the_types_change_what_the_papers_say():
    """Against the formulas, independently of transformers: which pairs each type leaves alone."""
    default, _ = scaled_frequencies(128, 500000.0, None)
    llama, a = scaled_frequencies(128, 500000.0, _ours("llama3.1")[2])
    wavelength = 2 * math.pi / default
    assert a == 1.0
    assert torch.equal(llama[wavelength < 8192 / 4], default[wavelength < 8192 / 4])  # short waves kept
    assert torch.equal(llama[wavelength > 8192], default[wavelength > 8192] / 8)  # long waves / s
    between = (wavelength >= 2048) & (wavelength <= 8192)
    assert between.any() and ((llama[between] < default[between]) & (llama[between] > default[between] / 8)).all()
    linear, _ = scaled_frequencies(256, 1e6, _ours("gemma3-linear")[2])
    assert torch.equal(linear, scaled_frequencies(256, 1e6, None)[0] / 8)
    yarn, a = scaled_frequencies(128, 1e6, _ours("qwen3-yarn")[2])
    assert a == pytest.approx(0.1 * math.log(4) + 1) and yarn[0] == 1.0  # the fastest pair kept
    torch.testing.assert_close(yarn[-1], scaled_frequencies(128, 1e6, None)[0][-1] / 4)  # the slowest / s
    d, base, phi3 = _ours("phi3-longrope")
    short, a = scaled_frequencies(d, base, phi3, 4096)
    long, _ = scaled_frequencies(d, base, phi3, 4097)
    assert a == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    theta = scaled_frequencies(d, base, None)[0].double()
    torch.testing.assert_close(long.double(), theta / torch.tensor(phi3.long_factor, dtype=torch.float64))
    torch.testing.assert_close(short.double(), theta / torch.tensor(phi3.short_factor, dtype=torch.float64))
    dynamic = _ours("dynamic")[2]
    assert torch.equal(scaled_frequencies(64, 1e4, dynamic, 100)[0], scaled_frequencies(64, 1e4, dynamic)[0])
    grown = 1e4 * (2 * 8192 / 2048 - 1) ** (64 / 62)
    torch.testing.assert_close(scaled_frequencies(64, 1e4, dynamic, 8192)[0], scaled_frequencies(64, grown, None)[0])


def test_dynamic_with_a_tensor_length_is_transformers_forward_pass():
    """transformers' dynamic layer passes ``max(position_ids) + 1`` as a tensor: base' in float32 tensors."""
    config, (d, base, scaling) = _hf_config("dynamic"), _ours("dynamic")
    for seq_len in (torch.tensor(100), torch.tensor(5000), torch.tensor(40000)):
        theirs, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, None, seq_len)
        assert torch.equal(scaled_frequencies(d, base, scaling, seq_len)[0], theirs)


def _hf_rotate(name, x, position_ids):
    """transformers: its rotary embedding's cos, sin and Phi-3's apply_rotary_pos_emb (rotate half on the
    first rotary_dim dimensions, the rest passed)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb

    cos, sin = LlamaRotaryEmbedding(_hf_config(name))(x, position_ids)
    return apply_rotary_pos_emb(x, x, cos, sin)[0]


def _to_halves(d_head, r):
    """The permutation from interleaved pairs to rotate-half pairs within the first r dimensions."""
    return torch.cat((torch.arange(0, r, 2), torch.arange(1, r, 2), torch.arange(r, d_head)))


@pytest.mark.parametrize(
    "name", ["default", "llama3.1", "qwen3-yarn", "gpt-oss", "phi3-longrope", "phi4-mini", "dynamic"]
)
def test_rope_equals_transformers_to_the_bit_at_40000_positions(name):
    T = 40_000
    d_head = CONFIGS[name][0]
    r, base, scaling = _ours(name)
    layer = RoPE(d_head, base, scaling=scaling, rotary_dim=r)
    x = torch.randn(1, 2, T, d_head, generator=torch.Generator().manual_seed(18))  # (B, n_heads, T, d_head)
    perm = _to_halves(d_head, r)
    theirs = _hf_rotate(name, x[..., perm], torch.arange(T)[None])
    ours = layer(x, torch.arange(T))[..., perm]
    assert torch.equal(ours, theirs), f"{(ours != theirs).sum().item()} of {ours.numel()} numbers differ"
    # short sequences: the table of the starting frequencies (longrope's short factors, dynamic's base)
    short = x[:, :, :1000]
    theirs = _hf_rotate(name, short[..., perm], torch.arange(1000)[None])
    assert torch.equal(layer(short, torch.arange(1000))[..., perm], theirs)


def test_growing_positions_agree_with_transformers_stateful_layers():
    """Generation: transformers' dynamic and LongRoPE layers keep state, this RoPE none; positions that only
    grow (a prompt, then one token at a time past the original length) give the same bits."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb

    for name, steps in (("dynamic", (2000, 2048, 2049, 2050, 3000)), ("phi3-longrope", (4000, 4096, 4097, 4098))):
        d_head = CONFIGS[name][0]
        r, base, scaling = _ours(name)
        layer, theirs_layer = RoPE(d_head, base, scaling=scaling, rotary_dim=r), LlamaRotaryEmbedding(_hf_config(name))
        perm, start = _to_halves(d_head, r), 0
        for end in steps:
            x = torch.randn(1, 2, end - start, d_head, generator=torch.Generator().manual_seed(end))
            positions = torch.arange(start, end)
            cos, sin = theirs_layer(x, positions[None])
            theirs = apply_rotary_pos_emb(x[..., perm], x[..., perm], cos, sin)[0]
            assert torch.equal(layer(x, positions)[..., perm], theirs), (name, start, end)
            start = end


def test_partial_rotary_passes_the_other_dimensions_and_scores_depend_on_m_minus_n():
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(2, 20, dtype=torch.float64, generator=g), torch.randn(2, 20, dtype=torch.float64, generator=g)
    for scaling in (None, RopeScaling("yarn", factor=4.0, original_max_position_embeddings=64)):
        layer = RoPE(20, 1000.0, rotary_dim=12, scaling=scaling)

        def score(m, n):
            return layer(q, torch.tensor([m, m]))[0] @ layer(k, torch.tensor([n, n]))[1]

        out = layer(q, torch.tensor([7, 300]))
        assert torch.equal(out[:, 12:], q[:, 12:])  # the passed dimensions, bit for bit
        assert not torch.allclose(out[:, :12], q[:, :12])
        for m, n in [(5, 2), (40, 7), (0, 9)]:
            torch.testing.assert_close(score(m + 100, n + 100), score(m, n), atol=1e-9, rtol=0)
        assert not torch.allclose(score(5, 2), score(2, 5))
    # without scaling the turned part is apply_rope over rotary_dim dimensions, to the bit
    x = torch.randn(3, 9, 20, generator=g)
    assert torch.equal(
        RoPE(20, 1000.0, rotary_dim=12)(x, torch.arange(9))[..., :12], apply_rope(x[..., :12], None, 1000.0)
    )


def test_attention_factor_scales_the_scores_by_its_square():
    g = torch.Generator().manual_seed(6)
    q, k = torch.randn(4, 16, dtype=torch.float64, generator=g), torch.randn(4, 16, dtype=torch.float64, generator=g)
    yarn = RopeScaling("yarn", factor=16.0, original_max_position_embeddings=256)
    plain = RopeScaling("yarn", factor=16.0, original_max_position_embeddings=256, attention_factor=1.0)
    pos = torch.tensor([0, 3, 100, 9000])
    a = RoPE(16, scaling=yarn).attention_factor
    assert a == pytest.approx(0.1 * math.log(16) + 1)
    scores, unscaled = (RoPE(16, scaling=s)(q, pos) @ RoPE(16, scaling=s)(k, pos).T for s in (yarn, plain))
    torch.testing.assert_close(scores, a**2 * unscaled, atol=1e-12, rtol=1e-12)


def test_from_hf_reads_both_spellings_and_ignores_other_keys():
    llama = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)
    expected = RopeScaling("llama3", max_position_embeddings=131072, **llama)
    for params in ({"rope_type": "llama3", "rope_theta": 5e5, **llama}, {"type": "llama3", **llama},
                   {"rope_type": "llama3", "partial_rotary_factor": 1.0, **llama}):  # fmt: skip
        assert RopeScaling.from_hf(params, 131072) == expected
    for default in (None, {"rope_type": "default", "rope_theta": 1e4}, {"type": "default"}, {"rope_theta": 1e4}):
        assert RopeScaling.from_hf(default, 2048) is None
    phi3 = {"type": "longrope", "short_factor": [1.0, 2.0], "long_factor": [3.0, 4.0]}
    s = RopeScaling.from_hf(phi3, 131072, original_max_position_embeddings=4096)
    assert (s.original_max_position_embeddings, s.short_factor, s.factor) == (4096, (1.0, 2.0), None)
    assert RopeScaling.from_hf({"rope_type": "yarn", "factor": 4.0}, 32768).original_max_position_embeddings == 32768
    assert RopeScaling.from_hf({"rope_type": "yarn", "factor": 4.0, "beta_fast": None}, 9).beta_fast == 32.0


def test_rope_scaling_is_hashable_and_shows_what_is_set():
    a = RopeScaling(
        "longrope", short_factor=[1.0, 2.0], long_factor=[3.0, 4.0], factor=2.0, original_max_position_embeddings=4
    )
    b = RopeScaling(
        "longrope", short_factor=(1.0, 2.0), long_factor=(3.0, 4.0), factor=2.0, original_max_position_embeddings=4
    )
    assert a == b and hash(a) == hash(b) and a.short_factor == (1.0, 2.0)
    assert len({a, b}) == 1
    assert repr(RopeScaling("linear", factor=8.0)) == "RopeScaling(rope_type='linear', factor=8.0)"
    layer = RoPE(8, 500000.0, scaling=RopeScaling("linear", factor=2.0), rotary_dim=4)
    assert (
        repr(layer)
        == "RoPE(d_head=8, base=500000.0, rotary_dim=4, scaling=RopeScaling(rope_type='linear', factor=2.0))"
    )
    assert repr(RoPE(8)) == "RoPE(d_head=8, base=10000.0)" and RoPE(8).attention_factor == 1.0
    assert layer.frequencies().shape == (2,)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: RopeScaling("ntk", factor=2.0), r'rope_type: expected "linear" or "dynamic" or "yarn" or "llama3" or "longrope", received str \'ntk\''),
        (lambda: RopeScaling("linear"), r'RopeScaling: expected factor for rope_type="linear", received none'),
        (lambda: RopeScaling("dynamic", factor=2.0), r"expected max_position_embeddings for rope_type=\"dynamic\""),
        (lambda: RopeScaling("llama3", factor=8.0), r'expected original_max_position_embeddings for rope_type="llama3"'),
        (lambda: RopeScaling("longrope", original_max_position_embeddings=4),
         r"expected short_factor, long_factor, factor \(or max_position_embeddings\) for rope_type=\"longrope\""),
        (lambda: RopeScaling("linear", factor=-1.0), r"factor: expected a positive number, received float -1.0"),
        (lambda: RopeScaling("linear", factor="8"), r"factor: expected a positive number, received str '8'"),
        (lambda: RopeScaling("yarn", factor=4.0, original_max_position_embeddings=4096.0), r"original_max_position_embeddings: expected a positive int"),
        (lambda: RopeScaling("yarn", factor=4.0, original_max_position_embeddings=64, truncate=1), r"truncate: expected True or False"),
        (lambda: RopeScaling("longrope", short_factor=[1, "a"], long_factor=[1, 2], factor=2.0, original_max_position_embeddings=4), r"short_factor: expected a list of positive numbers"),
        (lambda: RopeScaling("llama3", factor=8.0, original_max_position_embeddings=8192, low_freq_factor=4.0), r"low_freq_factor < high_freq_factor"),
        (lambda: RopeScaling.from_hf({"rope_type": "mrope"}, 2048), r"rope_type: expected \"default\" or \"linear\" .* received 'mrope'"),
        (lambda: RopeScaling.from_hf([("type", "linear")], 2048), r"params: expected a dict"),
        (lambda: scaled_frequencies(8, 1e4, RopeScaling("longrope", short_factor=[1.0] * 3, long_factor=[1.0] * 4, factor=2.0, original_max_position_embeddings=4)), r"short_factor: expected d/2 = 4 numbers .* received 3"),
        (lambda: scaled_frequencies(7, 1e4, None), r"d: expected an even number"),
        (lambda: scaled_frequencies(8, 1e4, {"rope_type": "linear"}), r"scaling: expected None or an attnlib RopeScaling"),
        (lambda: RoPE(8, rotary_dim=5), r"rotary_dim: expected an even number"),
        (lambda: RoPE(8, rotary_dim=10), r"rotary_dim: expected at most d_head = 8"),
        (lambda: RoPE(8, scaling="yarn"), r"scaling: expected None or an attnlib.RopeScaling, received str 'yarn'"),
    ],
)  # fmt: skip
def test_errors_say_what_was_expected(make, match):
    with pytest.raises(AttnlibError, match=match):
        make()
