"""attnlib's linear layer: ``nn.Linear``, under the name every attnlib layer builds (chapter 6).

``y = x W^T + b``: ``x (..., d_in)``, ``W (d_out, d_in)``, ``b (d_out,)``, ``y (..., d_out)``.
For one token (a cached decoding step, chapter 12) it is a matrix-vector product, one multiply-add
per weight, so its time is the time to read ``W`` from memory; PyTorch's own product runs it at
about that speed (``benchmarks/README.md``).

An earlier attnlib ``Linear`` had a product of its own for a single row (``W``'s rows in blocks, one
batched ``baddbmm``), tuned on one machine. Measured side by side against ``F.linear`` on the same
weights it was about 2x slower at 1 and 2 threads on the course's 2-core machine, for every one of
GPT-2 small's shapes, so it went: a speed trick that wins on one machine and loses on another does
not belong in a teaching library.
"""

from __future__ import annotations

from torch import nn


class Linear(nn.Linear):
    """``nn.Linear`` itself: the same arguments, parameters, ``state_dict``, products and gradients.

    attnlib's layers build their matrices with this name, so that a model's linear layers are found
    with ``isinstance(m, attnlib.Linear)`` and a model saved whole (``torch.save(model)``) still loads;
    it adds nothing to ``nn.Linear``.

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> layer, x = Linear(64, 256), torch.randn(1, 1, 64)         # one token: (B, T, d_in)
        >>> y = layer(x)                                              # x W^T + b
        >>> y.shape, torch.equal(y, nn.functional.linear(x, layer.weight, layer.bias))
        (torch.Size([1, 1, 256]), True)
    """
