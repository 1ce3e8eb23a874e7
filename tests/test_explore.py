"""attnlib.plot.explore: the attention explorer's HTML (unit tests) and its behaviour in
headless Chromium with real mouse and keyboard events (marked slow; network blocked).

The browser test uses Debian's /usr/bin/chromium and /usr/bin/chromedriver as test_browser.py
does; without them it is skipped, under CI (CI=true) it fails.
"""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest
import torch
from _chromium import assert_offline_and_clean, blend, contrast, open_view, touch_tap, views_browser

from attnlib import plot
from attnlib._validate import AttnlibError
from attnlib.views.explore import HINT, HINT_TOUCH, STYLE, Explorer

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


def _weights(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g) * 2, dim=-1)


def _data(page: str) -> dict:
    found = re.search(r'<script type="application/json" class="attnx-data">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


# Shapes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "shape"),
    [
        (_weights(6, 6), (1, 1, 1, 6, 6)),
        (_weights(3, 6, 6), (1, 1, 3, 6, 6)),
        ([_weights(3, 6, 6, seed=1), _weights(3, 6, 6, seed=2)], (1, 2, 3, 6, 6)),
        (_weights(2, 3, 6, 6), (1, 2, 3, 6, 6)),
        (_weights(3, 6, 6).numpy(), (1, 1, 3, 6, 6)),
    ],
)
def test_shapes_accepted(weights, shape):
    ex = plot.explore(weights, TOKENS)
    assert isinstance(ex, Explorer)
    assert ex.weights.shape == shape
    assert ex.queries == TOKENS and ex.tokens == TOKENS
    assert ex.heads == [str(h) for h in range(shape[2])] and ex.layers == [str(i) for i in range(shape[1])]


def test_steps_and_labels():
    ws = [[_weights(2, 6, 6, seed=s), _weights(2, 6, 6, seed=s + 9)] for s in range(3)]
    ex = plot.explore(ws, TOKENS, steps=[0, 100, 200], heads=["a", "b"], layers=["L0", "L1"])
    assert ex.weights.shape == (3, 2, 2, 6, 6)
    assert ex.steps == ["0", "100", "200"] and ex.heads == ["a", "b"]


def test_default_queries_are_the_last_tokens():
    ex = plot.explore(_weights(2, 6), TOKENS)
    assert ex.queries == ["the", "mat"]
    assert plot.explore(_weights(2, 6), TOKENS, queries=["q1", "q2"]).queries == ["q1", "q2"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plot.explore(_weights(6), TOKENS), r"weights: expected a tensor \(T_q, T_k\).*received tensor"),
        (lambda: plot.explore(_weights(1, 1, 1, 6, 6), TOKENS), r"weights: expected a tensor"),
        (lambda: plot.explore(torch.ones(6, 6, dtype=torch.long), TOKENS), "floating-point"),
        (lambda: plot.explore([_weights(2, 6, 6), _weights(3, 6, 6)], TOKENS), r"layers of one shape"),
        (lambda: plot.explore([], TOKENS), "empty list"),
        (lambda: plot.explore(_weights(6, 6) * 2, TOKENS), r"in \[0, 1\].*received values from"),
        (lambda: plot.explore(torch.full((6, 6), float("nan")), TOKENS), "NaN"),
        (lambda: plot.explore(_weights(6, 6), TOKENS[:5]), r"tokens: expected a list of 6 str \(T_k = 6\)"),
        (lambda: plot.explore(_weights(6, 6), "the cat sat on the mat"), "tokens: expected a list of 6 str"),
        (lambda: plot.explore(_weights(7, 6), TOKENS), r"queries: expected 7 query tokens"),
        (lambda: plot.explore(_weights(2, 6), TOKENS, queries=["a"]), r"queries: expected a list of 2 str"),
        (lambda: plot.explore(_weights(3, 6, 6), TOKENS, heads=["a"]), r"heads: expected a list of 3 labels"),
        (lambda: plot.explore(_weights(6, 6), TOKENS, steps=[0, 1]), r"weights: expected a list of 2"),
        (lambda: plot.explore([_weights(6, 6)] * 2, TOKENS, steps=[0]), r"weights: expected a list of 1"),
        (lambda: plot.explore(_weights(6, 6), TOKENS, mask=torch.ones(6, 6)), "mask: expected a bool tensor"),
        (lambda: plot.explore(_weights(6, 6), TOKENS, mask=torch.ones(5, dtype=torch.bool)), r"broadcastable"),
        (lambda: plot.explore(_weights(6, 6), TOKENS, mask=torch.ones(6, 6).tril() == 0), r"mask is False"),
        (lambda: plot.explore(_weights(6, 6), TOKENS, title=3), "title: expected None or a str"),
    ],
)
def test_refused_with_clear_errors(call, message):
    with pytest.raises(AttnlibError, match=message):
        call()


def test_mask_broadcasts_and_is_stored():
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    w = torch.softmax(torch.randn(2, 6, 6).masked_fill(~causal, float("-inf")), dim=-1)
    ex = plot.explore(w, TOKENS, mask=causal)
    assert _data(ex._repr_html_())["mask"] == causal.long().tolist()
    padding = torch.tensor([True] * 5 + [False])  # (T_k,): the last key is padding
    w = torch.softmax(torch.randn(6, 6).masked_fill(~padding, float("-inf")), dim=-1)
    assert plot.explore(w, TOKENS, mask=padding).mask.shape == (6, 6)


# The HTML ----------------------------------------------------------------------------------------


def _decoding(n_steps: int = 4):
    """Decoding steps 0 .. n-1 of a causal layer: at step t the queries and keys 0 .. t exist."""
    causal = torch.ones(n_steps, n_steps, dtype=torch.bool).tril()
    full = torch.softmax(torch.randn(2, n_steps, n_steps, generator=torch.Generator().manual_seed(5)), -1)
    full = full * causal / (full * causal).sum(-1, keepdim=True)  # (n_heads, T, T), causal
    masks = torch.stack([causal & (torch.arange(n_steps) <= t)[:, None] for t in range(n_steps)])  # (n_steps, T, T)
    return [full * m for m in masks], masks


def test_a_mask_per_step():
    weights, masks = _decoding()
    ex = plot.explore(weights, TOKENS[:4], steps=[0, 1, 2, 3], mask=masks)
    assert ex.mask.shape == (4, 4, 4)
    assert _data(ex._repr_html_())["mask"] == masks.long().tolist()
    with pytest.raises(AttnlibError, match=r"mask is False"):  # step 1's weights under step 0's mask
        plot.explore(weights, TOKENS[:4], steps=[0, 1, 2, 3], mask=masks[[0, 0, 2, 3]])
    with pytest.raises(AttnlibError, match=r"\(n_steps, T_q, T_k\) = \(4, 4, 4\)"):
        plot.explore(weights, TOKENS[:4], steps=[0, 1, 2, 3], mask=masks[:3])


def test_deterministic_bytes():
    make = lambda: plot.explore(_weights(3, 6, 6), TOKENS, title="three heads")._repr_html_()
    assert make() == make()
    other = plot.explore(_weights(3, 6, 6, seed=1), TOKENS, title="three heads")._repr_html_()
    ids = {re.search(r'id="(attnx-[0-9a-f]+)"', page).group(1) for page in (make(), other)}
    assert len(ids) == 2  # the id is derived from the inputs


def test_size_budget():
    """The budget the module states: at most 60 kB for 2 layers x 12 heads x 16 x 16."""
    tokens = [f"tok{i}" for i in range(16)]
    page = plot.explore(_weights(2, 12, 16, 16), tokens, title="a budget")._repr_html_()
    assert len(page.encode()) <= 60_000, len(page.encode())


def test_self_contained():
    page = plot.explore([_weights(3, 6, 6)] * 2, TOKENS, steps=[0, 1], title="t")._repr_html_()
    for outside in ("http", "//cdn", "<link", "src=", "@import", "url("):
        assert outside not in page, outside
    assert "<style>" in page and "<script>" in page


def test_json_holds_the_weights_rounded():
    w = _weights(2, 3, 6, 6)
    data = _data(plot.explore(w, TOKENS)._repr_html_())
    stored = np.array(data["w"]) / data["scale"]
    assert stored.shape == (1, 2, 3, 6, 6)
    np.testing.assert_array_equal(stored[0], np.round(w.double().numpy(), 4))


def test_tokens_are_escaped():
    page = plot.explore(_weights(2, 2), ["</script><b>", "a&b"])._repr_html_()
    assert "</script><b>" not in page and "&lt;/script&gt;&lt;b&gt;" in page


def test_still_until_its_script_runs():
    """Before its script runs (a saved output in a notebook JupyterLab does not trust) the page says
    it is still; the script replaces that with the hint (checked in the browser test)."""
    from attnlib.views.explore import STILL

    page = plot.explore(_weights(2, 6, 6), TOKENS)._repr_html_()
    still = html.escape(STILL)
    assert f'<p class="attnx-hint" data-i18n="{still}">{still}</p>' in page
    assert _data(page)["text"]["hint"] == HINT


def test_words_carry_i18n_keys_and_translate(monkeypatch):
    page = plot.explore(_weights(2, 6, 6), TOKENS)._repr_html_()
    for word in ("queries", "keys", "head", "all heads", "weights of"):
        assert f'data-i18n="{word}">{word}<' in page
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    chinese = plot.explore(_weights(2, 6, 6), TOKENS)._repr_html_()
    for word, zh in (("queries", "查询"), ("keys", "键"), ("all heads", "所有头")):
        assert f'data-i18n="{word}">{zh}<' in chinese  # the catalog's words, the English key kept


def test_readable_by_everyone():
    """Masked keys' grey reaches 4.5:1 on the hatch's grey stripes (on white, and on the dark theme's light
    output box #ced6dd); the table's caption keeps the view's colour (not the theme's muted grey); no italic
    labels (Chinese is never slanted); the queries are a named group; the table's sideways-scrolling box
    is a named region a keyboard reaches."""
    grey = re.search(r"\.attnx-masked\{color:(#[0-9a-fA-F]{3,6})", STYLE).group(1)
    stripe = re.search(r"rgba\(128,128,128,(\.\d+)\)", STYLE).group(1)
    for paper in ("#ffffff", "#ced6dd"):
        assert contrast(grey, blend("#808080", float(stripe), paper)) >= 4.5, (grey, paper)
    assert ".attnx-table caption{text-align:left;color:inherit}" in STYLE
    assert "italic" not in STYLE
    page = plot.explore(_weights(2, 6, 6), TOKENS)._repr_html_()
    assert '<div class="attnx-col attnx-queries" role="group" aria-label="queries">' in page
    assert (
        '<div class="attnx-scroll" tabindex="0" role="region" aria-label="weights of"><table class="attnx-table">'
        in page
    )
    assert _data(page)["text"]["hintTouch"] == _data(page)["hintTouch"] == HINT_TOUCH


def test_the_touch_hint_in_chinese(monkeypatch):
    from attnlib import i18n

    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    data = _data(plot.explore(_weights(2, 6, 6), TOKENS)._repr_html_())
    assert data["text"]["hintTouch"] == i18n.catalog("zh_CN")[HINT_TOUCH] and "轻触" in data["text"]["hintTouch"]


# In the browser ----------------------------------------------------------------------------------


browser = views_browser(height=1200)  # one Chromium for the module's tests


def _shown(driver) -> dict[int, list[float]]:
    """The numbers the table shows, {head: [weight or nan (masked) per key]}."""
    rows = driver.find_elements("css selector", ".attnx-table tbody tr")
    shown = {}
    for row in rows:
        cells = row.find_elements("css selector", "td")
        shown[int(row.get_attribute("data-head"))] = [
            float("nan") if "attnx-masked" in c.get_attribute("class") else float(c.text) for c in cells
        ]
    return shown


def _expect(driver, weights: np.ndarray, i: int, heads, mask: np.ndarray | None = None) -> None:
    """The table shows row ``i`` of ``weights`` (n_heads, T_q, T_k) for ``heads``, masked keys as masked."""
    weights = np.round(weights, 4)  # what the page stores; it shows those to 2 decimals
    if mask is not None:
        weights = np.where(mask, weights, np.nan)
    shown = _shown(driver)
    assert sorted(shown) == list(heads)
    for h in heads:
        np.testing.assert_allclose(shown[h], weights[h, i], atol=0.005 + 1e-9, err_msg=f"head {h}, query {i}")
    pressed = driver.find_elements("css selector", ".attnx-q.attnx-on")
    assert [int(q.get_attribute("data-q")) for q in pressed] == [i]


@pytest.mark.slow
def test_in_the_browser(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    steps = [[_weights(3, 6, 6, seed=10 * s + layer) for layer in range(2)] for s in range(3)]
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    steps = [[(w * causal) / (w * causal).sum(-1, keepdim=True) for w in layers] for layers in steps]
    ex = plot.explore(steps, TOKENS, steps=[0, 50, 100], layers=["L0", "L1"], mask=causal, title="explorer")
    w = ex.weights  # (step, layer, head, T_q, T_k)
    page = open_view(browser, tmp_path, ex, "explore")
    hint = browser.find_element("css selector", ".attnx-hint")  # the script ran: the still view's notice is gone
    assert (hint.text, hint.get_attribute("data-i18n")) == (HINT, HINT)
    queries = browser.find_elements("css selector", ".attnx-q")
    away = browser.find_element("id", "away")
    act = lambda: ActionChains(browser)
    s, layer = 2, 0  # the default view: the last step, the first layer, all heads

    # hover query i: its row, for every head; masked keys shown as masked
    for i in (0, 3, 5):
        act().move_to_element(queries[i]).perform()
        _expect(browser, w[s, layer], i, range(3), causal.numpy())
        masked = browser.find_elements("css selector", ".attnx-table td.attnx-masked")
        assert len(masked) == 3 * (5 - i)
    act().move_to_element(away).perform()
    assert _shown(browser) == {}

    # click pins: moving away keeps the row; clicking again unpins
    act().move_to_element(queries[4]).click().move_to_element(away).perform()
    _expect(browser, w[s, layer], 4, range(3), causal.numpy())
    assert queries[4].get_attribute("aria-pressed") == "true"
    act().move_to_element(queries[1]).perform()
    _expect(browser, w[s, layer], 1, range(3), causal.numpy())  # hovering another query shows it...
    act().move_to_element(away).perform()
    _expect(browser, w[s, layer], 4, range(3), causal.numpy())  # ...and the pinned row comes back
    act().move_to_element(queries[4]).click().move_to_element(away).click().perform()
    assert _shown(browser) == {}

    # keyboard: Tab reaches the first query, arrows move, Enter pins
    browser.find_element("tag name", "body").click()
    act().send_keys(Keys.TAB).perform()
    focused = browser.switch_to.active_element
    assert focused.get_attribute("class").startswith("attnx-") and focused.tag_name in ("select", "button")
    while "attnx-q" not in (browser.switch_to.active_element.get_attribute("class") or ""):
        act().send_keys(Keys.TAB).perform()
    # roving tabindex: Tab lands on the query last focused (4, clicked above); Home goes to the first
    assert browser.switch_to.active_element.get_attribute("data-q") == "4"
    act().send_keys(Keys.HOME).perform()
    assert browser.switch_to.active_element.get_attribute("data-q") == "0"
    act().send_keys(Keys.ARROW_DOWN, Keys.ARROW_DOWN, Keys.ARROW_DOWN, Keys.ARROW_UP, Keys.ENTER).perform()
    act().move_to_element(away).perform()
    assert browser.switch_to.active_element.get_attribute("data-q") == "2"
    _expect(browser, w[s, layer], 2, range(3), causal.numpy())
    assert queries[2].get_attribute("aria-pressed") == "true"

    # the selectors: head, layer, step (query 2 stays pinned)
    Select(browser.find_element("css selector", ".attnx-head")).select_by_value("1")
    _expect(browser, w[s, layer], 2, [1], causal.numpy())
    shown_by_key = [e.text for e in browser.find_elements("css selector", ".attnx-k .attnx-v")]
    np.testing.assert_allclose(
        [float(v) for v in shown_by_key[:3]], np.round(w[s, layer, 1, 2, :3], 4), atol=0.005 + 1e-9
    )
    assert shown_by_key[3:] == ["masked"] * 3
    Select(browser.find_element("css selector", ".attnx-layer")).select_by_value("1")
    layer = 1
    _expect(browser, w[s, layer], 2, [1], causal.numpy())
    slider = browser.find_element("css selector", ".attnx-step")
    act().click(slider).perform()  # the middle of the slider: step 1
    act().send_keys(Keys.HOME).perform()
    s = 0
    _expect(browser, w[s, layer], 2, [1], causal.numpy())
    assert browser.find_element("css selector", ".attnx-step-label").text == "0"
    act().send_keys(Keys.ARROW_RIGHT).perform()
    s = 1
    _expect(browser, w[s, layer], 2, [1], causal.numpy())
    assert browser.find_element("css selector", ".attnx-step-label").text == "50"
    Select(browser.find_element("css selector", ".attnx-head")).select_by_value("-1")
    _expect(browser, w[s, layer], 2, range(3), causal.numpy())

    assert_offline_and_clean(browser, page)  # no console errors, no request leaving the page


@pytest.mark.slow
def test_a_mask_per_step_in_the_browser(browser, tmp_path):
    """Decoding: at step t, a query after t is masked whole (it does not exist yet), not shown as zeros."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    weights, masks = _decoding()
    ex = plot.explore(weights, TOKENS[:4], steps=[0, 1, 2, 3], mask=masks)
    open_view(browser, tmp_path, ex, "steps")
    queries = browser.find_elements("css selector", ".attnx-q")
    slider = browser.find_element("css selector", ".attnx-step")
    ActionChains(browser).click(slider).send_keys(Keys.HOME, Keys.ARROW_RIGHT).perform()  # step 1
    for i in range(4):
        ActionChains(browser).move_to_element(queries[i]).perform()
        _expect(browser, ex.weights[1, 0], i, range(2), masks[1].numpy())
    assert len(browser.find_elements("css selector", ".attnx-table td.attnx-masked")) == 2 * 4  # query 3: every key
    ActionChains(browser).click(slider).send_keys(Keys.END).perform()  # step 3: every query exists
    ActionChains(browser).move_to_element(queries[3]).perform()
    _expect(browser, ex.weights[3, 0], 3, range(2), masks[3].numpy())
    assert not browser.find_elements("css selector", ".attnx-table td.attnx-masked")


@pytest.mark.slow
def test_on_a_touch_screen(browser, tmp_path):
    """On a phone (touch emulated, 390 px): the hint says "tap"; a tap pins a query and shows its row; a second
    tap on it unpins it and its row disappears (the emulated hover must not keep it shown)."""
    ex = plot.explore(_weights(2, 6, 6), TOKENS)
    browser.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": False}
    )
    try:
        open_view(browser, tmp_path, ex, "touch")
        assert browser.execute_script("return matchMedia('(hover: none) and (pointer: coarse)').matches")
        hint = browser.find_element("css selector", ".attnx-hint")
        assert (hint.text, hint.get_attribute("data-i18n")) == (HINT_TOUCH, HINT_TOUCH)
        query = browser.find_elements("css selector", ".attnx-q")[3]
        touch_tap(browser, query)
        _expect(browser, ex.weights[0, 0], 3, range(2))
        assert query.get_attribute("aria-pressed") == "true"
        touch_tap(browser, query)
        assert query.get_attribute("aria-pressed") == "false"
        assert _shown(browser) == {}, "the unpinned query's row is still shown"
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 390
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        browser.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": False})
