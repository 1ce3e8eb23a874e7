"""attnlib.embedding against PyTorch: table[ids], nn.Embedding and F.one_hot."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import AttnlibError, embed, one_hot


@settings(max_examples=50, deadline=None, derandomize=True)
@given(
    V=st.integers(1, 40),
    d=st.integers(1, 8),
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    seed=st.integers(0, 2**31 - 1),
)
def test_embed_equals_lookup_and_nn_embedding(V, d, shape, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, tuple(shape), generator=g)
    table = torch.randn(V, d, generator=g)
    expected = table[ids]
    layer = nn.Embedding(V, d)
    with torch.no_grad():
        layer.weight.copy_(table)
    assert embed(ids, table).shape == (*shape, d)
    assert torch.equal(embed(ids, table), expected)  # exact: one-hot rows select rows
    assert torch.equal(layer(ids), embed(ids, table))
    assert torch.equal(one_hot(ids, V), F.one_hot(ids, V).float())


def test_embed_float64_and_int32_ids():
    table = torch.randn(5, 3, dtype=torch.float64)
    ids = torch.tensor([4, 0, 4], dtype=torch.int32)
    out = embed(ids, table)
    assert out.dtype == torch.float64 and torch.equal(out, table[ids.long()])


def test_embed_gradient_only_touches_used_rows():
    table = torch.randn(6, 2, requires_grad=True)
    embed(torch.tensor([1, 3, 1]), table).sum().backward()
    used = table.grad.abs().sum(dim=1) != 0
    assert used.tolist() == [False, True, False, True, False, False]
    assert table.grad[1].tolist() == [2.0, 2.0]  # row 1 was used twice


@pytest.mark.parametrize(
    "ids, match",
    [
        (torch.tensor([0, 5]), r"ids: expected token ids in \[0, 4\] \(vocab_size=5\), received id 5"),
        (torch.tensor([-1, 2]), r"ids: expected token ids in \[0, 4\].*received id -1"),
        (torch.tensor([0.0, 1.0]), r"ids: expected an integer tensor of token ids, received .*torch.float32"),
        (torch.tensor([True]), r"ids: expected an integer tensor.*torch.bool"),
        ([0, 1], r"ids: expected a torch.Tensor, received list \[0, 1\]"),
    ],
)
def test_bad_ids(ids, match):
    with pytest.raises(AttnlibError, match=match):
        embed(ids, torch.zeros(5, 2))
    with pytest.raises(AttnlibError, match=match):
        one_hot(ids, 5)


def test_bad_table_and_vocab_size():
    with pytest.raises(
        AttnlibError, match=r"table: expected a 2-D tensor of shape \(vocab_size, d_model\), received .*\(5,\)"
    ):
        embed(torch.tensor([0]), torch.zeros(5))
    with pytest.raises(AttnlibError, match=r"table: expected a floating-point tensor, received .*torch.int64"):
        embed(torch.tensor([0]), torch.zeros(5, 2, dtype=torch.long))
    with pytest.raises(AttnlibError, match=r"vocab_size: expected a positive int, received int 0"):
        one_hot(torch.tensor([0]), 0)
    with pytest.raises(ValueError):  # AttnlibError is a ValueError
        one_hot(torch.tensor([0]), 2.5)
