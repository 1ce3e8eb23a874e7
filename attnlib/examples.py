"""The worked data the chapters share, typed once.

* ``CORPUS``, ``SENTENCE``, ``vocabulary()``: the two-sentence corpus of chapter 1
  and its vocabulary; chapters 2-6 embed ``SENTENCE`` (6 tokens).
* ``sentence_embeddings(d_model, seed)``: ``SENTENCE`` embedded with chapter 1's
  kind of table (standard normal entries rounded to 2 decimals), for chapters
  that need a small real-looking ``X``.
* ``illustrated()``: the worked example of "Illustrated: Self-Attention" (source
  [E]): three inputs of size ``d_model = 4`` and the weights ``W_K``, ``W_Q``,
  ``W_V`` of shape ``(d_model, 3)``. ``ILLUSTRATED_PUBLISHED`` holds the keys,
  queries, values and raw scores exactly as the article prints them, and
  ``ILLUSTRATED_ROUNDED_WEIGHTS`` and ``ILLUSTRATED_OUTPUTS`` the weights and
  outputs it prints after rounding (chapter 5 shows why those differ from the
  exact ones). The chapters compute everything else from the inputs.

Row vectors throughout: ``K = X @ W_K`` with ``X`` of shape ``(T, d_model)``.

>>> ex = illustrated()
>>> ex["X"].shape, ex["W_Q"].shape
(torch.Size([3, 4]), torch.Size([4, 3]))
>>> (ex["X"] @ ex["W_K"]).tolist() == ILLUSTRATED_PUBLISHED["keys"]
True
>>> emb = sentence_embeddings()
>>> emb["tokens"], emb["ids"].tolist(), tuple(emb["X"].shape)
(['a', 'cat', 'is', 'running', 'to', 'you'], [0, 1, 2, 3, 4, 5], (6, 4))
>>> vocabulary()
['a', 'cat', 'is', 'running', 'to', 'you', 'the', 'dog', 'sleeping']
"""

from __future__ import annotations

import torch

CORPUS = ["a cat is running to you", "the dog is sleeping"]
SENTENCE = CORPUS[0]

# Source [E], "Illustrated: Self-Attention", step 1 (inputs) and step 2 (weights).
_X = [
    [1, 0, 1, 0],  # input 1
    [0, 2, 0, 2],  # input 2
    [1, 1, 1, 1],
]  # input 3
_W_K = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]]
_W_Q = [[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]]
_W_V = [[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]]

# What the article prints: step 3 (keys, queries, values) and step 4 (raw scores, no scaling).
ILLUSTRATED_PUBLISHED = {
    "keys": [[0, 1, 1], [4, 4, 0], [2, 3, 1]],
    "queries": [[1, 0, 2], [2, 2, 2], [2, 1, 3]],
    "values": [[1, 2, 3], [2, 8, 0], [2, 6, 3]],
    "scores": [[2, 4, 4], [4, 16, 12], [4, 12, 10]],
}
# Step 5's softmax weights "rounded to one decimal" and the outputs of steps 6-7.
ILLUSTRATED_ROUNDED_WEIGHTS = [[0.0, 0.5, 0.5], [0.0, 1.0, 0.0], [0.0, 0.9, 0.1]]
ILLUSTRATED_OUTPUTS = [[2.0, 7.0, 1.5], [2.0, 8.0, 0.0], [2.0, 7.8, 0.3]]


def vocabulary(corpus: list[str] = CORPUS) -> list[str]:
    """The distinct words of ``corpus`` in order of first appearance: id ``i`` is ``vocabulary()[i]``."""
    return list(dict.fromkeys(word for line in corpus for word in line.split()))


def illustrated(device=None, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Source [E]'s inputs and weights as fresh tensors.

    Returns a dict with ``X`` of shape ``(T, d_model) = (3, 4)`` and ``W_K``,
    ``W_Q``, ``W_V`` of shape ``(d_model, d_k) = (4, 3)`` (``d_v = d_k = 3``).
    Every entry is a small whole number, so every product is exact in floating point.
    """

    def t(rows):
        return torch.tensor(rows, dtype=dtype, device=device)

    return {"X": t(_X), "W_K": t(_W_K), "W_Q": t(_W_Q), "W_V": t(_W_V)}


def sentence_embeddings(
    d_model: int = 4, seed: int = 0, sentence: str = SENTENCE, corpus: list[str] = CORPUS, device=None
) -> dict:
    """``sentence`` embedded with a seeded table, as chapter 1 builds it.

    ``table[i] ~ N(0, 1)`` per entry, rounded to 2 decimals (drawn on the CPU
    from ``torch.Generator().manual_seed(seed)``, then moved to ``device``, so
    the numbers are the same on any device), and ``X = table[ids]``.

    Returns a dict: ``tokens`` (list of ``T`` words), ``vocab`` (list of
    ``vocab_size`` words), ``ids`` of shape ``(T,)``, ``table`` of shape
    ``(vocab_size, d_model)`` and ``X`` of shape ``(T, d_model)``.
    """
    from ._checks import check_sentence

    vocab = vocabulary(corpus)
    tokens = sentence.split()
    check_sentence(sentence, tokens, vocab, d_model)
    g = torch.Generator().manual_seed(seed)
    table = (torch.randn(len(vocab), d_model, generator=g).round(decimals=2) + 0.0).to(device)  # + 0.0: no -0.0
    ids = torch.tensor([vocab.index(t) for t in tokens], device=device)  # (T,)
    return {"tokens": tokens, "vocab": vocab, "ids": ids, "table": table, "X": table[ids]}  # X: (T, d_model)
