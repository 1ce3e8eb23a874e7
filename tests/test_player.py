"""attnlib.plot.online_softmax_player: chapter 13's online softmax, tile by tile. Its HTML (unit tests) and
its behaviour in headless Chromium with real mouse and keyboard events (marked slow; network blocked).

The page computes the online softmax itself, in JavaScript; these tests compare what it shows at every
step with the running maximum and sum computed here with PyTorch from the same scores (the maximum and
the sum of the keys read so far, directly, not online), and its final row with ``torch.softmax``.
The browser test uses Debian's /usr/bin/chromium and /usr/bin/chromedriver (tests/_chromium.py);
without them it is skipped, under CI (CI=true) it fails.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from _chromium import assert_offline_and_clean, contrast, open_view, views_browser

from attnlib import i18n, plot
from attnlib._validate import AttnlibError
from attnlib.views.player import HINT, MAX_DV, MAX_KEYS, NAMES, STYLE, WORDS, OnlineSoftmaxPlayer, _words


def _row(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * 2


def _data(page: str) -> dict:
    found = re.search(r'<script type="application/json" class="osp-data">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


# Arguments ---------------------------------------------------------------------------------------


def test_accepted_and_stored():
    s = _row(7, 0)
    v = torch.randn(7, 3, generator=torch.Generator().manual_seed(1))
    p = plot.online_softmax_player(s, v, block_size=3, title="seven keys")
    assert isinstance(p, OnlineSoftmaxPlayer) and p.n_tiles == 3 and p.title == "seven keys"
    assert p.scores.dtype == np.float64 and p.values.shape == (7, 3)
    np.testing.assert_array_equal(p.scores, s.double().numpy())  # stored exactly
    assert repr(p) == "OnlineSoftmaxPlayer(T_k=7, block_size=3, 3 tiles, values d_v=3)"
    assert plot.online_softmax_player(s.numpy(), block_size=10).n_tiles == 1  # numpy; a block past T_k: one tile
    assert plot.online_softmax_player(s.double(), block_size=1).n_tiles == 7


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plot.online_softmax_player(_row(6, 0), block_size=0), r"block_size: expected .*received"),
        (lambda: plot.online_softmax_player(_row(6, 0), block_size=2.0), r"block_size: expected .*received"),
        (
            lambda: plot.online_softmax_player(torch.randn(2, 6), block_size=2),
            r"scores: expected a floating-point tensor \(T_k,\).*received tensor of shape \(2, 6\)",
        ),
        (lambda: plot.online_softmax_player(torch.arange(6), block_size=2), r"scores: expected .*int64"),
        (lambda: plot.online_softmax_player([1.0, 2.0], block_size=2), r"scores: expected .*received list"),
        (lambda: plot.online_softmax_player(torch.zeros(0), block_size=2), r"received tensor of shape \(0,\)"),
        (
            lambda: plot.online_softmax_player(torch.zeros(MAX_KEYS + 1), block_size=2),
            rf"1 <= T_k <= {MAX_KEYS}.*received tensor of shape \({MAX_KEYS + 1},\)",
        ),
        (
            lambda: plot.online_softmax_player(torch.tensor([1.0, float("-inf")]), block_size=1),
            r"scores: expected finite numbers.*received \[-inf\]",
        ),
        (
            lambda: plot.online_softmax_player(torch.tensor([1.0, float("nan")]), block_size=1),
            r"received \[nan\]",
        ),
        (
            lambda: plot.online_softmax_player(_row(6, 0), torch.zeros(5, 2), block_size=2),
            r"values: expected None or a floating-point tensor \(T_k, d_v\) = \(6, d_v\).*received tensor of shape \(5, 2\)",
        ),
        (
            lambda: plot.online_softmax_player(_row(6, 0), torch.zeros(6, MAX_DV + 1), block_size=2),
            rf"d_v <= {MAX_DV}.*received tensor of shape \(6, {MAX_DV + 1}\)",
        ),
        (lambda: plot.online_softmax_player(_row(6, 0), torch.zeros(6), block_size=2), r"values: expected"),
        (
            lambda: plot.online_softmax_player(_row(6, 0), torch.full((6, 2), float("inf")), block_size=2),
            r"values: expected finite numbers",
        ),
        (lambda: plot.online_softmax_player(_row(6, 0), block_size=2, title=3), "title: expected None or a str"),
    ],
)
def test_refused_with_clear_errors(call, message):
    with pytest.raises(AttnlibError, match=message):
        call()


def test_block_size_is_keyword_only():
    with pytest.raises(TypeError, match="keyword-only argument: 'block_size'"):
        plot.online_softmax_player(_row(6, 0), 2)  # 2 would be the values


def test_errors_are_attnlib_errors():
    with pytest.raises(AttnlibError, match=r"^scores: expected .*, received "):
        plot.online_softmax_player(torch.ones(3, dtype=torch.long), block_size=2)


# The HTML ----------------------------------------------------------------------------------------


def test_deterministic_bytes():
    make = lambda seed: plot.online_softmax_player(
        _row(9, seed), torch.randn(9, 2, generator=torch.Generator().manual_seed(5)), block_size=4, title="t"
    )._repr_html_()
    assert make(0) == make(0)
    ids = {re.search(r'id="(osp-[0-9a-f]+)"', page).group(1) for page in (make(0), make(1))}
    assert len(ids) == 2  # the id is derived from the inputs


def test_size_budget():
    """The budget the module states: at most 36 kB for 64 keys and 8 value components."""
    g = torch.Generator().manual_seed(3)
    page = plot.online_softmax_player(
        torch.randn(MAX_KEYS, generator=g), torch.randn(MAX_KEYS, MAX_DV, generator=g), block_size=5, title="budget"
    )._repr_html_()
    assert len(page.encode()) <= 36_000, len(page.encode())


def test_self_contained():
    page = plot.online_softmax_player(_row(8, 0), torch.ones(8, 2), block_size=3, title="t")._repr_html_()
    for outside in ("http", "//cdn", "<link", "src=", "@import", "url("):
        assert outside not in page, outside
    assert "<style>" in page and "<script>" in page


def test_data_holds_the_inputs_and_pythons_softmax():
    s = _row(10, 2)
    v = torch.randn(10, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    data = _data(plot.online_softmax_player(s, v, block_size=4)._repr_html_())
    assert data["s"] == s.double().tolist() and data["v"] == v.tolist() and data["b"] == 4
    expected = torch.softmax(s.double(), dim=-1)
    np.testing.assert_allclose(data["softmax"], expected.numpy(), rtol=0, atol=5e-9 + 1e-15)
    np.testing.assert_allclose(data["out"], (expected @ v).numpy(), rtol=0, atol=5e-9 + 1e-15)
    assert data["out"] is not None and _data(plot.online_softmax_player(s, block_size=4)._repr_html_())["out"] is None


def test_title_is_escaped():
    page = plot.online_softmax_player(_row(3, 0), block_size=2, title="</script><b>")._repr_html_()
    assert "</script><b>" not in page and "&lt;/script&gt;&lt;b&gt;" in page


def test_every_word_has_a_chinese_entry(monkeypatch):
    catalog = i18n.catalog("zh_CN")
    words = [*WORDS, *_words().values(), HINT, *NAMES]
    missing = [w for w in words if w not in catalog]
    assert not missing, missing
    page = plot.online_softmax_player(_row(5, 0), torch.ones(5, 2), block_size=2)._repr_html_()
    for word in WORDS:
        if word != "step":  # the slider's label (aria-label), not a visible word
            assert f'data-i18n="{word}">{word}<' in page, word
    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    chinese = plot.online_softmax_player(_row(5, 0), block_size=2)._repr_html_()
    assert f'data-i18n="Back">{catalog["Back"]}<' in chinese and catalog["not read yet"] in chinese
    assert _data(chinese)["text"]["grew"] == catalog["new maximum: the old sums are multiplied by the factor"]


# In the browser ----------------------------------------------------------------------------------


def test_readable_by_everyone():
    """The unread tiles' grey and the coloured marks reach 4.5:1 on white and on the dark theme's light output
    box (#ced6dd);
    the caption keeps the view's colour; the focusable box is a named group; each table scrolls sideways
    in a named region a keyboard reaches; no empty header cell."""
    grey = re.search(r"\.osp-unread\{color:(#[0-9a-fA-F]{3,6})", STYLE).group(1)
    colours = [grey] + re.findall(r"\.osp-(?:new|ok|bad)\{color:(#[0-9a-fA-F]{3,6})", STYLE)  # text, marks, verdict
    assert len(colours) == 4
    for colour in colours:
        for paper in ("#ffffff", "#ced6dd"):
            assert contrast(colour, paper) >= 4.5, (colour, paper)
    assert ".osp caption{text-align:left;font-weight:bold;color:inherit}" in STYLE
    page = plot.online_softmax_player(_row(8, 0), torch.ones(8, 2), block_size=3)._repr_html_()
    assert re.search(
        r'<div class="osp" id="osp-\w+" tabindex="0" role="group" aria-label="online softmax, tile by tile">', page
    )
    regions = re.findall(r'<div class="osp-scroll" tabindex="0" role="region" aria-label="([^"]+)"><table', page)
    assert regions == ["scores by tile", "running state", "final row"]
    assert not re.search(r"<th[^>]*></th>", page)


browser = views_browser(height=1200)  # one Chromium for the module's tests


def _reference(s: torch.Tensor, v: torch.Tensor | None, b: int, k: int) -> dict:
    """The state after ``k`` tiles, computed directly from the keys read so far (not online), float64."""
    s = s.double()
    seen = s[: k * b]
    if k == 0:
        return {"m": -math.inf, "l": 0.0, "w": [None] * len(s), "o": None if v is None else [0.0] * v.shape[1]}
    m = seen.max()
    e = torch.exp(seen - m)  # (k b,)
    l = e.sum()
    w = (e / l).tolist() + [None] * (len(s) - len(seen))
    o = None if v is None else (e @ v.double()[: len(seen)]).tolist()  # (k b,) @ (k b, d_v) -> (d_v,)
    return {"m": m.item(), "l": l.item(), "w": w, "o": o}


def _check_step(driver, s, v, b, k, n_tiles) -> None:
    """The page shows step k: its m, l, weights so far and o equal the reference (1e-6 relative)."""
    state = driver.find_element("css selector", ".osp-state")
    ref = _reference(s, v, b, k)
    assert int(state.get_attribute("data-step")) == k
    m, l = float(state.get_attribute("data-m")), float(state.get_attribute("data-l"))
    if k == 0:
        assert m == -math.inf and l == 0.0
    else:
        assert m == pytest.approx(ref["m"], rel=1e-6, abs=1e-12), f"m at step {k}"
        assert l == pytest.approx(ref["l"], rel=1e-6), f"l at step {k}"
        # the factor of this step: e^(m_old - m_new), with m_old the maximum of the keys before this tile
        m_old = _reference(s, v, b, k - 1)["m"]
        factor = float(state.get_attribute("data-factor"))
        assert factor == pytest.approx(math.exp(m_old - ref["m"]), rel=1e-6, abs=1e-300)
        note = driver.find_element("css selector", ".osp-note")
        assert note.get_attribute("data-rescaled") == str(k > 1 and ref["m"] > m_old).lower()
    w = json.loads(state.get_attribute("data-w"))
    assert [x is None for x in w] == [x is None for x in ref["w"]]
    np.testing.assert_allclose(
        [x for x in w if x is not None], [x for x in ref["w"] if x is not None], rtol=1e-6, atol=1e-15
    )
    o = json.loads(state.get_attribute("data-o"))
    if v is None:
        assert o is None
    else:
        np.testing.assert_allclose(o, ref["o"], rtol=1e-6, atol=1e-12)
    # what the reader sees: the step counter, the tile read in this step framed and labelled
    label = driver.find_element("css selector", ".osp-step").text
    assert re.findall(r"\d+", label) == [str(k), str(n_tiles)]
    now = driver.find_elements("css selector", "th.osp-tile.osp-now")
    assert [int(h.get_attribute("data-tile")) for h in now] == ([k - 1] if k else [])
    shown = [c.text for c in driver.find_elements("css selector", ".osp-wrow td")]
    for j, x in enumerate(ref["w"]):
        assert shown[j] == ("—" if x is None else f"{x:.4f}"), (k, j, shown[j], x)
    final = driver.find_element("css selector", ".osp-final")
    assert final.is_displayed() == (k == n_tiles)


def _rows():
    """Two rows: (a) a later tile holds a new, larger maximum, so the rescaling shows; (b) the
    maximum is the first key, so the factor of every tile after the first is 1."""
    a = _row(11, 7)
    a[9] = a.abs().max() + 3.0  # key 9: in tile 4 of 3 keys, tile 3 of 4 keys, tile 2 of 5
    b = _row(10, 8)
    b[0] = b.abs().max() + 1.0
    return a, b


CASES = [  # (row, with values, block size): 3 does not divide 11, 4 does not divide 11 or 10, 5 divides 10
    (0, True, 3),
    (0, False, 4),
    (1, True, 5),
]


@pytest.mark.slow
@pytest.mark.parametrize(("row", "with_values", "b"), CASES)
def test_in_the_browser(browser, tmp_path, row, with_values, b):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    s = _rows()[row]
    v = torch.randn(len(s), 3, generator=torch.Generator().manual_seed(20 + row)) if with_values else None
    n = math.ceil(len(s) / b)
    page = open_view(browser, tmp_path, plot.online_softmax_player(s, v, block_size=b, title="row"), f"row{row}b{b}")
    act = lambda: ActionChains(browser)
    forward = browser.find_element("css selector", ".osp-forward")
    back = browser.find_element("css selector", ".osp-back")
    _check_step(browser, s, v, b, 0, n)

    # forward to the end: a click, then the arrow keys (the focus stays in the player), then clicks
    act().click(forward).perform()
    _check_step(browser, s, v, b, 1, n)
    k = 1
    while k < n:
        if k % 2:
            act().send_keys(Keys.ARROW_RIGHT).perform()
        else:
            act().click(forward).perform()
        k += 1
        _check_step(browser, s, v, b, k, n)
    act().click(forward).send_keys(Keys.ARROW_RIGHT).perform()  # past the end: nothing moves
    _check_step(browser, s, v, b, n, n)
    assert forward.get_attribute("aria-disabled") == "true"

    # the final row: the page's exp(s - m) / l equals torch.softmax, and is marked equal
    final = browser.find_element("css selector", ".osp-final")
    expected = torch.softmax(s.double(), dim=-1).numpy()
    np.testing.assert_allclose(json.loads(final.get_attribute("data-final")), expected, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(json.loads(final.get_attribute("data-final")), torch.softmax(s, dim=-1), atol=1e-6)
    assert final.get_attribute("data-equal") == "true" and float(final.get_attribute("data-max-diff")) <= 1e-6
    marks = browser.find_elements("css selector", ".osp-final .osp-mark")
    assert len(marks) == len(s) and all("✓" in m.text for m in marks)
    assert "✓" in browser.find_element("css selector", ".osp-verdict").text
    python_column = [
        float(r.find_elements("css selector", "td")[1].text)
        for r in final.find_elements("css selector", "tbody tr:not(.osp-out-row)")
    ]
    np.testing.assert_allclose(python_column, expected, atol=0.00005 + 1e-9)  # Python's row, shown to 4 decimals
    out = json.loads(final.get_attribute("data-out"))
    if v is None:
        assert out is None
    else:
        np.testing.assert_allclose(out, (torch.softmax(s.double(), -1) @ v.double()).numpy(), rtol=1e-6, atol=1e-12)
        reference = torch.nn.functional.scaled_dot_product_attention(  # one query whose scores are s
            torch.ones(1, 1, dtype=torch.float64), s.double()[:, None], v.double(), scale=1.0
        )
        np.testing.assert_allclose(out, reference[0].numpy(), rtol=1e-6, atol=1e-12)

    # back: the arrow key, a click, the slider's own keys, End and Home on the player
    act().send_keys(Keys.ARROW_LEFT).perform()
    _check_step(browser, s, v, b, n - 1, n)
    act().click(back).perform()
    _check_step(browser, s, v, b, max(n - 2, 0), n)
    slider = browser.find_element("css selector", ".osp-slider")
    act().click(slider).send_keys(Keys.HOME).perform()  # the slider: Home is step 0
    _check_step(browser, s, v, b, 0, n)
    act().send_keys(Keys.ARROW_RIGHT).perform()  # the slider moves itself, one step
    _check_step(browser, s, v, b, 1, n)
    act().click(forward).send_keys(Keys.END).perform()
    _check_step(browser, s, v, b, n, n)
    for k in range(n - 1, -1, -1):
        act().send_keys(Keys.ARROW_LEFT).perform()
        _check_step(browser, s, v, b, k, n)
    assert back.get_attribute("aria-disabled") == "true"

    assert_offline_and_clean(browser, page)


@pytest.mark.slow
def test_the_rescaling_is_visible(browser, tmp_path):
    """Row (a) in tiles of 3: the tile holding key 9 brings a new maximum, and the page says so in words."""
    from selenium.webdriver.common.action_chains import ActionChains

    s, b = _rows()[0], 3
    open_view(browser, tmp_path, plot.online_softmax_player(s, block_size=b), "rescale")
    forward = browser.find_element("css selector", ".osp-forward")
    for _ in range(9 // b + 1):
        ActionChains(browser).click(forward).perform()
    factor = float(browser.find_element("css selector", ".osp-state").get_attribute("data-factor"))
    assert factor < 1 and factor == pytest.approx(math.exp(s[: 9 // b * b].max().item() - s.max().item()), rel=1e-6)
    note = browser.find_element("css selector", ".osp-note")
    assert note.get_attribute("data-rescaled") == "true" and note.text == i18n.tr(
        "new maximum: the old sums are multiplied by the factor", lang="en"
    )


@pytest.mark.slow
def test_in_chinese(browser, tmp_path, monkeypatch):
    """The page made with ATTNLIB_LANG=zh_CN shows the catalog's words, the static ones and the script's."""
    from selenium.webdriver.common.action_chains import ActionChains

    monkeypatch.setenv("ATTNLIB_LANG", "zh_CN")
    catalog = i18n.catalog("zh_CN")
    s, b = _rows()[0], 4
    v = torch.randn(len(s), 2, generator=torch.Generator().manual_seed(3))
    page = open_view(browser, tmp_path, plot.online_softmax_player(s, v, block_size=b), "zh")
    for word in ("Back", "Forward", "key", "score", "running sum ℓ", "output o, not yet divided by ℓ"):
        shown = browser.find_element("css selector", f'.osp [data-i18n="{word}"]').text
        assert shown == catalog[word] and re.search(r"[\u4e00-\u9fff]", shown), word
    assert browser.find_element("css selector", ".osp-hint").text == catalog[HINT]
    assert browser.find_element("css selector", ".osp-note").text == catalog["nothing read yet: m = −∞, ℓ = 0"]
    forward = browser.find_element("css selector", ".osp-forward")
    ActionChains(browser).click(forward).click(forward).click(forward).perform()
    assert browser.find_element("css selector", ".osp-step").text == catalog["step {} of {}"].replace(
        "{}", "3", 1
    ).replace("{}", "3", 1)
    assert browser.find_element("css selector", ".osp-final").is_displayed()
    assert catalog["equal"] in browser.find_element("css selector", ".osp-verdict").text
    _check_step(browser, s, v, b, 3, 3)
    assert_offline_and_clean(browser, page)


@pytest.mark.slow
def test_on_a_phone(browser, tmp_path):
    """At 390 px the page is no wider than the screen: the tiles, the state (its long sums) and the final
    row scroll sideways in their own boxes."""
    s = _row(12, 3)
    v = torch.randn(12, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 100
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": False}
    )
    try:
        open_view(browser, tmp_path, plot.online_softmax_player(s, v, block_size=2), "phone")
        for _ in range(6):
            browser.find_element("css selector", ".osp-forward").click()
        sizes = browser.execute_script(
            "return [document.documentElement.scrollWidth,"
            " ...[...document.querySelectorAll('.osp-scroll')].map(b => b.scrollWidth > b.clientWidth)];"
        )
        assert sizes[0] <= 390, sizes
        assert sizes[1:3] == [True, True], "the tiles and the state should need their own sideways scrolling here"
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
