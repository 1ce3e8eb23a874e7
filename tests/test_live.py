"""attnlib.plot.live_model: a GPT exported into the page and run by its script. Unit tests of the
HTML and the export, and (marked slow) the page in headless Chromium with the network blocked:
prompts typed with real keyboard events, the page's answers and attention weights compared with
PyTorch's (``model.generate`` and ``model(ids, need_weights=True)``).

The browser test uses Debian's /usr/bin/chromium and /usr/bin/chromedriver as test_explore.py
does; without them it is skipped, under CI (CI=true) it fails.
"""

from __future__ import annotations

import base64
import html
import json
import re
import time

import numpy as np
import pytest
import torch
from _chromium import assert_offline_and_clean, open_view, views_browser

from attnlib import plot
from attnlib._validate import AttnlibError
from attnlib.model import GPT, GPTConfig
from attnlib.train import reverse_batch, train
from attnlib.views.live import BUDGET, STILL, LiveModel

DIGITS = list("0123456789|")  # chapter 10's vocabulary: the digits, and the separator, token 10
CH10 = GPTConfig(vocab_size=11, context_length=13, d_model=32, n_layers=1, n_heads=4)  # chapter 10's model
# every option the page supports, away from chapter 10's: 2 layers, no biases, an untied head, d_head set
OTHER = GPTConfig(
    vocab_size=7, context_length=10, d_model=12, n_layers=2, n_heads=2, d_ff=20, bias=False,
    tie_embeddings=False, d_head=8,
)  # fmt: skip
WORDS = ["tok", "cat", "sat", "on", "mat", "the", "<b>"]  # tokens of several characters: typed with spaces


def _model(config=CH10, seed=0, sharp=True):
    """A seeded GPT; with ``sharp``, every parameter drawn afresh, larger than GPT-2's initialisation
    (which has zero biases, unit LayerNorm gains and a small MLP): every term of the forward pass then
    counts, the attention is far from uniform and the logits far apart, a sharper test."""
    torch.manual_seed(seed)
    model = GPT(config)
    if sharp:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:  # biases, and the LayerNorms' gains (around 1)
                    p.normal_(1.0 if name.endswith(".weight") else 0.0, 0.3)
                elif "emb" in name:
                    p.normal_(0, 1.0)
                elif "w_q" in name or "w_k" in name:
                    p.normal_(0, 0.6)
                else:  # (d_out, d_in): outputs of about unit size
                    p.normal_(0, 1.5 / p.shape[1] ** 0.5)
    return model


def _page(model=None, vocab=DIGITS, **kwargs) -> str:
    kwargs = {"prompt_length": 7, "new_tokens": 6} | kwargs
    return plot.live_model(model if model is not None else _model(), vocab, **kwargs)._repr_html_()


def _data(page: str) -> dict:
    found = re.search(r'<script type="application/json" class="attnl-data">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


# The export and the HTML -------------------------------------------------------------------------


def test_returns_a_live_model():
    live = plot.live_model(_model(), DIGITS, prompt_length=7, new_tokens=6, example="4 9 3 0 3 9 |")
    assert isinstance(live, LiveModel) and live.example == "4 9 3 0 3 9 |"
    assert "13,536 weights" in repr(live)  # chapter 10's parameter count, as attnlib.count_params says


@pytest.mark.parametrize("config", [CH10, OTHER])
def test_weights_round_trip_exactly(config):
    """The page's base64 holds every parameter bit for bit (float32, little-endian), by its model name."""
    model = _model(config)
    T = 9
    data = _data(_page(model, DIGITS if config is CH10 else WORDS, prompt_length=5, new_tokens=T - 5))
    blob = np.frombuffer(base64.b64decode(data["blob"]), dtype="<f4")
    params = dict(model.named_parameters())
    assert [name for name, _, _ in data["names"]] == list(params)  # a tied head once, as tok_emb.weight
    assert ("lm_head.weight" in params) is (not config.tie_embeddings)
    assert not any(name.endswith("bias") for name in params) or config.bias
    end = 0
    for name, offset, shape in data["names"]:
        want = params[name].detach()
        if name == "pos_emb.weight":
            want = want[:T]  # the positions the page uses
        assert offset == end and shape == list(want.shape)
        got = torch.from_numpy(blob[offset : offset + want.numel()].copy()).view(*shape)
        assert torch.equal(got, want), name  # exact: every bit
        end = offset + want.numel()
    assert end == blob.size
    spec = data["spec"]
    assert (spec["n_layers"], spec["n_heads"], spec["d_head"], spec["d_ff"]) == (
        config.n_layers, config.n_heads, config.head_dim, config.d_ff,
    )  # fmt: skip
    assert spec["eps"] == model.blocks[0].ln1.eps and spec["tied"] is config.tie_embeddings


def test_deterministic_bytes():
    assert _page() == _page()
    other = _page(_model(seed=1))
    ids = {re.search(r'id="(attnl-[0-9a-f]+)"', p).group(1) for p in (_page(), other)}
    assert len(ids) == 2  # the id is derived from the inputs


def test_size_budget():
    """The budget the module states: 4/3 * 4 bytes of base64 per exported float, plus at most 30 kB;
    chapter 10's model (13,536 parameters) under 110 kB."""
    for model, vocab, length in ((_model(), DIGITS, 7), (_model(OTHER), WORDS, 4)):
        page = _page(model, vocab, prompt_length=length, new_tokens=3, example=None, title="a budget")
        floats = len(base64.b64decode(_data(page)["blob"])) // 4
        assert len(page.encode()) <= 4 * (4 * floats + 2) // 3 + BUDGET, (len(page.encode()), floats)
    assert len(_page(example="4 9 3 0 3 9 |", title="reversal").encode()) < 110_000


def test_self_contained():
    page = _page(example="4930391", title="t")
    outside_data = re.sub(r'<script type="application/json" class="attnl-data">.*?</script>', "", page, flags=re.S)
    for outside in ("http", "//cdn", "<link", "src=", "@import", "url("):
        assert outside not in outside_data, outside
    assert "<style>" in page and "<script>" in page and "function attnx(id)" in page  # the explorer's script


def test_example_forms_and_tokens_escaped():
    as_text = plot.live_model(_model(), DIGITS, prompt_length=7, new_tokens=6, example="493039|")
    assert as_text.example == "4 9 3 0 3 9 |"  # one character per token: spaces optional
    assert plot.live_model(_model(), DIGITS, prompt_length=7, new_tokens=6, example=[4, 9, 3, 0, 3, 9, 10]).example == (
        "4 9 3 0 3 9 |"
    )
    ids = torch.tensor([0, 6, 2])
    live = plot.live_model(_model(OTHER), WORDS, prompt_length=3, new_tokens=2, example=ids)
    assert live.example == "tok <b> sat"
    page = live._repr_html_()
    assert "<b>" not in page and "\\u003cb\\u003e" in page  # escaped in the markup and in the data
    assert 'value="tok &lt;b&gt; sat"' in page and "<b> sat" not in page


def test_words_carry_i18n_keys_and_translate(monkeypatch):
    page = _page()
    for word in ("Run", "prompt:", "the model writes:"):
        assert f'data-i18n="{word}">{word}<' in page
    assert "A still view: run this cell to type a prompt" in page  # until the script runs
    assert "Type 7 tokens, each one of 0 1 2 3 4 5 6 7 8 9 |, then press Enter or Run" in page
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    chinese = _page()
    for word in ("Run", "prompt:", "the model writes:", "queries", "keys", "all heads", STILL):
        found = re.search(f'data-i18n="{re.escape(html.escape(word))}">([^<]*)<', chinese)
        assert found and re.search("[\u4e00-\u9fff]", found.group(1)), word  # Chinese, the English key kept
    data = _data(chinese)["text"]
    assert all(re.search("[\u4e00-\u9fff]", t) for t in data.values())  # the script's messages too
    # 「」 around the button's word in a Chinese sentence; no italic labels (Chinese is never slanted)
    assert "「运行」" in chinese and "“运行”" not in chinese
    assert "italic" not in chinese


@pytest.mark.parametrize(
    ("change", "unsupported"),
    [
        (dict(positions="rope"), "positions='rope'"),
        (dict(positions="none"), "positions='none'"),
        (dict(norm="rmsnorm"), "norm='rmsnorm'"),
        (dict(mlp="swiglu"), "mlp='swiglu'"),
        (dict(n_kv_heads=2), "n_kv_heads=2"),
        (dict(qk_norm=True), "qk_norm=True"),
        (dict(sliding_window=4), "sliding_window=4"),
        (dict(learned_sinks=True), "learned_sinks=True"),
        (dict(positions="rope", attention="mla", kv_rank=8), "positions='rope', attention='mla'"),
        (dict(positions="rope", norm="rmsnorm", mlp="swiglu"), "positions='rope', norm='rmsnorm', mlp='swiglu'"),
    ],
)
def test_refuses_what_it_cannot_run(change, unsupported):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**(CH10.__dict__ | {"d_ff": None} | change)))
    message = rf"model: expected a GPT the page can run \(learned positions, LayerNorm.*received a GPT with {re.escape(unsupported)}: not supported"
    with pytest.raises(AttnlibError, match=message):
        plot.live_model(model, DIGITS, prompt_length=7, new_tokens=6)


def _live(**kwargs):
    args = {"model": _model(), "vocab": DIGITS, "prompt_length": 7, "new_tokens": 6} | kwargs
    return plot.live_model(args.pop("model"), args.pop("vocab"), **args)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(model=torch.nn.Linear(2, 2)), r"model: expected an attnlib.GPT .*received Linear"),
        (
            dict(model=_model().double()),
            r"model: expected float32 parameters.*received parameters of dtype torch.float64",
        ),
        (dict(vocab="0123456789|"), r"vocab: expected 11 distinct non-empty str.*received str"),
        (dict(vocab=DIGITS[:10]), r"vocab: expected 11 distinct.*received 10 items"),
        (dict(vocab=DIGITS[:10] + ["0"]), r"vocab: expected 11 distinct.*received 11 items"),
        (dict(vocab=DIGITS[:10] + ["a b"]), r"vocab: expected 11 distinct non-empty str without spaces"),
        (dict(vocab=DIGITS[:10] + [10]), r"vocab: expected 11 distinct"),
        (dict(prompt_length=0), r"prompt_length: expected a positive int, received int 0"),
        (dict(new_tokens=True), r"new_tokens: expected a positive int, received bool True"),
        (dict(new_tokens=7), r"prompt_length \+ new_tokens <= context_length = 13.*received 7 \+ 7 = 14"),
        (
            dict(example="49303|"),
            r"example: expected None, a str of 7 tokens or 7 token ids, received '49303\|': 6 tokens",
        ),
        (dict(example="4930a9|"), r"example: .*'a' not in vocab"),
        (dict(example=[1, 2, 3, 4, 5, 6, 11]), r"example: expected .* in \[0, 10\], received list"),
        (dict(example=torch.zeros(7)), r"example: expected .* in \[0, 10\], received tensor of shape \(7,\)"),
        (dict(example=3), r"example: expected None, a str of 7 tokens or 7 token ids, received int 3"),
        (dict(title=3), "title: expected None or a str, received int 3"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(AttnlibError, match=message):
        _live(**kwargs)


# In the browser ----------------------------------------------------------------------------------


browser = views_browser(height=1400)  # one Chromium for the module's tests


READ = """var root=document.querySelector(".attnl"),res=root.querySelector(".attnl-result"),
msg=root.querySelector(".attnl-msg");
return {runs:+root.dataset.runs,ids:res.dataset.ids?JSON.parse(res.dataset.ids):null,
weights:res.dataset.weights?JSON.parse(res.dataset.weights):null,error:msg.dataset.error||"",message:msg.textContent,
shown:[].slice.call(res.querySelectorAll(".attnl-tok")).map(function(e){return [+e.dataset.pos,+e.dataset.id];})};"""


def _type(browser, text: str):
    """Clear the input and type ``text``, then Enter: real keyboard events."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    field = browser.find_element("css selector", ".attnl-in")
    # duration 0: no 250 ms pointer movement before the click
    act = ActionChains(browser, duration=0).click(field).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL)
    act.send_keys(Keys.BACKSPACE).send_keys(text).send_keys(Keys.ENTER).perform()


def _run_prompts(browser, model, vocab, prompts: torch.Tensor, texts: list[str], new_tokens: int):
    """Type every prompt; compare the page's tokens with model.generate and its weights with the
    model's, within 1e-4. Returns the number of runs the page counted."""
    want_ids = model.generate(prompts, new_tokens)  # (N, T): greedy, as the page is
    with torch.no_grad():
        _, want_w = model(want_ids, need_weights=True)  # one (N, n_heads, T, T) per layer
    want_w = torch.stack(want_w, dim=1).double().numpy()  # (N, n_layers, n_heads, T, T)
    runs = browser.execute_script(READ)["runs"]
    for n, text in enumerate(texts):
        _type(browser, text)
        got = browser.execute_script(READ)
        assert got["runs"] == runs + n + 1 and got["error"] == "", (text, got["message"])
        assert got["ids"] == want_ids[n].tolist(), f"prompt {text!r}"
        assert got["shown"] == [[pos, i] for pos, i in enumerate(got["ids"])]  # the tokens shown, prompt then answer
        np.testing.assert_allclose(np.array(got["weights"]), want_w[n], atol=1e-4, rtol=0, err_msg=text)
    return got


def _prompt_texts(prompts: torch.Tensor, vocab: list[str], seed: int) -> list[str]:
    """How a reader types them: with or without spaces (one-character tokens), extra spaces around."""
    rng = np.random.default_rng(seed)
    single = all(len(t) == 1 for t in vocab)
    texts = []
    for row in prompts.tolist():
        sep = rng.choice(["", " ", "  "]) if single else rng.choice([" ", "  "])
        texts.append(rng.choice(["", " "]) + sep.join(vocab[i] for i in row) + rng.choice(["", " "]))
    return texts


@pytest.mark.slow
def test_chapter_10_model_in_the_browser(browser, tmp_path):
    """Chapter 10's configuration, seeded random weights: 50 prompts typed, every answer and weight
    compared with PyTorch's; the example runs at load; bad prompts give the page's message; the
    explorer shows the weights of the last run when a query is hovered."""
    from selenium.webdriver.common.action_chains import ActionChains

    started = time.perf_counter()
    model = _model()
    g = torch.Generator().manual_seed(5)
    reversal = reverse_batch(25, 6, 11, generator=g)[0][:, :7]  # (25, 7): 6 digits and the separator
    anything = torch.randint(0, 11, (25, 7), generator=g)  # (25, 7): any tokens, anywhere
    prompts = torch.cat([reversal, anything])
    example = prompts[0]
    live = plot.live_model(model, DIGITS, prompt_length=7, new_tokens=6, example=example, title="live")
    page = open_view(browser, tmp_path, live, "ch10")

    # the example ran when the page loaded
    loaded = browser.execute_script(READ)
    assert loaded["message"] == "" and not browser.find_elements("css selector", ".attnl-still")  # the script ran
    assert loaded["runs"] == 1 and loaded["ids"] == model.generate(example[None], 6)[0].tolist()

    got = _run_prompts(browser, model, DIGITS, prompts, _prompt_texts(prompts, DIGITS, seed=0), 6)
    assert got["runs"] == 51

    # bad prompts: the page's message, and no run
    for text, error, message in (
        ("12345", "count", "Expected 7 tokens, received 5."),
        ("1234567|", "count", "Expected 7 tokens, received 8."),
        ("12x456|", "unknown", "Not a token of the vocabulary: x"),
        ("", "count", "Expected 7 tokens, received 0."),
    ):
        _type(browser, text)
        bad = browser.execute_script(READ)
        assert (bad["error"], bad["message"], bad["runs"]) == (error, message, 51)
        assert browser.find_element("css selector", ".attnl-in").get_attribute("aria-invalid") == "true"

    # Run with the button, then the explorer's table: hover query 9, every head's row, to 2 decimals
    field = browser.find_element("css selector", ".attnl-in")
    ActionChains(browser).click(field).send_keys("\b" * 20 + "0123456").perform()
    browser.find_element("css selector", ".attnl-run").click()
    got = browser.execute_script(READ)
    assert got["runs"] == 52 and got["error"] == ""
    w = np.array(got["weights"])  # (n_layers, n_heads, T, T)
    queries = browser.find_elements("css selector", ".attnl-view .attnx-q")
    labels = [DIGITS[i] for i in got["ids"]]
    assert [q.text for q in queries] == labels
    ActionChains(browser).move_to_element(queries[9]).perform()
    rows = browser.find_elements("css selector", ".attnl-view .attnx-table tbody tr")
    assert len(rows) == 4
    for row in rows:
        h = int(row.get_attribute("data-head"))
        cells = row.find_elements("css selector", "td")
        shown = [float("nan") if "attnx-masked" in c.get_attribute("class") else float(c.text) for c in cells]
        # the explorer stores 4 decimals and shows 2; the causal mask: keys 10-12 masked
        want = np.where(np.arange(13) <= 9, np.round(w[0, h, 9], 4), np.nan)
        np.testing.assert_allclose(shown, want, atol=0.005 + 1e-9)
    assert_offline_and_clean(browser, page)
    print(f"chapter 10's model, 52 runs in the browser: {time.perf_counter() - started:.1f} s")


@pytest.mark.slow
def test_other_configuration_in_the_browser(browser, tmp_path):
    """Two layers, no biases, an untied head, d_head != d_model / n_heads, tokens of several characters."""
    model = _model(OTHER, seed=3)
    g = torch.Generator().manual_seed(6)
    prompts = torch.randint(0, 7, (12, 4), generator=g)
    page = open_view(browser, tmp_path, plot.live_model(model, WORDS, prompt_length=4, new_tokens=5), "other")
    assert browser.execute_script(READ)["runs"] == 0  # no example: nothing run yet
    assert browser.execute_script(READ)["message"] == ""  # the still view's note gone: the script runs
    _run_prompts(browser, model, WORDS, prompts, _prompt_texts(prompts, WORDS, seed=1), 5)
    _type(browser, "tokcat sat on")  # without spaces: not tokens here
    assert browser.execute_script(READ)["message"] == "Not a token of the vocabulary: tokcat"
    assert_offline_and_clean(browser, page)


@pytest.mark.slow
def test_briefly_trained_model_in_the_browser(browser, tmp_path):
    """Chapter 10's model after 60 steps of its training (a second): its answers and weights."""
    torch.manual_seed(0)
    model = GPT(CH10)
    g = torch.Generator().manual_seed(1)
    train(model, lambda: reverse_batch(64, 6, 11, generator=g), steps=60, lr=1e-2)
    prompts = reverse_batch(12, 6, 11, generator=torch.Generator().manual_seed(7))[0][:, :7]
    page = open_view(browser, tmp_path, plot.live_model(model, DIGITS, prompt_length=7, new_tokens=6), "trained")
    _run_prompts(browser, model, DIGITS, prompts, _prompt_texts(prompts, DIGITS, seed=2), 6)
    assert_offline_and_clean(browser, page)
