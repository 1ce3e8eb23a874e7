"""Checkers for chapter 7's coding exercises."""

from __future__ import annotations

import torch
from torch import nn

from ..params import count_params
from ._core import Cases, Check, _register


def _attention_params_heads_cases() -> Cases:
    g = torch.Generator().manual_seed(7)
    cases = [
        ("GPT-2 small: 12 heads of 64, n_heads * d_head = d_model = 768", (768, 12, 64)),
        ("one head as wide as the model", (768, 1, 768)),
        ("64 heads of 12 (n_heads * d_head = d_model)", (768, 64, 12)),
        ("GPT-3 XL as Table 2.1 prints it: 24 heads of 128 on d_model = 2048", (2048, 24, 128)),
        ("heads narrower in total than the model: d_model = 512, 4 heads of 64", (512, 4, 64)),
        ("heads of width 1", (16, 4, 1)),
        ("the smallest layer: d_model = n_heads = d_head = 1", (1, 1, 1)),
        ("GPT-3 175B: 96 heads of 128 on d_model = 12288", (12288, 96, 128)),
    ]
    for _ in range(5):
        d_model = int(torch.randint(1, 2049, (1,), generator=g))
        n_heads = int(torch.randint(1, 65, (1,), generator=g))
        d_head = int(torch.randint(1, 257, (1,), generator=g))
        cases.append((f"random, d_model={d_model}, n_heads={n_heads}, d_head={d_head}", (d_model, n_heads, d_head)))
    return cases


def _attention_params_heads(d_model: int, n_heads: int, d_head: int) -> int:
    """Parameters of an attention layer whose heads are n_heads * d_head wide in total, counted by
    walking four nn.Linear layers built on the meta device (the layer's shapes, not a formula)."""
    inner = n_heads * d_head
    with torch.device("meta"):  # shapes only, no memory: fast even for d_model = 12288
        layer = nn.ModuleDict(
            {
                "w_q": nn.Linear(d_model, inner),  # (d_model, n_heads * d_head) and a bias
                "w_k": nn.Linear(d_model, inner),
                "w_v": nn.Linear(d_model, inner),
                "w_o": nn.Linear(inner, d_model),  # (n_heads * d_head, d_model) and a bias of d_model
            }
        )
    return count_params(layer)


attention_params_heads = _register(
    Check(
        exercise="ch07-head-width",
        function="attention_params_heads",
        cases=_attention_params_heads_cases,
        reference=_attention_params_heads,
        hint="the heads together are n_heads * d_head columns wide: W_Q, W_K and W_V are each "
        "(d_model, n_heads * d_head) with a bias of n_heads * d_head; W_O maps them back, "
        "(n_heads * d_head, d_model), with a bias of d_model. When n_heads * d_head = d_model "
        "this is 4 d^2 + 4 d",
        covers="n_heads * d_head equal to, above and below d_model, d_head = 1, one head, GPT-3's widths",
        forbids=("attention_params", "count_params", "param_breakdown", "gpt_params"),
    )
)
