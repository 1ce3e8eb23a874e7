"""Input checks shared by every attnlib module.

Every public function checks its arguments and raises :class:`AttnlibError`
(a ``ValueError``) whose message names the argument, what was expected and
what was received. Keeping the wording in one place keeps it consistent.
"""
from __future__ import annotations

import torch


class AttnlibError(ValueError):
    """Bad input to an attnlib function: the message says expected vs received."""


def fail(name: str, expected: str, received: str) -> AttnlibError:
    """Build the standard error: ``<name>: expected <expected>, received <received>``."""
    return AttnlibError(f"{name}: expected {expected}, received {received}")


def describe(x) -> str:
    """A short description of a value for error messages: type, shape and dtype."""
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"


def ensure_tensor(name: str, x, min_dim: int = 0) -> torch.Tensor:
    """Check that ``x`` is a tensor with at least ``min_dim`` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise fail(name, "a torch.Tensor", describe(x))
    if x.dim() < min_dim:
        raise fail(name, f"a tensor with at least {min_dim} dimensions", describe(x))
    return x


def ensure_float(name: str, x: torch.Tensor) -> torch.Tensor:
    """Check that ``x`` is a floating-point tensor."""
    ensure_tensor(name, x)
    if not x.is_floating_point():
        raise fail(name, "a floating-point tensor", describe(x))
    return x


def ensure_positive_int(name: str, n) -> int:
    """Check that ``n`` is a positive Python int (bool is not accepted)."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise fail(name, "a positive int", describe(n))
    return n
