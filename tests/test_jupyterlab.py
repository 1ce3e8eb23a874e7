"""The explorer in a real JupyterLab: a notebook opened in the browser and executed there (issue 23).

bertviz's views are reported blank in JupyterLab (their scripts come from a CDN, through RequireJS).
This test starts the JupyterLab the course installs (requirements.txt) on 127.0.0.1 with a token,
opens a notebook in Debian's headless Chromium (tests/_chromium.py: every other host fails to
resolve), runs its cells with the keyboard (Shift+Enter), and checks with real mouse and keyboard
events that hovering query i shows row i of the weights the kernel computed, that the head and step
selectors change the numbers to the right ones, that chapter 10's live model answers and attends
as the kernel's PyTorch model does, that chapter 13's player ends on softmax's row, that the words come from the Chinese catalog when the
kernel runs with ATTNLIB_LANG=zh_CN, that the console shows no error and that no request leaves
the machine. Marked slow: it takes about 20 s (JupyterLab's start, its page, a kernel).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import numpy as np
import pytest
from _chromium import require_browser, start_chromium

from attnlib.i18n import tr

pytestmark = pytest.mark.slow

# The notebook: the kernel computes the weights (a seeded model's attention, two training "steps"),
# saves them for the test, and shows them in the explorer; then the same in Chinese.
CELLS = [
    """import numpy as np
import torch
import attnlib
from attnlib import plot

torch.manual_seed(0)
tokens = ["the", "cat", "sat", "on", "the", "mat"]
x = torch.randn(1, 6, 16)
mha = attnlib.MultiHeadAttention(16, n_heads=4)
mask = attnlib.causal_mask(6)
steps = []
for step in range(2):                      # two "steps": the weights, then after moving every parameter
    with torch.no_grad():
        _, w = mha(x, attn_mask=mask)      # (1, n_heads, T, T)
        steps.append(w[0])
        for p in mha.parameters():
            p.add_(torch.randn_like(p))
np.save("weights.npy", torch.stack(steps).numpy())   # (n_steps, n_heads, T, T), for the test""",
    'plot.explore(steps, tokens, steps=[0, 1], mask=mask, title="two steps")',
    """import json
gpt = attnlib.GPT(attnlib.GPTConfig(vocab_size=11, context_length=13, d_model=32, n_layers=1, n_heads=4)).eval()
prompt = torch.tensor([[4, 9, 3, 0, 3, 9, 10]])
with torch.no_grad():
    out = gpt.generate(prompt, 6)                        # (1, 13): what the page must answer
    _, (w_gpt,) = gpt(out, need_weights=True)            # (1, n_heads, 13, 13)
json.dump({"ids": out[0].tolist(), "weights": w_gpt[0].tolist()}, open("gpt.json", "w"))
plot.live_model(gpt, list("0123456789|"), prompt_length=7, new_tokens=6, example=prompt[0])""",
    """row = torch.tensor([2.0, 1.0, 4.0, 3.0, 7.0, 0.0, 5.0])
np.save("row.npy", torch.softmax(row, -1).numpy())
plot.online_softmax_player(row, block_size=3)""",
    """import os
os.environ["ATTNLIB_LANG"] = "zh_CN"
plot.explore(steps[0], tokens, mask=mask)""",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 serving a fresh folder with the notebook; (url, folder)."""
    require_browser()
    root = tmp_path_factory.mktemp("lab")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, root / "explore.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / ".config"), JUPYTER_DATA_DIR=str(root / ".data"))
    env.update(JUPYTER_RUNTIME_DIR=str(root / ".runtime"), IPYTHONDIR=str(root / ".ipython"))
    env.pop("ATTNLIB_LANG", None)  # English until the notebook asks for Chinese
    args = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}"]
    args += [f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--LabApp.news_url="]
    args += ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")  # CI's container runs as root
    log = open(root / "server.log", "w")
    server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (root / "server.log").read_text()[-3000:])
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/lab/tree/explore.ipynb?token={token}", root
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _table(driver, explorer) -> dict[int, list[float]]:
    """The numbers an explorer's table shows, {head: [weight, or nan where masked]}."""
    shown = {}
    for row in explorer.find_elements("css selector", ".attnx-table tbody tr"):
        cells = row.find_elements("css selector", "td")
        shown[int(row.get_attribute("data-head"))] = [
            float("nan") if "attnx-masked" in c.get_attribute("class") else float(c.text) for c in cells
        ]
    return shown


def test_the_explorer_runs_in_jupyterlab(lab, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    url, root = lab
    driver = start_chromium(tmp_path / "profile", height=1400, timeout=60)
    try:
        driver.get(url)
        wait = WebDriverWait(driver, 90)
        wait.until(lambda d: len(d.find_elements("css selector", ".jp-Notebook .jp-CodeCell")) == len(CELLS))
        wait.until(lambda d: d.find_elements("css selector", ".jp-Notebook-ExecutionIndicator[data-status='idle']"))
        first = driver.find_element("css selector", ".jp-Notebook .jp-CodeCell .jp-InputArea-editor")
        act = lambda: ActionChains(driver)
        act().click(first).send_keys(Keys.ESCAPE).perform()  # command mode on the first cell
        for _ in CELLS:  # run each cell and move to the next, as a reader does
            act().key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
        # the cells run in a kernel that shares the machine with the suite's background jobs: give them time
        WebDriverWait(driver, 240).until(
            lambda d: len(d.find_elements("css selector", ".jp-OutputArea-output .attnx[data-ready]")) >= 3
        )
        assert not driver.find_elements("css selector", ".jp-OutputArea-output[data-mime-type*='error']")

        # chapter 10's live model computed, in the page, what PyTorch computed in the kernel
        gpt = json.loads((root / "gpt.json").read_text())
        result = driver.find_element("css selector", ".attnl[data-ready] .attnl-result")
        wait.until(lambda d: result.get_attribute("data-ids"))
        assert json.loads(result.get_attribute("data-ids")) == gpt["ids"]
        page_weights = np.array(json.loads(result.get_attribute("data-weights")))[0]  # layer 0: (n_heads, T, T)
        np.testing.assert_allclose(page_weights, gpt["weights"], atol=1e-4)
        # chapter 13's player, stepped to its end with the keyboard: its row is softmax's
        player = driver.find_element("css selector", ".osp[data-ready]")
        back = player.find_element("css selector", "button")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", back)
        act().click(back).send_keys(Keys.END).perform()
        final = player.find_element("css selector", ".osp-final")
        wait.until(lambda d: final.get_attribute("data-final"))
        np.testing.assert_allclose(json.loads(final.get_attribute("data-final")), np.load(root / "row.npy"), atol=1e-6)

        weights = np.load(root / "weights.npy")  # (n_steps, n_heads, T, T), as the kernel computed them
        causal = np.tril(np.ones((6, 6), dtype=bool))
        explorer = driver.find_elements("css selector", ".attnx")[0]  # the first cell's, with two steps
        queries = explorer.find_elements("css selector", ".attnx-q")
        away = driver.find_element("css selector", ".attnx-title")

        def expect(step: int, heads, i: int) -> None:
            shown = _table(driver, explorer)
            assert sorted(shown) == list(heads)
            for h in heads:
                want = np.where(causal[i], weights[step, h, i], np.nan)
                np.testing.assert_allclose(shown[h], want, atol=0.005 + 1e-9, err_msg=f"step {step}, head {h}")

        def to(element):  # the pointer onto an element, scrolled to the middle of the notebook's own scroller
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
            return act().move_to_element(element)

        for i in (1, 4, 5):  # hover query i: row i of every head, at the last step (the default)
            to(queries[i]).perform()
            expect(1, range(4), i)
        to(queries[3]).click().move_to_element(away).perform()  # pin query 3
        expect(1, range(4), 3)
        Select(explorer.find_element("css selector", ".attnx-head")).select_by_value("2")
        expect(1, [2], 3)
        slider = explorer.find_element("css selector", ".attnx-step")
        to(slider).click().send_keys(Keys.HOME).perform()
        expect(0, [2], 3)
        assert not np.allclose(weights[0, 2, 3], weights[1, 2, 3], atol=0.01)  # the step changed the numbers

        chinese = driver.find_elements("css selector", ".attnx")[-1]
        for word in ("queries", "keys", "all heads"):
            assert chinese.find_element("css selector", f'[data-i18n="{word}"]').text == tr(word, "zh_CN")
        assert tr("queries", "zh_CN") != "queries"

        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        urls = []
        for entry in driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
                params = message["params"]
                urls.append(params["request"]["url"] if "request" in params else params["url"])
        assert any("/api/kernels" in u for u in urls)  # the log saw the page talk to its server
        # chrome-untrusted://new-tab-page: the browser's own start page (newer Chromium asks it for its bar)
        local = ("http://127.0.0.1:", "ws://127.0.0.1:", "data:", "blob:", "chrome://", "chrome-untrusted://", "about:")
        leaving = [u for u in urls if not u.startswith(local)]
        assert not leaving, leaving
    finally:
        driver.quit()
