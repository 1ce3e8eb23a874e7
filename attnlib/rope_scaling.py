"""Chapter 19: stretching the context. RoPE's long-context variants, as changes of its frequencies.

A model trained on sequences of ``L0`` tokens (``original_max_position_embeddings``) has seen the
angles ``m theta_i`` for ``m < L0`` only, with RoPE's frequencies
``theta_i = 1 / base^(2i/d)``, ``i = 0 .. d/2 - 1`` (chapter 9; ``d`` is the rotated width). Each
method below stretches the context to ``s L0`` (``s``: the ``factor``) by changing the ``theta_i``,
and two of them also scale ``cos`` and ``sin`` by an attention factor ``a``, so that every score
``q . k`` is multiplied by ``a^2`` (a temperature)::

    linear    theta'_i = theta_i / s                                   position interpolation:
              (Chen et al. 2023, arXiv:2306.15595; kaiokendev 2023)    position m reads as m / s
    dynamic   theta'_i = 1 / base'^(2i/d),                             NTK-aware scaling, recomputed
              base' = base (s L / L0 - (s - 1))^(d / (d - 2))          for the length L = max(seq_len, L0)
              (bloc97, emozilla 2023, on Reddit's r/LocalLLaMA)        (L0 here: max_position_embeddings)
    yarn      theta'_i = theta_i / s  r_i  +  theta_i (1 - r_i),       by frequency band: a pair that turns
              r_i = clamp((i - lo) / (hi - lo), 0, 1),                 more than beta_fast times in L0
              lo, hi = d ln(L0 / (2 pi beta)) / (2 ln base)            tokens is kept, one that turns less
                       for beta = beta_fast, beta_slow                 than beta_slow times is interpolated;
              a = 0.1 ln s + 1                                         and the temperature a
              (Peng et al. 2023, "YaRN", arXiv:2309.00071)             (DeepSeek: mscale(s, m) / mscale(s, m_all))
    llama3    lambda_i = 2 pi / theta_i (the wavelength);              Llama 3.1's bands: short wavelengths
              theta'_i = theta_i           if lambda_i < L0 / high     kept, long ones divided by s,
                       = theta_i / s       if lambda_i > L0 / low      a smooth blend between
                       = (1 - g) theta_i / s + g theta_i,  g = (L0 / lambda_i - low) / (high - low)
              (Llama Team 2024, "The Llama 3 Herd of Models", arXiv:2407.21783)
    longrope  theta'_i = theta_i / lambda_i, lambda = long_factor if seq_len > L0, else short_factor
              a = sqrt(1 + ln s / ln L0), s = max_position_embeddings / L0 unless given
              (Ding et al. 2024, "LongRoPE", arXiv:2402.13753; Phi-3)

:func:`scaled_frequencies` computes them exactly as Hugging Face ``transformers`` does
(``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``, version 5.24): the same float operations
in the same order, so the float32 results are equal to the bit. :class:`RopeScaling` holds a
method's parameters; :meth:`RopeScaling.from_hf` reads them from a ``transformers`` config's RoPE
dict. :class:`attnlib.positions.RoPE` rotates by them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from ._validate import describe, ensure_bool, ensure_choice, ensure_even, ensure_int, ensure_number, fail

__all__ = ["ROPE_TYPES", "RopeScaling", "scaled_frequencies", "attention_factor"]

ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3", "longrope")

# The fields each type cannot do without (transformers' validation: its required keys).
_REQUIRED = {
    "linear": ("factor",),
    "dynamic": ("factor", "max_position_embeddings"),
    "yarn": ("original_max_position_embeddings",),
    "llama3": ("factor", "original_max_position_embeddings"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
}

_POSITIVE = "a positive number"


@dataclass(frozen=True)
class RopeScaling:
    """The parameters of one of RoPE's long-context variants (the module's docstring has the formulas).

    Hashable and immutable: lists of factors are kept as tuples. Checked when made: an unknown
    ``rope_type``, a missing required field or a value of the wrong kind raises ``AttnlibError``.

    Attributes:
        rope_type: ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"llama3"`` or ``"longrope"``
            (default RoPE is no ``RopeScaling``: ``None``).
        factor: ``s``, how many times the context is stretched (linear, dynamic, llama3: required;
            yarn, longrope: ``None`` means ``max_position_embeddings / original_max_position_embeddings``,
            as in ``transformers``).
        original_max_position_embeddings: ``L0``, the length the model was trained on (yarn, llama3,
            longrope: required).
        beta_fast: YaRN: pairs that turn more than ``beta_fast`` times in ``L0`` tokens keep their
            frequency (default 32).
        beta_slow: YaRN: pairs that turn less than ``beta_slow`` times are interpolated (default 1).
        attention_factor: yarn, longrope: ``a``, the factor on ``cos`` and ``sin``; ``None``: the
            paper's value from ``factor``.
        mscale: YaRN (DeepSeek-V3): with ``mscale_all_dim``, ``a = mscale(s, mscale) / mscale(s,
            mscale_all_dim)``, ``mscale(s, m) = 0.1 m ln s + 1``.
        mscale_all_dim: YaRN (DeepSeek-V3): see ``mscale``.
        truncate: YaRN: round ``lo`` down and ``hi`` up to whole dimensions (default True; gpt-oss: False).
        low_freq_factor: Llama 3: wavelengths longer than ``L0 / low_freq_factor`` are divided by ``s``
            (default 1).
        high_freq_factor: Llama 3: wavelengths shorter than ``L0 / high_freq_factor`` are kept (default 4).
        short_factor: LongRoPE: ``d/2`` divisors of the frequencies for sequences up to ``L0``.
        long_factor: LongRoPE: ``d/2`` divisors of the frequencies for longer sequences.
        max_position_embeddings: the extended length: dynamic NTK's ``L0`` (required there), and
            LongRoPE's and YaRN's ``s = max_position_embeddings / L0`` when ``factor`` is None.

    Example:
        >>> RopeScaling("llama3", factor=8.0, original_max_position_embeddings=8192)
        RopeScaling(rope_type='llama3', factor=8.0, original_max_position_embeddings=8192)
        >>> RopeScaling("yarn", factor=4.0)
        Traceback (most recent call last):
            ...
        attnlib._validate.AttnlibError: RopeScaling: expected original_max_position_embeddings for rope_type="yarn", received none
    """

    rope_type: str
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    max_position_embeddings: int | None = None

    def __post_init__(self):
        ensure_choice("rope_type", self.rope_type, ROPE_TYPES)
        for name in ("short_factor", "long_factor"):  # lists (from JSON) -> tuples: hashable
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                object.__setattr__(self, name, tuple(value))
                if not all(_is_positive(v) for v in value):
                    raise fail(name, "a list of positive numbers (one per rotated pair)", describe(value))
            elif value is not None:
                raise fail(name, "None or a list of positive numbers (one per rotated pair)", describe(value))
        missing = [name for name in _REQUIRED[self.rope_type] if getattr(self, name) is None]
        if self.rope_type in ("yarn", "longrope") and self.factor is None and self.max_position_embeddings is None:
            missing.append("factor (or max_position_embeddings)")
        if missing:
            raise fail("RopeScaling", f'{", ".join(missing)} for rope_type="{self.rope_type}"', "none")
        for name in ("factor", "attention_factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor"):
            value = getattr(self, name)
            if value is not None:
                ensure_number(name, value, _POSITIVE, _is_positive)
        for name in ("mscale", "mscale_all_dim"):
            if getattr(self, name) is not None:
                ensure_number(name, getattr(self, name), "None or a number")
        for name in ("original_max_position_embeddings", "max_position_embeddings"):
            if getattr(self, name) is not None:
                ensure_int(name, getattr(self, name))
        ensure_bool("truncate", self.truncate)
        if self.rope_type == "llama3" and not self.low_freq_factor < self.high_freq_factor:
            raise fail(
                "low_freq_factor, high_freq_factor",
                "low_freq_factor < high_freq_factor (the band between them is blended)",
                f"{self.low_freq_factor}, {self.high_freq_factor}",
            )

    def __repr__(self) -> str:
        """Only the fields that differ from their defaults."""
        shown = [f"rope_type={self.rope_type!r}"]
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if value != f.default:
                shown.append(f"{f.name}={value!r}")
        return f"RopeScaling({', '.join(shown)})"

    @property
    def original_length(self) -> int | None:
        """The length up to which ``dynamic`` and ``longrope`` keep their starting frequencies: dynamic
        NTK's ``max_position_embeddings``, LongRoPE's ``original_max_position_embeddings`` (None: the others,
        whose frequencies do not depend on the length)."""
        return {"dynamic": self.max_position_embeddings, "longrope": self.original_max_position_embeddings}.get(
            self.rope_type
        )

    @classmethod
    def from_hf(
        cls, params: dict | None, max_position_embeddings: int, original_max_position_embeddings: int | None = None
    ) -> RopeScaling | None:
        """A ``RopeScaling`` from a ``transformers`` config's RoPE dict, or None for default RoPE.

        Args:
            params: ``config.rope_parameters`` (transformers 5) or ``config.rope_scaling``
                (transformers 4; None there means default RoPE). The type is ``rope_type`` or the legacy
                ``type``; keys that are no scaling parameter (``rope_theta``, ``partial_rotary_factor``)
                are ignored.
            max_position_embeddings: the config's ``max_position_embeddings``.
            original_max_position_embeddings: the config's top-level attribute of that name if it has
                one (Phi-3 keeps it there): it wins over the dict's, as in ``transformers``. Without either,
                llama3, yarn and longrope take ``max_position_embeddings``, as ``transformers`` does.

        Example:
            >>> RopeScaling.from_hf({"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}, 131072)
            RopeScaling(rope_type='linear', factor=8.0, max_position_embeddings=131072)
            >>> RopeScaling.from_hf({"type": "default", "rope_theta": 10000.0}, 2048) is None
            True
        """
        if params is None:
            return None
        if not isinstance(params, dict):
            raise fail("params", "a dict (a config's rope_parameters or rope_scaling) or None", describe(params))
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type == "default":
            return None
        if rope_type not in ROPE_TYPES:
            raise fail(
                "rope_type",
                " or ".join(f'"{t}"' for t in ("default",) + ROPE_TYPES) + " (attnlib's RoPE scalings)",
                f"{rope_type!r}",
            )
        ensure_int("max_position_embeddings", max_position_embeddings)
        original = original_max_position_embeddings or params.get("original_max_position_embeddings")
        if original is None and rope_type in ("llama3", "yarn", "longrope"):
            original = max_position_embeddings  # transformers' standardize_rope_params does the same
        known = {f.name for f in fields(cls)} - {"rope_type", "original_max_position_embeddings"}
        values = {k: v for k, v in params.items() if k in known and v is not None}
        for beta in ("beta_fast", "beta_slow"):  # transformers: `params.get(beta) or default`
            if beta in values and not values[beta]:
                del values[beta]
        values["max_position_embeddings"] = max_position_embeddings
        return cls(rope_type, original_max_position_embeddings=original, **values)


def _is_positive(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) and x > 0


# Each type: (d, base, scaling, seq_len, device, dtype) -> inverse frequencies (d/2,). The float operations
# are transformers', in their order; comments give the formula.


def _default(d, base, device, dtype):
    """theta_i = 1 / base^(2i/d)."""
    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).to(device=device, dtype=dtype) / d))


def _linear(d, base, s: RopeScaling, seq_len, device, dtype):
    """theta_i / s."""
    return _default(d, base, device, dtype) / s.factor


def _dynamic(d, base, s: RopeScaling, seq_len, device, dtype):
    """1 / base'^(2i/d), base' = base (s L / L0 - (s - 1))^(d / (d - 2)), L = max(seq_len, L0).

    ``seq_len`` may be an int (transformers' init: Python floats) or a 0-d integer tensor (its forward
    pass, ``max(position_ids) + 1``: then ``base'`` is computed in float32 tensors, as there)."""
    L0, factor = s.max_position_embeddings, s.factor
    if seq_len is None:
        L = L0
    elif isinstance(seq_len, torch.Tensor):
        L = torch.maximum(seq_len, torch.tensor(L0, dtype=seq_len.dtype, device=seq_len.device))
    else:
        L = max(seq_len, L0)
    base = base * ((factor * L / L0) - (factor - 1)) ** (d / (d - 2))
    return _default(d, base, device, dtype)


def _yarn(d, base, s: RopeScaling, seq_len, device, dtype):
    """theta_i / s r_i + theta_i (1 - r_i), r_i = clamp((i - lo) / (hi - lo), 0, 1)."""
    L0 = s.original_max_position_embeddings

    def band_edge(rotations):  # the dimension 2i whose pair turns `rotations` times in L0 tokens
        return (d * math.log(L0 / (rotations * 2 * math.pi))) / (2 * math.log(base))

    lo, hi = band_edge(s.beta_fast), band_edge(s.beta_slow)
    if s.truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001  # no zero width
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)  # r_i
    kept = 1 - ramp.to(device=device, dtype=dtype)  # 1 - r_i: the share of theta_i kept as it is

    pos_freqs = base ** (torch.arange(0, d, 2).to(device=device, dtype=dtype) / d)  # 1 / theta_i
    extrapolated = 1.0 / pos_freqs  # theta_i
    interpolated = 1.0 / (_factor(s) * pos_freqs)  # theta_i / s
    return interpolated * (1 - kept) + extrapolated * kept


def _llama3(d, base, s: RopeScaling, seq_len, device, dtype):
    """Wavelengths below L0 / high kept, above L0 / low divided by s, blended between."""
    theta = _default(d, base, device, dtype)
    factor, low, high, L0 = s.factor, s.low_freq_factor, s.high_freq_factor, s.original_max_position_embeddings
    wavelength = 2 * math.pi / theta
    scaled = torch.where(wavelength > L0 / low, theta / factor, theta)  # long wavelengths: theta / s
    g = (L0 / wavelength - low) / (high - low)  # 0 at L0 / low, 1 at L0 / high
    blended = (1 - g) * scaled / factor + g * scaled
    between = ~(wavelength < L0 / high) * ~(wavelength > L0 / low)
    return torch.where(between, blended, scaled)


def _longrope(d, base, s: RopeScaling, seq_len, device, dtype):
    """theta_i / lambda_i, lambda = long_factor past L0, short_factor up to it."""
    long = seq_len is not None and bool(seq_len) and seq_len > s.original_max_position_embeddings
    factors = s.long_factor if long else s.short_factor
    if len(factors) != d // 2:
        name = "long_factor" if long else "short_factor"
        raise fail(name, f"d/2 = {d // 2} numbers (one per rotated pair of d = {d})", f"{len(factors)}")
    ext_factors = torch.tensor(factors, dtype=dtype, device=device)
    return 1.0 / (ext_factors * base ** (torch.arange(0, d, 2, dtype=torch.int64, device=device).to(dtype) / d))


_FREQUENCIES = {"linear": _linear, "dynamic": _dynamic, "yarn": _yarn, "llama3": _llama3, "longrope": _longrope}


def _factor(s: RopeScaling) -> float:
    """s: the given factor, or the extended length over the original one (Phi-3 gives none)."""
    return s.max_position_embeddings / s.original_max_position_embeddings if s.factor is None else s.factor


def attention_factor(scaling: RopeScaling | None) -> float:
    """``a``, the factor on ``cos`` and ``sin`` (every score is multiplied by ``a^2``): 1.0 but for YaRN and
    LongRoPE, whose given ``attention_factor`` wins over the paper's value::

        yarn      a = 0.1 ln s + 1                            (1 for s <= 1)
                  a = mscale(s, mscale) / mscale(s, mscale_all_dim),  mscale(s, m) = 0.1 m ln s + 1
        longrope  a = sqrt(1 + ln s / ln L0)                  (1 for s <= 1)

    Example:
        >>> round(attention_factor(RopeScaling("yarn", factor=4.0, original_max_position_embeddings=32768)), 6)
        1.138629
    """
    if scaling is None or scaling.rope_type not in ("yarn", "longrope"):
        return 1.0
    if scaling.attention_factor is not None:
        return scaling.attention_factor
    factor = _factor(scaling)
    if scaling.rope_type == "longrope":
        if factor <= 1.0:
            return 1.0
        return math.sqrt(1 + math.log(factor) / math.log(scaling.original_max_position_embeddings))

    def mscale(scale, m=1):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if scaling.mscale and scaling.mscale_all_dim:
        return float(mscale(factor, scaling.mscale) / mscale(factor, scaling.mscale_all_dim))
    return mscale(factor)


def scaled_frequencies(
    d: int,
    base: float,
    scaling: RopeScaling | None,
    seq_len: int | torch.Tensor | None = None,
    device=None,
    dtype=torch.float32,
) -> tuple[torch.Tensor, float]:
    """RoPE's inverse frequencies ``theta'_i`` ``(d/2,)`` under ``scaling``, and its attention factor ``a``.

    Equal to the bit, in float32, to ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config,
    device, seq_len)`` for the same config (and to its default RoPE for ``scaling=None``).

    Args:
        d: the rotated width, even (``head_dim``, or a partial rotary's ``int(head_dim * partial_rotary_factor)``).
        base: RoPE's base ``theta`` (``rope_theta``).
        scaling: the variant, or None for default RoPE (``theta_i = 1 / base^(2i/d)``).
        seq_len: the length of the sequence being processed: dynamic NTK's base grows with it past
            ``max_position_embeddings``; LongRoPE takes its long factors past ``original_max_position_embeddings``.
            The others ignore it. None: the starting frequencies (transformers' init).
        device, dtype: where and in which float dtype to compute (float32: transformers').

    Returns:
        ``(theta', a)``: a tensor ``(d/2,)`` and a float (1.0 for default, linear, dynamic and llama3).

    Example:
        >>> llama31 = RopeScaling("llama3", factor=8.0, original_max_position_embeddings=8192)
        >>> theta, a = scaled_frequencies(128, 500000.0, llama31)
        >>> theta.shape, a
        (torch.Size([64]), 1.0)
        >>> default, _ = scaled_frequencies(128, 500000.0, None)
        >>> torch.equal(theta[:20], default[:20]), torch.equal(theta[-10:], default[-10:] / 8)   # short / long waves
        (True, True)
    """
    ensure_even("d", ensure_int("d", d))
    ensure_number("base", base, "a positive number", lambda b: b > 0)
    if scaling is None:
        return _default(d, base, device, dtype), 1.0
    if not isinstance(scaling, RopeScaling):
        raise fail("scaling", "None or an attnlib RopeScaling", describe(scaling))
    return _FREQUENCIES[scaling.rope_type](d, base, scaling, seq_len, device, dtype), attention_factor(scaling)
