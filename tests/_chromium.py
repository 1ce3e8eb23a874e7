"""Debian's headless Chromium for the browser tests (test_browser, test_explore, test_live, test_player, test_jupyterlab).

`/usr/bin/chromium` and `/usr/bin/chromedriver` (never a downloaded browser), driven by selenium,
with every host name but 127.0.0.1 failing to resolve: a page that asks the network shows it in
the performance log, which the tests read. Without the browser a test is skipped, with a message
saying so; under CI (`CI=true`) a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")


def require_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        message = (
            f"browser test needs Debian's chromium and chromium-driver ({', '.join(missing)} not found; "
            "`apt-get install chromium chromium-driver`)"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + ": required under CI")
        pytest.skip(message)


def views_browser(height: int):
    """A module-scoped ``browser`` fixture for a test module: one headless Chromium for the pages of
    attnlib's views (the explorer's, the live model's, the player's), ``height`` pixels tall."""

    @pytest.fixture(scope="module")
    def browser(tmp_path_factory):
        require_browser()
        driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"), height=height, timeout=30)
        yield driver
        driver.quit()

    return browser


def start_chromium(profile_dir, height: int = 1600, timeout: float = 60):
    """A headless Chromium (selenium's driver), the network blocked, logging the console and requests."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size=1280,{height}",
        f"--user-data-dir={profile_dir}",
        # the network is blocked: every host but loopback fails to resolve
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(timeout)
    driver.set_script_timeout(timeout)
    return driver


def requests(driver) -> list[str]:
    """The URLs the page asked for since the performance log was last read (the log is emptied)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def assert_offline_and_clean(driver, page) -> None:
    """A local page (``page``, a file's Path) that logged no console error and asked nothing of the
    network: every request is the file itself or the browser's own (data:, chrome://, chrome-untrusted://, about:)."""
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    urls = requests(driver)
    assert page.as_uri() in urls
    # chrome-untrusted://new-tab-page: the browser's own start page (Chromium 150 asks it for its bar)
    leaving = [u for u in urls if not u.startswith(("file://", "data:", "chrome://", "chrome-untrusted://", "about:"))]
    assert not leaving, leaving


def open_view(driver, folder, view, name: str):
    """Write ``view``'s ``_repr_html_()`` into ``folder/name.html`` (a page with an ``#away`` heading, a
    place for the pointer to rest), forget what earlier pages logged, open it; return the file's Path."""
    page = folder / f"{name}.html"
    page.write_text(
        '<!doctype html><html><head><meta charset="utf-8"><title>t</title></head><body>'
        f"<h1 id='away'>away</h1>{view._repr_html_()}</body></html>",
        encoding="utf-8",
    )
    driver.get_log("browser"), driver.get_log("performance")
    driver.get(page.as_uri())
    return page


def contrast(foreground: str, background: str) -> float:
    """WCAG 2's contrast ratio of two colours "#rgb" / "#rrggbb" (1 to 21; text needs 4.5)."""

    def luminance(colour: str) -> float:
        hexes = colour.lstrip("#")
        hexes = "".join(c * 2 for c in hexes) if len(hexes) == 3 else hexes
        channels = [int(hexes[i : i + 2], 16) / 255 for i in (0, 2, 4)]
        r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def blend(colour: str, alpha: float, background: str) -> str:
    """``colour`` painted with opacity ``alpha`` over ``background``, as "#rrggbb"."""

    def rgb(c):
        c = c.lstrip("#")
        c = "".join(x * 2 for x in c) if len(c) == 3 else c
        return [int(c[i : i + 2], 16) for i in (0, 2, 4)]

    mixed = [round(alpha * a + (1 - alpha) * b) for a, b in zip(rgb(colour), rgb(background))]
    return "#" + "".join(f"{x:02x}" for x in mixed)


def touch_tap(driver, element) -> None:
    """A finger's tap on ``element`` (touchStart, touchEnd): Chromium then sends the mouse events and the
    click a phone sends, hover included."""
    x, y = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2];", element
    )
    point = {"x": x, "y": y}
    driver.execute_cdp_cmd("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [point]})
    driver.execute_cdp_cmd("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
