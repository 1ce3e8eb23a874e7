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

Chapter 12: ``GPT.generate(ids, max_new_tokens)`` continues ``ids`` greedily, one token at
a time, with a KV cache per layer (``use_cache=True``) or by running the whole sequence
again at every step (``use_cache=False``): the same tokens. ``GPTConfig(n_kv_heads=...)``
gives every layer grouped-query attention.

Chapter 14: the same model with the options of today's open models (Llama 3, Qwen3,
Mistral): ``GPTConfig(positions="rope", norm="rmsnorm", mlp="swiglu", bias=False,
tie_embeddings=False, n_kv_heads=..., d_head=..., qk_norm=...)``::

    x = tok_emb[ids]                                # no position table: RoPE inside attention
    for each block:
        x = x + attn(rmsnorm1(x), causal, rope)     # q, k rotated by position; QK-norm before it
        x = x + down(silu(gate(rmsnorm2(x))) * up(rmsnorm2(x)))    # SwiGLU
    logits = rmsnorm_f(x) @ W_head                  # untied

``LLAMA3_8B`` and ``QWEN3_8B`` are their published configurations; ``attnlib.from_hf``
(``attnlib/hf.py``) loads a ``transformers`` model's weights into such a ``GPT``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
from torch import nn

from ._layer_checks import check_gpt_config, check_gpt_ids, renamed
from ._validate import ensure_bool, ensure_instance
from .generation import generate
from .kv_cache import KVCache
from .latent import MultiHeadLatentAttention
from .linear import Linear
from .multihead import MultiHeadAttention

__all__ = [
    "GPTConfig",
    "GPT2_SMALL",
    "GPT2_MEDIUM",
    "GPT2_LARGE",
    "GPT2_XL",
    "GPT3_175B",
    "LLAMA3_8B",
    "QWEN3_8B",
    "SwiGLU",
    "TransformerBlock",
    "GPT",
]


@dataclass(frozen=True)
class GPTConfig:
    """The sizes of a GPT model, and (chapter 14) the choices that make it a Llama or a Qwen.

    Args:
        vocab_size: the number of token ids.
        context_length: the most tokens the model reads at once (learned positions).
        d_model: width of every token vector.
        n_layers: number of transformer blocks.
        n_heads: attention heads per block; must divide ``d_model`` unless ``d_head`` is set.
        d_ff: hidden width of the MLP; ``None`` (default) means ``4 * d_model``, filled in at
            construction (so ``dataclasses.replace(c, d_model=...)`` keeps ``c.d_ff``
            unless you also pass ``d_ff=None``).
        bias: whether linear layers and LayerNorms have biases.
        tie_embeddings: whether the output head reuses the token embedding matrix.
        n_kv_heads: key/value heads per attention layer, a divisor of ``n_heads``; ``None``
            (default) means ``n_heads``, plain multi-head attention, and is left as None
            (the printed config shows the field only when it is set). ``1`` is multi-query
            attention (Shazeer 2019), in between grouped-query attention (Ainslie et al. 2023).
        positions: ``"learned"`` (default, GPT-2: a ``(context_length, d_model)`` table added
            to the token vectors), ``"rope"`` (rotary positions inside every attention layer,
            Su et al. 2021) or ``"none"`` (no positions: only the causal mask orders tokens).
        rope_base: RoPE's frequency base (Llama 3: 500000, Qwen3: 1000000).
        norm: ``"layernorm"`` (default) or ``"rmsnorm"`` (Zhang and Sennrich 2019: no mean, no bias).
        norm_eps: the ``eps`` of every norm, QK-norm's included.
        mlp: ``"gelu"`` (default, ``W_2 GELU(W_1 x)``) or ``"swiglu"`` (Shazeer 2020:
            ``W_down (SiLU(W_gate x) * W_up x)``, three matrices).
        d_head: width of each attention head; ``None`` (default) means ``d_model // n_heads``.
            Qwen3 sets it independently (128 with ``d_model = 1024`` and 16 heads).
        qk_norm: whether each head's queries and keys go through an RMSNorm over ``d_head``
            before RoPE (Qwen3, Gemma 3; OLMo 2 instead normalises the whole
            ``n_heads * d_head`` projection, which this option does not do).
        sliding_window: chapter 15: the sliding layers attend to the last ``sliding_window``
            tokens only, each itself included (Mistral 7B: 4096); ``None`` (default): no window.
        layer_types: ``"full"`` or ``"sliding"`` for each layer (Gemma 2 alternates them,
            Gemma 3 has five sliding layers per full one); ``None`` (default): every layer
            sliding when ``sliding_window`` is set, every layer full otherwise.
        learned_sinks: one learned logit per head that joins each row's softmax and takes
            weight without adding a value (gpt-oss).
        attention: ``"mha"`` (default: multi-head attention, grouped with ``n_kv_heads``) or
            ``"mla"`` (chapter 16: multi-head latent attention, DeepSeek-V2/V3; needs
            ``positions="rope"``), with its sizes: ``kv_rank`` (the cached latent's width),
            ``q_rank`` (None: uncompressed queries), ``d_head_nope`` (the unrotated key width;
            None: ``d_model // n_heads``), ``d_head_rope`` (the rotated part; None:
            ``d_head_nope // 2``) and ``d_head_v`` (None: ``d_head_nope``). ``d_head`` is
            multi-head attention's head width and stays None with ``"mla"``.

    The chapter 14 fields are printed only when they differ from their defaults, which keep
    every earlier model as it was.

    Example:
        >>> GPTConfig(vocab_size=100, context_length=16, d_model=32, n_layers=2, n_heads=4).d_ff
        128
        >>> GPTConfig(100, 16, 32, 2, 4, positions="rope", norm="rmsnorm", mlp="swiglu", d_head=16)
        GPTConfig(vocab_size=100, context_length=16, d_model=32, n_layers=2, n_heads=4, d_ff=128, bias=True, tie_embeddings=True, positions='rope', norm='rmsnorm', mlp='swiglu', d_head=16)
    """

    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int | None = None
    bias: bool = True
    tie_embeddings: bool = True
    n_kv_heads: int | None = None
    positions: str = "learned"
    rope_base: float = 10000.0
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    mlp: str = "gelu"
    d_head: int | None = None
    qk_norm: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    learned_sinks: bool = False
    attention: str = "mha"
    kv_rank: int | None = None
    q_rank: int | None = None
    d_head_rope: int | None = None
    d_head_v: int | None = None
    d_head_nope: int | None = None

    def __repr__(self) -> str:
        always = ("vocab_size", "context_length", "d_model", "n_layers", "n_heads", "d_ff", "bias", "tie_embeddings")
        shown = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name in always or getattr(self, f.name) != f.default
        ]  # as before chapters 12 and 14 for the models of chapters 7-13
        return f"GPTConfig({', '.join(shown)})"

    def __post_init__(self):
        if isinstance(self.layer_types, list):
            object.__setattr__(self, "layer_types", tuple(self.layer_types))  # frozen, hashable: a tuple
        check_gpt_config(self)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)  # frozen dataclass: set once here

    @property
    def head_dim(self) -> int:
        """``d_head``, filled in: ``d_model // n_heads`` unless the config sets it (multi-head attention's
        head width; MLA's are :attr:`mla_nope_dim`, :attr:`mla_rope_dim` and :attr:`mla_v_dim`)."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def mla_nope_dim(self) -> int:
        """MLA's ``d_head_nope``, filled in: ``d_model // n_heads`` unless the config sets it."""
        return self.d_head_nope if self.d_head_nope is not None else self.d_model // self.n_heads

    @property
    def mla_rope_dim(self) -> int:
        """MLA's ``d_head_rope``, filled in: ``mla_nope_dim // 2`` unless the config sets it."""
        return self.d_head_rope if self.d_head_rope is not None else self.mla_nope_dim // 2

    @property
    def mla_v_dim(self) -> int:
        """MLA's ``d_head_v``, filled in: ``mla_nope_dim`` unless the config sets it."""
        return self.d_head_v if self.d_head_v is not None else self.mla_nope_dim

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of layer ``layer`` (0-based): ``sliding_window`` for a sliding layer, None for a full one.

        Example:
            >>> c = GPTConfig(100, 16, 32, 4, 4, sliding_window=8, layer_types=("sliding", "full") * 2)
            >>> [c.layer_window(i) for i in range(4)]
            [8, None, 8, None]
        """
        if self.layer_types is None:
            return self.sliding_window
        return self.sliding_window if self.layer_types[layer] == "sliding" else None


# Published configurations. GPT-2: Radford et al. 2019, table 2 (with the released code's
# vocab_size = 50257 and context 1024); GPT-3: Brown et al. 2020, table 2.1 (same tokenizer, context 2048).
GPT2_SMALL = GPTConfig(vocab_size=50257, context_length=1024, d_model=768, n_layers=12, n_heads=12)
GPT2_MEDIUM = GPTConfig(vocab_size=50257, context_length=1024, d_model=1024, n_layers=24, n_heads=16)
GPT2_LARGE = GPTConfig(vocab_size=50257, context_length=1024, d_model=1280, n_layers=36, n_heads=20)
GPT2_XL = GPTConfig(vocab_size=50257, context_length=1024, d_model=1600, n_layers=48, n_heads=25)
GPT3_175B = GPTConfig(vocab_size=50257, context_length=2048, d_model=12288, n_layers=96, n_heads=96)
# Chapter 14, from the published config.json files: Llama 3 8B as released in April 2024
# (meta-llama/Meta-Llama-3-8B, 8,192 tokens; Llama 3.1 8B has the same shapes and reaches 131,072
# tokens by rescaling RoPE's frequencies, "llama3" rope scaling) and Qwen3 8B (Qwen/Qwen3-8B), both
# RMSNorm, SwiGLU, RoPE, no biases, untied heads, 8 key/value heads.
LLAMA3_8B = GPTConfig(
    vocab_size=128256, context_length=8192, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336,
    bias=False, tie_embeddings=False, positions="rope", rope_base=500000.0, norm="rmsnorm", norm_eps=1e-5,
    mlp="swiglu",
)  # fmt: skip
QWEN3_8B = GPTConfig(
    vocab_size=151936, context_length=40960, d_model=4096, n_layers=36, n_heads=32, n_kv_heads=8, d_ff=12288,
    bias=False, tie_embeddings=False, positions="rope", rope_base=1000000.0, norm="rmsnorm", norm_eps=1e-6,
    mlp="swiglu", d_head=128, qk_norm=True,
)  # fmt: skip


class SwiGLU(nn.Module):
    """The gated MLP of Llama and Qwen (Shazeer 2020): ``down(SiLU(gate(x)) * up(x))``.

    ``gate`` and ``up`` map ``d_model -> d_ff``, ``down`` maps ``d_ff -> d_model``: three
    matrices where GELU's MLP has two, so ``3 d_model d_ff`` weights.

    Example:
        >>> SwiGLU(8, 16)(torch.zeros(2, 3, 8)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        self.gate = Linear(d_model, d_ff, bias=bias)  # (..., d_model) -> (..., d_ff)
        self.up = Linear(d_model, d_ff, bias=bias)  # (..., d_model) -> (..., d_ff)
        self.down = Linear(d_ff, d_model, bias=bias)  # (..., d_ff) -> (..., d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


def make_norm(config: GPTConfig) -> nn.Module:
    """The config's norm over ``d_model``: ``nn.LayerNorm`` or ``nn.RMSNorm``, with its ``norm_eps``."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=config.norm_eps)  # x / rms(x) * g: no mean, no bias
    return nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.bias)


def make_attention(config: GPTConfig, layer: int = 0) -> nn.Module:
    """The attention layer of block ``layer``: multi-head attention with the config's options
    (chapters 6-15), or multi-head latent attention (``attention="mla"``, chapter 16)."""
    if config.attention == "mla":
        return MultiHeadLatentAttention(
            config.d_model, config.n_heads, kv_rank=config.kv_rank, q_rank=config.q_rank,
            d_head_nope=config.mla_nope_dim, d_head_rope=config.mla_rope_dim, d_head_v=config.mla_v_dim,
            rope_base=config.rope_base, norm_eps=config.norm_eps,
        )  # fmt: skip
    return MultiHeadAttention(
        config.d_model, config.n_heads, n_kv_heads=config.n_kv_heads, bias=config.bias, d_head=config.head_dim,
        rope=config.positions == "rope", rope_base=config.rope_base, qk_norm=config.qk_norm,
        norm_eps=config.norm_eps, sliding_window=config.layer_window(layer), learned_sinks=config.learned_sinks,
    )  # fmt: skip


class TransformerBlock(nn.Module):
    """One pre-norm block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``.

    GPT-2: ``mlp(x) = GELU(x W_1 + b_1) W_2 + b_2`` with ``W_1 (d_model, d_ff)`` and
    ``W_2 (d_ff, d_model)``, LayerNorms, causal multi-head self-attention. The config's
    chapter 14 options make it a Llama/Qwen3 block: ``ln1``, ``ln2`` are RMSNorms
    (``norm="rmsnorm"``), ``mlp`` is a :class:`SwiGLU`, the attention rotates queries and keys
    (``positions="rope"``), with QK-norm and its own ``d_head`` when set.

    Args:
        config: a :class:`GPTConfig`.
        layer: the block's index in the model, 0-based (default 0): which layer type it is
            when ``config.layer_types`` mixes full and sliding layers (chapter 15).

    Example:
        >>> block = TransformerBlock(GPTConfig(100, 16, d_model=32, n_layers=1, n_heads=4))
        >>> block(torch.zeros(2, 5, 32)).shape                # (B, T, d_model) in and out
        torch.Size([2, 5, 32])
    """

    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        d, bias = config.d_model, config.bias
        self.ln1 = make_norm(config)
        self.attn = make_attention(config, layer)
        self.ln2 = make_norm(config)
        if config.mlp == "swiglu":
            self.mlp = SwiGLU(d, config.d_ff, bias=bias)
        else:
            self.mlp = nn.Sequential(
                Linear(d, config.d_ff, bias=bias),  # (B, T, d_model) -> (B, T, d_ff)
                nn.GELU(approximate="tanh"),  # GPT-2 uses the tanh approximation of GELU
                Linear(config.d_ff, d, bias=bias),  # (B, T, d_ff) -> (B, T, d_model)
            )

    def forward(
        self,
        x: torch.Tensor,
        need_weights: bool = False,
        kv_cache: KVCache | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``x``: ``(B, T, d_model)`` -> ``(B, T, d_model)``.

        With ``need_weights=True`` it returns ``(x, weights)``: also the attention weights
        ``(B, n_heads, T, T)``, computed step by step (the default path uses
        ``F.scaled_dot_product_attention``, faster, and keeps no weights).
        With a ``kv_cache`` (this block's :class:`KVCache`), ``x`` holds the new tokens only;
        they attend to the cached ones too (weights ``(B, n_heads, T, T_cached + T)``).
        ``positions`` (RoPE only): the tokens' positions, as ``MultiHeadAttention`` takes them.
        """
        a, weights = self.attn(
            self.ln1(x), is_causal=True, need_weights=need_weights, kv_cache=kv_cache, positions=positions
        )
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return (x, weights) if need_weights else x


class GPT(nn.Module):
    """A GPT-2 style language model: token ids ``(B, T)`` -> next-token logits ``(B, T, vocab_size)``.

    ``logits = ln_f(blocks(tok_emb[ids] + pos_emb[0..T-1])) @ W_head^T``, causal: the
    logits at position ``t`` depend on ``ids[:, :t+1]`` only. With ``tie_embeddings``
    ``lm_head.weight is tok_emb.weight``. Weights start as in GPT-2: normal with std 0.02,
    ``0.02 / sqrt(2 n_layers)`` for the projections that write into the residual stream.
    With ``positions="rope"`` (or ``"none"``) there is no ``pos_emb``: ``x = tok_emb[ids]``, and
    every attention layer rotates its queries and keys by position (chapter 14).

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
        ensure_instance("config", config, GPTConfig, "a GPTConfig")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        # GPT-2's learned positions; with RoPE (or none) the model has no position table
        self.pos_emb = nn.Embedding(config.context_length, config.d_model) if config.positions == "learned" else None
        self.blocks = nn.ModuleList(TransformerBlock(config, i) for i in range(config.n_layers))
        self.ln_f = make_norm(config)
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight  # one (vocab_size, d_model) matrix, used twice
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("attn.w_o.weight", "mlp.2.weight", "mlp.down.weight")):  # write into the residual stream
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        ids: torch.Tensor,
        need_weights: bool = False,
        kv_cache: list[KVCache] | None = None,
        *,
        return_weights: bool | None = None,
        positions: str | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """``ids``: integer token ids ``(B, T)``, ``T <= context_length`` -> logits ``(B, T, vocab_size)``.

        With ``need_weights=True`` it returns ``(logits, weights)``, ``weights`` a list with
        one ``(B, n_heads, T, T)`` tensor per block: every layer's attention weights
        ``softmax(Q_h K_h^T / sqrt(d_head) + M)``, from the same forward pass. The default
        (False) takes the fast path, ``F.scaled_dot_product_attention``, and keeps none.
        ``need_weights`` is the flag's name in every attnlib layer (``TransformerBlock``,
        ``MultiHeadAttention``) and in ``nn.MultiheadAttention``; the block and the model
        return ``(output, weights)`` when it is True and the output alone otherwise.
        ``return_weights``, its old name, still works and warns (``DeprecationWarning``).

        With ``kv_cache``, a list of one :class:`~attnlib.multihead.KVCache` per block that
        already holds ``T_cached`` tokens, ``ids`` are the **next** ``T`` tokens: they get the
        positions ``T_cached .. T_cached + T - 1``, attend to the cached tokens and to each
        other (causally), and their keys and values are appended to the caches. The logits
        equal those of the last ``T`` positions of a forward pass over the whole sequence.
        ``positions="in_cache"`` (chapter 15, StreamingLLM, with rolling caches): every full-attention
        RoPE layer counts positions within its cache (``MultiHeadAttention.forward``'s
        ``positions="in_cache"``); a sliding layer keeps each token's own position, which its window makes
        exact. ``None`` (default): each token's position in the sequence.

        Example:
            >>> _ = torch.manual_seed(0)
            >>> model = GPT(GPTConfig(vocab_size=10, context_length=8, d_model=16, n_layers=2, n_heads=4))
            >>> logits, weights = model(torch.tensor([[1, 2, 3]]), need_weights=True)
            >>> logits.shape, len(weights), weights[0].shape       # one (B, n_heads, T, T) per layer
            (torch.Size([1, 3, 10]), 2, torch.Size([1, 4, 3, 3]))
            >>> weights[1][0, 0, 0].tolist()                       # token 0 sees only itself
            [1.0, 0.0, 0.0]
            >>> cache = [KVCache() for _ in model.blocks]
            >>> first = model(torch.tensor([[1, 2]]), kv_cache=cache)   # tokens 0, 1 fill the caches
            >>> last = model(torch.tensor([[3]]), kv_cache=cache)       # token 2 attends to 0, 1, 2
            >>> len(cache[0]), torch.allclose(last[0, -1], logits[0, -1], atol=1e-6)
            (3, True)
        """
        if return_weights is not None:
            need_weights = renamed("return_weights", "need_weights", return_weights, need_weights)
        x, weights = self._hidden(ids, need_weights, kv_cache, positions)  # (B, T, d_model), after ln_f
        logits = self.lm_head(x)  # (B, T, d_model) @ (d_model, vocab_size) -> (B, T, vocab_size)
        return (logits, weights) if need_weights else logits

    def _hidden(
        self,
        ids: torch.Tensor,
        need_weights: bool = False,
        kv_cache: list[KVCache] | None = None,
        positions: str | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The final hidden states ``ln_f(blocks(...))`` ``(B, T, d_model)``, and the weights if asked."""
        ensure_bool("need_weights", need_weights)
        T_cached = check_gpt_ids(self, ids, kv_cache, positions)  # (B, T) ids after T_cached tokens seen
        T = ids.shape[1]
        pos = torch.arange(T_cached, T_cached + T, device=ids.device)  # (T,): positions after the cached ones
        # (RoPE: each attention layer rotates q and k by the same positions, from its cache's count)
        x = self.tok_emb(ids)  # (B, T, d_model)
        if self.pos_emb is not None:
            x = x + self.pos_emb(pos)  # (B, T, d_model) + (T, d_model) -> (B, T, d_model)
        caches = kv_cache if kv_cache is not None else [None] * len(self.blocks)
        weights = []
        for i, (block, cache) in enumerate(zip(self.blocks, caches)):
            # "in_cache" (StreamingLLM) for the full-attention RoPE layers; None: positions from the cache's count
            rotated_in_cache = self.config.positions == "rope" and self.config.layer_window(i) is None
            where = positions if rotated_in_cache else None
            if need_weights:
                x, w = block(x, True, cache, where)  # (B, T, d_model), w: (B, n_heads, T, T_k)
                weights.append(w)
            else:
                x = block(x, kv_cache=cache, positions=where)  # (B, T, d_model) -> (B, T, d_model)
        return self.ln_f(x), weights

    def generate(
        self,
        ids: torch.Tensor,
        max_new_tokens: int,
        use_cache: bool = True,
        *,
        cache_window: int | None = None,
        cache_sinks: int = 0,
    ) -> torch.Tensor:
        """Continue ``ids`` greedily: append the most likely next token, ``max_new_tokens`` times
        (the code: :func:`attnlib.generation.generate`).

        ``ids_{t+1} = argmax(logits of the last position)``, computed from the whole sequence so
        far. ``use_cache=True`` (default) runs the prompt once, keeping every layer's keys and
        values in a :class:`~attnlib.multihead.KVCache`, and then feeds one new token per step
        (position ``T``, its query attending to all cached keys); ``use_cache=False`` runs
        the whole sequence through the model again at every step. A sliding layer
        (``config.sliding_window``) keeps only its window, ``KVCache(window=...)``, whose memory
        stays constant however many tokens are generated (chapter 15). Both give the same tokens;
        both compute the output head for the last position only (it is ``vocab_size`` wide).

        Args:
            ids: the prompt, integer token ids ``(B, T0)`` with ``T0 >= 1``.
            max_new_tokens: how many tokens to append, ``>= 0``, with
                ``T0 + max_new_tokens <= context_length`` (the learned positions end there).
            use_cache: keep the keys and values (True) or recompute everything (False).
            cache_window, cache_sinks: chapter 15, StreamingLLM: a new token attends to the first
                ``cache_sinks`` tokens and the last ``cache_window`` (itself included): between
                steps every layer's cache keeps the sinks and the last ``cache_window - 1``
                (``KVCache(window=..., sinks=...)``), with positions counted within the cache,
                so generation may go past ``context_length`` (positions ``"rope"`` or
                ``"none"``). The tokens then differ from the full model's once the first
                tokens are evicted. Default: keep every token (the sliding layers of a
                windowed model keep their window only, which changes nothing).

        Returns:
            Token ids ``(B, T0 + max_new_tokens)``: the prompt, then the new tokens.

        Example:
            >>> _ = torch.manual_seed(0)
            >>> model = GPT(GPTConfig(vocab_size=10, context_length=8, d_model=16, n_layers=2, n_heads=4))
            >>> prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])            # (B, T0) = (2, 3)
            >>> out = model.generate(prompt, max_new_tokens=4)
            >>> out.shape, torch.equal(out[:, :3], prompt)
            (torch.Size([2, 7]), True)
            >>> torch.equal(out, model.generate(prompt, max_new_tokens=4, use_cache=False))
            True
        """
        return generate(self, ids, max_new_tokens, use_cache, cache_window=cache_window, cache_sinks=cache_sinks)
