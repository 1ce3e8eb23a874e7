"""Chapter 7: a GPT-2 style model, the home of the attention layers we count.

A decoder-only transformer (Radford et al. 2019, GPT-2), pre-norm:

    x = tok_emb[ids] + pos_emb[0..T-1]             # (B, T, d_model)
    for each block:
        x = x + attn(ln1(x), causal)               # multi-head self-attention
        x = x + mlp(ln2(x))                        # d_model -> d_ff -> d_model, GELU
    logits = ln_f(x) @ tok_emb^T                   # (B, T, vocab_size); head tied to the embedding

The published configurations are below; build the big ones on the meta
device (``with torch.device("meta"): GPT(GPT3_175B)``) to inspect and count
their parameters without allocating any memory.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ._validate import describe, ensure_positive_int, ensure_tensor, fail
from .multihead import MultiHeadAttention, _check_divisible

__all__ = ["GPTConfig", "GPT2_SMALL", "GPT2_MEDIUM", "GPT2_LARGE", "GPT2_XL", "GPT3_175B",
           "TransformerBlock", "GPT"]


@dataclass(frozen=True)
class GPTConfig:
    """The sizes of a GPT model.

    Args:
        vocab_size: the number of token ids.
        context_length: the most tokens the model reads at once (learned positions).
        d_model: width of every token vector.
        n_layers: number of transformer blocks.
        n_heads: attention heads per block; must divide ``d_model``.
        d_ff: hidden width of the MLP; ``None`` (default) means ``4 * d_model``, filled in at
            construction (so ``dataclasses.replace(c, d_model=...)`` keeps ``c.d_ff``
            unless you also pass ``d_ff=None``).
        bias: whether linear layers and LayerNorms have biases.
        tie_embeddings: whether the output head reuses the token embedding matrix.

    Example:
        >>> GPTConfig(vocab_size=100, context_length=16, d_model=32, n_layers=2, n_heads=4).d_ff
        128
    """

    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int | None = None
    bias: bool = True
    tie_embeddings: bool = True

    def __post_init__(self):
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads"):
            ensure_positive_int(name, getattr(self, name))
        _check_divisible(self.d_model, self.n_heads)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)  # frozen dataclass: set once here
        ensure_positive_int("d_ff", self.d_ff)
        for name in ("bias", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise fail(name, "True or False", describe(getattr(self, name)))


# Published configurations. GPT-2: Radford et al. 2019, table 2 (with the released code's
# vocab_size = 50257 and context 1024); GPT-3: Brown et al. 2020, table 2.1 (same tokenizer, context 2048).
GPT2_SMALL = GPTConfig(vocab_size=50257, context_length=1024, d_model=768, n_layers=12, n_heads=12)
GPT2_MEDIUM = GPTConfig(vocab_size=50257, context_length=1024, d_model=1024, n_layers=24, n_heads=16)
GPT2_LARGE = GPTConfig(vocab_size=50257, context_length=1024, d_model=1280, n_layers=36, n_heads=20)
GPT2_XL = GPTConfig(vocab_size=50257, context_length=1024, d_model=1600, n_layers=48, n_heads=25)
GPT3_175B = GPTConfig(vocab_size=50257, context_length=2048, d_model=12288, n_layers=96, n_heads=96)


class TransformerBlock(nn.Module):
    """One pre-norm GPT-2 block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``.

    ``mlp(x) = GELU(x W_1 + b_1) W_2 + b_2`` with ``W_1 (d_model, d_ff)`` and ``W_2 (d_ff, d_model)``;
    the attention is causal multi-head self-attention.

    Args:
        config: a :class:`GPTConfig`.

    Example:
        >>> block = TransformerBlock(GPTConfig(100, 16, d_model=32, n_layers=1, n_heads=4))
        >>> block(torch.zeros(2, 5, 32)).shape                # (B, T, d_model) in and out
        torch.Size([2, 5, 32])
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        d, bias = config.d_model, config.bias
        self.ln1 = nn.LayerNorm(d, bias=bias)
        self.attn = MultiHeadAttention(d, config.n_heads, bias=bias)
        self.ln2 = nn.LayerNorm(d, bias=bias)
        self.mlp = nn.Sequential(
            nn.Linear(d, config.d_ff, bias=bias),  # (B, T, d_model) -> (B, T, d_ff)
            nn.GELU(approximate="tanh"),           # GPT-2 uses the tanh approximation of GELU
            nn.Linear(config.d_ff, d, bias=bias),  # (B, T, d_ff) -> (B, T, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(B, T, d_model)`` -> ``(B, T, d_model)``."""
        x = x + self.attn(self.ln1(x), is_causal=True, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A GPT-2 style language model: token ids ``(B, T)`` -> next-token logits ``(B, T, vocab_size)``.

    ``logits = ln_f(blocks(tok_emb[ids] + pos_emb[0..T-1])) @ W_head^T``, causal: the
    logits at position ``t`` depend on ``ids[:, :t+1]`` only. With ``tie_embeddings``
    ``lm_head.weight is tok_emb.weight``. Weights start as in GPT-2: normal with std 0.02,
    ``0.02 / sqrt(2 n_layers)`` for the projections that write into the residual stream.

    Args:
        config: a :class:`GPTConfig`.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = GPT(GPTConfig(vocab_size=100, context_length=16, d_model=32, n_layers=2, n_heads=4))
        >>> model(torch.tensor([[1, 2, 3], [4, 5, 6]])).shape
        torch.Size([2, 3, 100])
        >>> model.lm_head.weight is model.tok_emb.weight
        True
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise fail("config", "a GPTConfig", describe(config))
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.context_length, config.d_model)
        self.blocks = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model, bias=config.bias)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight  # one (vocab_size, d_model) matrix, used twice
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("attn.w_o.weight", "mlp.2.weight")):  # writes into the residual stream
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids``: integer token ids ``(B, T)``, ``T <= context_length`` -> logits ``(B, T, vocab_size)``."""
        cfg = self.config
        ensure_tensor("ids", ids)
        if ids.dim() != 2 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise fail("ids", "a 2-D integer tensor of token ids (B, T)", describe(ids))
        B, T = ids.shape
        if not 1 <= T <= cfg.context_length:
            raise fail("ids", f"T in [1, {cfg.context_length}] tokens (context_length)", describe(ids))
        if ids.device.type != "meta" and ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size):
            bad = ids[(ids < 0) | (ids >= cfg.vocab_size)][0].item()
            raise fail("ids", f"token ids in [0, {cfg.vocab_size - 1}] (vocab_size={cfg.vocab_size})", f"id {bad}")
        if ids.device != self.tok_emb.weight.device:
            raise fail("ids", f"a tensor on {self.tok_emb.weight.device} (the model's device)",
                       f"{describe(ids)} on {ids.device}")
        pos = torch.arange(T, device=ids.device)  # (T,)
        x = self.tok_emb(ids) + self.pos_emb(pos)  # (B, T, d_model) + (T, d_model) -> (B, T, d_model)
        for block in self.blocks:
            x = block(x)  # (B, T, d_model) -> (B, T, d_model)
        return self.lm_head(self.ln_f(x))  # (B, T, d_model) @ (d_model, vocab_size) -> (B, T, vocab_size)
