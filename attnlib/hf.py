"""Chapter 15: a Hugging Face ``transformers`` model's weights in attnlib's ``GPT``.

``from_hf(model)`` reads the model's config, builds the :class:`~attnlib.model.GPT` with the same
choices (norm, MLP, positions, heads) and copies every weight, so that both give the same logits.
Two things change on the way:

* GPT-2 stores its matrices as ``Conv1D`` weights ``(d_in, d_out)``, the papers' ``W``;
  ``nn.Linear`` stores ``W^T``, ``(d_out, d_in)``: every matrix is transposed.
* Llama, Qwen3 and Mistral in ``transformers`` pair RoPE's dimensions as ``(i, i + d_head/2)``
  ("rotate half", GPT-NeoX's layout, the one Qwen and Gemma are trained in; serving code such as
  vLLM and llama.cpp calls it NeoX style, ``is_neox_style=True``), attnlib as ``(2i, 2i + 1)``
  (RoFormer's interleaved pairs, Meta's original Llama code; GPT-J style). The rotation is the same once
  each head's query and key dimensions are put in the other order: a fixed permutation of
  the rows of ``W_Q`` and ``W_K`` (and of the QK-norm gains), :func:`rotate_half_to_interleaved`.
  Scores are sums over a head's dimensions, so they do not change; values and outputs are
  not rotated and keep their order.

Chapter 17: ``from_hf`` also takes one ``DeepseekV3Attention`` layer and returns the equal
:class:`~attnlib.latent.MultiHeadLatentAttention`. DeepSeek-V3's RoPE pairs are interleaved
already (``rope_interleave``); its ``kv_a_proj_with_mqa`` stacks ``W_DKV`` and ``W_KR``, and its
``kv_b_proj`` stacks each head's ``W_UK,h`` and ``W_UV,h``: the rows are split, not permuted. Its YaRN
(chapter 19) scales the rotated part's frequencies and the scores' scale.

Chapter 19: the decoder families of :data:`attnlib.hf_families.FAMILIES`, each read into a ``GPTConfig`` by
:func:`attnlib.hf_families.gpt_config`; GLM and Cohere store RoPE's pairs interleaved already, Phi-3 and GLM
stack q, k, v (or gate and up) in one matrix, Gemma stores its norms' gains as ``g - 1``.

attnlib does not import ``transformers``: it reads ``model.config`` and ``model.state_dict()``.
The course builds these models from small random configs in its tests; it never downloads one.
"""

from __future__ import annotations

import copy

import torch

from ._hf_checks import check_hf_config, check_hf_mla_config, check_hf_model
from .config import GPTConfig
from .hf_families import FAMILIES, Family, gpt_config
from .latent import MultiHeadLatentAttention
from .model import GPT
from .recurrent import GatedDeltaNet
from .rope_scaling import RopeScaling
from .sparse import LightningIndexer

__all__ = ["from_hf", "rotate_half_to_interleaved"]


def rotate_half_to_interleaved(w: torch.Tensor, n_heads: int, rotary_dim: int | None = None) -> torch.Tensor:
    """Reorder each head's rows from "rotate half" pairs to interleaved pairs.

    Within each head of ``d_head`` rows: ``out[2i] = w[i]`` and ``out[2i + 1] = w[i + r/2]``,
    ``i = 0 .. r/2 - 1``, with ``r = rotary_dim`` (default ``d_head``); rows ``r .. d_head - 1``, which a
    partial rotary leaves unrotated (chapter 19), stay where they are. With ``r = d_head`` it undoes the
    permutation that the conversion of Meta's Llama weights to Hugging Face's layout applies,
    ``w.view(n_heads, d_head // 2, 2, d_in).transpose(1, 2).reshape(n_heads * d_head, d_in)``.

    Args:
        w: a query or key projection's weight ``(n_heads * d_head, d_in)``, its bias
            ``(n_heads * d_head,)``, or a QK-norm gain ``(d_head,)`` with ``n_heads = 1``.
        n_heads: the number of heads stacked in ``w``'s rows.
        rotary_dim: how many of each head's first rows RoPE rotates (None: all).

    Returns:
        A tensor of ``w``'s shape.

    Example:
        >>> rotate_half_to_interleaved(torch.arange(8), n_heads=2)   # heads [0 1 2 3], [4 5 6 7]
        tensor([0, 2, 1, 3, 4, 6, 5, 7])
        >>> rotate_half_to_interleaved(torch.arange(8), n_heads=1, rotary_dim=4)   # rows 4 .. 7 not rotated
        tensor([0, 2, 1, 3, 4, 5, 6, 7])
    """
    d_head = w.shape[0] // n_heads
    r = d_head if rotary_dim is None else rotary_dim
    heads = w.reshape(n_heads, d_head, *w.shape[1:])  # (n_heads * d_head, ...) -> (h, d_head, ...)
    rows = heads[:, :r].reshape(n_heads, 2, r // 2, *w.shape[1:])  # (h, half, i, ...): row half * r/2 + i
    rotated = rows.transpose(1, 2).reshape(n_heads, r, *w.shape[1:])  # (h, i, half, ...): row 2i + half
    return torch.cat([rotated, heads[:, r:]], dim=1).reshape(w.shape)


def from_hf(model) -> GPT | MultiHeadLatentAttention:
    """An attnlib :class:`~attnlib.model.GPT` with the weights of a ``transformers`` model.

    Supported (chapters 15 and 19): ``GPT2LMHeadModel`` and the decoder families of
    :data:`attnlib.hf_families.FAMILIES`: Llama (every RoPE type: Llama 3.1's ``"llama3"``, YaRN, ...),
    Mistral, Mixtral, Qwen2/2.5, Qwen3 (YaRN too), Qwen3-MoE, Gemma 2, Gemma 3 (text), SmolLM3, OLMo 2,
    OLMo 3, Phi-3, GLM and GLM-4, gpt-oss, Granite, Cohere 2 and (chapter 20) Qwen3-Next, whose Gated DeltaNet
    layers become :class:`~attnlib.recurrent.GatedDeltaNet`, each with its windows, sinks, biases,
    score scale, soft caps and norms as its config sets them; an option attnlib does not build raises an
    error that names it. A mixture-of-experts MLP (Mixtral, Qwen3-MoE, gpt-oss) is not attention, the
    course's subject: the model keeps a copy of transformers' own module in each block
    (``GPTConfig(mlp="external")``). Chapter 17: a ``DeepseekV3Attention`` layer gives the equal
    :class:`~attnlib.latent.MultiHeadLatentAttention`; chapter 20: a ``DeepseekV32Attention`` the same with its
    :class:`~attnlib.sparse.LightningIndexer` and ``index_topk``. The new model is on ``model``'s device, in its
    dtype and training mode; ``from_hf(model)(ids)`` equals ``model(ids).logits`` to float rounding.

    Args:
        model: one of the models above (any other raises an error that names the supported ones).

    Returns:
        The ``GPT``; its ``config`` is the :class:`~attnlib.config.GPTConfig` read from ``model.config``.

    Example:
        >>> import transformers                                      # doctest: +SKIP
        >>> hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        ...     vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        ...     num_attention_heads=4, num_key_value_heads=2))        # doctest: +SKIP
        >>> ids = torch.tensor([[1, 2, 3]])
        >>> torch.allclose(from_hf(hf)(ids), hf(ids).logits, atol=1e-5)   # doctest: +SKIP
        True
    """
    family = check_hf_model(model)  # "gpt2", a key of FAMILIES, or "deepseek_v3"
    if family in ("deepseek_v3", "deepseek_v32"):
        return _mla_from_hf(model)
    if family == "gpt2":
        check_hf_config(model.config, "gpt2")  # GELU (tanh), scores scaled by 1/sqrt(d_head) only
        config = _gpt2_config(model.config)
        state = _gpt2_state(model.state_dict(), config)
    else:
        config = gpt_config(model.config, family)
        state = _decoder_state(model.state_dict(), config, FAMILIES[family])
    weight = next(model.parameters())
    with torch.device("meta"):
        gpt = GPT(config)  # no memory yet, no random initialisation to pay for
    gpt = gpt.to_empty(device=weight.device).to(weight.dtype)  # memory, not yet the weights
    if config.tie_embeddings:
        gpt.lm_head.weight = gpt.tok_emb.weight  # to_empty gave each its own tensor: one again
    for i, layer in enumerate(model.model.layers if config.layer_types and "linear" in config.layer_types else ()):
        if config.is_recurrent(i):  # chapter 20: a Gated DeltaNet, its projections unpacked
            delta = GatedDeltaNet.from_hf(layer.linear_attn).state_dict()
            state |= {f"blocks.{i}.attn.{name}": t for name, t in delta.items()}
    gpt.load_state_dict(state)
    if config.mlp == "external":  # a mixture of experts: a copy of transformers' own module in each block
        for block, layer in zip(gpt.blocks, model.model.layers):
            block.mlp.module = copy.deepcopy(getattr(layer, "mlp", None) or layer.block_sparse_moe)
    return gpt.train(model.training)


def _gpt2_config(c) -> GPTConfig:
    return GPTConfig(
        vocab_size=c.vocab_size, context_length=c.n_positions, d_model=c.n_embd, n_layers=c.n_layer,
        n_heads=c.n_head, d_ff=c.n_inner or 4 * c.n_embd, bias=True, tie_embeddings=c.tie_word_embeddings,
        norm_eps=c.layer_norm_epsilon,
    )  # fmt: skip


def _gpt2_state(hf: dict, config: GPTConfig) -> dict:
    """GPT-2's ``Conv1D`` weights ``(d_in, d_out)`` as ``nn.Linear`` weights ``(d_out, d_in)``: transposed."""
    d = config.d_model
    state = {"tok_emb.weight": hf["transformer.wte.weight"], "pos_emb.weight": hf["transformer.wpe.weight"]}
    for i in range(config.n_layers):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        w_qkv, b_qkv = hf[h + "attn.c_attn.weight"], hf[h + "attn.c_attn.bias"]  # (d, 3d), (3d,): q | k | v
        for j, name in enumerate(("w_q", "w_k", "w_v")):
            state[b + f"attn.{name}.weight"] = w_qkv[:, j * d : (j + 1) * d].T  # (d, d) -> W^T
            state[b + f"attn.{name}.bias"] = b_qkv[j * d : (j + 1) * d]
        pairs = {"attn.w_o": "attn.c_proj", "mlp.0": "mlp.c_fc", "mlp.2": "mlp.c_proj"}
        for ours, theirs in pairs.items():
            state[b + ours + ".weight"] = hf[h + theirs + ".weight"].T
            state[b + ours + ".bias"] = hf[h + theirs + ".bias"]
        for ours, theirs in {"ln1": "ln_1", "ln2": "ln_2"}.items():
            state[b + ours + ".weight"], state[b + ours + ".bias"] = (
                hf[h + theirs + ".weight"],
                hf[h + theirs + ".bias"],
            )
    state["ln_f.weight"], state["ln_f.bias"] = hf["transformer.ln_f.weight"], hf["transformer.ln_f.bias"]
    state["lm_head.weight"] = hf["lm_head.weight"]
    return state


def _decoder_state(hf: dict, config: GPTConfig, f: Family) -> dict:
    """A decoder family's tensors under attnlib's names (``FAMILIES``' layer names): fused projections
    split, Gemma's gains ``w`` as ``1 + w``, and RoPE's rows (q, k, their biases and QK-norm gains) from
    rotate-half to interleaved pairs unless the family stores them interleaved already (GLM, Cohere)."""
    n_kv, d_head = config.n_kv_heads or config.n_heads, config.head_dim
    state = {"tok_emb.weight": hf["model.embed_tokens.weight"]}
    state["lm_head.weight"] = hf.get("lm_head.weight", hf["model.embed_tokens.weight"])
    for i in range(config.n_layers):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        layer = {k[len(h) :]: v for k, v in hf.items() if k.startswith(h)}  # this layer's tensors, short names
        if "self_attn.qkv_proj.weight" in layer:  # Phi-3: q | k | v stacked in one matrix
            q, k, v = layer.pop("self_attn.qkv_proj.weight").split(
                [config.n_heads * d_head, n_kv * d_head, n_kv * d_head]
            )
            layer |= {"self_attn.q_proj.weight": q, "self_attn.k_proj.weight": k, "self_attn.v_proj.weight": v}
        if config.output_gate and "self_attn.q_proj.weight" in layer:  # Qwen3-Next: each head's [query | gate] rows
            for p in ("weight", "bias"):
                if f"self_attn.q_proj.{p}" in layer:
                    q_g = layer.pop(f"self_attn.q_proj.{p}").unflatten(
                        0, (config.n_heads, 2, d_head)
                    )  # (H, 2, d_head, ...)
                    layer[f"self_attn.q_proj.{p}"], layer[f"self_attn.g_proj.{p}"] = (
                        q_g[:, j].flatten(0, 1) for j in (0, 1)
                    )
        if "mlp.gate_up_proj.weight" in layer:  # Phi-3, GLM: gate | up stacked in one matrix
            layer["mlp.gate_proj.weight"], layer["mlp.up_proj.weight"] = layer.pop("mlp.gate_up_proj.weight").chunk(2)
        for x in "qkvog":  # the projections, with their biases where the model has them (g: the output gate)
            for p in ("weight", "bias"):
                if f"self_attn.{x}_proj.{p}" in layer:
                    state[b + f"attn.w_{x}.{p}"] = layer[f"self_attn.{x}_proj.{p}"]
        for x in ("q", "k"):
            if f"self_attn.{x}_norm.weight" in layer:
                state[b + f"attn.{x}_norm.weight"] = layer[f"self_attn.{x}_norm.weight"]
        if "self_attn.sinks" in layer:
            state[b + "attn.sinks"] = layer["self_attn.sinks"]
        for ours, theirs in f.norms.items():
            for p in ("weight", "bias"):
                if f"{theirs}.{p}" in layer:
                    state[b + f"{ours}.{p}"] = layer[f"{theirs}.{p}"]
        if config.mlp != "external":
            for x in ("gate", "up", "down"):
                for p in ("weight", "bias"):
                    if f"mlp.{x}_proj.{p}" in layer:
                        state[b + f"mlp.{x}.{p}"] = layer[f"mlp.{x}_proj.{p}"]
    state["ln_f.weight"] = hf["model.norm.weight"]
    if f.gemma_norms:  # Gemma's RMSNorm multiplies by (1 + w): attnlib's nn.RMSNorm by its weight
        state = {k: v + 1 if k.endswith(("norm.weight", "ln1.weight", "ln2.weight", "_out.weight", "ln_f.weight"))
                 else v for k, v in state.items()}  # fmt: skip
    if f.pairs == "half":
        state = _interleave_rope_rows(state, config, n_kv)
    return state


def _interleave_rope_rows(state: dict, config: GPTConfig, n_kv: int) -> dict:
    """The rows RoPE rotates, in every layer with positions, from rotate-half pairs to interleaved pairs:
    ``W_Q``'s and ``W_K``'s (and their biases), and the QK-norm gains (per head, or over the projection)."""
    r = config.rotary_dim
    for i in range(config.n_layers):
        if config.layer_rope(i) is None:  # a layer without positions: nothing turns, nothing to reorder
            continue
        b = f"blocks.{i}.attn."
        for x, heads in (("q", config.n_heads), ("k", n_kv)):
            for p in ("weight", "bias"):
                if b + f"w_{x}.{p}" in state:
                    state[b + f"w_{x}.{p}"] = rotate_half_to_interleaved(state[b + f"w_{x}.{p}"], heads, r)
            if b + f"{x}_norm.weight" in state:  # a head's gains (d_head,), or the projection's (heads * d_head,)
                gains = state[b + f"{x}_norm.weight"]
                state[b + f"{x}_norm.weight"] = rotate_half_to_interleaved(gains, gains.shape[0] // config.head_dim, r)
    return state


def _mla_from_hf(layer) -> MultiHeadLatentAttention:
    """A ``DeepseekV3Attention`` layer as a :class:`~attnlib.latent.MultiHeadLatentAttention`."""
    c = layer.config
    theta, rope = check_hf_mla_config(c)  # default RoPE or YaRN, interleaved pairs, no biases, one kv head per head
    H, nope, r, dv, rank = (c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,
                            c.kv_lora_rank)  # fmt: skip
    weight = next(layer.parameters())
    mla = MultiHeadLatentAttention(
        c.hidden_size, H, kv_rank=rank, q_rank=c.q_lora_rank, d_head_nope=nope, d_head_rope=r, d_head_v=dv,
        rope_base=theta, norm_eps=layer.kv_a_layernorm.variance_epsilon,
        rope_scaling=RopeScaling.from_hf(rope, c.max_position_embeddings),
    ).to(weight.device, weight.dtype)  # fmt: skip
    hf = layer.state_dict()
    kv_b = hf["kv_b_proj.weight"].view(H, nope + dv, rank)  # (H * (nope + dv), rank) -> (H, nope + dv, rank)
    state = {
        "w_dkv.weight": hf["kv_a_proj_with_mqa.weight"][:rank],  # (rank + r, d_model): the latent's rows first
        "w_kr.weight": hf["kv_a_proj_with_mqa.weight"][rank:],  # then the shared rotated key's
        "kv_norm.weight": hf["kv_a_layernorm.weight"],
        "w_uk.weight": kv_b[:, :nope].reshape(H * nope, rank),  # each head: its key rows, then its value rows
        "w_uv.weight": kv_b[:, nope:].reshape(H * dv, rank),
        "w_o.weight": hf["o_proj.weight"],
    }
    if c.q_lora_rank is None:
        state["w_q.weight"] = hf["q_proj.weight"]
    else:
        state |= {"w_dq.weight": hf["q_a_proj.weight"], "q_latent_norm.weight": hf["q_a_layernorm.weight"],
                  "w_uq.weight": hf["q_b_proj.weight"]}  # fmt: skip
    mla.load_state_dict(state)
    if hasattr(layer, "indexer"):  # chapter 20, DeepSeek-V3.2: its lightning indexer picks each query's top-k keys
        mla.indexer, mla.index_topk = LightningIndexer.from_hf(layer.indexer), c.index_topk
    return mla.train(layer.training)
