"""Chapter 20: hybrid models, Gated DeltaNet layers among attention layers (Qwen3-Next's 3:1 pattern).

``GPTConfig(layer_types=(..., "linear", ...), delta_heads=..., delta_d_k=..., delta_d_v=...)`` builds a
:class:`~attnlib.recurrent.GatedDeltaNet` in each ``"linear"`` layer; its cache is a
:class:`~attnlib.kv_cache.StateCache` of constant size. ``from_hf`` loads a whole ``Qwen3NextForCausalLM``
(its mixture of experts kept as transformers built it), compared with transformers under 5.24 and 4.57.
"""

import pytest
import torch

import attnlib
from attnlib import GPT, GPTConfig
from attnlib.generation import new_caches
from attnlib.kv_cache import KVCache, StateCache
from attnlib.recurrent import GatedDeltaNet

HYBRID = dict(vocab_size=50, context_length=210, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_head=16,
              positions="rope", norm="rmsnorm", mlp="swiglu", bias=False, output_gate=True,
              layer_types=("linear", "linear", "linear", "full"), delta_heads=4, delta_k_heads=2, delta_d_k=8,
              delta_d_v=8)  # fmt: skip


def test_a_hybrid_config_builds_delta_net_layers_and_counts_them():
    c = GPTConfig(**HYBRID)
    model = GPT(c)
    assert [type(b.attn) for b in model.blocks] == [GatedDeltaNet] * 3 + [attnlib.MultiHeadAttention]
    assert attnlib.gpt_params(c) == attnlib.count_params(model)
    assert [type(x) for x in new_caches(model, 10)] == [StateCache] * 3 + [KVCache]
    with pytest.raises(attnlib.AttnlibError, match="delta_heads"):
        GPTConfig(**{**HYBRID, "delta_heads": None})
    with pytest.raises(attnlib.AttnlibError, match="cache_window"):
        model.generate(torch.tensor([[1, 2]]), 2, cache_window=4)


def test_the_hybrid_through_its_caches_equals_the_whole_sequence():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**HYBRID)).eval()
    ids = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        whole = model(ids)
        caches = new_caches(model, 20)
        parts = [model(ids[:, a:b], kv_cache=caches) for a, b in ((0, 7), (7, 8), (8, 20))]
    assert torch.allclose(torch.cat(parts, dim=1), whole, atol=1e-5)
    prompt = ids[:, :4]
    assert torch.equal(model.generate(prompt, 12), model.generate(prompt, 12, use_cache=False))


def test_a_delta_net_layer_keeps_a_state_of_constant_size():
    """Over 200 tokens a StateCache keeps the same bytes (test_recurrent.py: 1,000 steps of the layer's state);
    the attention layer's KVCache grows by one key and one value per token, per key/value head."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**HYBRID)).eval()
    caches = new_caches(model, 201)
    sizes = []
    with torch.no_grad():
        model(torch.tensor([[1]]), kv_cache=caches)
        for t in range(199):
            model(torch.tensor([[t % 50]]), kv_cache=caches)
            if t in (0, 198):
                sizes.append((caches[0].nbytes, caches[3].nbytes))
    (state_first, kv_first), (state_last, kv_last) = sizes
    assert state_first == state_last > 0 and caches[0].seen == 200
    assert kv_last - kv_first == 198 * 2 * 2 * 16 * 4  # 198 more tokens x (k, v) x 2 heads x d_head x 4 bytes


def test_from_hf_loads_qwen3_next():
    transformers = pytest.importorskip("transformers")
    from _transformers import rope

    config = transformers.Qwen3NextConfig(
        vocab_size=100, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2,
        linear_key_head_dim=8, linear_value_head_dim=8, max_position_embeddings=64, pad_token_id=0, **rope(10000.0),
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.Qwen3NextForCausalLM(config).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # weights large enough that a wrong formula shows; norms' stored g - 1 around 0
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() > 1 else 0.1))
    mine = attnlib.from_hf(hf)
    c = mine.config
    assert (c.layer_types, c.output_gate, c.rotary_dim, c.mlp) == (("linear",) * 3 + ("full",), True, 4, "external")
    assert attnlib.count_params(mine) == sum(p.numel() for p in hf.parameters())
    ids = torch.randint(0, 100, (2, 30), generator=g)
    with torch.no_grad():
        theirs, ours = hf(ids).logits, mine(ids)
    # float32, the delta rule chunked in both: within 1e-4 of the logits' scale (5.24: 2e-6; 4.57's code 4e-5)
    assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max()
    prompt = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16, min_new_tokens=16,
                           do_sample=False, pad_token_id=0)  # fmt: skip
    assert torch.equal(mine.generate(prompt, 16), expected)
