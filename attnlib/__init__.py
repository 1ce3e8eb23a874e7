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
6 Multi-head attention          ``multihead``   ``split_heads``, ``merge_heads``, ``MultiHeadAttention``
                                                (``MultiHeadAttention.from_torch``)
7 Counting parameters           ``model``,      ``GPTConfig``, ``GPT2_SMALL`` ... ``GPT2_XL``,
                                ``params``      ``GPT3_175B``, ``TransformerBlock``, ``GPT``;
                                                ``attention_params``, ``mlp_params``,
                                                ``layernorm_params``, ``param_breakdown``,
                                                ``gpt_params``, ``count_params``
every chapter's figures         ``plot``        ``show_matrix``, ``show_matrices``,
                                                ``attention_heatmap``, ``heads_grid``, ``overview``
shared worked data              ``examples``    ``illustrated``, ``sentence_embeddings``, ``CORPUS``
every chapter's exercises       ``check``       one checker per coding exercise, ``CHECKS``
homework                        ``homework``    ``python -m attnlib.homework release|grade``
==============================  ==============  =====================================================

The API, with shapes::

    one_hot(ids (...), vocab_size) -> (..., vocab_size) float
    embed(ids (...), table (vocab_size, d_model)) -> (..., d_model)           # one_hot(ids) @ table
    qk_scores(q (..., T_q, d_k), k (..., T_k, d_k), scale=None) -> (..., T_q, T_k)
                                              # scale=None: 1/sqrt(d_k); scale=1.0: raw dot products
    causal_mask(T_q, T_k=None, device=None) -> bool (T_q, T_k)      # lower triangle, diagonal kept
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
    GPTConfig(vocab_size, context_length, d_model, n_layers, n_heads, d_ff=None, bias=True,
              tie_embeddings=True); GPT2_SMALL, GPT2_MEDIUM, GPT2_LARGE, GPT2_XL, GPT3_175B
    TransformerBlock(config), GPT(config)    # GPT-2 (pre-norm); GPT.forward(ids (B, T)) -> (B, T, vocab_size)
    attention_params(d_model, bias=True) -> int                     # 4 d^2 + 4 d with biases
    mlp_params(d_model, d_ff, bias=True), layernorm_params(d_model, bias=True) -> int
    param_breakdown(config) -> dict; gpt_params(config) -> int      # closed form
    count_params(module) -> int                                     # each distinct parameter once

Bad input raises :class:`AttnlibError` (a ``ValueError``) naming the argument,
what was expected and what was received.

The functions are re-exported here, so ``attnlib.softmax`` and
``attnlib.attention`` are the functions; import the modules by their full name
(``from attnlib.softmax import softmax``) when you want to read them.
"""
from ._validate import AttnlibError
from .embedding import embed, one_hot
from .scores import qk_scores
from .masks import causal_mask, float_mask, padding_mask
from .softmax import softmax
from .attention import attention, attention_weights
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .model import GPT, GPT2_LARGE, GPT2_MEDIUM, GPT2_SMALL, GPT2_XL, GPT3_175B, GPTConfig, TransformerBlock
from .params import (attention_params, count_params, gpt_params, layernorm_params, mlp_params,
                     param_breakdown)
from . import check, examples, plot

__all__ = [
    "AttnlibError",
    "one_hot", "embed",
    "qk_scores",
    "causal_mask", "padding_mask", "float_mask",
    "softmax", "attention", "attention_weights",
    "split_heads", "merge_heads", "MultiHeadAttention",
    "GPTConfig", "GPT2_SMALL", "GPT2_MEDIUM", "GPT2_LARGE", "GPT2_XL", "GPT3_175B",
    "TransformerBlock", "GPT",
    "attention_params", "mlp_params", "layernorm_params", "param_breakdown", "gpt_params", "count_params",
    "check", "examples", "plot",
]
