"""attnlib.Linear: nn.Linear under attnlib's name, for one token (chapter 12's decoding step) and for many."""

import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlib
from attnlib.linear import Linear


def test_linear_is_nn_linear_with_nothing_added():
    # issue 34: no product of its own (the row-blocked one was 2x slower than F.linear on the course's machine)
    assert issubclass(Linear, nn.Linear) and attnlib.Linear is Linear
    assert Linear.forward is nn.Linear.forward
    layer, ref = Linear(32, 64), nn.Linear(32, 64)
    assert [(n, p.shape) for n, p in layer.named_parameters()] == [(n, p.shape) for n, p in ref.named_parameters()]
    assert list(layer.buffers()) == [] and repr(layer) == repr(ref)


@pytest.mark.parametrize("d_in, d_out", [(64, 256), (48, 8), (30, 7), (768, 2304), (16, 29 * 3)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (2, 3)])
def test_one_row_and_many_equal_nn_linear(d_in, d_out, bias, shape):
    torch.manual_seed(0)
    layer, ref = Linear(d_in, d_out, bias=bias), nn.Linear(d_in, d_out, bias=bias)
    ref.load_state_dict(layer.state_dict())  # the same parameters, the same names
    x = torch.randn(*shape, d_in)
    y = layer(x)
    assert y.shape == (*shape, d_out)
    assert torch.equal(y, ref(x))
    torch.testing.assert_close(y, x @ layer.weight.T + (0 if layer.bias is None else layer.bias), rtol=1e-5, atol=1e-5)


def test_one_row_that_is_not_contiguous():
    torch.manual_seed(0)
    layer = Linear(32, 64)
    x = torch.randn(1, 5, 64)[:, 2, ::2]  # (1, 32) with stride 2
    torch.testing.assert_close(layer(x), F.linear(x.contiguous(), layer.weight, layer.bias), rtol=1e-6, atol=1e-6)


def test_gradients_of_one_row_equal_nn_linear():
    torch.manual_seed(0)
    layer, ref = Linear(32, 64), nn.Linear(32, 64)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(1, 32, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    layer(x).square().sum().backward()
    ref(x_ref).square().sum().backward()
    for got, want in [(x.grad, x_ref.grad), (layer.weight.grad, ref.weight.grad), (layer.bias.grad, ref.bias.grad)]:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_every_matrix_of_a_gpt_is_a_linear_in_nn_linears_layout():
    torch.manual_seed(0)
    config = attnlib.GPTConfig(vocab_size=200, context_length=16, d_model=64, n_layers=2, n_heads=4)
    model = attnlib.GPT(config)
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(layers) == 6 * config.n_layers + 1  # q, k, v, o, two MLP matrices per block; the output head
    assert all(type(m) is Linear and m.weight.shape == (m.out_features, m.in_features) for m in layers)
    assert all(m.weight.is_contiguous() for m in layers)


def test_a_model_saved_whole_loads_back():
    torch.manual_seed(0)
    model = nn.Sequential(Linear(8, 16), nn.ReLU(), Linear(16, 4, bias=False))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = torch.randn(3, 8)
    assert type(loaded[0]) is Linear and torch.equal(loaded(x), model(x))
