"""Checkers for chapter 7's coding exercises."""
from __future__ import annotations

import math

import torch

from ..model import GPTConfig
from ..model import TransformerBlock
from ..params import count_params
from ._core import Cases, Check, _register

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
