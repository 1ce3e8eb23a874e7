"""attnlib.Linear: nn.Linear with a row-blocked product for one token (chapter 12's decoding step)."""

from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlib
from attnlib.linear import Linear, hold_row_blocks, row_blocks


@pytest.mark.parametrize("d_out", [8, 67, 768, 2304, 50257, 64 * 67])
def test_row_blocks_is_the_smallest_divisor_from_8_to_64(d_out):
    c = row_blocks(d_out)
    divisors = [k for k in range(8, 65) if d_out % k == 0]
    assert c == (divisors[0] if divisors else None)


@pytest.mark.parametrize("d_in, d_out", [(64, 256), (48, 8), (30, 7), (768, 2304), (16, 29 * 3)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_one_row_equals_nn_linear(d_in, d_out, bias, shape):
    torch.manual_seed(0)
    layer = Linear(d_in, d_out, bias=bias)
    x = torch.randn(*shape, d_in)
    y = layer(x)
    assert y.shape == (*shape, d_out)
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_one_row_that_is_not_contiguous():
    torch.manual_seed(0)
    layer = Linear(32, 64)
    x = torch.randn(1, 5, 64)[:, 2, ::2]  # (1, 32) with stride 2
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_many_rows_are_nn_linear_exactly():
    torch.manual_seed(0)
    layer = Linear(32, 64)
    x = torch.randn(2, 3, 32)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


def test_gradients_of_one_row_equal_nn_linear():
    torch.manual_seed(0)
    layer, ref = Linear(32, 64), nn.Linear(32, 64)
    ref.load_state_dict(layer.state_dict())  # the same parameters, the same names
    x = torch.randn(1, 32, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    layer(x).square().sum().backward()
    ref(x_ref).square().sum().backward()
    for got, want in [(x.grad, x_ref.grad), (layer.weight.grad, ref.weight.grad), (layer.bias.grad, ref.bias.grad)]:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_weight_that_is_not_contiguous_takes_nn_linears_product():
    torch.manual_seed(0)
    layer = Linear(32, 64)
    layer.weight = nn.Parameter(torch.randn(32, 64).T)  # (64, 32), a transposed view
    x = torch.randn(1, 32)
    with (
        mock.patch("attnlib.linear.torch.bmm", wraps=torch.bmm) as bmm,
        mock.patch("attnlib.linear.torch.baddbmm", wraps=torch.baddbmm) as baddbmm,
    ):
        y = layer(x)
    assert bmm.call_count == baddbmm.call_count == 0
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias))


def test_a_cached_decoding_step_uses_the_row_blocked_product_in_every_layer():
    torch.manual_seed(0)
    config = attnlib.GPTConfig(vocab_size=200, context_length=16, d_model=64, n_layers=2, n_heads=4)
    model = attnlib.GPT(config).eval()
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert all(isinstance(m, Linear) and m.weight.is_contiguous() for m in layers)
    assert len(layers) == 6 * config.n_layers + 1  # q, k, v, o, two MLP matrices per block; the output head
    cache = [attnlib.KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), kv_cache=cache)
        with (
            mock.patch("attnlib.linear.torch.bmm", wraps=torch.bmm) as bmm,
            mock.patch("attnlib.linear.torch.baddbmm", wraps=torch.baddbmm) as baddbmm,
        ):
            model(torch.tensor([[4]]), kv_cache=cache)
    # every matrix of the step, the output head included: with a bias b + W x (baddbmm), without W x (bmm)
    assert baddbmm.call_count == sum(m.bias is not None for m in layers) > 0
    assert bmm.call_count == sum(m.bias is None for m in layers) > 0


def test_hold_row_blocks_holds_views_of_the_weights_and_gives_them_back():
    torch.manual_seed(0)
    model = nn.Sequential(Linear(32, 64), nn.ReLU(), Linear(64, 67), Linear(67, 16, bias=False))
    x = torch.randn(1, 32)
    y = model(x)
    with hold_row_blocks(model):
        first, odd, no_bias = model[0].held, model[2].held, model[3].held
        assert first[0].shape == (8, 8, 32) and first[1].shape == (8, 8, 1)
        assert first[0].data_ptr() == model[0].weight.data_ptr()  # views: no copy
        assert first[1].data_ptr() == model[0].bias.data_ptr()
        assert odd is None  # 67 rows have no divisor from 8 to 64: nn.Linear's product
        assert no_bias[1] is None
        with hold_row_blocks(model[0]):  # an inner block gives back what the outer one holds
            assert model[0].held is not None
        assert model[0].held is first
        assert torch.equal(model(x), y)  # the same numbers as without
    assert all(m.held is None for m in model.modules() if isinstance(m, Linear))


def test_hold_row_blocks_gives_them_back_after_an_error():
    layer = Linear(32, 64)
    with pytest.raises(RuntimeError, match="inside"):
        with hold_row_blocks(layer):
            raise RuntimeError("inside")
    assert layer.held is None


def test_generate_makes_the_row_blocks_once_per_call_not_per_step():
    torch.manual_seed(0)
    config = attnlib.GPTConfig(vocab_size=200, context_length=16, d_model=64, n_layers=2, n_heads=4)
    model = attnlib.GPT(config)
    prompt = torch.tensor([[1, 2, 3]])
    with mock.patch.object(Linear, "row_blocked", autospec=True, side_effect=Linear.row_blocked) as made:
        out = model.generate(prompt, max_new_tokens=6)
    n_linear = sum(isinstance(m, Linear) for m in model.modules())
    assert made.call_count == n_linear  # once each on entry; the 5 one-token steps reuse them
    assert torch.equal(out, model.generate(prompt, max_new_tokens=6, use_cache=False))
    assert all(m.held is None for m in model.modules() if isinstance(m, Linear))
    # without hold_row_blocks a one-token step makes them in every layer, at every step
    cache = [attnlib.KVCache() for _ in model.blocks]
    with (
        torch.no_grad(),
        mock.patch.object(Linear, "row_blocked", autospec=True, side_effect=Linear.row_blocked) as made,
    ):
        model(prompt, kv_cache=cache)
        model(torch.tensor([[4]]), kv_cache=cache)
        model(torch.tensor([[5]]), kv_cache=cache)
    assert made.call_count == 2 * n_linear
