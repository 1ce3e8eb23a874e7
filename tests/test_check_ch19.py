"""Chapter 19's checkers: YaRN's ramp and Llama 3's frequencies. Each reference is checked against an independent
one, attnlib's ``scaled_frequencies`` (itself equal to transformers' ``ROPE_INIT_FUNCTIONS`` to the bit,
tests/test_rope_scaling.py): the ramp read back from YaRN's frequencies, Llama 3's frequencies themselves. The
notebook's solutions pass, and the classic mistakes fail with their diagnosis."""

import math

import pytest
import torch
from _solutions import fails, notebook_solution

from attnlib import RopeScaling, check, scaled_frequencies
from attnlib.check import CHECKS

RAMP = CHECKS["ch19-yarn-ramp"]
LLAMA3 = CHECKS["ch19-llama3-frequencies"]
NOTEBOOK = "19_long_context.ipynb"


def test_registered_under_their_exercises():
    assert RAMP is check.yarn_ramp and RAMP.function == "yarn_ramp"
    assert LLAMA3 is check.llama3_frequencies and LLAMA3.function == "llama3_frequencies"


def test_the_notebooks_solutions_pass(capsys):
    for entry in (RAMP, LLAMA3):
        entry(notebook_solution(NOTEBOOK, entry.function))
    out = capsys.readouterr().out
    for entry in (RAMP, LLAMA3):
        assert f"check.{entry.function}: all {len(entry.cases())} cases passed" in out


def test_checking_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    RAMP.cases(), LLAMA3.cases()
    assert torch.equal(torch.random.get_rng_state(), before)


# ------------------------------------------------------------------ ch19-yarn-ramp


def test_ramp_reference_is_what_yarns_frequencies_interpolate():
    """YaRN's theta' = (1 - r) theta + r theta / s, so r = (theta - theta') / (theta - theta / s)."""
    for label, (d, base, L0, beta_fast, beta_slow) in RAMP.cases():
        r = RAMP.reference(d, base, L0, beta_fast, beta_slow)
        assert r.shape == (d // 2,) and r.dtype == torch.float32, label
        s = RopeScaling("yarn", factor=4.0, original_max_position_embeddings=L0, beta_fast=beta_fast,
                        beta_slow=beta_slow)  # fmt: skip
        theta = scaled_frequencies(d, base, None, dtype=torch.float64)[0]
        scaled = scaled_frequencies(d, base, s, dtype=torch.float64)[0]
        torch.testing.assert_close(r.double(), (theta - scaled) / (theta - theta / 4), atol=1e-6, rtol=0, msg=label)


def test_the_toys_ramp_by_hand():
    """d = 8, base 300, L0 = 32: e(32) < 0 so lo = 0; e(1) = 8 ln(32 / 2pi) / (2 ln 300) = 1.14, hi = 2."""
    assert 8 * math.log(32 / (2 * math.pi)) / (2 * math.log(300)) == pytest.approx(1.14, abs=0.01)
    assert RAMP.reference(8, 300.0, 32).tolist() == [0.0, 0.5, 1.0, 1.0]


def _ramp(d, base, L0, bf, bs, floor=math.floor, ceil=math.ceil, pairs=None):
    def edge(turns):
        return d * math.log(L0 / (2 * math.pi * turns)) / (2 * math.log(base))

    lo, hi = max(floor(edge(bf)), 0), min(ceil(edge(bs)), d - 1)
    hi = hi + 0.001 if lo == hi else hi
    return torch.clamp((torch.arange(pairs or d // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda d, b, L, bf=32.0, bs=1.0: 1 - _ramp(d, b, L, bf, bs), "your ramp is 1 for the fast pairs"),
        (lambda d, b, L, bf=32.0, bs=1.0: _ramp(d, b, L, bs, bf), "you swapped the betas"),
        (lambda d, b, L, bf=32.0, bs=1.0: _ramp(d, b, L, bf, bs, floor=float, ceil=float), "you kept the edges"),
        (lambda d, b, L, bf=32.0, bs=1.0: _ramp(d, b, L, bf, bs, pairs=d), "your ramp has one value per dimension"),
        # the natural log of the turns, not of L0 / (2 pi turns): no diagnosis fits
        (lambda d, b, L, bf=32.0, bs=1.0: torch.zeros(d // 2), None),
    ],
)
def test_ramp_classic_mistakes_are_caught(wrong, diagnosis):
    fails(check.yarn_ramp, wrong, r"wrong (values|shape).*case: ", diagnosis)


def test_ramp_may_not_call_scaled_frequencies():
    def cheat(d, base, L0, beta_fast=32.0, beta_slow=1.0):
        s = RopeScaling("yarn", factor=2.0, original_max_position_embeddings=L0)
        theta, scaled = scaled_frequencies(d, base, None)[0], scaled_frequencies(d, base, s)[0]
        return (theta - scaled) / (theta / 2)

    with pytest.raises(AssertionError, match="without attnlib.scaled_frequencies"):
        check.yarn_ramp(cheat)


# ------------------------------------------------------------------ ch19-llama3-frequencies


def test_llama3_reference_is_attnlibs_scaled_frequencies():
    for label, (theta, factor, L0, low, high) in LLAMA3.cases():
        d = 2 * theta.shape[0]
        base = 1 / theta[1].item() ** (d / 2)  # theta_1 = base^(-2/d)
        s = RopeScaling("llama3", factor=factor, original_max_position_embeddings=L0, low_freq_factor=low,
                        high_freq_factor=high)  # fmt: skip
        expected = scaled_frequencies(d, round(base, 1), s, dtype=theta.dtype)[0]
        got = LLAMA3.reference(theta, factor, L0, low, high)
        assert got.dtype == theta.dtype, label
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=0, msg=label)


def test_llama31_keeps_the_short_waves_and_divides_the_long_ones():
    theta = scaled_frequencies(128, 500000.0, None)[0]
    got = LLAMA3.reference(theta, 8.0, 8192)
    wavelength = 2 * math.pi / theta
    assert torch.equal(got[wavelength < 2048], theta[wavelength < 2048])
    assert torch.equal(got[wavelength > 8192], theta[wavelength > 8192] / 8)
    between = (wavelength >= 2048) & (wavelength <= 8192)
    assert between.any() and ((got[between] < theta[between]) & (got[between] > theta[between] / 8)).all()


def _bands(theta, s, L0, lo=1.0, hi=4.0, kept="short", g_flip=False, blend=True):
    wavelength = 2 * math.pi / theta
    g = (L0 / wavelength - lo) / (hi - lo)
    g = 1 - g if g_flip else g
    between = (1 - g) * theta / s + g * theta if blend else theta
    short, long = wavelength < L0 / hi, wavelength > L0 / lo
    if kept == "long":
        short, long = long, short
    return torch.where(long, theta / s, torch.where(short, theta, between))


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (lambda t, s, L, lo=1.0, hi=4.0: t / s, "you divided every frequency by the factor"),
        (lambda t, s, L, lo=1.0, hi=4.0: _bands(t, s, L, lo, hi, kept="long"), "you swapped the bands"),
        (lambda t, s, L, lo=1.0, hi=4.0: _bands(t, s, L, lo, hi, g_flip=True), "your blend runs the wrong way"),
        (lambda t, s, L, lo=1.0, hi=4.0: _bands(t, s, L, lo, hi, blend=False), "you left out the blend"),
        # the wavelength taken as 1 / theta, without 2 pi: no diagnosis fits
        (lambda t, s, L, lo=1.0, hi=4.0: _bands(t * 2 * math.pi, s, L, lo, hi) / (2 * math.pi), None),
    ],
)
def test_llama3_classic_mistakes_are_caught(wrong, diagnosis):
    fails(check.llama3_frequencies, wrong, r"wrong (values|shape|dtype).*case: ", diagnosis)


def test_llama3_may_not_call_scaled_frequencies():
    def cheat(theta, factor, original_length, low_freq_factor=1.0, high_freq_factor=4.0):
        s = RopeScaling("llama3", factor=factor, original_max_position_embeddings=original_length)
        return scaled_frequencies(2 * theta.shape[0], 500000.0, s)[0]

    with pytest.raises(AssertionError, match="without attnlib.scaled_frequencies"):
        check.llama3_frequencies(cheat)
