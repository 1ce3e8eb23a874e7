"""Chapter 10: training a small GPT on a task whose attention pattern is known in advance.

The task is reversal: ``n`` random digits, a separator, then the same digits backwards,

    ids = a_1 a_2 ... a_n | a_n ... a_2 a_1          # T = 2 n + 1 tokens

In the second half every next token is a digit of the first half: the query at position
``t`` (from the separator, ``t = n``, to ``t = 2 n - 1``) must predict ``ids[t + 1] =
ids[2 n - 1 - t]``. Attention is the only step that moves information between positions,
so a trained model must attend from query ``t`` to key ``2 n - 1 - t``: an anti-diagonal.

The loss is the next-token cross-entropy, averaged over the N positions where a mask is True:

    loss = -(1 / N) * sum over (b, t) with mask[b, t] of log softmax(logits[b, t])[targets[b, t]]

* ``reverse_batch``: a batch of such sequences, with the next-token targets and the mask.
* ``next_token_loss``: the loss above, ``F.cross_entropy`` on the masked positions.
* ``train``: AdamW steps on batches from a function, an optional progress bar (tqdm), and
  an optional ``callback(step, model)`` after every update (to watch the model learn).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_logits_targets,
    check_loss_mask,
    check_reverse_batch,
    check_train,
    ensure_batch,
    ensure_trainable,
)
from ._validate import ensure_callable, ensure_in_range

__all__ = ["reverse_batch", "next_token_loss", "train"]

IGNORE = -100  # the target where there is no next token: F.cross_entropy's ignore_index


def reverse_batch(
    batch_size: int, length: int, vocab_size: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of reversal sequences: ``(ids, targets, mask)``, each ``(batch_size, 2 * length + 1)``.

    With ``n = length`` and the separator ``sep = vocab_size - 1``::

        ids[b]     = a_1 ... a_n  sep  a_n ... a_1        a_i drawn uniformly from 0 .. vocab_size - 2
        targets[b] = ids[b] shifted left by one: targets[b, t] = ids[b, t + 1],
                     IGNORE = -100 at t = 2n, where there is no next token
        mask[b]    = True at t = n .. 2n - 1: from the separator on, where the next token is
                     a digit of the first half, ids[b, 2n - 1 - t]

    The first half is random, so nothing in it can be predicted: the mask leaves it out.

    Args:
        batch_size: number of sequences ``B``.
        length: the number of digits ``n`` to reverse; the sequences have ``T = 2 n + 1`` tokens.
        vocab_size: number of token ids, at least 3: ``vocab_size - 1`` digits and the separator.
        generator: a CPU ``torch.Generator`` for reproducible batches (None: the global one).

    Returns:
        ``ids`` (B, T) int64, ``targets`` (B, T) int64, ``mask`` (B, T) bool, on the CPU.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> ids, targets, mask = reverse_batch(1, length=3, vocab_size=11, generator=g)
        >>> ids[0, 4:].tolist() == ids[0, :3].flip(0).tolist(), ids[0, 3].item()   # reversed; sep = 10
        (True, 10)
        >>> mask[0].int().tolist()                                 # predict from the separator on
        [0, 0, 0, 1, 1, 1, 0]
        >>> targets[0, 3:6].tolist() == ids[0, 4:].tolist(), targets[0, 6].item()
        (True, -100)
    """
    check_reverse_batch(batch_size, length, vocab_size, generator)
    n, T = length, 2 * length + 1
    digits = torch.randint(0, vocab_size - 1, (batch_size, n), generator=generator)  # (B, n)
    sep = torch.full((batch_size, 1), vocab_size - 1)  # (B, 1)
    ids = torch.cat([digits, sep, digits.flip(1)], dim=1)  # (B, 2n + 1)
    targets = torch.full_like(ids, IGNORE)
    targets[:, :-1] = ids[:, 1:]  # the next token
    t = torch.arange(T)
    mask = ((t >= n) & (t <= 2 * n - 1)).expand(batch_size, T).clone()  # (T,) -> (B, T)
    return ids, targets, mask


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The next-token cross-entropy, averaged over the positions where ``mask`` is True.

    ``loss = -(1 / N) * sum over (b, t) with mask[b, t] of log softmax(logits[b, t])[targets[b, t]]``,
    ``N = mask.sum()``: that is ``F.cross_entropy(logits[mask], targets[mask])``.
    Guessing uniformly among ``vocab_size`` tokens gives ``log(vocab_size)``; a model sure of
    every right answer gives 0.

    Args:
        logits: floating point ``(B, T, vocab_size)``, the model's output.
        targets: integer ``(B, T)``, the token that should come next, in ``[0, vocab_size)`` where
            ``mask`` is True.
        mask: boolean ``(B, T)``, True where the loss counts; ``None`` (default): every position
            whose target is not ``IGNORE`` (-100).

    Returns:
        A scalar tensor, in ``logits``' dtype.

    Example:
        >>> logits = torch.zeros(1, 3, 4)                        # uniform over 4 tokens
        >>> targets = torch.tensor([[2, 0, -100]])
        >>> round(next_token_loss(logits, targets).item(), 4)   # log 4
        1.3863
    """
    check_logits_targets(logits, targets)
    if mask is None:
        mask = targets != IGNORE
    check_loss_mask(mask, targets)
    picked = targets[mask]  # (N,)
    vocab_size = logits.shape[-1]
    ensure_in_range("targets", picked, 0, vocab_size - 1, f"token ids in [0, {vocab_size - 1}] where mask is True")
    return F.cross_entropy(logits[mask], picked)  # (N, vocab_size), (N,) -> ()


def train(
    model: nn.Module,
    make_batch: Callable[[], tuple],
    steps: int,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    progress: bool = False,
    desc: str = "training",
    callback: Callable[[int, nn.Module], object] | None = None,
) -> list[float]:
    """Train ``model`` for ``steps`` steps of AdamW on the next-token loss; return the losses.

    Each step: ``ids, targets, mask = make_batch()``, ``loss = next_token_loss(model(ids),
    targets, mask)``, ``loss.backward()`` (the gradient of the loss with respect to every
    parameter), then one AdamW update of every parameter. The batches are moved to the
    model's device. The model is in training mode during the loop and returns to its mode
    afterwards. Nothing here is random: seed the model's initialisation and ``make_batch``'s
    generator, and the losses are reproducible on one machine.

    Args:
        model: maps ids ``(B, T)`` to logits ``(B, T, vocab_size)``, e.g. an ``attnlib.GPT``.
        make_batch: called once per step, without arguments; returns ``(ids, targets, mask)``
            as :func:`reverse_batch` does.
        steps: the number of updates.
        lr: AdamW's learning rate.
        weight_decay: AdamW's decoupled weight decay (0 by default).
        progress: show a text progress bar (tqdm) with the recent loss.
        desc: the progress bar's label.
        callback: ``None`` (default) or a function called as ``callback(step, model)`` after
            each update, ``step = 1 .. steps`` (the number of updates made so far); its return
            value is ignored. It is called with the model in training mode and under no special
            grad mode (gradients on, as the loop runs): a callback that evaluates the model
            should use ``torch.no_grad()`` and ``model.eval()``, then ``model.train()`` again,
            and draw no random numbers from a generator the training uses (the global one
            included: dropout would). Such a callback leaves the training unchanged: the same
            losses, the same parameters. ``train`` puts the model back in training mode after
            each call, in case the callback did not.

    Returns:
        The loss of every step, a list of ``steps`` floats.

    Example:
        >>> from attnlib.model import GPT, GPTConfig
        >>> _ = torch.manual_seed(0)
        >>> g = torch.Generator().manual_seed(0)
        >>> model = GPT(GPTConfig(vocab_size=11, context_length=7, d_model=16, n_layers=1, n_heads=2))
        >>> losses = train(model, lambda: reverse_batch(32, 3, 11, generator=g), steps=40, lr=1e-2)
        >>> len(losses), round(losses[0], 1), sum(losses[-10:]) / 10 < losses[0] / 2   # starts at log 11
        (40, 2.4, True)

        Watching the model: record something after every 10th update.

        >>> seen = []
        >>> def watch(step, model):
        ...     if step % 10 == 0:
        ...         model.eval()
        ...         with torch.no_grad():
        ...             seen.append((step, model(torch.zeros(1, 7, dtype=torch.long)).shape))
        ...         model.train()
        >>> _ = train(model, lambda: reverse_batch(32, 3, 11, generator=g), steps=20, lr=1e-2, callback=watch)
        >>> seen
        [(10, torch.Size([1, 7, 11])), (20, torch.Size([1, 7, 11]))]
    """
    check_train(model, make_batch, steps, lr, weight_decay, progress)
    if callback is not None:
        ensure_callable("callback", callback, "None or a function callback(step, model)")
    params = ensure_trainable(model, [p for p in model.parameters() if p.requires_grad])
    device = params[0].device
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)
    bar = None
    if progress:
        from tqdm import tqdm  # text bar on stderr: no widgets, no JavaScript

        bar = tqdm(total=steps, desc=desc, mininterval=1.0)  # at most one update a second
    was_training = model.training
    model.train()
    losses = []
    try:
        for step in range(steps):
            batch = ensure_batch(make_batch())  # a tuple (ids, targets, mask)
            ids, targets, mask = (x.to(device) for x in batch)
            loss = next_token_loss(model(ids), targets, mask)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # gradients of the loss
            optimizer.step()  # one AdamW update of every parameter
            losses.append(loss.item())
            if callback is not None:
                callback(step + 1, model)  # after update step + 1, with the model in training mode
                model.train()  # as the loop needs it, whatever the callback did
            if bar is not None:
                bar.update(1)
                if step % 50 == 0 or step == steps - 1:
                    bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    finally:
        if bar is not None:
            bar.close()
        model.train(was_training)
    return losses
