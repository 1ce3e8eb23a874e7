"""Input checks shared by every attnlib module.

Every public function checks its arguments and raises :class:`AttnlibError`
(a ``ValueError``) whose message names the argument, what was expected and
what was received. Keeping the checks and their wording in one place keeps them
consistent, and keeps the other modules' functions short: each opens with a call
or two of the helpers below, and then the math.

The helpers are grouped by the kind of argument they check:

1. errors: :func:`fail`, :func:`describe`;
2. Python values: flags, ints, numbers, choices, instances;
3. tensors: type, dtype, rank, integer values in a range, an axis;
4. sizes: heads that divide the width, block sizes, cached tokens.

The checks of arguments that belong to one function or one layer are built from these:
queries and keys, masks, token ids, KV caches, positions and training in
``attnlib/_checks.py``; layers and models in ``attnlib/_layer_checks.py``; the models that
``from_hf`` converts in ``attnlib/_hf_checks.py``.

``ensure_<kind>(name, x, ...)`` checks one argument and returns it;
``check_<what>(...)`` checks several arguments that depend on one another.
"""

from __future__ import annotations

import torch

# 1. Errors ---------------------------------------------------------------------------------------


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


# 2. Python values --------------------------------------------------------------------------------


def ensure_bool(name: str, x) -> bool:
    """Check that a flag is ``True`` or ``False`` (not 0, 1 or None)."""
    if not isinstance(x, bool):
        raise fail(name, "True or False", describe(x))
    return x


def ensure_int(name: str, n, min: int = 1, why: str | None = None) -> int:
    """Check that ``n`` is a Python int ``>= min`` (bool is not accepted).

    The message reads "a positive int" for ``min=1`` (the default), "an int >= <min>"
    otherwise, followed by ``(why)`` when given.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < min:
        expected = "a positive int" if min == 1 else f"an int >= {min}"
        raise fail(name, f"{expected} ({why})" if why else expected, describe(n))
    return n


def ensure_even(name: str, n: int) -> int:
    """Check that the int ``n`` is even (dimensions that come in pairs)."""
    if n % 2:
        raise fail(name, "an even number (the dimensions come in pairs)", f"{n}")
    return n


def ensure_number(name: str, x, expected: str, ok=None):
    """Check that ``x`` is an int or a float (not a bool) and, if given, that ``ok(x)`` is true."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (ok is not None and not ok(x)):
        raise fail(name, expected, describe(x))
    return x


def ensure_choice(name: str, x, choices: tuple[str, ...]) -> str:
    """Check that ``x`` is one of the strings ``choices``: 'expected "a" or "b"'."""
    if x not in choices:
        raise fail(name, " or ".join(f'"{c}"' for c in choices), describe(x))
    return x


def ensure_instance(name: str, x, cls, expected: str):
    """Check that ``x`` is an instance of ``cls`` (a class or a tuple of classes)."""
    if not isinstance(x, cls):
        raise fail(name, expected, describe(x))
    return x


def ensure_callable(name: str, fn, expected: str):
    """Check that ``fn`` can be called."""
    if not callable(fn):
        raise fail(name, expected, describe(fn))
    return fn


# 3. Tensors --------------------------------------------------------------------------------------


def ensure_tensor(name: str, x, min_dim: int = 0) -> torch.Tensor:
    """Check that ``x`` is a tensor with at least ``min_dim`` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise fail(name, "a torch.Tensor", describe(x))
    if x.dim() < min_dim:
        raise fail(name, f"a tensor with at least {min_dim} dimensions", describe(x))
    return x


def ensure_float(name: str, x, min_dim: int = 0, expected: str | None = None) -> torch.Tensor:
    """Check that ``x`` is a floating-point tensor, then that it has at least ``min_dim`` dimensions
    (``expected`` replaces the message "a tensor with at least <min_dim> dimensions")."""
    ensure_tensor(name, x)
    if not x.is_floating_point():
        raise fail(name, "a floating-point tensor", describe(x))
    if x.dim() < min_dim:
        raise fail(name, expected or f"a tensor with at least {min_dim} dimensions", describe(x))
    return x


def ensure_dim(name: str, x, dim: int, expected: str) -> torch.Tensor:
    """Check that ``x`` is a tensor with exactly ``dim`` dimensions; ``expected`` names its shape."""
    ensure_tensor(name, x)
    if x.dim() != dim:
        raise fail(name, expected, describe(x))
    return x


def _is_integer(x: torch.Tensor) -> bool:
    """Whether a tensor holds integers: not floating point, complex or bool."""
    return not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)


def ensure_int_tensor(name: str, x, expected: str, dim: int | None = None) -> torch.Tensor:
    """Check that ``x`` is an integer tensor (not float, complex or bool), with ``dim`` dimensions if given."""
    ensure_tensor(name, x)
    if (dim is not None and x.dim() != dim) or not _is_integer(x):
        raise fail(name, expected, describe(x))
    return x


def ensure_bool_tensor(name: str, x, expected: str) -> torch.Tensor:
    """Check that ``x`` is a tensor of dtype ``torch.bool``."""
    ensure_tensor(name, x)
    if x.dtype != torch.bool:
        raise fail(name, expected, describe(x))
    return x


def ensure_in_range(name: str, x: torch.Tensor, low: int, high: int, expected: str, what: str = "") -> torch.Tensor:
    """Check that every entry of the integer tensor ``x`` is in ``[low, high]``.

    The message receives the first entry outside, after ``what`` (e.g. ``"id "``).
    """
    if x.numel() and (int(x.min()) < low or int(x.max()) > high):
        bad = x[(x < low) | (x > high)].flatten()[0].item()
        raise fail(name, expected, f"{what}{bad}")
    return x


def ensure_axis(name: str, dim, x: torch.Tensor) -> int:
    """Check that ``dim`` is an int that indexes an axis of ``x`` (a 0-D ``x`` counts as 1-D)."""
    n = max(x.dim(), 1)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -n <= dim < n:
        raise fail(name, f"an int in [{-n}, {n - 1}] for a {x.dim()}-D x", describe(dim))
    return dim


def ensure_float_dtype(name: str, dtype, expected: str, complex_ok: bool = False) -> torch.dtype:
    """Check that ``dtype`` is a floating-point ``torch.dtype`` (or complex, if ``complex_ok``)."""
    if not isinstance(dtype, torch.dtype) or not (dtype.is_floating_point or complex_ok and dtype.is_complex):
        raise fail(name, expected, describe(dtype))
    return dtype


# 4. Sizes ----------------------------------------------------------------------------------------


def ensure_divisible(name: str, n: int, of_name: str, of: int, why: str) -> int:
    """Check that ``n`` is a multiple of ``of``: 'expected a multiple of <of_name>=<of> (<why>)'."""
    if n % of:
        raise fail(name, f"a multiple of {of_name}={of} ({why})", f"{name}={n}")
    return n


def ensure_heads(d_model: int, n_heads) -> int:
    """Check that ``n_heads`` is a positive int that divides ``d_model``; return ``n_heads``."""
    ensure_int("n_heads", n_heads)
    ensure_divisible("d_model", d_model, "n_heads", n_heads, "d_head = d_model / n_heads")
    return n_heads


def ensure_kv_heads(n_heads: int, n_kv_heads) -> int:
    """``n_kv_heads`` filled in (None -> n_heads) and checked: a positive divisor of ``n_heads``."""
    if n_kv_heads is None:
        return n_heads
    ensure_int("n_kv_heads", n_kv_heads)
    if n_heads % n_kv_heads:
        raise fail(
            "n_kv_heads",
            f"a divisor of n_heads={n_heads} (each key/value head serves n_heads / n_kv_heads query heads)",
            f"n_kv_heads={n_kv_heads}",
        )
    return n_kv_heads


def check_head_counts(d_model: int, n_heads, n_kv_heads, d_head=None) -> None:
    """Optional head counts: ``n_heads`` divides ``d_model`` (unless ``d_head`` is given), ``n_kv_heads``
    needs ``n_heads`` and divides it; ``d_head`` needs ``n_heads``."""
    if (n_kv_heads is not None or d_head is not None) and n_heads is None:
        given = "n_kv_heads" if n_kv_heads is not None else "d_head"
        raise fail("n_heads", f"the number of query heads when {given} is given", "None")
    if d_head is not None:
        ensure_int("d_head", d_head)
        ensure_int("n_heads", n_heads)
    elif n_heads is not None:
        ensure_heads(d_model, n_heads)
    if n_kv_heads is not None:
        ensure_kv_heads(n_heads, n_kv_heads)


def check_layer_sizes(T_q, d_model, n_heads, B, T_k) -> tuple[int, int, int, int, int]:
    """Check the sizes of one attention layer; return ``(B, T_q, T_k, d_model, n_heads)``, ``T_k`` filled in."""
    ensure_int("T_q", T_q)
    ensure_int("d_model", d_model)
    ensure_int("n_heads", n_heads)
    ensure_int("B", B)
    T_k = T_q if T_k is None else ensure_int("T_k", T_k)
    ensure_heads(d_model, n_heads)
    return B, T_q, T_k, d_model, n_heads


def ensure_block_size(block_size) -> int:
    """Check the side of a tile of ``tiled_attention``: a positive int."""
    return ensure_int("block_size", block_size, why="the number of queries and of keys in one tile")


def check_cached_tokens(T, context_length: int) -> int:
    """``T`` cached tokens, ``1 .. context_length``; None means ``context_length``."""
    T = context_length if T is None else ensure_int("T", T)
    if T > context_length:
        raise fail("T", f"at most context_length = {context_length} tokens", f"T = {T}")
    return T
