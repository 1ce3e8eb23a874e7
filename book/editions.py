"""Build the book in English and in Chinese from one source; keep the catalogs in step.

The English pages and notebooks are the only source. Sphinx's gettext builder
extracts their prose into message catalogs, one per page
(``locales/zh_CN/LC_MESSAGES/notebooks/04_masking.po``); the Chinese edition is
the same build with ``language: zh_CN``, which replaces each message by its
translation. Code cells and their outputs are not messages: both editions show
the same executed code and the same numbers.

    python book/editions.py build       # both editions: _build/html/ and _build/html/zh/  (make book)
    python book/editions.py catalogs    # re-extract the English text, update the .po files (make catalogs)
    python book/editions.py catalogs notebooks/16_local_attention ...  # the same, for these pages' catalogs only
    python book/editions.py extract DIR # only extract the .pot templates into DIR (the tests compare them)
    python book/editions.py notebooks   # Chinese notebooks in notebooks/zh/ (make notebooks-zh)
    python book/editions.py lint FILE.po ...  # untranslated, fuzzy, markup changed, terms (tests do the same)

The English build executes the notebooks (cached in ``_build/.jupyter_cache``).
The Chinese build executes them a second time, with ``ATTNLIB_LANG=zh_CN``, so
that attnlib draws its figures (and writes its checkers' messages) in Chinese;
it has a cache of its own, ``_build/.jupyter_cache_zh``, and runs at the same
time as the English build (on a 2-core machine the two take little longer than
the English one alone). The notebooks' stored outputs stay English: only the English
pages and nbval read them, and the extraction of the text (``execute: off``).

The Chinese edition's own words outside the pages (its title, the parts of the
table of contents, the figure of the introduction) come from the catalog of the
introduction, ``book/intro.po``; the theme's words from
``locales/zh_CN/LC_MESSAGES/exercise.po`` (see ``book/_ext/course_html.py``).
Its search splits Chinese text into words with jieba and a dictionary of the
course's terms (``search_words``), which the search page also uses to split a
query the same way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LOCALES = ROOT / "locales"
LANG = "zh_CN"
BUILD = ROOT / "_build"
WORK = BUILD / "editions"  # generated configs and the intermediate builds
HTML = BUILD / "html"  # English; the Chinese edition goes to HTML / "zh"
ZH_CACHE = BUILD / ".jupyter_cache_zh"  # the notebooks as executed with ATTNLIB_LANG=zh_CN
# The Chinese build's kernels: attnlib's words (figures, checkers) in Chinese; one thread each, as
# they run beside the English build's (two kernels with PyTorch's two threads each on a 2-core
# machine spend a third of their time waiting for each other)
ZH_ENV = {"ATTNLIB_LANG": LANG, "OMP_NUM_THREADS": "1"}
# Words for the Chinese search that are not in the term table (locales/zh_CN/terminology.md),
# whose Chinese terms are all used
SEARCH_WORDS = ["注意力", "值", "键值缓存", "位置嵌入"]


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _translation(msgid: str, catalog: str = "book/intro") -> str:
    """The Chinese of one message of a catalog (the introduction's by default); an error if it has none."""
    import polib

    path = LOCALES / LANG / "LC_MESSAGES" / f"{catalog}.po"
    for entry in polib.pofile(str(path), wrapwidth=0):
        if entry.msgid == msgid and entry.msgstr and not entry.fuzzy and not entry.obsolete:
            return entry.msgstr
    raise SystemExit(f"book/editions.py: {path.relative_to(ROOT)} has no translation of {msgid!r}")


def zh_title() -> str:
    """The Chinese edition's title: the translation of the introduction's heading (= _config.yml's title)."""
    return _translation(yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["title"])


def search_words() -> list[str]:
    """The words the Chinese search must keep whole: the Chinese of the term table, and SEARCH_WORDS."""
    terms, _ = terminology()
    words = {w for _, zh in terms for w in re.findall(r"[\u4e00-\u9fff]+", zh)} | set(SEARCH_WORDS)
    return sorted(words)


def _search_dictionary() -> Path:
    """jieba's user dictionary (one word a line) for the Chinese search index and the search page."""
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / "search_words_zh.txt"
    path.write_text("".join(f"{w}\n" for w in search_words()), encoding="utf-8")
    return path


def _config(kind: str) -> Path:
    """_config.yml for one kind of build ("gettext" or "zh"), written under _build/editions/.

    Jupyter Book resolves the paths in a --config file relative to that file, so the
    repository's relative paths are made absolute here.
    """
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    sphinx = cfg.setdefault("sphinx", {})
    sphinx["local_extensions"] = {k: str(ROOT / v) for k, v in sphinx.get("local_extensions", {}).items()}
    cfg["bibtex_bibfiles"] = [str(ROOT / p) for p in cfg.get("bibtex_bibfiles", [])]
    if "favicon" in cfg.get("html", {}):
        cfg["html"]["favicon"] = str(ROOT / cfg["html"]["favicon"])
    config = sphinx.setdefault("config", {})
    if kind == "gettext":
        cfg["execute"]["execute_notebooks"] = "off"  # the text only: the outputs stored in the notebooks
    if kind == "zh":
        cfg["execute"]["cache"] = str(ZH_CACHE)  # executed with ZH_ENV (see build), cached apart
        cfg["execute"]["exclude_patterns"] = []  # every chapter: their figures are drawn in Chinese
        cfg["title"] = zh_title()
        cfg["author"] = _translation(cfg["author"], "exercise")
        config["language"] = LANG
        config["locale_dirs"] = [str(LOCALES)]
        config["togglebutton_hint"] = "点击展开"  # sphinx-togglebutton has no zh_CN catalog
        config["togglebutton_hint_hide"] = "点击收起"
        # Jupyter Book sets the search box's text itself, in English
        config.setdefault("html_theme_options", {})["search_bar_text"] = _translation("Search this book...", "exercise")
        config["html_search_options"] = {"dict": str(_search_dictionary())}
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"_config_{kind}.yml"
    part = path.with_name(f"{path.name}.{os.getpid()}")  # written whole, then renamed: runs at once never read half
    part.write_text(yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False), encoding="utf-8")
    os.replace(part, path)
    return path


def _jupyter_book(*args: str, strict: bool = True, env: dict | None = None) -> None:
    flags = ["-W", "-n", "--keep-going"] if strict else []
    subprocess.run(
        [_bin("jupyter-book"), "build", str(ROOT), *args, *flags],
        cwd=ROOT,
        check=True,
        env={**os.environ, **(env or {})},
    )


def _start_jupyter_book(*args: str, env: dict | None = None, prefix: str = "") -> tuple:
    """Start a strict build in the background; its output is printed line by line, each with ``prefix``."""
    proc = subprocess.Popen(
        [_bin("jupyter-book"), "build", str(ROOT), *args, "-W", "-n", "--keep-going"],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

    def relay():  # bytes as they come: no encoding can stop it (and the build with it, on a full pipe)
        out = getattr(sys.stdout, "buffer", None)
        for line in proc.stdout:
            if out is not None:
                out.write(prefix.encode() + line)
                out.flush()
            else:
                sys.stdout.write(prefix + line.decode("utf-8", "replace"))

    relay_thread = threading.Thread(target=relay, daemon=True)
    relay_thread.start()
    return proc, relay_thread


def extract(out: Path) -> Path:
    """Write the .pot templates of every page into ``out`` (one per page, as the catalogs)."""
    out = Path(out)
    WORK.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gettext-", dir=WORK))  # one per run: two extractions may run at once
    _jupyter_book(
        "--config",
        str(_config("gettext")),
        "--builder",
        "custom",
        "--custom-builder",
        "gettext",
        "--path-output",
        str(tmp),
        "--all",
    )
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tmp / "_build" / "gettext", out)
    shutil.rmtree(tmp, ignore_errors=True)
    _add_exercise_titles(out)
    return out


EXERCISE = re.compile(r"^[ \t]*`{3,}\{exercise\}[ \t]+(\S.*?)[ \t]*$", re.M)


def _read_page(path: Path):
    """A chapter (.ipynb) or a page of book/ (.md, a MyST text notebook when it has code cells) as a notebook."""
    import nbformat
    from myst_nb.core.read import read_myst_markdown_notebook

    if path.suffix == ".ipynb":
        return nbformat.read(path, as_version=4)
    return read_myst_markdown_notebook(path.read_text(encoding="utf-8"))


def _add_exercise_titles(pot_dir: Path) -> None:
    """Exercise titles and the figures' alt text, which the gettext builder misses, are added to
    their page's template by hand, and so are the captions of figures that the extraction cannot see
    (a code cell of book/*.md has no stored output: the extraction does not execute it).
    (sphinx-exercise's post-transforms rebuild the title without a source; an image node gets no
    uid. Sphinx's Locale transform translates all three once they are in the catalog.)"""
    import polib

    pages = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted((ROOT / "book").glob("*.md"))
    for path in pages:
        docname = f"{path.parent.name}/{path.stem}"
        pot_path = pot_dir / f"{docname}.pot"
        if not pot_path.exists():
            continue
        pot = polib.pofile(str(pot_path), wrapwidth=0)
        known = {e.msgid for e in pot}

        def add(msgid: str, cell: int) -> None:
            if msgid and msgid not in known:
                known.add(msgid)
                pot.append(polib.POEntry(msgid=msgid, msgstr="", occurrences=[(f"{docname}{path.suffix}", str(cell))]))

        for i, cell in enumerate(_read_page(path).cells):
            mystnb = cell.get("metadata", {}).get("mystnb", {})
            caption = mystnb.get("figure", {}).get("caption", "")
            add(caption.replace("\n", " ").strip(), i)  # as Sphinx reads a paragraph: one line
            add(mystnb.get("image", {}).get("alt"), i)
            if cell.cell_type == "markdown":
                for title in EXERCISE.findall(cell.source):
                    add(title, i)
        pot.save(str(pot_path))


def catalogs(pages: list[str] | None = None) -> None:
    """Re-extract the English text and update locales/zh_CN: new messages empty, changed ones fuzzy.
    With ``pages`` (docnames such as ``notebooks/16_local_attention``), only those pages' catalogs."""
    pot = extract(Path(tempfile.mkdtemp(prefix="pot-", dir=WORK)))
    if pages:
        missing = [p for p in pages if not (pot / f"{p}.pot").exists()]
        if missing:
            raise SystemExit(f"book/editions.py catalogs: expected pages of the book, received {missing}")
        for path in pot.rglob("*.pot"):
            if path.relative_to(pot).with_suffix("").as_posix() not in pages:
                path.unlink()
    subprocess.run(
        [_bin("sphinx-intl"), "update", "-p", str(pot), "-l", LANG, "-d", str(LOCALES), "-w", "0"], cwd=ROOT, check=True
    )
    shutil.rmtree(pot, ignore_errors=True)


def _toc_zh() -> Path:
    """_toc.yml with the parts' captions in Chinese, from the introduction's catalog (where the
    extraction puts them: the root page holds the table of contents)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    for part in toc.get("parts", []):
        if "caption" in part:
            part["caption"] = _translation(part["caption"])
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / "_toc_zh.yml"
    path.write_text(yaml.safe_dump(toc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def _zh_cache_for_this_attnlib() -> None:
    """Empty the Chinese cache when attnlib (its code or its catalog: the words of its figures) changed.

    jupyter-cache knows a notebook by its code cells only; the English cache is kept as it was, but
    a stale Chinese one would keep figures with old words after a translation is fixed in attnlib.
    """
    import hashlib

    files = sorted(p for p in (ROOT / "attnlib").rglob("*") if p.suffix in (".py", ".po") and p.is_file())
    digest = hashlib.sha256(b"".join(p.relative_to(ROOT).as_posix().encode() + p.read_bytes() for p in files))
    stamp = ZH_CACHE / "attnlib.sha256"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return
    shutil.rmtree(ZH_CACHE, ignore_errors=True)
    ZH_CACHE.mkdir(parents=True)
    stamp.write_text(digest.hexdigest())


def _zh_args() -> list[str]:
    _zh_cache_for_this_attnlib()
    return ["--config", str(_config("zh")), "--toc", str(_toc_zh()), "--path-output", str(WORK / "zh"), "--all"]


def _install_zh() -> None:
    shutil.rmtree(HTML / "zh", ignore_errors=True)
    shutil.copytree(WORK / "zh" / "_build" / "html", HTML / "zh")


# What a figure drawn without a Chinese font leaves in the output of its cell: matplotlib's warning
# for each character it draws as a box, and attnlib's own (attnlib/plot/; in Chinese in the zh build)
MISSING_GLYPHS = re.compile(
    r"Glyph \d+ \([^)\n]*\) missing from (?:current )?font|ATTNLIB_LANG=zh_CN[:：]\s*matplotlib"
)


def missing_glyphs(executed) -> dict[str, str]:
    """The pages whose figures miss Chinese glyphs: ``executed`` holds (page, executed notebook)
    pairs; for each page with a cell output that warns of one (MISSING_GLYPHS), its first such line."""
    found = {}
    for page, nb in executed:
        for cell in nb.get("cells", []):
            for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
                texts = (
                    [out.get("text", "")] + list(out.get("data", {}).values()) + [" ".join(out.get("traceback", []))]
                )
                for text in texts:
                    text = "".join(text) if isinstance(text, list) else text
                    m = MISSING_GLYPHS.search(text) if isinstance(text, str) else None
                    if m and page not in found:
                        line = text[text.rfind("\n", 0, m.start()) + 1 :].split("\n", 1)[0]
                        found[page] = line.strip()[:160]
    return found


def _executed(cache_path: Path) -> list[tuple[str, dict]]:
    """The notebooks of a build as its jupyter cache holds them executed: (page, notebook), for every
    page the cache executed whose code is still the same (what the build showed)."""
    from jupyter_cache import get_cache

    if not (Path(cache_path) / "global.db").exists():
        return []
    cache = get_cache(str(cache_path))
    executed = []
    for record in cache.list_project_records():
        try:
            cached = cache.get_cached_project_nb(record.uri)
        except Exception:  # a page deleted or moved since: the build no longer has it
            continue
        if cached is not None:
            path = Path(record.uri)
            page = path.relative_to(ROOT).with_suffix("").as_posix() if path.is_relative_to(ROOT) else str(path)
            executed.append((page, cache.get_cache_bundle(cached.pk).nb))
    return executed


def check_zh_figures(cache_path: Path = ZH_CACHE) -> None:
    """Fail when the Chinese edition's figures were drawn without a Chinese font (boxes for
    characters): a stale matplotlib font cache, or no such font installed. The Chinese cache is
    marked stale too, so the next build draws its figures again."""
    bad = missing_glyphs(_executed(cache_path))
    if not bad:
        return
    (Path(cache_path) / "attnlib.sha256").unlink(missing_ok=True)  # _zh_cache_for_this_attnlib empties it
    import matplotlib

    pages = "\n".join(f"  {page}: {line}" for page, line in sorted(bad.items()))
    raise SystemExit(
        "book/editions.py: the Chinese edition's figures show boxes instead of Chinese characters "
        f"(matplotlib found no font with them) on these pages:\n{pages}\n"
        "Fix: install a Chinese font (`sudo apt-get install fonts-wqy-zenhei`), then delete matplotlib's "
        f"font cache, which does not know the font yet (`rm -rf {matplotlib.get_cachedir()}`, "
        "~/.cache/matplotlib by default), or set MPLCONFIGDIR to an empty folder, and build again "
        f"(the Chinese cache, {Path(cache_path).name}, is executed again)."
    )


def build_zh() -> None:
    """The Chinese edition alone into _build/html/zh (it links to the English one, next to it);
    SystemExit when its figures miss Chinese glyphs (check_zh_figures)."""
    _jupyter_book(*_zh_args(), env=ZH_ENV)
    check_zh_figures()
    _install_zh()


def build() -> None:
    """Both editions, at the same time: English at _build/html, Chinese at _build/html/zh.

    Each executes the notebooks (the Chinese one with ZH_ENV) into a cache of its own; executing
    them is most of the time, and a kernel uses about one core, so two builds side by side take
    about as long as one. The Chinese one's lines are printed with the prefix "[zh] ". SystemExit
    when the Chinese figures miss glyphs (check_zh_figures).
    """
    shutil.rmtree(HTML, ignore_errors=True)
    zh = _start_jupyter_book(*_zh_args(), env=ZH_ENV, prefix="[zh] ")
    en = _start_jupyter_book("--all")
    failed = []
    for name, (proc, relay) in (("English", en), ("Chinese", zh)):
        proc.wait()
        relay.join()
        if proc.returncode:
            failed.append(name)
    if failed:
        raise SystemExit(f"book/editions.py: the {' and the '.join(failed)} build failed (see above)")
    check_zh_figures()
    _install_zh()


def notebooks(out: Path = ROOT / "notebooks" / "zh") -> list[Path]:
    """Chinese copies of the chapters: markdown from the catalogs, code and outputs untouched."""
    sys.path.insert(0, str(ROOT))
    from coursetools.translate import translate_notebook_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for src in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        dest = out / src.name
        translate_notebook_file(src, dest, LANG)
        written.append(dest)
    return written


# ------------------------------------------------------------------ checking a translation
# (book/catalog_lint.py; re-exported here for the command line and the tests)
from catalog_lint import CJK, fullwidth, lint, lint_message, terminology  # noqa: E402,F401

if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "build":
        build()
        print(f"The book is in {HTML / 'index.html'}; the Chinese edition in {HTML / 'zh' / 'index.html'}")
    elif command == "catalogs":
        catalogs([p.removesuffix(".ipynb").removesuffix(".md") for p in sys.argv[2:]])
    elif command == "extract" and len(sys.argv) == 3:
        print(extract(Path(sys.argv[2])))
    elif command == "lint":
        sys.exit(1 if lint(sys.argv[2:]) else 0)
    elif command == "fullwidth":
        from catalog_lint import fix_fullwidth

        print(f"{fix_fullwidth(sys.argv[2:])} messages changed")
    elif command == "notebooks":
        for p in notebooks():
            print(p.relative_to(ROOT))
    else:
        sys.exit(__doc__)
