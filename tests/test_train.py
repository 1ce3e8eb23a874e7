"""Chapter 10: the GPT's attention weights, the reversal task, the next-token loss and the
training loop, against PyTorch and the formulas."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlib._validate import AttnlibError
from attnlib.model import GPT, GPTConfig
from attnlib.train import IGNORE, next_token_loss, reverse_batch, train

TINY = GPTConfig(vocab_size=11, context_length=9, d_model=12, n_layers=2, n_heads=3)


def raises(*fragments):
    """pytest.raises(AttnlibError) whose message contains every fragment, in order."""
    return pytest.raises(AttnlibError, match=".*".join(re.escape(f) for f in fragments))


# ---------------------------------------------------------------- GPT(ids, need_weights=True)


def _model(seed=0, config=TINY):
    torch.manual_seed(seed)
    model = GPT(config).double().eval()
    with torch.no_grad():  # larger weights than GPT-2's init: weights far from uniform, a sharper test
        for block in model.blocks:
            for lin in (block.attn.w_q, block.attn.w_k):
                lin.weight.normal_(0, 0.5)
    return model


def test_weights_shapes_rows_and_causality():
    model = _model()
    ids = torch.randint(0, 11, (2, 7))
    logits, weights = model(ids, need_weights=True)
    assert logits.shape == (2, 7, 11) and len(weights) == TINY.n_layers
    allowed = torch.ones(7, 7, dtype=torch.bool).tril()
    for w in weights:
        assert w.shape == (2, TINY.n_heads, 7, 7)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, TINY.n_heads, 7, dtype=torch.float64))
        assert (w[..., ~allowed] == 0).all()  # nothing above the diagonal
        assert (w[..., allowed] > 0).all()  # every allowed key some weight
        assert w.std() > 0.05  # not uniform: the test can fail


def test_weights_path_gives_the_fast_paths_logits():
    model = _model()
    ids = torch.randint(0, 11, (3, 9))
    torch.testing.assert_close(model(ids, need_weights=True)[0], model(ids))


def test_weights_equal_attention_recomputed_by_hand():
    """Every layer's weights: softmax(Q_h K_h^T / sqrt(d_head)) with the causal mask, from the
    block's own modules, the hidden state passed on by the earlier blocks."""
    model = _model()
    ids = torch.randint(0, 11, (2, 8))
    _, weights = model(ids, need_weights=True)
    x = model.tok_emb.weight[ids] + model.pos_emb.weight[:8]  # (B, T, d_model)
    n_heads, d_head = TINY.n_heads, TINY.d_model // TINY.n_heads
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    for block, w in zip(model.blocks, weights):
        h = F.layer_norm(x, (TINY.d_model,), block.ln1.weight, block.ln1.bias)
        a = block.attn
        q = (h @ a.w_q.weight.T + a.w_q.bias).view(2, 8, n_heads, d_head).transpose(1, 2)
        k = (h @ a.w_k.weight.T + a.w_k.bias).view(2, 8, n_heads, d_head).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(~causal, float("-inf"))
        torch.testing.assert_close(w, torch.softmax(scores, dim=-1))
        x = block(x)


def test_weights_equal_torch_multihead_attention():
    """nn.MultiheadAttention loaded with a block's weights returns the same per-head weights
    (its boolean mask means True = blocked: ~allowed)."""
    model = _model(seed=1)
    ids = torch.randint(0, 11, (2, 6))
    _, weights = model(ids, need_weights=True)
    block, a = model.blocks[0], model.blocks[0].attn
    ref = nn.MultiheadAttention(TINY.d_model, TINY.n_heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
        ref.out_proj.load_state_dict(a.w_o.state_dict())
        h = block.ln1(model.tok_emb(ids) + model.pos_emb(torch.arange(6)))
        allowed = torch.ones(6, 6, dtype=torch.bool).tril()
        _, w_ref = ref(h, h, h, attn_mask=~allowed, average_attn_weights=False)
    torch.testing.assert_close(weights[0], w_ref)


def test_block_need_weights_and_bad_flags():
    model = _model()
    x = torch.randn(2, 5, TINY.d_model, dtype=torch.float64)
    out, w = model.blocks[0](x, need_weights=True)
    torch.testing.assert_close(out, model.blocks[0](x))
    assert w.shape == (2, TINY.n_heads, 5, 5)
    with raises("need_weights:", "True or False", "1"):
        model(torch.zeros(1, 3, dtype=torch.long), need_weights=1)
    with raises("need_weights:", "True or False"):
        model.blocks[0](x, need_weights="yes")


# ---------------------------------------------------------------- reverse_batch


def test_reverse_batch_layout():
    g = torch.Generator().manual_seed(0)
    ids, targets, mask = reverse_batch(64, 5, 11, generator=g)
    L, T = 5, 11
    assert ids.shape == targets.shape == mask.shape == (64, T)
    assert ids.dtype == targets.dtype == torch.int64 and mask.dtype == torch.bool
    assert (ids[:, L] == 10).all()  # the separator, vocab_size - 1
    assert (ids[:, :L] < 10).all() and (ids[:, :L] >= 0).all()  # digits only before it
    for b in range(64):
        assert ids[b, L + 1 :].tolist() == ids[b, :L].tolist()[::-1]  # reversed after it
    assert torch.equal(targets[:, :-1], ids[:, 1:]) and (targets[:, -1] == IGNORE).all()
    assert mask[0].tolist() == [False] * L + [True] * L + [False]
    assert (mask == mask[0]).all()
    t = torch.arange(T)
    rows = torch.arange(64)[:, None]
    # where the mask is True, the next token is the digit at key 2L - 1 - t: the anti-diagonal
    assert torch.equal(targets[:, L : 2 * L], ids[rows, (2 * L - 1 - t[L : 2 * L])[None]])


def test_reverse_batch_is_seeded_and_uses_every_digit():
    a = reverse_batch(200, 6, 11, generator=torch.Generator().manual_seed(3))
    b = reverse_batch(200, 6, 11, generator=torch.Generator().manual_seed(3))
    c = reverse_batch(200, 6, 11, generator=torch.Generator().manual_seed(4))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert set(a[0][:, :6].flatten().tolist()) == set(range(10))


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        (dict(batch_size=0, length=3, vocab_size=11), ("batch_size:", "positive int", "0")),
        (dict(batch_size=2, length=0, vocab_size=11), ("length:", "positive int")),
        (dict(batch_size=2, length=3, vocab_size=2), ("vocab_size:", "at least 3", "vocab_size=2")),
        (dict(batch_size=2, length=3.0, vocab_size=11), ("length:", "positive int", "float")),
        (dict(batch_size=2, length=3, vocab_size=11, generator=3), ("generator:", "CPU torch.Generator", "int 3")),
    ],
)
def test_reverse_batch_errors(kwargs, fragments):
    with raises(*fragments):
        reverse_batch(**kwargs)


# ---------------------------------------------------------------- next_token_loss


def test_loss_is_the_formula():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=torch.float64)
    targets = torch.randint(0, 7, (3, 5))
    mask = torch.rand(3, 5) < 0.5
    mask[0, 0] = True
    log_p = torch.log_softmax(logits, dim=-1)
    terms = [-log_p[b, t, targets[b, t]] for b in range(3) for t in range(5) if mask[b, t]]
    torch.testing.assert_close(next_token_loss(logits, targets, mask), torch.stack(terms).mean())
    # no mask: every position whose target is not IGNORE
    targets[1, 2] = IGNORE
    kept = targets != IGNORE
    torch.testing.assert_close(next_token_loss(logits, targets), F.cross_entropy(logits[kept], targets[kept]))
    # uniform logits: log(vocab_size)
    assert math.isclose(
        next_token_loss(torch.zeros(2, 4, 7), torch.ones(2, 4, dtype=torch.long)).item(), math.log(7), rel_tol=1e-6
    )


@pytest.mark.parametrize(
    "args, fragments",
    [
        ((torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long)), ("logits:", "(B, T, vocab_size)")),
        ((torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long)), ("targets:", "(B, T) = (2, 3)", "(2, 4)")),
        ((torch.zeros(2, 3, 5), torch.zeros(2, 3)), ("targets:", "integer", "float32")),
        ((torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3)), ("mask:", "boolean")),
        (
            (torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.bool)),
            ("mask:", "at least one True"),
        ),
        ((torch.zeros(2, 3, 5), torch.full((2, 3), 5)), ("targets:", "[0, 4] where mask is True", "5")),
    ],
)
def test_loss_errors(args, fragments):
    with raises(*fragments):
        next_token_loss(*args)


def test_loss_ignore_without_mask_is_skipped_but_with_mask_is_an_error():
    logits = torch.zeros(1, 3, 5)
    targets = torch.tensor([[1, 2, IGNORE]])
    assert math.isclose(next_token_loss(logits, targets).item(), math.log(5), rel_tol=1e-6)
    with raises("targets:", "where mask is True", "-100"):
        next_token_loss(logits, targets, torch.ones(1, 3, dtype=torch.bool))


# ---------------------------------------------------------------- train


def _tiny_run(steps=60, seed=0, **kwargs):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=6, context_length=7, d_model=16, n_layers=1, n_heads=2))
    g = torch.Generator().manual_seed(seed)
    return model, train(model, lambda: reverse_batch(32, 3, 6, generator=g), steps=steps, lr=1e-2, **kwargs)


def test_training_lowers_the_loss_and_is_reproducible():
    model, losses = _tiny_run()
    assert len(losses) == 60 and all(isinstance(x, float) for x in losses)
    assert abs(losses[0] - math.log(6)) < 0.1  # a fresh model guesses uniformly
    assert sum(losses[-10:]) / 10 < 0.5 * losses[0]
    assert _tiny_run()[1] == losses  # seeded: the same losses again
    assert model.training  # it started in training mode
    ids, targets, mask = reverse_batch(256, 3, 6, generator=torch.Generator().manual_seed(99))
    with torch.no_grad():
        trained = next_token_loss(model(ids), targets, mask).item()
    assert trained < 0.5 * losses[0]  # and on fresh sequences too


def test_training_restores_the_mode_and_changes_every_attention_matrix():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=6, context_length=7, d_model=16, n_layers=1, n_heads=2)).eval()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    g = torch.Generator().manual_seed(0)
    train(model, lambda: reverse_batch(8, 3, 6, generator=g), steps=3)
    assert model.training is False
    for name in ("w_q", "w_k", "w_v", "w_o"):
        key = f"blocks.0.attn.{name}.weight"
        assert not torch.equal(before[key], dict(model.named_parameters())[key]), key


def test_progress_bar_goes_to_stderr(capsys):
    _tiny_run(steps=5, progress=True, desc="reversal")
    out, err = capsys.readouterr()
    assert out == "" and "reversal" in err and "5/5" in err


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        (dict(model="gpt"), ("model:", "torch.nn.Module", "str 'gpt'")),
        (dict(make_batch=[1, 2, 3]), ("make_batch:", "function", "list")),
        (dict(steps=0), ("steps:", "positive int", "0")),
        (dict(lr=0.0), ("lr:", "positive number", "0.0")),
        (dict(lr=-1e-3), ("lr:", "positive number")),
        (dict(weight_decay=-0.1), ("weight_decay:", "non-negative number")),
        (dict(progress="yes"), ("progress:", "True or False")),
        (dict(make_batch=lambda: torch.zeros(2, 3)), ("make_batch:", "tuple (ids, targets, mask)", "tensor")),
    ],
)
def test_train_errors(kwargs, fragments):
    torch.manual_seed(0)
    args = dict(
        model=GPT(GPTConfig(vocab_size=6, context_length=7, d_model=8, n_layers=1, n_heads=2)),
        make_batch=lambda: reverse_batch(4, 3, 6),
        steps=2,
    )
    args.update(kwargs)
    with raises(*fragments):
        train(**args)


def test_train_rejects_a_model_without_parameters():
    with raises("model:", "trainable parameters", "Identity"):
        train(nn.Identity(), lambda: reverse_batch(4, 3, 6), steps=1)


# ---------------------------------------------------------------- plot.loss_curve


def test_loss_curve_draws_the_losses_and_their_running_mean():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from attnlib import plot

    losses = [2.4, 2.0, 1.0, 0.5, 0.25, 0.2]
    fig = plot.loss_curve(losses, window=3, reference=math.log(11), reference_label="uniform guess", log=True)
    ax = fig.axes[0]
    raw, mean, ref = ax.lines
    assert raw.get_ydata().tolist() == losses and raw.get_xdata().tolist() == list(range(6))
    expected = [2.4, 2.2, 5.4 / 3, 3.5 / 3, 1.75 / 3, 0.95 / 3]  # fewer steps in the first windows
    np.testing.assert_allclose(mean.get_ydata(), expected)
    assert ref.get_ydata()[0] == pytest.approx(math.log(11)) and ref.get_label() == "uniform guess"
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "training step"
    plt.close(fig)
    fig = plot.loss_curve(torch.tensor(losses), window=1)  # a tensor works; window 1: no smoothing
    np.testing.assert_allclose(fig.axes[0].lines[1].get_ydata(), losses)
    plt.close(fig)


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        (dict(losses=[]), ("losses:", "non-empty 1-D", "(0,)")),
        (dict(losses=[1.0, float("nan")]), ("losses:", "finite", "inf or nan")),
        (dict(losses=["a"]), ("losses:", "sequence of numbers", "list")),
        (dict(losses=[1.0, 0.0], log=True), ("losses:", "positive numbers (log=True)", "0.0")),
        (dict(losses=[1.0], window=0), ("window:", "positive int", "0")),
    ],
)
def test_loss_curve_errors(kwargs, fragments):
    from attnlib import plot

    with raises(*fragments):
        plot.loss_curve(**kwargs)


def test_return_weights_is_the_old_name_of_need_weights():
    """GPT.forward, TransformerBlock.forward and MultiHeadAttention.forward share one flag, need_weights;
    the old name still works, warns, and gives the same result."""
    model = _model()
    ids = torch.randint(0, 11, (2, 5))
    logits, weights = model(ids, need_weights=True)
    with pytest.warns(DeprecationWarning, match="return_weights is deprecated: use need_weights=True"):
        old_logits, old_weights = model(ids, return_weights=True)
    torch.testing.assert_close(old_logits, logits)
    for w_old, w in zip(old_weights, weights, strict=True):
        torch.testing.assert_close(w_old, w)
    with pytest.warns(DeprecationWarning):
        torch.testing.assert_close(model(ids, return_weights=False), model(ids))
    with raises("return_weights:", "not given together with need_weights"):
        model(ids, need_weights=True, return_weights=True)


# ---------------------------------------------------------------- train(..., callback=...)


class _DropoutLM(nn.Module):
    """A tiny next-token model with dropout: its training draws from the global RNG."""

    def __init__(self, vocab_size=6, d=16):
        super().__init__()
        self.emb, self.drop, self.out = nn.Embedding(vocab_size, d), nn.Dropout(0.3), nn.Linear(d, vocab_size)

    def forward(self, ids):
        return self.out(self.drop(self.emb(ids)))  # (B, T) -> (B, T, d) -> (B, T, vocab_size)


def _dropout_run(callback=None, steps=12):
    torch.manual_seed(0)
    model = _DropoutLM()
    g = torch.Generator().manual_seed(0)
    losses = train(model, lambda: reverse_batch(16, 3, 6, generator=g), steps=steps, lr=1e-2, callback=callback)
    return model, losses


def test_callback_sees_every_step_in_order_after_its_update():
    calls, params = [], {}

    def callback(step, model):
        calls.append((step, model.training, torch.is_grad_enabled()))
        params[step] = [p.detach().clone() for p in model.parameters()]

    model, _ = _tiny_run(steps=7, callback=callback)
    assert calls == [(s, True, True) for s in range(1, 8)]  # steps 1..7, training mode, gradients on
    for steps in (1, 4, 7):  # what it sees at step s: the parameters after s updates
        after, _ = _tiny_run(steps=steps)
        for seen, p in zip(params[steps], after.parameters()):
            assert torch.equal(seen, p.detach())
    assert all(torch.equal(a, p.detach()) for a, p in zip(params[7], model.parameters()))


def test_a_callback_that_evaluates_leaves_the_training_unchanged():
    """An eval-mode snapshot under no_grad changes nothing: the same losses and parameters as without a
    callback, with a model whose dropout draws from the global RNG during training. A callback that
    leaves the model in eval mode changes nothing either (train switches it back)."""
    model, losses = _dropout_run()
    snapshots = []

    def snapshot(step, m):
        m.eval()
        with torch.no_grad():
            snapshots.append(torch.softmax(m(torch.arange(6)[None]), dim=-1))
        m.train()

    def forgetful(step, m):
        m.eval()  # and never back: train puts it back in training mode

    for callback in (snapshot, forgetful):
        watched, watched_losses = _dropout_run(callback)
        assert watched_losses == losses
        assert all(torch.equal(a, b) for a, b in zip(watched.parameters(), model.parameters()))
    assert len(snapshots) == 12 and not torch.equal(snapshots[0], snapshots[-1])  # it did watch the model learn
    # the test can fail: a callback that draws from the global RNG (as dropout does) changes the losses
    assert _dropout_run(lambda step, m: torch.rand(1))[1] != losses


@pytest.mark.parametrize("callback", ["print", 3, [print]])
def test_callback_must_be_callable(callback):
    with raises("callback:", "None or a function callback(step, model)", f"{type(callback).__name__}"):
        _tiny_run(steps=2, callback=callback)
