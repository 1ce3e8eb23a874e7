"""Checkers for the coding exercises: instant, specific feedback.

Each coding exercise in a chapter ends with a call such as
``check.one_hot_rows(one_hot_rows)``. The checker runs the student's function
on random and edge cases (empty and size-1 axes, large values, ...) and compares
the results with attnlib's reference. It prints one line when every case passes,
or raises an ``AssertionError`` whose message gives the failing case, its input,
what was expected, what came back and a hint.

A checker is a :class:`Check`: its cases, the reference, a hint. They are
registered in ``CHECKS`` under the exercise's label (``ch01-one-hot``), with the
name of the function it checks, so that ``python -m attnlib.homework grade``
can grade a notebook whatever its check cells say: it runs the student's
function on the cases in the notebook's kernel and compares the results here.

Writing a checker for a new exercise::

    my_function = _register(Check(
        exercise="ch02-...", function="my_function",
        cases=_my_cases,             # () -> [(label, args), ...], seeded
        reference=attnlib_function,  # same signature as the student's function
        hint="what to look at when the values are wrong",
        covers="the edge cases it tries, for the success line"))
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .attention import attention as _attention
from .attention import attention_weights
from .embedding import embed, one_hot
from .masks import causal_mask, padding_mask
from .model import GPTConfig, TransformerBlock
from .multihead import merge_heads, split_heads
from .params import count_params
from .scores import qk_scores
from .softmax import softmax as _softmax

Cases = list[tuple[str, tuple]]


def _show(x: Any) -> str:
    """Short text for a value in a message: small tensors in full, big ones by shape."""
    if isinstance(x, torch.Tensor):
        if x.numel() <= 24:
            return f"tensor({x.tolist()}, shape={tuple(x.shape)}, dtype={x.dtype})"
        return f"tensor of shape {tuple(x.shape)}, dtype {x.dtype}"
    if isinstance(x, tuple):
        return "(" + ", ".join(_show(v) for v in x) + ")"
    return repr(x)


def _mismatch(expected: Any, got: Any, atol: float, rtol: float) -> str | None:
    """Why ``got`` does not match ``expected`` (None if it does): type, shape, dtype, values."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple) or len(got) != len(expected):
            return (f"expected a tuple of {len(expected)} values, got {type(got).__name__}"
                    + (f" of {len(got)}" if isinstance(got, tuple) else ""))
        for i, (e, g) in enumerate(zip(expected, got)):
            why = _mismatch(e, g, atol, rtol)
            if why:
                return f"in item {i} of the returned tuple: {why}"
        return None
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a torch.Tensor, got {type(got).__name__} (return a tensor, not a list or array)"
        if got.shape != expected.shape:
            return f"wrong shape\n  expected shape: {tuple(expected.shape)}\n  got shape:      {tuple(got.shape)}"
        if expected.dtype == torch.bool:
            if got.dtype != torch.bool:
                return f"expected a bool tensor, got dtype {got.dtype}"
            same = torch.equal(got.cpu(), expected)
        else:
            if not got.is_floating_point():
                return (f"expected a floating-point tensor, got dtype {got.dtype} "
                        "(use .float() or create it with dtype=torch.float32)")
            got = got.detach().to("cpu", expected.dtype)
            if torch.isnan(got).any() and not torch.isnan(expected).any():
                return f"wrong values: your result contains NaN\n  expected: {_show(expected)}\n  got:      {_show(got)}"
            same = torch.allclose(got, expected, atol=atol, rtol=rtol)
        if not same:
            return f"wrong values\n  expected: {_show(expected)}\n  got:      {_show(got)}"
        return None
    if isinstance(expected, (int, float)):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"expected a number ({type(expected).__name__}), got {type(got).__name__}"
        if isinstance(expected, int) and got != expected or not math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
            return f"wrong value\n  expected: {expected!r}\n  got:      {got!r}"
        return None
    return None if got == expected else f"wrong value\n  expected: {expected!r}\n  got:      {got!r}"


def compare(name: str, fn: Callable, cases: Cases, reference: Callable, hint: str,
            atol: float = 1e-5, rtol: float = 1e-5) -> int:
    """Run ``fn`` and ``reference`` on every case; raise a helpful AssertionError on the first
    difference. Return the number of cases."""
    if not callable(fn):
        raise AssertionError(f"{name}: expected a function, received {_show(fn)}. "
                             f"Pass the function itself, e.g. check.{name}({name}).")
    for number, (label, args) in enumerate(cases, start=1):
        expected = reference(*args)
        where = f"  case: {label} [{number} of {len(cases)}]\n  input: {', '.join(_show(a) for a in args)}\n"
        try:
            got = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        except NotImplementedError:
            raise AssertionError(f"{name}: not implemented yet (it raised NotImplementedError). "
                                 "Replace the raise NotImplementedError(...) line with your code.") from None
        except Exception as e:  # the student's code failed: say where and how
            raise AssertionError(f"{name}: your function raised {type(e).__name__}: {e}\n"
                                 f"{where}  hint: {hint}") from None
        why = _mismatch(expected, got, atol, rtol)
        if why:
            first, _, rest = why.partition("\n")
            raise AssertionError(f"{name}: {first}\n{where}{rest + chr(10) if rest else ''}  hint: {hint}")
    return len(cases)


@dataclass(frozen=True)
class Check:
    """The checker of one coding exercise; call it with the student's function."""

    exercise: str            # the exercise's label in the chapter, e.g. "ch01-one-hot"
    function: str            # the name of the function the student writes
    cases: Callable[[], Cases]
    reference: Callable
    hint: str
    covers: str              # the edge cases tried, shown on success
    points: int = 1
    atol: float = 1e-5
    rtol: float = 1e-5

    def __call__(self, fn: Callable) -> None:
        n = compare(self.function, fn, self.cases(), self.reference, self.hint, self.atol, self.rtol)
        print(f"check.{self.function}: all {n} cases passed ({self.covers}).")


CHECKS: dict[str, Check] = {}


def _register(check: Check) -> Check:
    CHECKS[check.exercise] = check
    return check


# ---------------------------------------------------------------- chapter 1

def _one_hot_cases() -> Cases:
    g = torch.Generator().manual_seed(1)
    cases = [
        ("the sentence of chapter 1", (torch.tensor([0, 1, 2, 3, 4, 5]), 6)),
        ("repeated ids, id V-1 included", (torch.tensor([3, 3, 0, 9]), 10)),
        ("a single token", (torch.tensor([0]), 1)),
        ("no tokens at all (T = 0)", (torch.zeros(0, dtype=torch.long), 5)),
        ("a batch (B, T) = (2, 3)", (torch.tensor([[1, 0, 2], [2, 2, 1]]), 3)),
    ]
    for i in range(5):
        V = int(torch.randint(1, 50, (1,), generator=g))
        shape = tuple(int(s) for s in torch.randint(1, 6, (1 + i % 2,), generator=g))
        cases.append((f"random ids, shape {shape}, V={V}", (torch.randint(0, V, shape, generator=g), V)))
    return cases


one_hot_rows = _register(Check(
    exercise="ch01-one-hot", function="one_hot_rows", cases=_one_hot_cases, reference=one_hot,
    hint="row i has a single 1, in column ids[i]; the result has one more axis, of size V",
    covers="shapes (T,) and (B, T), T = 0, V = 1"))


def _mean_embedding_cases() -> Cases:
    g = torch.Generator().manual_seed(2)
    cases = [
        ("one token", (torch.tensor([2]), torch.arange(8.0).reshape(4, 2))),
        ("a token repeated", (torch.tensor([1, 1, 3]), torch.arange(8.0).reshape(4, 2))),
        ("large values", (torch.tensor([0, 1]), torch.tensor([[1e6, -1e6], [1e6, 3e6]]))),
    ]
    for _ in range(5):
        V, d, T = (int(s) for s in torch.randint(1, 20, (3,), generator=g))
        cases.append((f"random, T={T}, V={V}, d={d}",
                      (torch.randint(0, V, (T,), generator=g), torch.randn(V, d, generator=g))))
    return cases


def _mean_embedding(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return embed(ids, table).mean(dim=0)  # (T, d_model) -> (d_model,)


mean_embedding = _register(Check(
    exercise="ch01-mean-embedding", function="mean_embedding", cases=_mean_embedding_cases,
    reference=_mean_embedding, atol=1e-4,
    hint="average the rows table[ids]; written as a product it is (counts / T) @ table",
    covers="repeated tokens, T = 1, large values"))


# ---------------------------------------------------------------- chapter 2

def _scores_cases() -> Cases:
    g = torch.Generator().manual_seed(3)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def randint(bound, *shape):  # whole numbers in [-bound, bound], as floats
        return torch.randint(-bound, bound + 1, shape, generator=g).float()

    x_ill = torch.tensor([[1.0, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]])       # Illustrated: Self-Attention
    w_query = torch.tensor([[1.0, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]])
    w_key = torch.tensor([[0.0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]])
    cases = [
        ("the worked example of Illustrated: Self-Attention", (x_ill, w_query, w_key)),
        ("W_Q != W_K: S is not symmetric, so Q K^T and K Q^T differ", (randn(3, 4), randn(4, 2), randn(4, 2))),
        ("a single token (T = 1)", (randn(1, 4), randn(4, 3), randn(4, 3))),
        ("d_k = 1", (randn(5, 3), randn(3, 1), randn(3, 1))),
        ("d_k > d_model", (randn(4, 2), randn(2, 5), randn(2, 5))),
        ("a batch (B, T, d_model) = (2, 3, 4)", (randn(2, 3, 4), randn(4, 3), randn(4, 3))),
        ("two batch axes (2, 3, 5, 4)", (randn(2, 3, 5, 4), randn(4, 2), randn(4, 2))),
        # whole numbers stay exact in float32 in any summation order (all sums < 2**24)
        ("large values (whole numbers up to 50)", (randint(50, 4, 3), randint(10, 3, 2), randint(10, 3, 2))),
    ]
    for i in range(5):
        T, d_model, d_k = (int(s) for s in torch.randint(1, 9, (3,), generator=g))
        batch = (int(torch.randint(1, 4, (1,), generator=g)),) if i % 2 else ()
        cases.append((f"random, x of shape {batch + (T, d_model)}, d_k={d_k}",
                      (randn(*batch, T, d_model), randn(d_model, d_k), randn(d_model, d_k))))
    return cases


def _scores(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor) -> torch.Tensor:
    return qk_scores(x @ w_q, x @ w_k, scale=1.0)  # (..., T, d_k) @ (..., d_k, T) -> (..., T, T)


scores = _register(Check(
    exercise="ch02-scores", function="scores", cases=_scores_cases, reference=_scores,
    atol=1e-4, rtol=1e-4,
    hint="Q = x @ w_q and K = x @ w_k are (..., T, d_k); S = Q @ K.transpose(-2, -1) (not K.T, which "
         "reverses every axis of a batch); row i is query i; no 1/sqrt(d_k) in this exercise",
    covers="the worked example, T = 1, d_k = 1, d_k > d_model, batch axes, large values"))


# ---------------------------------------------------------------- chapter 3

def _scaled_scores_cases() -> Cases:
    g = torch.Generator().manual_seed(31)
    cases = [
        ("d_k = 1: divide by sqrt(1) = 1", (torch.tensor([[2.0], [-1.0]]), torch.tensor([[3.0], [0.5], [-2.0]]))),
        ("d_k = 4: divide by 2", (torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 2.0]]))),
        ("T_q = 3, T_k = 5, d_k = 2 (all different)", (torch.randn(3, 2, generator=g), torch.randn(5, 2, generator=g))),
        ("one query, one key (T_q = T_k = 1), d_k = 64", (torch.randn(1, 64, generator=g), torch.randn(1, 64, generator=g))),
        ("a batch (B, T_q, d_k) = (2, 3, 4) with T_k = 6", (torch.randn(2, 3, 4, generator=g), torch.randn(2, 6, 4, generator=g))),
        ("GPT-2 heads (B, n_heads, T, d_k) = (1, 12, 5, 64)", (torch.randn(1, 12, 5, 64, generator=g), torch.randn(1, 12, 5, 64, generator=g))),
        ("large values (1e3)", (1e3 * torch.randn(4, 8, generator=g), 1e3 * torch.randn(3, 8, generator=g))),
        ("float64 inputs", (torch.randn(2, 5, dtype=torch.float64, generator=g), torch.randn(4, 5, dtype=torch.float64, generator=g))),
    ]
    for i in range(5):
        T_q, T_k, d_k = (int(s) for s in torch.randint(1, 9, (3,), generator=g))
        batch = tuple(int(s) for s in torch.randint(1, 4, (i % 3,), generator=g))
        cases.append((f"random, batch {batch}, T_q={T_q}, T_k={T_k}, d_k={d_k}",
                      (torch.randn(*batch, T_q, d_k, generator=g), torch.randn(*batch, T_k, d_k, generator=g))))
    return cases


scaled_scores = _register(Check(
    exercise="ch03-scaled-scores", function="scaled_scores", cases=_scaled_scores_cases,
    reference=qk_scores,
    hint="q @ k.transpose(-2, -1) (swap only the last two axes), divided by the square root "
         "of d_k = q.shape[-1], the length of each vector (not by d_k, not by T_q or T_k)",
    covers="d_k = 1, T_q != T_k, T = 1, batch and head axes, large values, float64"))


def _unit_variance_scale_cases() -> Cases:
    g = torch.Generator().manual_seed(32)
    cases = [
        ("unit-variance entries, d_k = 64 (GPT-2): 1/8", (64, 1.0, 1.0)),
        ("d_k = 1, unit variance: 1", (1, 1.0, 1.0)),
        ("sigma_q = 2, sigma_k = 1, d_k = 64", (64, 2.0, 1.0)),
        ("sigma_q = 1, sigma_k = 0.5, d_k = 16", (16, 1.0, 0.5)),
        ("small entries: sigma_q = sigma_k = 0.02, d_k = 128", (128, 0.02, 0.02)),
    ]
    for _ in range(5):
        d_k = int(torch.randint(1, 1025, (1,), generator=g))
        s_q, s_k = (round(float(s), 3) for s in 0.1 + 3 * torch.rand(2, generator=g))
        cases.append((f"random: d_k={d_k}, sigma_q={s_q}, sigma_k={s_k}", (d_k, s_q, s_k)))
    return cases


def _unit_variance_scale(d_k: int, sigma_q: float, sigma_k: float) -> float:
    # Var(q . k) = d_k * sigma_q^2 * sigma_k^2; the scale divides by its square root
    return 1.0 / (sigma_q * sigma_k * math.sqrt(d_k))


unit_variance_scale = _register(Check(
    exercise="ch03-unit-variance-scale", function="unit_variance_scale",
    cases=_unit_variance_scale_cases, reference=_unit_variance_scale, atol=0.0, rtol=1e-6,
    hint="each product q_i k_i has variance sigma_q^2 * sigma_k^2 and d_k of them add up; "
         "the scale is 1 / (standard deviation of q . k)",
    covers="d_k = 1, GPT-2's d_k = 64, sigma_q != sigma_k, small entries"))


# ---------------------------------------------------------------- chapter 4

def _causal_weights_cases() -> Cases:
    g = torch.Generator().manual_seed(4)
    eye2 = torch.eye(2)
    cases = [
        ("T = 2, q = k = identity: token 0 sees only itself", (eye2, eye2)),
        ("a single token (T = 1)", (torch.randn(1, 3, generator=g), torch.randn(1, 3, generator=g))),
        ("negative scores, so a masked score of 0 would beat them",
         (torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([[-1.0], [-2.0], [-3.0]]))),
        ("batch dims (B, n_heads, T, d_k) = (2, 3, 4, 5)",
         (torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 3, 4, 5, generator=g))),
        ("large values (scores in the thousands)",
         (100 * torch.randn(3, 2, generator=g), 100 * torch.randn(3, 2, generator=g))),
    ]
    for i in range(5):
        T, d = (int(s) for s in torch.randint(1, 9, (2,), generator=g))
        batch = tuple(int(s) for s in torch.randint(1, 4, (i % 3,), generator=g))
        shape = batch + (T, d)
        cases.append((f"random, shape {shape}",
                      (torch.randn(shape, generator=g), torch.randn(shape, generator=g))))
    return cases


def _causal_attention_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return attention_weights(q, k, is_causal=True)  # (..., T, T)


causal_attention_weights = _register(Check(
    exercise="ch04-causal-weights", function="causal_attention_weights",
    cases=_causal_weights_cases, reference=_causal_attention_weights, atol=1e-5,
    hint="token i attends to keys 0..i, itself included: keep the diagonal (torch.ones(T, T).tril(), "
         "not tril(-1) or triu()); set the blocked scores to -inf (not 0) before the softmax; "
         "divide by sqrt(d_k); softmax over the last dimension with torch.softmax (a hand-written "
         "exp overflows on large scores unless you subtract the row maximum first)",
    covers="T = 1, batch dims, scores that are negative or in the thousands"))


def _combine_masks_cases() -> Cases:
    g = torch.Generator().manual_seed(44)
    cases = [
        ("the chapter's batch: lengths 5, 3, 1, T = 5", (torch.tensor([5, 3, 1]), 5)),
        ("one token (T = 1)", (torch.tensor([1]), 1)),
        ("an empty sequence (length 0)", (torch.tensor([0, 2]), 3)),
        ("no padding at all", (torch.tensor([4, 4]), 4)),
    ]
    for _ in range(5):
        B, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 9, (1,), generator=g))
        lengths = torch.randint(0, T + 1, (B,), generator=g)
        cases.append((f"random, B={B}, T={T}", (lengths, T)))
    return cases


def _combine_masks(lengths: torch.Tensor, T: int) -> torch.Tensor:
    # (T, T) & (B, 1, 1, T) -> (B, 1, T, T)
    return causal_mask(T, device=lengths.device) & padding_mask(lengths, T)


combine_masks = _register(Check(
    exercise="ch04-combine-masks", function="combine_masks",
    cases=_combine_masks_cases, reference=_combine_masks,
    hint="mask[b, 0, i, j] is True (may attend) when j <= i AND j < lengths[b]; return a bool tensor "
         "of shape (B, 1, T, T), True = may attend (not nn.MultiheadAttention's True = blocked)",
    covers="T = 1, a sequence of length 0, no padding"))


# ---------------------------------------------------------------- chapter 5

def _stable_softmax_cases() -> Cases:
    g = torch.Generator().manual_seed(5)
    inf = float("inf")
    cases = [
        ("the worked example's scores (chapter 5)",
         (torch.tensor([[2.0, 4.0, 4.0], [4.0, 16.0, 12.0], [4.0, 12.0, 10.0]]),)),
        ("large scores 1000, 999, 998 (exp overflows)", (torch.tensor([1000.0, 999.0, 998.0]),)),
        ("scores of 1e4 and -1e4", (torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4]]),)),
        ("very negative scores (exp underflows to 0)", (torch.tensor([-1000.0, -1001.0]),)),
        ("-inf entries get weight 0", (torch.tensor([[1.0, -inf, 2.0], [-inf, 0.0, -inf]]),)),
        ("a row that is all -inf gives zeros", (torch.tensor([[0.5, -inf, 1.5], [-inf, -inf, -inf]]),)),
        ("one entry per row (size-1 last axis)", (torch.tensor([[3.0], [-inf], [1e4]]),)),
        ("equal scores give equal weights", (torch.zeros(1, 4),)),
        ("causal scores (B, T, T) = (2, 3, 3)",
         (torch.randn(2, 3, 3, generator=g).masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), -inf),)),
    ]
    for i, scale in enumerate([1.0, 10.0, 100.0, 1e3, 1e4]):
        shape = tuple(int(s) for s in torch.randint(1, 6, (1 + i % 3,), generator=g))
        x = torch.randn(shape, generator=g) * scale
        x = x.masked_fill(torch.rand(shape, generator=g) < 0.3, -inf)  # some masked keys, maybe whole rows
        cases.append((f"random scores of size {scale:g}, shape {shape}, some -inf", (x,)))
    return cases


stable_softmax = _register(Check(
    exercise="ch05-stable-softmax", function="stable_softmax", cases=_stable_softmax_cases,
    reference=_softmax,
    hint="subtract the row maximum (amax over the last axis, keepdim=True) before exp; where a row is "
         "all -inf its maximum is -inf: subtract 0 there and divide by 1 instead of the sum 0",
    covers="scores of 1000 and 1e4, -inf entries, all -inf rows, a size-1 axis, batches"))


def _attend_cases() -> Cases:
    g = torch.Generator().manual_seed(6)
    x = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 2.0], [1.0, 1.0, 1.0, 1.0]])
    w_k = torch.tensor([[0.0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]])
    w_q = torch.tensor([[1.0, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]])
    w_v = torch.tensor([[0.0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]])
    key = torch.randn(1, 4, generator=g)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    cases = [
        ("the worked example of chapter 5 (T = 3, d_k = d_v = 3)", (x @ w_q, x @ w_k, x @ w_v)),
        ("one token (T_q = T_k = 1): out is v", (r(1, 4), r(1, 4), r(1, 2))),
        ("2 queries, 5 keys (T_q != T_k)", (r(2, 4), r(5, 4), r(5, 3))),
        ("d_v != d_k (d_k = 4, d_v = 7)", (r(3, 4), r(3, 4), r(3, 7))),
        ("d_k = 1", (r(4, 1), r(4, 1), r(4, 2))),
        ("batch and heads (B, h, T, d) = (2, 3, 4, 8)", (r(2, 3, 4, 8), r(2, 3, 4, 8), r(2, 3, 4, 8))),
        ("large scores (exp of the raw scores overflows)", (20 * r(3, 4), 20 * r(5, 4), r(5, 2))),
        ("identical keys: equal weights", (r(2, 4), key.expand(3, 4).clone(), r(3, 2))),
    ]
    for _ in range(5):
        T_q, T_k, d_k, d_v = (int(s) for s in torch.randint(1, 9, (4,), generator=g))
        batch = tuple(int(s) for s in torch.randint(1, 4, (int(torch.randint(0, 3, (1,), generator=g)),),
                                                    generator=g))
        cases.append((f"random, batch {batch}, T_q={T_q}, T_k={T_k}, d_k={d_k}, d_v={d_v}",
                      (r(*batch, T_q, d_k), r(*batch, T_k, d_k), r(*batch, T_k, d_v))))
    return cases


attend = _register(Check(
    exercise="ch05-attend", function="attend", cases=_attend_cases, reference=_attention,
    hint="weights = softmax(q @ k^T / sqrt(d_k)) over the last axis (the keys), with d_k = q.shape[-1] and "
         "k.transpose(-2, -1); out = weights @ v; return (out, weights) in that order",
    covers="the worked example, T = 1, T_q != T_k, d_v != d_k, batch and head axes, large scores"))


# ---------------------------------------------------------------- chapter 6

def _split_heads_cases() -> Cases:
    g = torch.Generator().manual_seed(6)
    cases = [
        ("2 heads, entries numbered x[0, t, c] = 4 t + c", (torch.arange(12.0).reshape(1, 3, 4), 2)),
        ("n_heads = 1: one head holds every column", (torch.randn(2, 3, 4, generator=g), 1)),
        ("n_heads = d_model: heads of width d_head = 1", (torch.randn(2, 3, 4, generator=g), 4)),
        ("one token (T = 1)", (torch.randn(2, 1, 6, generator=g), 3)),
        ("GPT-2-wide heads: d_head = 64, n_heads = 3", (torch.randn(1, 4, 192, generator=g), 3)),
        ("x not contiguous in memory (a transposed view)",
         (torch.randn(3, 2, 6, generator=g).transpose(0, 1), 2)),  # (3, 2, 6) -> (2, 3, 6)
        ("large values (1e6)", (1e6 * torch.randn(2, 4, 6, generator=g), 3)),
    ]
    for _ in range(5):
        B, T, H, d_head = (int(s) for s in torch.randint(1, 6, (4,), generator=g))
        cases.append((f"random, B={B}, T={T}, n_heads={H}, d_head={d_head}",
                      (torch.randn(B, T, H * d_head, generator=g), H)))
    return cases


split_heads_by_hand = _register(Check(
    exercise="ch06-split-heads", function="split_heads_by_hand", cases=_split_heads_cases,
    reference=split_heads, atol=0.0, rtol=0.0,
    hint="head h holds columns h*d_head .. (h+1)*d_head - 1 of every token: reshape to "
         "(B, T, n_heads, d_head) first, then swap the T and n_heads axes with transpose(1, 2). "
         "Reshaping straight to (B, n_heads, T, d_head) gives the right shape but cuts across tokens",
    covers="n_heads = 1, n_heads = d_model, T = 1, a non-contiguous x, large values"))


def _merge_heads_cases() -> Cases:
    g = torch.Generator().manual_seed(66)
    cases = [
        ("2 heads, entries numbered 0..11", (torch.arange(12.0).reshape(1, 2, 3, 2),)),
        ("one head (n_heads = 1)", (torch.randn(2, 1, 3, 4, generator=g),)),
        ("heads of width 1 (d_head = 1)", (torch.randn(2, 4, 3, 1, generator=g),)),
        ("one token (T = 1)", (torch.randn(2, 3, 1, 2, generator=g),)),
        ("GPT-2 small heads (B, n_heads, T, d_head) = (1, 12, 5, 64)", (torch.randn(1, 12, 5, 64, generator=g),)),
        ("heads as split_heads returns them (not contiguous)",
         (split_heads(torch.randn(2, 3, 6, generator=g), 2),)),
        ("large values (1e6)", (1e6 * torch.randn(2, 3, 4, 2, generator=g),)),
    ]
    for _ in range(5):
        B, H, T, d_head = (int(s) for s in torch.randint(1, 6, (4,), generator=g))
        cases.append((f"random, B={B}, n_heads={H}, T={T}, d_head={d_head}",
                      (torch.randn(B, H, T, d_head, generator=g),)))
    return cases


merge_heads_by_hand = _register(Check(
    exercise="ch06-merge-heads", function="merge_heads_by_hand", cases=_merge_heads_cases,
    reference=merge_heads, atol=0.0, rtol=0.0,
    hint="swap the head and token axes back with transpose(1, 2), giving (B, T, n_heads, d_head), then "
         "reshape to (B, T, n_heads * d_head). Reshaping straight from (B, n_heads, T, d_head) gives the "
         "right shape but glues the wrong numbers; after the transpose use reshape (view fails on a "
         "non-contiguous tensor)",
    covers="n_heads = 1, d_head = 1, T = 1, non-contiguous heads, large values"))


# ---------------------------------------------------------------- chapter 7

def _block_params_cases() -> Cases:
    g = torch.Generator().manual_seed(7)
    cases = [
        ("GPT-2 small: d_model=768, d_ff=3072", (768, 3072)),
        ("the smallest block: d_model=1, d_ff=1", (1, 1)),
        ("a one-unit MLP: d_model=64, d_ff=1", (64, 1)),
        ("d_ff < d_model: d_model=512, d_ff=128", (512, 128)),
        ("d_ff != 4 d_model: d_model=4096, d_ff=11008", (4096, 11008)),
        ("GPT-3 175B: d_model=12288, d_ff=49152", (12288, 49152)),
    ]
    for _ in range(5):
        d_model = int(torch.randint(1, 2049, (1,), generator=g))
        d_ff = int(torch.randint(1, 8193, (1,), generator=g))
        cases.append((f"random, d_model={d_model}, d_ff={d_ff}", (d_model, d_ff)))
    return cases


def _block_params(d_model: int, d_ff: int) -> int:
    """Parameters of one GPT-2 block, counted by walking a TransformerBlock built on the meta device."""
    config = GPTConfig(vocab_size=1, context_length=1, d_model=d_model, n_layers=1, n_heads=1, d_ff=d_ff)
    with torch.device("meta"):  # shapes only, no memory: fast even for d_model = 12288
        return count_params(TransformerBlock(config))


block_params = _register(Check(
    exercise="ch07-block-params", function="block_params", cases=_block_params_cases,
    reference=_block_params,
    hint="one block = attention 4 d^2 + 4 d (W_Q, W_K, W_V, W_O and their biases, whatever the number "
         "of heads) + MLP d*d_ff + d_ff + d_ff*d + d (two weight matrices, two biases) "
         "+ two LayerNorms of 2 d each (scale and shift)",
    covers="d_model = 1, d_ff = 1, d_ff != 4 d_model, GPT-3's d_model = 12288"))
