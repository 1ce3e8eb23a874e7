"""A trained GPT in the page: the reader types a prompt, the page's script runs the model.

``live_model(model, vocab, prompt_length=..., new_tokens=...)`` returns a :class:`LiveModel`;
a notebook shows it as HTML (``_repr_html_``). The page holds the model's weights and a small
forward pass written in JavaScript, so it needs no kernel and no network. The reader types
``prompt_length`` tokens and presses Enter (or the Run button); the page then

* generates ``new_tokens`` tokens greedily, as :meth:`attnlib.GPT.generate` does: each is the
  argmax of the logits of the last position, computed from the whole sequence so far;
* runs the model once more over the whole sequence (prompt and answer, ``T`` tokens) and shows
  every layer's and every head's attention weights in :func:`attnlib.plot.explore`'s view
  (hover or focus a query, pick a head or a layer; the causal mask's keys marked "masked").

The forward pass is chapter 7's (``attnlib/model.py``), in float64:

    x = tok_emb[ids] + pos_emb[0..T-1]                                    # (T, d_model)
    for each block:
        h = LayerNorm(x; ln1)                    # (h - mean) / sqrt(var + eps) * w + b, var biased
        Q, K, V = h W_Q^T + b_Q, h W_K^T + b_K, h W_V^T + b_V          # (T, n_heads d_head)
        A_h = softmax(Q_h K_h^T / sqrt(d_head) + causal mask)             # (T, T) per head
        x = x + concat_h(A_h V_h) W_O^T + b_O
        x = x + GELU_tanh(LayerNorm(x; ln2) W_1^T + b_1) W_2^T + b_2
    logits = LayerNorm(x; ln_f) W_head^T                                  # W_head = tok_emb if tied

with ``GELU_tanh(u) = u / 2 (1 + tanh(sqrt(2 / pi) (u + 0.044715 u^3)))`` (GPT-2's approximation,
``nn.GELU(approximate="tanh")``). It runs exactly the models it can: an ``attnlib.GPT`` with learned
positions, LayerNorm, the GELU MLP and plain multi-head attention (any ``n_layers``, ``n_heads``,
``d_model``, ``d_head``, ``d_ff``, with or without biases, tied or untied head); any other option
(RoPE, RMSNorm, SwiGLU, grouped-query attention, QK-norm, sliding windows, sinks, latent
attention) is refused with an error naming it.

The weights are exported exactly: float32, little-endian, base64 in the page, decoded with a
``DataView``. The page is self-contained (style, script and data inline; the style and the script
are ``live.css`` and ``live.js``, beside this module) and deterministic (the same model and
arguments give the same bytes). Size budget: ``4/3 * 4`` bytes of base64 per
exported float (the parameters, with ``pos_emb`` cut to the ``T`` positions used) plus at most
30 kB; chapter 10's model (13,536 parameters) makes a page of under 110 kB.

For tests and the curious, what the page computed is in its DOM: the element ``.attnl-result``
carries ``data-ids`` (the ``T`` token ids, JSON) and ``data-weights`` (JSON, every weight in
full float64 precision, ``[layer][head][query][key]``); each token shown is a ``.attnl-tok`` with
``data-id`` and ``data-pos``; ``data-runs`` on the root counts the runs. The words go through
``attnlib.i18n.tr`` and carry their English text in ``data-i18n``. Until its script runs (a saved
output in an untrusted JupyterLab notebook), the page says it is still, as the explorer does.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Sequence

import numpy as np
import torch

from .._figure_text import tr_label
from .._validate import describe, ensure_int, fail
from ..i18n import language, tr
from ..model import GPT
from ._page import script, script_json, style
from .explore import SCRIPT, explore, render

__all__ = ["LiveModel", "live_model", "export_weights"]

# The words of the page (English msgids, looked up with tr; {n}, {tokens}, {got}, {token} filled in).
TYPE = "Type {n} tokens, each one of {tokens}, then press Enter or Run"
SPACES = "(spaces between the tokens are optional)"
RUN = "Run"
PROMPT = "prompt:"
WRITES = "the model writes:"
VIEW = "Attention of every head, in one forward pass over the prompt and the answer:"
COUNT = "Expected {n} tokens, received {got}."
UNKNOWN = "Not a token of the vocabulary: {token}"
STILL = (
    "A still view: run this cell to type a prompt "
    "(JupyterLab runs a saved output's script only in a trusted notebook)."
)  # shown until the script runs, which removes it
WORDS = (TYPE, SPACES, RUN, PROMPT, WRITES, VIEW, COUNT, UNKNOWN, STILL)

SUPPORTED = "learned positions, LayerNorm, the GELU MLP, multi-head attention"
BUDGET = 30_000  # bytes of the page besides the weights' base64

# The page's style and script, package files beside this module (attnlib/views/_page.py reads them). The
# script decodes the weights, reads the prompt, generates, runs once more for the weights and shows them.
STYLE = style("live.css")
LIVE_SCRIPT = script("live.js")


class LiveModel:
    """A GPT that runs in the page; shown in a notebook by ``_repr_html_``.

    Attributes (as validated by :func:`live_model`): ``spec`` (the sizes the script needs, a dict),
    ``names`` (the exported tensors' names, offsets and shapes), ``blob`` (their float32 bytes),
    ``vocab`` (``vocab_size`` str), ``prompt_length``, ``new_tokens``, ``example`` (None or the
    prompt's text) and ``title``.
    """

    def __init__(self, spec, names, blob, vocab, prompt_length, new_tokens, example, title):
        self.spec, self.names, self.blob, self.vocab = spec, names, blob, vocab
        self.prompt_length, self.new_tokens, self.example, self.title = prompt_length, new_tokens, example, title

    def __repr__(self) -> str:
        s = self.spec
        return (
            f"LiveModel({s['n_layers']} layer(s) x {s['n_heads']} head(s), d_model={s['d_model']}, "
            f"{len(self.blob) // 4:,} weights; prompt {self.prompt_length} + {self.new_tokens} new tokens)"
        )

    def _repr_html_(self) -> str:
        return render_live(self)


def live_model(model, vocab, *, prompt_length, new_tokens, example=None, title=None) -> LiveModel:
    """A trained ``attnlib.GPT`` running in the page's script (see the module's docstring).

    * ``model``: an ``attnlib.GPT`` with float32 parameters, learned positions, LayerNorm, the GELU
      MLP and plain multi-head attention (chapter 10's); on any device.
    * ``vocab``: the text of each token id, ``vocab_size`` distinct non-empty str without spaces.
      When every token is one character, the reader may type the prompt without spaces.
    * ``prompt_length``: how many tokens the reader types, ``>= 1``.
    * ``new_tokens``: how many tokens the model appends, greedily, ``>= 1``; with
      ``prompt_length + new_tokens <= context_length``.
    * ``example``: None (an empty input) or a prompt, as the reader would type it (a str) or as
      ``prompt_length`` token ids (a 1-D integer tensor or list); the page runs it when it loads.
    * ``title``: a heading above the view.

    >>> import torch
    >>> from attnlib.model import GPT, GPTConfig
    >>> _ = torch.manual_seed(0)
    >>> model = GPT(GPTConfig(vocab_size=11, context_length=13, d_model=32, n_layers=1, n_heads=4))
    >>> live_model(model, list("0123456789|"), prompt_length=7, new_tokens=6, example="493039|")
    LiveModel(1 layer(s) x 4 head(s), d_model=32, 13,536 weights; prompt 7 + 6 new tokens)
    """
    if not isinstance(model, GPT):
        raise fail("model", f"an attnlib.GPT ({SUPPORTED})", describe(model))
    c = model.config
    unsupported = [
        f"{name}={getattr(c, name)!r}"
        for name, ok in (
            ("positions", c.positions == "learned"),
            ("norm", c.norm == "layernorm"),
            ("mlp", c.mlp == "gelu"),
            ("attention", c.attention == "mha"),
            ("n_kv_heads", c.n_kv_heads in (None, c.n_heads)),
            ("qk_norm", not c.qk_norm),
            ("sliding_window", c.sliding_window is None),
            ("learned_sinks", not c.learned_sinks),
        )
        if not ok
    ]
    if unsupported:
        raise fail(
            "model",
            f"a GPT the page can run ({SUPPORTED})",
            f"a GPT with {', '.join(unsupported)}: not supported by live_model",
        )
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    if dtypes != ["torch.float32"]:
        raise fail(
            "model", "float32 parameters (exported exactly as float32)", f"parameters of dtype {', '.join(dtypes)}"
        )
    vocab = _vocab(vocab, c.vocab_size)
    prompt_length = ensure_int("prompt_length", prompt_length)
    new_tokens = ensure_int("new_tokens", new_tokens)
    if prompt_length + new_tokens > c.context_length:
        raise fail(
            "prompt_length, new_tokens",
            f"prompt_length + new_tokens <= context_length = {c.context_length} (the learned positions end there)",
            f"{prompt_length} + {new_tokens} = {prompt_length + new_tokens}",
        )
    if example is not None:
        example = _example(example, vocab, prompt_length)
    if title is not None and not isinstance(title, str):
        raise fail("title", "None or a str", describe(title))
    if title is not None:
        title = tr_label(title)  # translated as plot's titles are
    spec, names, blob = export_weights(model, prompt_length + new_tokens)
    return LiveModel(spec, names, blob, vocab, prompt_length, new_tokens, example, title)


def export_weights(model, positions: int | None = None) -> tuple[dict, list, bytes]:
    """The tensors the page's forward pass reads: ``(spec, names, blob)``.

    ``spec``: the sizes (``n_layers``, ``n_heads``, ``d_head``, ``d_model``, ``d_ff``,
    ``vocab_size``, ``eps``, ``tied``); ``names``: ``[name, offset, shape]`` for each tensor, its
    offset counted in floats; ``blob``: every tensor's float32 values, little-endian, one after the
    other in ``names``' order (row-major). ``pos_emb`` keeps its first ``positions`` rows (default:
    all). Biases the model has not (``bias=False``) are left out: the page reads them as 0. The
    names are the model's own, e.g. ``blocks.0.attn.w_q.weight`` ``(n_heads d_head, d_model)``,
    ``nn.Linear``'s layout; ``lm_head.weight`` only when the head is not tied.

    >>> from attnlib.model import GPT, GPTConfig
    >>> spec, names, blob = export_weights(GPT(GPTConfig(11, 13, 32, 1, 4)))
    >>> names[:2], len(blob) // 4
    ([['tok_emb.weight', 0, [11, 32]], ['pos_emb.weight', 352, [13, 32]]], 13536)
    """
    c = model.config
    tensors = {}
    for name, p in model.named_parameters():  # a tied head is one parameter: named once, as tok_emb.weight
        value = p.detach()
        if name == "pos_emb.weight" and positions is not None:
            value = value[:positions]  # (context_length, d_model) -> (positions, d_model)
        tensors[name] = value.to("cpu", torch.float32).contiguous()
    names, parts, offset = [], [], 0
    for name, value in tensors.items():
        names.append([name, offset, list(value.shape)])
        parts.append(value.numpy().astype("<f4").tobytes())
        offset += value.numel()
    spec = {
        "n_layers": c.n_layers,
        "n_heads": c.n_heads,
        "d_head": c.head_dim,
        "d_model": c.d_model,
        "d_ff": c.d_ff,
        "vocab_size": c.vocab_size,
        "eps": c.norm_eps,
        "tied": c.tie_embeddings,
    }
    return spec, names, b"".join(parts)


# Checks ------------------------------------------------------------------------------------------


def _vocab(vocab, vocab_size: int) -> list[str]:
    want = f"{vocab_size} distinct non-empty str without spaces, the text of each token id (vocab_size = {vocab_size})"
    if isinstance(vocab, str) or not isinstance(vocab, Sequence):
        raise fail("vocab", want, describe(vocab))
    vocab = list(vocab)
    ok = all(isinstance(t, str) and t and not any(ch.isspace() for ch in t) for t in vocab)
    if not ok or len(vocab) != vocab_size or len(set(vocab)) != vocab_size:
        raise fail("vocab", want, f"{len(vocab)} items: {vocab!r}")
    return vocab


def _split(text: str, vocab: list[str]) -> list[str]:
    """The tokens of a typed prompt, as the page splits them: at spaces, and between characters
    when every token of the vocabulary is one character."""
    if all(len(t) == 1 for t in vocab):
        return [ch for ch in text if not ch.isspace()]
    return text.split()


def _example(example, vocab: list[str], prompt_length: int) -> str:
    """The example prompt as the page's input shows it: the tokens, separated by spaces."""
    want = f"None, a str of {prompt_length} tokens or {prompt_length} token ids"
    if isinstance(example, str):
        tokens = _split(example, vocab)
        unknown = [t for t in tokens if t not in vocab]
        if len(tokens) != prompt_length or unknown:
            got = f"{len(tokens)} tokens" + (f", {unknown[0]!r} not in vocab" if unknown else "")
            raise fail("example", want, f"{example!r}: {got}")
        return " ".join(tokens)
    ids = example.tolist() if isinstance(example, torch.Tensor) and example.dim() == 1 else example
    if isinstance(ids, np.ndarray) or not isinstance(ids, Sequence) or isinstance(ids, str):
        raise fail("example", want, describe(example))
    ok = all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(vocab) for i in ids)
    if not ok or len(ids) != prompt_length:
        raise fail("example", want + f" in [0, {len(vocab) - 1}]", describe(example))
    return " ".join(vocab[i] for i in ids)


# The page ------------------------------------------------------------------------------------------


def _word(word: str, **fill) -> str:
    """One of the page's words, translated and filled in, with its English msgid in ``data-i18n``."""
    text = tr(word)
    for key, value in fill.items():
        text = text.replace("{" + key + "}", value)
    return f'<span data-i18n="{html.escape(word)}">{html.escape(text)}</span>'


def _explorer_template(live: LiveModel) -> str:
    """The explorer's HTML for the page to copy at every run: zero weights, placeholder tokens,
    the causal mask; the page's script replaces the tokens and the data and starts it."""
    s = live.spec
    T = live.prompt_length + live.new_tokens
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T), True = may attend
    ex = explore(torch.zeros(s["n_layers"], s["n_heads"], T, T), [str(i) for i in range(T)], mask=causal)
    return render(ex)


def render_live(live: LiveModel) -> str:
    """The page: one <div> holding its style, the input, the answer, the view, the data and the script."""
    esc = html.escape
    single = all(len(t) == 1 for t in live.vocab)
    data = {
        "spec": live.spec,
        "names": live.names,
        "blob": base64.b64encode(live.blob).decode("ascii"),
        "vocab": live.vocab,
        "single": single,
        "prompt": live.prompt_length,
        "new": live.new_tokens,
        "text": {"count": tr(COUNT), "unknown": tr(UNKNOWN)},
    }
    text = script_json(data)
    seed = "\n".join([text, script_json([live.example, live.title]), language()])
    uid = "attnl-" + hashlib.sha256(seed.encode()).hexdigest()[:12]
    label = _word(TYPE, n=str(live.prompt_length), tokens=" ".join(live.vocab))
    if single:
        label += " " + _word(SPACES)
    title = f'<div class="attnl-title">{esc(live.title)}</div>' if live.title else ""
    value = f' value="{esc(live.example)}"' if live.example is not None else ""
    return (
        f'<div class="attnl" id="{uid}" data-runs="0"><style>{STYLE}</style>{title}'
        f'<form class="attnl-form"><label for="{uid}-in">{label}</label> '
        f'<input id="{uid}-in" class="attnl-in" type="text" autocomplete="off" spellcheck="false" '
        f'size="{max(12, 2 * live.prompt_length + 4)}"{value}> '
        f'<button type="submit" class="attnl-run">{_word(RUN)}</button></form>'
        f'<p class="attnl-msg attnl-still" role="status" aria-live="polite" data-i18n="{esc(STILL)}">'
        f"{esc(tr(STILL))}</p>"
        f'<div class="attnl-result" aria-live="polite" hidden>'
        f'<span class="attnl-label">{_word(PROMPT)}</span> <span class="attnl-prompt"></span> '
        f'<span class="attnl-label">{_word(WRITES)}</span> <span class="attnl-answer"></span></div>'
        f'<div class="attnl-view-title" hidden>{_word(VIEW)}</div><div class="attnl-view"></div>'
        f'<template class="attnl-template">{_explorer_template(live)}</template>'
        f'<script type="application/json" class="attnl-data">{text}</script>'
        f"<script>{LIVE_SCRIPT.replace('__ID__', uid).replace('__EXPLORER__', SCRIPT)}</script>"
        "</div>"
    )
