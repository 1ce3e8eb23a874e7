"""Chapter 20: sparse attention, each query's top-k keys (DeepSeek Sparse Attention, DeepSeek-V3.2).

Softmax attention over ``T`` keys costs every query ``T`` dot products with ``d_head``-wide keys in
every head. DeepSeek-V3.2 (DeepSeek-AI 2025) keeps MLA (chapter 17) but lets each query attend to
only ``k`` keys (2,048 in V3.2), chosen by a small, cheap scorer, the **lightning indexer**::

    q_I[t, h] = RoPE(c_q[t] W_Iq,h)                     # (H_I, d_I): the indexer's own query heads,
                                                        #   from MLA's query latent c_q
    k_I[s]    = RoPE(LayerNorm(x[s] W_Ik))              # (d_I,): one key per token, shared by the heads
    w[t, h]   = x[t] W_Iw,h / sqrt(H_I)                 # a weight per query and indexer head
    I[t, s]   = sum_h w[t, h] ReLU(q_I[t, h] . k_I[s]) / sqrt(d_I)

RoPE turns only the first ``d_rope`` dimensions of ``q_I`` and ``k_I`` (the others pass unchanged).
Each query keeps its ``k`` highest-scoring allowed keys (all of them while fewer than ``k`` are
allowed, as the first ``k`` tokens of a causal sequence) and attends to those alone::

    M[t, s] = causal[t, s] and s in top_k(I[t, :] over the allowed keys)
    out     = softmax(q K^T * scale + M) V              # attention (chapter 5) with that mask

so a query attends to ``min(k, t + 1)`` keys: past ``k`` tokens, the attention's cost per token is
flat in ``T``. The indexer still scores all ``T`` keys, but with one small key per token, no value and
no softmax (DeepSeek's own kernel runs it in FP8, transformers' in float32 or bfloat16).

transformers' ``DeepseekV32Indexer`` computes the same scores (its RoPE pairs dimensions ``i`` and
``i + d_rope / 2``; :meth:`LightningIndexer.from_hf` permutes its rows to attnlib's interleaved pairs,
which leaves every dot product unchanged) and its attention layer masks the same keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._hf_checks import check_hf_mla_config
from ._validate import ensure_bool, ensure_dim, ensure_float, ensure_int, fail
from .attention import attention
from .linear import Linear
from .masks import causal_mask
from .positions import RoPE
from .rope_scaling import RopeScaling

__all__ = ["LightningIndexer", "indexer_scores", "sparse_attention", "topk_mask"]


def indexer_scores(
    q: torch.Tensor, k: torch.Tensor, head_weights: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """The lightning indexer's scores: ``I[b, t, s] = scale * sum_h w[b, t, h] ReLU(q[b, t, h] . k[b, s])``.

    Args:
        q: the indexer's queries ``(B, T_q, H_I, d_I)``, rotated already.
        k: the indexer's keys ``(B, T_k, d_I)``, one per token for every indexer head, rotated already.
        head_weights: ``w`` ``(B, T_q, H_I)``, each query's weight on each indexer head.
        scale: factor on the sums; ``None`` means ``1 / sqrt(d_I)``.

    Returns:
        ``I`` ``(B, T_q, T_k)``: how much each query wants each key (no mask: :func:`topk_mask` adds it).

    Example:
        >>> q = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])      # B=1, T_q=1, H_I=2 heads, d_I=2
        >>> k = torch.tensor([[[2.0, -1.0], [-1.0, 3.0]]])      # T_k=2 keys
        >>> indexer_scores(q, k, torch.tensor([[[1.0, 0.5]]]), scale=1.0)   # [1*2 + 0.5*0, 1*0 + 0.5*3]
        tensor([[[2.0000, 1.5000]]])
    """
    ensure_float("q", q, 4, "indexer queries of shape (B, T_q, H_I, d_I)")
    ensure_float("k", k, 3, "indexer keys of shape (B, T_k, d_I)")
    ensure_float("head_weights", head_weights, 3, "head weights of shape (B, T_q, H_I)")
    B, T_q, H_I, d_I = q.shape
    if k.dim() != 3 or k.shape[0] != B or k.shape[2] != d_I or head_weights.shape != (B, T_q, H_I):
        raise fail("k, head_weights", f"shapes (B={B}, T_k, d_I={d_I}) and (B, T_q, H_I)={(B, T_q, H_I)}",
                   f"{tuple(k.shape)} and {tuple(head_weights.shape)}")  # fmt: skip
    scale = d_I**-0.5 if scale is None else scale
    dots = q @ k[:, None].mT  # (B, T_q, H_I, d_I) @ (B, 1, d_I, T_k) -> (B, T_q, H_I, T_k)
    per_head = head_weights[..., None] * F.relu(dots)  # (B, T_q, H_I, 1) * (B, T_q, H_I, T_k)
    return per_head.sum(dim=-2) * scale  # (B, T_q, H_I, T_k) -> (B, T_q, T_k): summed over the indexer heads


def topk_mask(scores: torch.Tensor, k: int, *, is_causal: bool = True) -> torch.Tensor:
    """Each query's ``k`` highest-scoring allowed keys: ``M[t, s] = allowed[t, s] and s in top_k(I[t, allowed])``.

    ``allowed`` is the causal mask, bottom-right aligned (``T_q`` new queries after ``T_k - T_q`` cached
    keys, chapter 12), or every key with ``is_causal=False``. A query with fewer than ``k`` allowed keys
    keeps all of them, so each row holds ``min(k, allowed keys)`` True entries. Among equal scores at the
    boundary, which key is kept is ``torch.topk``'s choice.

    Args:
        scores: ``(..., T_q, T_k)``, e.g. :func:`indexer_scores`' ``(B, T_q, T_k)``.
        k: how many keys each query keeps (DeepSeek-V3.2: 2048).
        is_causal: query ``t`` may choose among keys ``0 .. t + T_k - T_q`` only (default True).

    Returns:
        Boolean ``(..., T_q, T_k)``, True = may attend (attnlib's convention, as ``F.scaled_dot_product_attention``).

    Example:
        >>> scores = torch.tensor([[5.0, 0.0, 0.0, 0.0], [1.0, 2.0, 0.0, 0.0],
        ...                        [3.0, 1.0, 2.0, 0.0], [0.0, 4.0, 1.0, 3.0]])
        >>> topk_mask(scores, 2).int()                     # rows 0 and 1: fewer than 2 allowed keys, all kept
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [1, 0, 1, 0],
                [0, 1, 0, 1]], dtype=torch.int32)
    """
    ensure_float("scores", scores, 2, "scores of shape (..., T_q, T_k)")
    ensure_int("k", k, why="the number of keys each query keeps")
    ensure_bool("is_causal", is_causal)
    T_q, T_k = scores.shape[-2:]
    allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=scores.device)  # (T_q, T_k)
    if is_causal and T_q and T_k:
        allowed = causal_mask(T_q, T_k, device=scores.device, align="bottom_right")
    candidates = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k): blocked keys never win
    chosen = candidates.topk(min(k, T_k), dim=-1).indices  # (..., T_q, min(k, T_k))
    selected = torch.zeros_like(candidates, dtype=torch.bool).scatter(-1, chosen, True)  # (..., T_q, T_k)
    return selected & allowed  # a row with fewer than k allowed keys also "chose" blocked ones: dropped here


def sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scores: torch.Tensor,
    top_k: int,
    *,
    is_causal: bool = True,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over each query's top-k keys: ``softmax(q K^T * scale + M) V`` with ``M = topk_mask(scores, top_k)``.

    The same mask serves every head (the indexer chooses per token, not per head). Equal to
    ``attention(q, k, v, topk_mask(scores, top_k, is_causal=is_causal)[:, None], scale=scale)``:
    this function computes it so, to show what is computed; a kernel that gathers the ``top_k``
    chosen keys instead (DeepSeek's FlashMLA) does ``min(top_k, T)`` dot products per query and head.

    Args:
        q: queries ``(B, n_heads, T_q, d_k)``.
        k: keys ``(B, n_heads, T_k, d_k)`` (or ``(B, 1, T_k, d_k)``, broadcast).
        v: values ``(B, n_heads, T_k, d_v)`` (or ``(B, 1, T_k, d_v)``).
        scores: the indexer's scores ``(B, T_q, T_k)`` (:func:`indexer_scores`).
        top_k: keys kept per query.
        is_causal: choose among the causal keys only (bottom-right aligned), default True.
        scale: factor on ``q . k``; ``None`` means ``1 / sqrt(d_k)``.

    Returns:
        ``(out (B, n_heads, T_q, d_v), weights (B, n_heads, T_q, T_k))``, zero weight off the chosen keys.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 3)
        >>> out, weights = sparse_attention(q, k, v, torch.randn(1, 6, 6), top_k=3)
        >>> out.shape, (weights > 0).sum(dim=-1)[0, 0].tolist()        # min(3, t + 1) keys for query t
        (torch.Size([1, 2, 6, 3]), [1, 2, 3, 3, 3, 3])
    """
    ensure_float("q", q, 4, "queries of shape (B, n_heads, T_q, d_k)")
    ensure_dim("scores", scores, 3, "indexer scores of shape (B, T_q, T_k)")
    mask = topk_mask(scores, top_k, is_causal=is_causal)[:, None]  # (B, T_q, T_k) -> (B, 1, T_q, T_k), every head
    return attention(q, k, v, mask, scale=scale)


def _half_to_interleaved(n: int) -> torch.Tensor:
    """The order that turns "rotate half" pairs ``(i, i + n/2)`` of ``n`` rows into interleaved pairs
    ``(2i, 2i + 1)``: ``[0, n/2, 1, n/2 + 1, ...]``.

    Example:
        >>> _half_to_interleaved(6).tolist()                  # pairs (0, 3), (1, 4), (2, 5) side by side
        [0, 3, 1, 4, 2, 5]
    """
    return torch.arange(n).view(2, n // 2).T.flatten()  # (2, n/2) -> (n/2, 2) -> (n,)


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: :func:`indexer_scores` from its own small projections.

    ``q_I = RoPE(c_q W_Iq)`` (``H_I`` heads of width ``d_I``, from MLA's query latent ``c_q =
    RMSNorm(x W_DQ)``), ``k_I = RoPE(LayerNorm(x W_Ik))``, ``w = x W_Iw / sqrt(H_I)``; RoPE turns the
    first ``d_rope`` dimensions of each. Layers: ``w_q`` ``(q_rank -> H_I d_I)``, ``w_k``
    ``(d_model -> d_I)``, ``k_norm`` (a ``LayerNorm``, with bias), ``w_weights`` ``(d_model -> H_I)``.

    Args:
        d_model: model width.
        q_rank: width of MLA's query latent ``c_q``.
        n_heads: ``H_I``, the indexer's heads (V3.2: 64).
        d_head: ``d_I``, their width (V3.2: 128).
        d_rope: how many leading dimensions RoPE turns, even (V3.2: 64, MLA's ``d_head_rope``).
        rope_base: RoPE's base; rope_scaling: a :class:`~attnlib.rope_scaling.RopeScaling` or None.
        norm_eps: the LayerNorm's ``eps``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> indexer = LightningIndexer(d_model=16, q_rank=8, n_heads=4, d_head=8, d_rope=4)
        >>> x, c_q = torch.randn(2, 5, 16), torch.randn(2, 5, 8)       # (B, T, d_model), (B, T, q_rank)
        >>> scores, keys = indexer(x, c_q)
        >>> scores.shape, keys.shape, topk_mask(scores, 3).sum(dim=-1)[0].tolist()
        (torch.Size([2, 5, 5]), torch.Size([2, 5, 8]), [1, 2, 3, 3, 3])
    """

    def __init__(
        self,
        d_model: int,
        q_rank: int,
        n_heads: int,
        d_head: int,
        d_rope: int,
        rope_base: float = 10000.0,
        rope_scaling: RopeScaling | None = None,
        norm_eps: float = 1e-6,
    ):
        super().__init__()
        self.n_heads, self.d_head = ensure_int("n_heads", n_heads), ensure_int("d_head", d_head)
        self.w_q = Linear(ensure_int("q_rank", q_rank), n_heads * d_head, bias=False)  # (q_rank) -> (H_I * d_I)
        self.w_k = Linear(ensure_int("d_model", d_model), d_head, bias=False)  # (d_model) -> (d_I), one key
        self.k_norm = nn.LayerNorm(d_head, eps=norm_eps)
        self.w_weights = Linear(d_model, n_heads, bias=False)  # (d_model) -> (H_I)
        self.pos_enc = RoPE(d_head, rope_base, scaling=rope_scaling, rotary_dim=d_rope)  # checks d_rope

    def forward(
        self,
        x: torch.Tensor,
        q_latent: torch.Tensor,
        positions: torch.Tensor | None = None,
        past_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The scores of ``x``'s tokens against every token so far.

        Args:
            x: ``(B, T, d_model)``, the layer's input.
            q_latent: MLA's query latent ``RMSNorm(x W_DQ)`` ``(B, T, q_rank)``.
            positions: RoPE positions ``(T,)``; ``None``: ``T_cached .. T_cached + T - 1``.
            past_keys: the earlier tokens' indexer keys ``(B, T_cached, d_I)`` (a cache, as
                transformers' ``update_indexer``); None: no earlier tokens.

        Returns:
            ``(scores (B, T, T_cached + T), keys (B, T_cached + T, d_I))``: pass ``keys`` as the next
            call's ``past_keys``.
        """
        ensure_dim("x", x, 3, "(B, T, d_model)")
        ensure_float("q_latent", q_latent, 3, "MLA's query latent of shape (B, T, q_rank)")
        B, T, _ = x.shape
        T_cached = 0 if past_keys is None else ensure_dim("past_keys", past_keys, 3, "(B, T_cached, d_I)").shape[1]
        pos = torch.arange(T_cached, T_cached + T, device=x.device) if positions is None else positions
        q = self.w_q(q_latent).view(B, T, self.n_heads, self.d_head)  # (B, T, H_I * d_I) -> (B, T, H_I, d_I)
        q = self.pos_enc(q.transpose(1, 2), pos).transpose(1, 2)  # RoPE along T: (B, H_I, T, d_I) and back
        keys = self.pos_enc(self.k_norm(self.w_k(x)), pos)  # (B, T, d_I)
        if past_keys is not None:
            keys = torch.cat([past_keys, keys], dim=1)  # (B, T_cached + T, d_I)
        head_weights = self.w_weights(x) * self.n_heads**-0.5  # (B, T, H_I)
        return indexer_scores(q, keys, head_weights), keys

    @classmethod
    def from_hf(cls, indexer: nn.Module) -> LightningIndexer:
        """The equal indexer of a ``transformers`` ``DeepseekV32Indexer`` (its weights copied, RoPE's rows
        permuted from "rotate half" pairs to interleaved ones: the same dot products).

        Args:
            indexer: ``DeepseekV32Attention.indexer`` of a ``transformers`` DeepSeek-V3.2 model.

        Example:
            >>> from transformers.models.deepseek_v32 import modeling_deepseek_v32 as ds   # doctest: +SKIP
            >>> layer = ds.DeepseekV32Attention(config, layer_idx=0)                        # doctest: +SKIP
            >>> indexer = LightningIndexer.from_hf(layer.indexer)                           # doctest: +SKIP
            >>> scores, keys = indexer(x, layer.q_a_layernorm(layer.q_a_proj(x)))          # doctest: +SKIP
        """
        if type(indexer).__name__ != "DeepseekV32Indexer":
            raise fail("indexer", "a transformers DeepseekV32Indexer", type(indexer).__name__)
        c = indexer.config
        theta, rope = check_hf_mla_config(c)  # default RoPE or YaRN, as MLA's (the indexer shares its cos, sin)
        H, d, r = c.index_n_heads, c.index_head_dim, c.qk_rope_head_dim
        new = cls(c.hidden_size, c.q_lora_rank, H, d, r, theta, RopeScaling.from_hf(rope, c.max_position_embeddings),
                  indexer.k_norm.eps)  # fmt: skip
        order = torch.cat([_half_to_interleaved(r), torch.arange(r, d)])  # a head's rows: rotated ones permuted
        hf = indexer.state_dict()
        state = {
            "w_q.weight": hf["wq_b.weight"].view(H, d, -1)[:, order].reshape(H * d, -1),  # (H d, q_rank) per head
            "w_k.weight": hf["wk.weight"][order],  # (d, d_model)
            "k_norm.weight": hf["k_norm.weight"][order],  # LayerNorm's mean and variance ignore the order
            "k_norm.bias": hf["k_norm.bias"][order],
            "w_weights.weight": hf["weights_proj.weight"],
        }
        weight = next(indexer.parameters())
        new.to(weight.device, weight.dtype).load_state_dict(state)
        return new.train(indexer.training)
