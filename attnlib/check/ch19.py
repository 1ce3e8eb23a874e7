"""Checkers for chapter 19's coding exercises: YaRN's ramp (the share of interpolation of each RoPE pair) and
Llama 3's frequencies (wavelengths kept, divided, or blended between)."""

from __future__ import annotations

import math

import torch

from ._core import Cases, Check, _register, matches

# ------------------------------------------------------------------ ch19-yarn-ramp


def _ramp(d: int, base: float, original_length: int, beta_fast: float, beta_slow: float, truncate=True):
    """YaRN's ramp ``r_i`` ``(d/2,)`` float32 (Peng et al. 2023, as ``transformers`` computes it): the dimension
    ``2i`` whose pair turns ``beta`` times in ``L0`` tokens is ``e(beta) = d ln(L0 / (2 pi beta)) / (2 ln base)``;
    ``lo = max(floor(e(beta_fast)), 0)``, ``hi = min(ceil(e(beta_slow)), d - 1)`` (``+ 0.001`` if equal);
    ``r_i = clamp((i - lo) / (hi - lo), 0, 1)``."""

    def edge(turns):
        return d * math.log(original_length / (2 * math.pi * turns)) / (2 * math.log(base))

    lo, hi = edge(beta_fast), edge(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001
    return torch.clamp((torch.arange(d // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)


def _yarn_reference(d, base, original_length, beta_fast=32.0, beta_slow=1.0):
    return _ramp(d, base, original_length, beta_fast, beta_slow)


def _yarn_cases() -> Cases:
    """(d, base, original_length, beta_fast, beta_slow), seeded."""
    g = torch.Generator().manual_seed(18)
    cases = [
        ("the chapter's toy: d = 8, base 300, L0 = 32", (8, 300.0, 32, 32.0, 1.0)),
        ("Qwen3 with YaRN: d = 128, base 1,000,000, L0 = 32,768", (128, 1000000.0, 32768, 32.0, 1.0)),
        ("Llama 3's shapes: d = 128, base 500,000, L0 = 8,192", (128, 500000.0, 8192, 32.0, 1.0)),
        ("gpt-oss: d = 64, base 150,000, L0 = 4,096", (64, 150000.0, 4096, 32.0, 1.0)),
        ("DeepSeek-V3's rotated part: d = 64, base 10,000, L0 = 4,096", (64, 10000.0, 4096, 32.0, 1.0)),
        ("L0 = 6 tokens: both edges at dimension 0, hi = lo + 0.001", (8, 10000.0, 6, 32.0, 1.0)),
        ("a wide band: beta_fast = 64, beta_slow = 0.5", (32, 10000.0, 2048, 64.0, 0.5)),
        ("a narrow band: beta_fast = 2, beta_slow = 1", (64, 10000.0, 4096, 2.0, 1.0)),
        ("d = 2: one pair", (2, 10000.0, 64, 32.0, 1.0)),
    ]
    for _ in range(3):
        d = 2 * int(torch.randint(4, 65, (1,), generator=g))
        base = float(10 ** (2 + 4 * torch.rand(1, generator=g).item()))
        L0 = int(2 ** int(torch.randint(5, 16, (1,), generator=g)))
        cases.append((f"random: d = {d}, base {base:,.0f}, L0 = {L0}", (d, round(base, 1), L0, 32.0, 1.0)))
    return cases


yarn_ramp = _register(
    Check(
        exercise="ch19-yarn-ramp",
        function="yarn_ramp",
        cases=_yarn_cases,
        reference=_yarn_reference,
        hint="e(beta) = d ln(L0 / (2 pi beta)) / (2 ln base); lo = max(floor(e(beta_fast)), 0) and hi = "
        "min(ceil(e(beta_slow)), d - 1), hi + 0.001 if they are equal; then r = clamp((i - lo) / (hi - lo), 0, 1) "
        "for i = torch.arange(d // 2) in float32: 0 for the fast pairs, 1 for the slow ones",
        covers="the chapter's toy, Qwen3, Llama 3's shapes, gpt-oss, DeepSeek-V3, both edges at 0, a wide and a "
        "narrow band, one pair, random sizes",
        forbids=("scaled_frequencies",),
        atol=1e-6,
        rtol=1e-6,
        diagnoses=(
            (
                "your ramp is 1 for the fast pairs and 0 for the slow ones: r_i is the share interpolated, 0 for the "
                "pairs that turn many times in L0 tokens (they keep theta_i), 1 for the slow ones",
                lambda got, e, *args: matches(got, 1 - e, 1e-6),
            ),
            (
                "you swapped the betas: the edge of beta_fast (more turns) is the lower dimension, lo; that of "
                "beta_slow is hi",
                lambda got, e, d, base, L0, bf, bs: (
                    not matches(got, e, 1e-6) and matches(got, _ramp(d, base, L0, bs, bf), 1e-6)
                ),
            ),
            (
                "you kept the edges as they are: YaRN rounds lo down (floor) and hi up (ceil) to whole dimensions "
                "before the ramp (transformers' truncate=True)",
                lambda got, e, d, base, L0, bf, bs: matches(got, _ramp(d, base, L0, bf, bs, truncate=False), 1e-6),
            ),
            (
                "your ramp has one value per dimension: it needs one per pair, d // 2 of them",
                lambda got, e, d, *args: isinstance(got, torch.Tensor) and got.shape == (d,),
            ),
        ),
    )
)


# ------------------------------------------------------------------ ch19-llama3-frequencies


def _llama3(theta, factor, original_length, low_freq_factor=1.0, high_freq_factor=4.0):
    """Llama 3's frequencies from the default ones ``theta`` ``(d/2,)`` (Llama Team 2024): with
    ``lambda_i = 2 pi / theta_i``, kept below ``L0 / high``, divided by ``factor`` above ``L0 / low``, and
    ``(1 - g) theta_i / factor + g theta_i``, ``g = (L0 / lambda_i - low) / (high - low)``, between."""
    wavelength = 2 * math.pi / theta
    g = (original_length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    between = (1 - g) * theta / factor + g * theta
    out = torch.where(wavelength < original_length / high_freq_factor, theta, between)
    return torch.where(wavelength > original_length / low_freq_factor, theta / factor, out)


def _theta(d: int, base: float, dtype=torch.float32) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).to(dtype) / d))  # (d/2,)


def _llama3_cases() -> Cases:
    """(theta (d/2,), factor, original_length, low_freq_factor, high_freq_factor), seeded."""
    g = torch.Generator().manual_seed(1818)
    cases = [
        ("Llama 3.1: d = 128, base 500,000, s = 8, L0 = 8,192", (_theta(128, 500000.0), 8.0, 8192, 1.0, 4.0)),
        ("Llama 3.2: d = 64, base 500,000, s = 32, L0 = 8,192", (_theta(64, 500000.0), 32.0, 8192, 1.0, 4.0)),
        ("the chapter's toy: d = 8, base 300, s = 8, L0 = 32", (_theta(8, 300.0), 8.0, 32, 1.0, 4.0)),
        ("low_freq_factor 2, high_freq_factor 8", (_theta(64, 10000.0), 4.0, 4096, 2.0, 8.0)),
        ("factor 1: nothing changes", (_theta(32, 10000.0), 1.0, 2048, 1.0, 4.0)),
        ("every wavelength shorter than L0 / high: all kept", (_theta(16, 100.0), 8.0, 65536, 1.0, 4.0)),
        ("L0 = 6, shorter than 2 pi: every pair divided", (_theta(16, 1e6), 8.0, 6, 1.0, 4.0)),
        ("float64 theta", (_theta(128, 500000.0, torch.float64), 8.0, 8192, 1.0, 4.0)),
    ]
    for _ in range(3):
        d = 2 * int(torch.randint(4, 65, (1,), generator=g))
        base = round(float(10 ** (3 + 3 * torch.rand(1, generator=g).item())), 1)
        factor = float(torch.randint(2, 33, (1,), generator=g))
        L0 = int(2 ** int(torch.randint(8, 15, (1,), generator=g)))
        cases.append(
            (f"random: d = {d}, base {base:,.0f}, s = {factor:g}, L0 = {L0}", (_theta(d, base), factor, L0, 1.0, 4.0))
        )
    return cases


def _on(got, where: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether ``got`` is a tensor of ``expected``'s shape equal to it (rtol 1e-5) on the entries ``where``, some."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not where.any():
        return False
    return bool(torch.allclose(got[where].double(), expected[where].double(), rtol=1e-5, atol=0.0))


def _regions(theta, factor, L0, low, high):
    """(short, between, long) bool masks of the pairs, and g: the three bands of Llama 3's rule."""
    wavelength = 2 * math.pi / theta
    short, long = wavelength < L0 / high, wavelength > L0 / low
    return short, ~short & ~long, long, (L0 / wavelength - low) / (high - low)


def _swapped(got, theta, s, L0, lo, hi) -> bool:
    short, _, long, _ = _regions(theta, s, L0, lo, hi)
    return s != 1 and _on(got, short, theta / s) and _on(got, long, theta)


def _blend_reversed(got, theta, s, L0, lo, hi) -> bool:
    short, between, long, g = _regions(theta, s, L0, lo, hi)
    return (
        s != 1
        and _on(got, between, g * theta / s + (1 - g) * theta)
        and not _on(got, between, _llama3(theta, s, L0, lo, hi))
    )


def _no_blend(got, theta, s, L0, lo, hi) -> bool:
    short, between, long, _ = _regions(theta, s, L0, lo, hi)
    return (
        s != 1
        and (_on(got, between, theta) or _on(got, between, theta / s))
        and _on(got, short | long, _llama3(theta, s, L0, lo, hi))
    )


llama3_frequencies = _register(
    Check(
        exercise="ch19-llama3-frequencies",
        function="llama3_frequencies",
        cases=_llama3_cases,
        reference=_llama3,
        hint="wavelength = 2 pi / theta; g = (L0 / wavelength - low) / (high - low); the blend is (1 - g) theta / "
        "factor + g theta; torch.where(wavelength < L0 / high, theta, blend), then torch.where(wavelength > L0 / "
        "low, theta / factor, ...): the same shape and dtype as theta",
        covers="Llama 3.1, Llama 3.2, the chapter's toy, other band factors, factor 1, every pair kept, every pair "
        "divided, float64, random sizes",
        forbids=("scaled_frequencies",),
        atol=0.0,
        rtol=1e-5,
        diagnoses=(
            (
                "you divided every frequency by the factor: that is position interpolation; Llama 3 keeps the pairs "
                "of short wavelength, lambda_i < L0 / high_freq_factor",
                lambda got, e, theta, s, *rest: s != 1 and matches(got, theta / s, 1e-5),
            ),
            (
                "you swapped the bands: the short wavelengths (fast pairs) are kept and the long ones (slow pairs) "
                "divided by the factor, not the other way round",
                lambda got, e, *args: _swapped(got, *args),
            ),
            (
                "your blend runs the wrong way: g = 1 at lambda_i = L0 / high (kept, g theta) and 0 at L0 / low "
                "(divided, (1 - g) theta / s); you weighted theta by 1 - g",
                lambda got, e, *args: _blend_reversed(got, *args),
            ),
            (
                "you left out the blend: the wavelengths between L0 / high and L0 / low are neither kept nor divided, "
                "but (1 - g) theta / s + g theta",
                lambda got, e, *args: _no_blend(got, *args),
            ),
        ),
    )
)
