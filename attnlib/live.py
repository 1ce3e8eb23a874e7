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
``DataView``. The page is self-contained (style, script and data inline) and deterministic (the
same model and arguments give the same bytes). Size budget: ``4/3 * 4`` bytes of base64 per
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

from ._validate import describe, ensure_int, fail
from .explore import SCRIPT, _json, explore, render
from .i18n import language, tr
from .model import GPT

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
        from .plot import _label  # translated as plot's titles are (plot imports this module)

        title = _label(title)
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
    text = _json(data)
    seed = "\n".join([text, _json([live.example, live.title]), language()])
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


STYLE = (
    ".attnl{font:13px/1.3 system-ui,sans-serif;max-width:100%;overflow-x:auto;margin:.5em 0}"
    ".attnl-title{font-weight:bold;margin-bottom:.3em}"
    ".attnl-form{display:flex;flex-wrap:wrap;align-items:center;gap:.3em .6em}"
    ".attnl-in{font:14px/1.4 ui-monospace,monospace;padding:2px 4px}"
    ".attnl-in:focus-visible,.attnl-run:focus-visible{outline:2px solid #0072B2;outline-offset:1px}"
    ".attnl-run{font:inherit;padding:2px 10px}"
    ".attnl-msg{min-height:1.3em;margin:.3em 0;color:#943d00;font-weight:bold}"  # 4.5:1 or more on white and on #ced6dd
    ".attnl-msg.attnl-still{color:inherit;font-weight:normal;opacity:.7}"
    ".attnl-result{margin:.3em 0;font-size:15px}"
    ".attnl-label{opacity:.75;font-size:13px}"  # not italic: Chinese labels are never slanted
    ".attnl-tok{display:inline-block;min-width:1.1em;text-align:center;font-family:ui-monospace,monospace;"
    "padding:0 2px;margin:0 1px;border-radius:3px}"
    ".attnl-answer .attnl-tok{background:rgba(0,158,115,.18);font-weight:bold}"
    ".attnl-view-title{margin-top:.5em}"
)

# The script: decode the weights, read the prompt, generate, run once more for the weights, show them.
LIVE_SCRIPT = """(function(){
var root=document.getElementById("__ID__");if(!root||root.dataset.ready)return;root.dataset.ready="1";
__EXPLORER__
var D=JSON.parse(root.querySelector(".attnl-data").textContent),S=D.spec;
var input=root.querySelector(".attnl-in"),msg=root.querySelector(".attnl-msg"),res=root.querySelector(".attnl-result");
var view=root.querySelector(".attnl-view"),viewTitle=root.querySelector(".attnl-view-title");
var tmpl=root.querySelector(".attnl-template");
msg.textContent="";msg.classList.remove("attnl-still");msg.removeAttribute("data-i18n");
var bin=atob(D.blob),bytes=new Uint8Array(bin.length);for(var i=0;i<bin.length;i++)bytes[i]=bin.charCodeAt(i);
var dv=new DataView(bytes.buffer),P={};
D.names.forEach(function(e){var n=e[2].reduce(function(a,b){return a*b;},1),a=new Float64Array(n);
  for(var i=0;i<n;i++)a[i]=dv.getFloat32(4*(e[1]+i),true);P[e[0]]=a;});
function get(name,n){return P[name]||new Float64Array(n);}
function lin(x,W,b,nOut){var nIn=x.length,y=new Float64Array(nOut);
  for(var o=0;o<nOut;o++){var s=b?b[o]:0,r=o*nIn;for(var i=0;i<nIn;i++)s+=W[r+i]*x[i];y[o]=s;}return y;}
function ln(x,w,b){var n=x.length,m=0,v=0,y=new Float64Array(n),i;for(i=0;i<n;i++)m+=x[i];m/=n;
  for(i=0;i<n;i++)v+=(x[i]-m)*(x[i]-m);v/=n;var r=1/Math.sqrt(v+S.eps);
  for(i=0;i<n;i++)y[i]=(x[i]-m)*r*w[i]+b[i];return y;}
function gelu(u){var c=Math.sqrt(2/Math.PI);return u.map(function(z){return 0.5*z*(1+Math.tanh(c*(z+0.044715*z*z*z)));});}
function forward(ids){
  var T=ids.length,d=S.d_model,H=S.n_heads,dh=S.d_head,dq=H*dh,x=[],weights=[],t,i,j,h,c;
  var E=P["tok_emb.weight"],Pos=P["pos_emb.weight"];
  for(t=0;t<T;t++){var r=new Float64Array(d);for(c=0;c<d;c++)r[c]=E[ids[t]*d+c]+Pos[t*d+c];x.push(r);}
  for(var l=0;l<S.n_layers;l++){
    var p="blocks."+l+".",a=p+"attn.";
    var hs=x.map(function(r){return ln(r,P[p+"ln1.weight"],get(p+"ln1.bias",d));});
    var q=hs.map(function(r){return lin(r,P[a+"w_q.weight"],P[a+"w_q.bias"],dq);});
    var k=hs.map(function(r){return lin(r,P[a+"w_k.weight"],P[a+"w_k.bias"],dq);});
    var v=hs.map(function(r){return lin(r,P[a+"w_v.weight"],P[a+"w_v.bias"],dq);});
    var y=x.map(function(){return new Float64Array(dq);}),W=[];
    for(h=0;h<H;h++){var Wh=[];
      for(i=0;i<T;i++){var s=new Float64Array(T),mx=-Infinity,z=0;
        for(j=0;j<=i;j++){var dot=0;for(c=0;c<dh;c++)dot+=q[i][h*dh+c]*k[j][h*dh+c];s[j]=dot/Math.sqrt(dh);
          if(s[j]>mx)mx=s[j];}
        for(j=0;j<=i;j++){s[j]=Math.exp(s[j]-mx);z+=s[j];}
        for(j=0;j<T;j++)s[j]=j<=i?s[j]/z:0;
        for(j=0;j<=i;j++)for(c=0;c<dh;c++)y[i][h*dh+c]+=s[j]*v[j][h*dh+c];
        Wh.push(Array.prototype.slice.call(s));}
      W.push(Wh);}
    weights.push(W);
    for(t=0;t<T;t++){var o=lin(y[t],P[a+"w_o.weight"],P[a+"w_o.bias"],d);for(c=0;c<d;c++)x[t][c]+=o[c];}
    for(t=0;t<T;t++){var g=ln(x[t],P[p+"ln2.weight"],get(p+"ln2.bias",d));
      var m=lin(gelu(lin(g,P[p+"mlp.0.weight"],P[p+"mlp.0.bias"],S.d_ff)),P[p+"mlp.2.weight"],P[p+"mlp.2.bias"],d);
      for(c=0;c<d;c++)x[t][c]+=m[c];}
  }
  var last=ln(x[T-1],P["ln_f.weight"],get("ln_f.bias",d));
  var logits=lin(last,S.tied?E:P["lm_head.weight"],null,S.vocab_size);
  return {logits:logits,weights:weights};
}
function argmax(a){var b=0;for(var i=1;i<a.length;i++)if(a[i]>a[b])b=i;return b;}
function fill(t,o){return t.replace(/\\{(\\w+)\\}/g,function(_,k){return o[k];});}
function parse(text){
  var toks=D.single?text.replace(/\\s+/g,"").split(""):text.trim().split(/\\s+/).filter(Boolean),ids=[];
  for(var i=0;i<toks.length;i++){var id=D.vocab.indexOf(toks[i]);
    if(id<0)return {error:"unknown",text:fill(D.text.unknown,{token:toks[i]})};ids.push(id);}
  if(ids.length!==D.prompt)return {error:"count",text:fill(D.text.count,{n:D.prompt,got:ids.length})};
  return {ids:ids};
}
function toks(ids,from){return ids.map(function(id,i){var e=document.createElement("span");e.className="attnl-tok";
  e.dataset.id=id;e.dataset.pos=from+i;e.textContent=D.vocab[id];return e.outerHTML;}).join(" ");}
function run(){
  var got=parse(input.value);
  if(got.error){msg.textContent=got.text;msg.dataset.error=got.error;input.setAttribute("aria-invalid","true");return;}
  msg.textContent="";msg.dataset.error="";input.removeAttribute("aria-invalid");
  var ids=got.ids.slice();
  for(var s=0;s<D.new;s++)ids.push(argmax(forward(ids).logits));
  var w=forward(ids).weights,T=ids.length;
  res.querySelector(".attnl-prompt").innerHTML=toks(ids.slice(0,D.prompt),0);
  res.querySelector(".attnl-answer").innerHTML=toks(ids.slice(D.prompt),D.prompt);
  res.dataset.ids=JSON.stringify(ids);res.dataset.weights=JSON.stringify(w);res.hidden=false;viewTitle.hidden=false;
  var n=+root.dataset.runs+1,ex=document.importNode(tmpl.content,true).firstElementChild,id=root.id+"-x"+n;
  [].slice.call(ex.querySelectorAll("script:not([type])")).forEach(function(e){e.remove();});
  ex.id=id;
  var data=ex.querySelector(".attnx-data"),X=JSON.parse(data.textContent),labels=ids.map(function(i){return D.vocab[i];});
  X.w=[w.map(function(L){return L.map(function(Hh){return Hh.map(function(row){
    return row.map(function(v){return Math.min(X.scale,Math.max(0,Math.round(v*X.scale)));});});});})];
  data.textContent=JSON.stringify(X);
  [].slice.call(ex.querySelectorAll(".attnx-q")).forEach(function(e,i){e.textContent=labels[i];e.title=labels[i];});
  [].slice.call(ex.querySelectorAll(".attnx-k")).forEach(function(e,i){e.lastChild.textContent=" "+labels[i];
    e.title=labels[i];});
  [].slice.call(ex.querySelectorAll(".attnx-table thead th")).slice(1).forEach(function(e,i){e.textContent=labels[i];});
  view.innerHTML="";view.appendChild(ex);attnx(id);root.dataset.runs=String(n);
}
root.querySelector(".attnl-form").addEventListener("submit",function(e){e.preventDefault();run();});
if(input.value)run();
})();"""
