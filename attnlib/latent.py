"""Chapter 17: multi-head latent attention (MLA, DeepSeek-AI 2024, arXiv 2405.04434).

Grouped-query attention (chapter 12) shrinks the cache by sharing keys and values among heads.
MLA caches neither: it caches one small **latent** vector per token, ``c = RMSNorm(x W_DKV)`` of
width ``kv_rank``, and every head's key and value are expanded from it::

    c     = RMSNorm(x W_DKV)                  # (T, kv_rank): all that is cached, with k_rope
    k_h   = c W_UK,h                          # (T, d_head_nope), head h's key
    v_h   = c W_UV,h                          # (T, d_head_v),    head h's value

RoPE cannot act on ``k_h``: the rotation depends on the position, so it would sit between
``W_UK,h`` and the query and stop the absorption below. MLA adds a small rotated part instead,
``d_head_rope`` wide, with one key shared by every head (cached beside ``c``)::

    q_h   = [q_nope,h, RoPE(q_rope,h)]        # q = x W_Q (or RMSNorm(x W_DQ) W_UQ: q_rank)
    k_h   = [c W_UK,h, RoPE(x W_KR)]          # the rotated part is the same for every head
    score = q_h . k_h / sqrt(d_head_nope + d_head_rope)

Three forms compute the same outputs (chapter 17 names them so):

1. expanded: every cached latent expanded into each head's key and value (``absorb=False``);
2. absorbed, at run time: ``q_nope,h . (c W_UK,h) = (q_nope,h W_UK,h^T) . c``, so the scores are
   taken against the cached latent without expanding any key, and ``(weights c) W_UV,h`` mixes
   the latents first and expands once (``absorb=True``; serving code such as vLLM and FlashMLA
   calls this the absorbed form);
3. pre-multiplied: ``W_Q,h W_UK,h^T`` and ``W_UV,h W_O,h`` multiplied once, offline (DeepSeek-V2's
   "W_UK absorbed into W_Q, W_UV into W_O"); attnlib does not compute it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._layer_checks import check_latent_update, check_mla_inputs, check_mla_options, check_score_options
from ._validate import ensure_int
from .attention import attention_weights
from .linear import Linear
from .masks import causal_mask
from .multihead import merge_heads, split_heads
from .positions import RoPE
from .rope_scaling import RopeScaling
from .sparse import topk_mask

__all__ = ["LatentCache", "MultiHeadLatentAttention"]


class LatentCache:
    """What one MLA layer keeps of the tokens it has seen: their latents ``c`` and rotated keys ``k_rope``.

    Chapter 12's :class:`~attnlib.kv_cache.KVCache` keeps every key/value head's key and value; an MLA
    layer expands those from the latent at every step, so it caches only what it cannot recompute::

        c      = RMSNorm(x W_DKV)             # (B, 1, T_cached, kv_rank):     the latent
        k_rope = RoPE(x W_KR)                 # (B, 1, T_cached, d_head_rope): the rotated key

    The axis of width 1 is the heads' axis: one latent and one rotated key serve every head (as
    multi-query attention's single key head does), and they broadcast against the queries
    ``(B, n_heads, T, ...)``. Memory: ``kv_rank + d_head_rope`` numbers per token and layer,
    whatever the number of heads (DeepSeek-V2's Table 1), so ``B T_cached (kv_rank + d_head_rope)``
    numbers (:attr:`nbytes`), :func:`attnlib.kv_cache_bytes`'s count for MLA. A GPT with
    ``attention="mla"`` keeps one ``LatentCache`` per block: ``[LatentCache() for _ in model.blocks]``.

    ``LatentCache()`` grows with ``torch.cat``; ``LatentCache(max_tokens=T_max)`` allocates room for
    ``T_max`` tokens at the first update and writes each step's rows into it in place (as
    ``KVCache(max_tokens=...)``; ``GPT.generate`` uses that form). It keeps every token: MLA's layer
    attends to all of them (chapter 16's rolling caches are multi-head attention's), so :attr:`window`
    is always None and :attr:`seen` equals ``len(cache)``.

    Args:
        max_tokens: room to allocate ahead; ``None`` (default): grow.

    Example:
        >>> cache = LatentCache()
        >>> c, k_rope = cache.update(torch.zeros(2, 1, 3, 8), torch.zeros(2, 1, 3, 4))  # 3 tokens
        >>> c, k_rope = cache.update(torch.ones(2, 1, 1, 8), torch.ones(2, 1, 1, 4))    # 1 more
        >>> len(cache), tuple(c.shape), tuple(k_rope.shape)
        (4, (2, 1, 4, 8), (2, 1, 4, 4))
        >>> cache.nbytes                                  # B T (kv_rank + d_head_rope) = 2*4*(8+4) floats of 4 bytes
        384
        >>> cache
        LatentCache(T_cached=4, c of shape (2, 1, 4, 8), k_rope of shape (2, 1, 4, 4))
        >>> ahead = LatentCache(max_tokens=6)             # room for 6 tokens, allocated once
        >>> _ = ahead.update(torch.zeros(2, 1, 3, 8), torch.zeros(2, 1, 3, 4))
        >>> c, _ = ahead.update(torch.ones(2, 1, 1, 8), torch.ones(2, 1, 1, 4))
        >>> torch.equal(c, cache.c), len(ahead), ahead.nbytes
        (True, 4, 384)
    """

    window = None  # MLA's cache never rolls: a GPT's checks read it as they read a KVCache's

    def __init__(self, max_tokens: int | None = None):
        self.max_tokens = None if max_tokens is None else ensure_int("max_tokens", max_tokens)
        self.c: torch.Tensor | None = None  # (B, 1, T_cached, kv_rank): the latents
        self.k_rope: torch.Tensor | None = None  # (B, 1, T_cached, d_head_rope): the rotated keys
        self.index_keys: torch.Tensor | None = None  # chapter 20: DeepSeek-V3.2's indexer keys (B, T_cached, d_I)
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, 1, max_tokens, width) each

    def __len__(self) -> int:
        """The number of cached tokens, ``T_cached``."""
        return 0 if self.c is None else self.c.shape[2]

    @property
    def seen(self) -> int:
        """The tokens appended so far, all of them held: the position of the next one."""
        return len(self)

    @property
    def nbytes(self) -> int:
        """Bytes of the cached latents and rotated keys, ``T_cached`` tokens (as ``KVCache.nbytes``, the
        rows held, not a ``max_tokens`` cache's room): ``B T_cached (kv_rank + d_head_rope)`` numbers."""
        return 0 if self.c is None else self.c.nbytes + self.k_rope.nbytes

    def __repr__(self) -> str:
        if self.c is None:
            return "LatentCache(T_cached=0, c and k_rope of shape None)"
        return (
            f"LatentCache(T_cached={len(self)}, c of shape {tuple(self.c.shape)}, "
            f"k_rope of shape {tuple(self.k_rope.shape)})"
        )

    def update(self, c_new: torch.Tensor, k_rope_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new tokens' latents and rotated keys; return all of them.

        Args:
            c_new: the new latents ``(B, 1, T_new, kv_rank)``.
            k_rope_new: the new rotated keys ``(B, 1, T_new, d_head_rope)``; both with the ``B``,
                widths, dtype and device of what is cached.

        Returns:
            ``(c, k_rope)``, ``(B, 1, T_cached + T_new, kv_rank)`` and ``(B, 1, T_cached + T_new,
            d_head_rope)``: the cached tokens first, what the new tokens attend to.
        """
        check_latent_update(self, c_new, k_rope_new)
        T, T_new = len(self), c_new.shape[2]
        if self.max_tokens is None:  # grow: copy what is cached and the new rows into new tensors
            self.c = c_new if self.c is None else torch.cat([self.c, c_new], dim=2)  # (B, 1, T + T_new, kv_rank)
            self.k_rope = k_rope_new if self.k_rope is None else torch.cat([self.k_rope, k_rope_new], dim=2)
            return self.c, self.k_rope
        if self._buffers is None:  # the first update allocates room for max_tokens tokens
            self._buffers = tuple(t.new_empty(t.shape[0], 1, self.max_tokens, t.shape[3]) for t in (c_new, k_rope_new))
        c_buf, k_buf = self._buffers
        c_buf[:, :, T : T + T_new] = c_new  # write the new rows in place: (B, 1, T_new, kv_rank)
        k_buf[:, :, T : T + T_new] = k_rope_new
        self.c, self.k_rope = c_buf[:, :, : T + T_new], k_buf[:, :, : T + T_new]  # views of the first T + T_new rows
        return self.c, self.k_rope


def yarn_score_scale(d_qk: int, scaling: RopeScaling | None) -> float:
    """The factor on MLA's scores: ``1 / sqrt(d_qk)``; with DeepSeek's YaRN (``mscale_all_dim`` set) times
    ``mscale(s, mscale_all_dim)^2``, ``mscale(s, m) = 0.1 m ln s + 1`` (1 for ``s <= 1``), as DeepSeek-V3's code.

    Example:
        >>> from attnlib.rope_scaling import RopeScaling
        >>> yarn = RopeScaling("yarn", factor=40.0, original_max_position_embeddings=4096, mscale=1.0, mscale_all_dim=1.0)
        >>> round(yarn_score_scale(192, None) ** -2), round(yarn_score_scale(192, yarn) * 192**0.5, 4)   # 1.3689^2
        (192, 1.8739)
    """
    scale = 1 / math.sqrt(d_qk)
    m_all = None if scaling is None or scaling.rope_type != "yarn" else scaling.mscale_all_dim
    if m_all and scaling.factor > 1:
        mscale = 0.1 * m_all * math.log(scaling.factor) + 1.0
        scale = scale * mscale * mscale
    return scale


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention: keys and values expanded from a cached latent (DeepSeek-V2/V3).

    ``out = concat_h(softmax(q_h k_h^T / sqrt(d_head_nope + d_head_rope) + M) v_h) W_O`` with
    ``k_h = [c W_UK,h, RoPE(x W_KR)]``, ``v_h = c W_UV,h`` and ``c = RMSNorm(x W_DKV)`` (the module
    docstring has the whole derivation). Layers: ``w_q`` (or ``w_dq``, ``q_latent_norm``, ``w_uq``
    with ``q_rank``: ``q_latent_norm`` is the compressed query's RMSNorm, DeepSeek's
    ``q_a_layernorm``, not QK-norm), ``w_dkv`` ``(d_model -> kv_rank)``, ``kv_norm``, ``w_kr``
    ``(d_model -> d_head_rope)``, ``w_uk`` ``(kv_rank -> n_heads d_head_nope)``, ``w_uv``
    ``(kv_rank -> n_heads d_head_v)``, ``w_o`` ``(n_heads d_head_v -> d_model)``; every projection
    without bias.

    Its cache is a :class:`LatentCache`, not a ``KVCache``: it holds the latents ``c``
    ``(B, 1, T, kv_rank)`` and the rotated keys ``k_rope`` ``(B, 1, T, d_head_rope)``, ``kv_rank +
    d_head_rope`` numbers per token and layer, whatever the number of heads.

    Args:
        d_model: model width.
        n_heads: number of heads.
        kv_rank: width of the latent ``c`` (DeepSeek-V2/V3: 512).
        q_rank: ``None`` (default): ``q = x W_Q``; a width: queries compressed too,
            ``q = RMSNorm(x W_DQ) W_UQ`` (DeepSeek-V3: 1536), to save training memory, not cache.
        d_head_nope: each head's key/query width without RoPE (default ``d_model // n_heads``; V3: 128).
        d_head_rope: the rotated part's width, even (default ``d_head_nope // 2``; V3: 64).
        d_head_v: each head's value width (default ``d_head_nope``; V3: 128).
        rope_base: RoPE's frequency base.
        absorb: compute the absorbed form (form 2 of chapter 17): the scores against the latent,
            the latents mixed and expanded once, no key or value expanded (same outputs to
            float rounding; the form for generating). False: the expanded form (form 1).
        norm_eps: the ``eps`` of the two RMSNorms (DeepSeek: 1e-6).
        rope_scaling: chapter 19, a :class:`~attnlib.rope_scaling.RopeScaling` of the rotated part
            (DeepSeek-V3: YaRN, factor 40); with YaRN's ``mscale_all_dim`` the scores' scale is also
            multiplied by ``mscale(s, mscale_all_dim)^2`` (:func:`yarn_score_scale`).

    Chapter 20, DeepSeek-V3.2: set ``indexer`` (a :class:`~attnlib.sparse.LightningIndexer`) and ``index_topk``
    (``from_hf(DeepseekV32Attention)`` does) and each query attends to its ``index_topk`` best keys by the
    indexer's scores (:meth:`select`); its cache then keeps the indexer's keys too (``LatentCache.index_keys``).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> mla = MultiHeadLatentAttention(d_model=32, n_heads=4, kv_rank=8, d_head_rope=4)
        >>> x = torch.randn(2, 5, 32)                                  # (B, T, d_model)
        >>> out, weights = mla(x, is_causal=True)
        >>> out.shape, weights.shape
        (torch.Size([2, 5, 32]), torch.Size([2, 4, 5, 5]))
        >>> absorbed = MultiHeadLatentAttention(32, 4, kv_rank=8, d_head_rope=4, absorb=True)
        >>> _ = absorbed.load_state_dict(mla.state_dict())
        >>> torch.allclose(absorbed(x, is_causal=True)[0], out, atol=1e-5)
        True
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        kv_rank: int,
        q_rank: int | None = None,
        d_head_nope: int | None = None,
        d_head_rope: int | None = None,
        d_head_v: int | None = None,
        rope_base: float = 10000.0,
        absorb: bool = False,
        norm_eps: float = 1e-6,
        rope_scaling: RopeScaling | None = None,
    ):
        super().__init__()
        sizes = check_mla_options(d_model, n_heads, kv_rank, q_rank, d_head_nope, d_head_rope, d_head_v, absorb)
        check_score_options(sizes[1], True, rope_scaling, None, None, None, None, None)
        self.d_model, self.n_heads, self.kv_rank, self.q_rank = d_model, n_heads, kv_rank, q_rank
        self.d_head_nope, self.d_head_rope, self.d_head_v = sizes  # defaults filled in
        self.rope_base, self.absorb = float(rope_base), absorb
        self.pos_enc = RoPE(self.d_head_rope, self.rope_base, scaling=rope_scaling)  # the rotated part's positions
        d_qk = self.d_head_nope + self.d_head_rope  # a head's query and key width
        self.scale = yarn_score_scale(d_qk, rope_scaling)  # 1 / sqrt(d_qk), DeepSeek's YaRN: times mscale^2
        # chapter 20, DeepSeek-V3.2: a LightningIndexer and how many keys each query keeps (None: every key)
        self.indexer, self.index_topk = None, None
        if q_rank is None:
            self.w_q = Linear(d_model, n_heads * d_qk, bias=False)  # (d_model) -> (n_heads * d_qk)
        else:  # compressed queries: down to q_rank, an RMSNorm, up to the heads
            self.w_dq = Linear(d_model, q_rank, bias=False)
            self.q_latent_norm = nn.RMSNorm(q_rank, eps=norm_eps)  # not QK-norm: the compressed query's
            self.w_uq = Linear(q_rank, n_heads * d_qk, bias=False)
        self.w_dkv = Linear(d_model, kv_rank, bias=False)  # (d_model) -> (kv_rank): the latent
        self.kv_norm = nn.RMSNorm(kv_rank, eps=norm_eps)
        self.w_kr = Linear(d_model, self.d_head_rope, bias=False)  # the rotated key, shared by the heads
        self.w_uk = Linear(kv_rank, n_heads * self.d_head_nope, bias=False)  # latent -> every head's key
        self.w_uv = Linear(kv_rank, n_heads * self.d_head_v, bias=False)  # latent -> every head's value
        self.w_o = Linear(n_heads * self.d_head_v, d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = True,
        kv_cache: LatentCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Self-attention of ``x`` ``(B, T, d_model)``, as ``MultiHeadAttention.forward``.

        Args:
            x: ``(B, T, d_model)``.
            positions: RoPE positions ``(T,)``; ``None`` (default): ``T_cached .. T_cached + T - 1``.
            is_causal: position ``i`` attends to ``0 .. i`` (bottom-right aligned after a cache).
            need_weights: True (default) computes the weights step by step and returns them;
                False uses ``F.scaled_dot_product_attention`` (not with ``absorb``) and returns None.
            kv_cache: a :class:`LatentCache` (not a ``KVCache``: MLA caches a latent, not keys and
                values): the latents and rotated keys of the new tokens are appended, and the
                queries attend to every cached token.

        Returns:
            ``(out (B, T, d_model), weights (B, n_heads, T, T_k) or None)``.
        """
        check_mla_inputs(self, x, positions, is_causal, need_weights, kv_cache, LatentCache)
        B, T, _ = x.shape
        T_cached = 0 if kv_cache is None else len(kv_cache)
        pos = torch.arange(T_cached, T_cached + T, device=x.device) if positions is None else positions

        q_latent = None if self.q_rank is None else self.q_latent_norm(self.w_dq(x))  # (B, T, q_rank)
        q = self.w_q(x) if self.q_rank is None else self.w_uq(q_latent)  # (B, T, H * d_qk)
        q = split_heads(q, self.n_heads)  # (B, T, H * d_qk) -> (B, H, T, d_qk)
        q_nope, q_rope = q.split([self.d_head_nope, self.d_head_rope], dim=-1)
        q_rope = self.pos_enc(q_rope, pos)  # (B, H, T, d_head_rope)
        c = self.kv_norm(self.w_dkv(x))[:, None]  # (B, T, kv_rank) -> (B, 1, T, kv_rank): the latent
        k_rope = self.pos_enc(self.w_kr(x)[:, None], pos)  # (B, 1, T, d_head_rope), one for all heads
        if kv_cache is not None:
            c, k_rope = kv_cache.update(c, k_rope)  # (B, 1, T_k, kv_rank), (B, 1, T_k, d_head_rope)
        T_k = c.shape[2]
        mask = None
        if is_causal and T_cached:  # new tokens after cached ones: the triangle at the bottom right
            mask = None if T == 1 else causal_mask(T, T_k, device=x.device, align="bottom_right")
        elif is_causal:
            mask = causal_mask(T, T_k, device=x.device)
        if self.indexer is not None and is_causal:  # chapter 20, DeepSeek Sparse Attention: each query's top-k keys
            mask = self.select(x, q_latent, pos, kv_cache)  # (B, 1, T, T_k), within the causal mask
        scale = self.scale

        if self.absorb:  # form 2, absorbed: scores against the latent, q_nope,h W_UK,h^T . c, no key expanded
            W_uk = self.w_uk.weight.view(self.n_heads, self.d_head_nope, self.kv_rank)  # (H, d_head_nope, kv_rank)
            q_latent = q_nope @ W_uk  # (B, H, T, d_head_nope) @ (H, d_head_nope, kv_rank) -> (B, H, T, kv_rank)
            scores = (q_latent @ c.mT + q_rope @ k_rope.mT) * scale  # (B, H, T, T_k)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # (B, H, T, T_k)
            mixed = weights @ c  # (B, H, T, T_k) @ (B, 1, T_k, kv_rank) -> (B, H, T, kv_rank): latents mixed
            W_uv = self.w_uv.weight.view(self.n_heads, self.d_head_v, self.kv_rank)  # (H, d_head_v, kv_rank)
            y = mixed @ W_uv.mT  # (B, H, T, kv_rank) @ (H, kv_rank, d_head_v) -> (B, H, T, d_head_v)
        else:  # form 1, expanded: every head's key and value from the latent, then attend as usual
            k_nope = split_heads(self.w_uk(c[:, 0]), self.n_heads)  # (B, T_k, kv_rank) -> (B, H, T_k, d_head_nope)
            v = split_heads(self.w_uv(c[:, 0]), self.n_heads)  # (B, T_k, kv_rank) -> (B, H, T_k, d_head_v)
            k = torch.cat([k_nope, k_rope.expand(B, self.n_heads, T_k, -1)], dim=-1)  # (B, H, T_k, d_qk)
            q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, T, d_qk)
            if need_weights:
                weights = attention_weights(q, k, mask, scale=scale)  # (B, H, T, T_k)
                y = weights @ v  # (B, H, T, d_head_v)
            else:
                weights = None
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)  # (B, H, T, d_head_v)
        out = self.w_o(merge_heads(y))  # (B, H, T, d_head_v) -> (B, T, H * d_head_v) -> (B, T, d_model)
        return out, (weights if need_weights else None)

    def select(self, x, q_latent, pos, kv_cache) -> torch.Tensor:
        """Chapter 20, DeepSeek-V3.2: the lightning indexer scores every key so far, and each query keeps its
        ``index_topk`` best allowed ones (:func:`~attnlib.sparse.topk_mask`): a mask ``(B, 1, T, T_k)``, one for
        every head. With a cache, the indexer's keys are kept beside the latents."""
        past = None if kv_cache is None else kv_cache.index_keys
        scores, keys = self.indexer(x, q_latent, pos, past)  # (B, T, T_k), (B, T_k, d_I)
        if kv_cache is not None:
            kv_cache.index_keys = keys
        return topk_mask(scores, self.index_topk)[:, None]  # (B, T, T_k) -> (B, 1, T, T_k)
