"""Chapter 14: a Hugging Face ``transformers`` model's weights in attnlib's ``GPT``.

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

Chapter 16: ``from_hf`` also takes one ``DeepseekV3Attention`` layer and returns the equal
:class:`~attnlib.latent.MultiHeadLatentAttention`. DeepSeek-V3's RoPE pairs are interleaved
already (``rope_interleave``); its ``kv_a_proj_with_mqa`` stacks ``W_DKV`` and ``W_KR``, and its
``kv_b_proj`` stacks each head's ``W_UK,h`` and ``W_UV,h``: the rows are split, not permuted.

attnlib does not import ``transformers``: it reads ``model.config`` and ``model.state_dict()``.
The course builds these models from small random configs in its tests; it never downloads one.
"""

from __future__ import annotations

import torch

from ._hf_checks import check_hf_config, check_hf_mla_config, check_hf_model
from .latent import MultiHeadLatentAttention
from .model import GPT, GPTConfig

__all__ = ["from_hf", "rotate_half_to_interleaved"]


def rotate_half_to_interleaved(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Reorder each head's rows from "rotate half" pairs to interleaved pairs.

    Within each head of ``d_head`` rows: ``out[2i] = w[i]`` and ``out[2i + 1] = w[i + d_head/2]``,
    ``i = 0 .. d_head/2 - 1``. It undoes the permutation that the conversion of Meta's Llama
    weights to Hugging Face's layout applies, ``w.view(n_heads, d_head // 2, 2, d_in)
    .transpose(1, 2).reshape(n_heads * d_head, d_in)``.

    Args:
        w: a query or key projection's weight ``(n_heads * d_head, d_in)``, its bias
            ``(n_heads * d_head,)``, or a QK-norm gain ``(d_head,)`` with ``n_heads = 1``.
        n_heads: the number of heads stacked in ``w``'s rows.

    Returns:
        A tensor of ``w``'s shape.

    Example:
        >>> rotate_half_to_interleaved(torch.arange(8), n_heads=2)   # heads [0 1 2 3], [4 5 6 7]
        tensor([0, 2, 1, 3, 4, 6, 5, 7])
    """
    d_head = w.shape[0] // n_heads
    rows = w.reshape(n_heads, 2, d_head // 2, *w.shape[1:])  # (h, half, i, ...): row half * d_head/2 + i
    return rows.transpose(1, 2).reshape(w.shape)  # (h, i, half, ...): row 2i + half


def from_hf(model) -> GPT | MultiHeadLatentAttention:
    """An attnlib :class:`~attnlib.model.GPT` with the weights of a ``transformers`` model.

    Supported: ``GPT2LMHeadModel`` (GPT-2), ``LlamaForCausalLM`` (Llama 2, and Llama 3 as released
    in April 2024: not Llama 3.1, 3.2 or 3.3, whose ``"llama3"`` RoPE scaling is refused),
    ``Qwen3ForCausalLM`` (without YaRN) and ``MistralForCausalLM`` (its ``sliding_window`` too:
    chapter 15), with RoPE's default frequencies only: any ``rope_scaling`` / non-default
    ``rope_type`` raises an error that names it. The new model is on ``model``'s device, in its dtype and
    training mode; ``from_hf(model)(ids)`` equals ``model(ids).logits`` to float rounding.

    Args:
        model: one of the models above (any other raises an error that names the supported ones).

    Returns:
        The ``GPT``; its ``config`` is the :class:`~attnlib.model.GPTConfig` read from ``model.config``.

    Example:
        >>> import transformers                                      # doctest: +SKIP
        >>> hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        ...     vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        ...     num_attention_heads=4, num_key_value_heads=2))        # doctest: +SKIP
        >>> ids = torch.tensor([[1, 2, 3]])
        >>> torch.allclose(from_hf(hf)(ids), hf(ids).logits, atol=1e-5)   # doctest: +SKIP
        True
    """
    family = check_hf_model(model)  # "gpt2", "llama", "qwen3", "mistral" or "deepseek_v3"
    if family == "deepseek_v3":
        return _mla_from_hf(model)
    c = model.config
    config = _gpt2_config(c) if family == "gpt2" else _llama_config(c, family)
    hf = model.state_dict()
    state = _gpt2_state(hf, config) if family == "gpt2" else _llama_state(hf, config)
    weight = next(model.parameters())
    with torch.device("meta"):
        gpt = GPT(config)  # no memory yet, no random initialisation to pay for
    gpt = gpt.to_empty(device=weight.device).to(weight.dtype)  # memory, not yet the weights
    if config.tie_embeddings:
        gpt.lm_head.weight = gpt.tok_emb.weight  # to_empty gave each its own tensor: one again
    gpt.load_state_dict(state)
    return gpt.train(model.training)


def _gpt2_config(c) -> GPTConfig:
    check_hf_config(c, "gpt2")  # GELU (tanh), scores scaled by 1/sqrt(d_head) only
    return GPTConfig(
        vocab_size=c.vocab_size, context_length=c.n_positions, d_model=c.n_embd, n_layers=c.n_layer,
        n_heads=c.n_head, d_ff=c.n_inner or 4 * c.n_embd, bias=True, tie_embeddings=c.tie_word_embeddings,
        norm_eps=c.layer_norm_epsilon,
    )  # fmt: skip


def _llama_config(c, family: str) -> GPTConfig:
    theta = check_hf_config(c, family)  # SiLU, default RoPE, no window but Mistral's: returns RoPE's base
    d_head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return GPTConfig(
        vocab_size=c.vocab_size, context_length=c.max_position_embeddings, d_model=c.hidden_size,
        n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads,
        d_ff=c.intermediate_size, bias=bool(getattr(c, "attention_bias", False)),
        tie_embeddings=c.tie_word_embeddings, positions="rope", rope_base=theta,
        norm="rmsnorm", norm_eps=c.rms_norm_eps, mlp="swiglu",
        d_head=None if d_head * c.num_attention_heads == c.hidden_size else d_head, qk_norm=family == "qwen3",
        sliding_window=getattr(c, "sliding_window", None) if family == "mistral" else None,
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


def _llama_state(hf: dict, config: GPTConfig) -> dict:
    """Llama/Qwen3/Mistral names; the q and k rows (and QK-norm gains) from rotate-half to interleaved pairs."""
    n_kv = config.n_kv_heads or config.n_heads
    parts = ("weight", "bias") if config.bias else ("weight",)
    names = {  # attnlib's name in a block -> transformers' name in a layer
        "ln1.weight": "input_layernorm.weight", "ln2.weight": "post_attention_layernorm.weight",
        **{f"attn.w_{x}.{p}": f"self_attn.{x}_proj.{p}" for x in "qkvo" for p in parts},
        **{f"mlp.{x}.{p}": f"mlp.{x}_proj.{p}" for x in ("gate", "up", "down") for p in parts},
    }  # fmt: skip
    state = {"tok_emb.weight": hf["model.embed_tokens.weight"], "ln_f.weight": hf["model.norm.weight"]}
    state["lm_head.weight"] = hf["lm_head.weight"] if "lm_head.weight" in hf else hf["model.embed_tokens.weight"]
    for i in range(config.n_layers):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        for ours, theirs in names.items():
            state[b + ours] = hf[h + theirs]
        for x, heads in (("q", config.n_heads), ("k", n_kv)):  # RoPE pairs: rotate half -> interleaved
            for p in parts:
                state[b + f"attn.w_{x}.{p}"] = rotate_half_to_interleaved(hf[h + f"self_attn.{x}_proj.{p}"], heads)
            if config.qk_norm:
                state[b + f"attn.{x}_norm.weight"] = rotate_half_to_interleaved(hf[h + f"self_attn.{x}_norm.weight"], 1)
    return state


def _mla_from_hf(layer) -> MultiHeadLatentAttention:
    """A ``DeepseekV3Attention`` layer as a :class:`~attnlib.latent.MultiHeadLatentAttention`."""
    c = layer.config
    theta = check_hf_mla_config(c)  # default RoPE, interleaved pairs, no biases, one key/value head per head
    H, nope, r, dv, rank = (c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,
                            c.kv_lora_rank)  # fmt: skip
    weight = next(layer.parameters())
    mla = MultiHeadLatentAttention(
        c.hidden_size, H, kv_rank=rank, q_rank=c.q_lora_rank, d_head_nope=nope, d_head_rope=r, d_head_v=dv,
        rope_base=theta, norm_eps=layer.kv_a_layernorm.variance_epsilon,
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
    return mla.train(layer.training)
