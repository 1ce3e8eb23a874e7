"""Build the book in English and in Chinese from one source; keep the catalogs in step.

The English pages and notebooks are the only source. Sphinx's gettext builder
extracts their prose into message catalogs, one per page
(``locales/zh_CN/LC_MESSAGES/notebooks/04_masking.po``); the Chinese edition is
the same build with ``language: zh_CN``, which replaces each message by its
translation. Code cells and their outputs are not messages: both editions show
the same executed code and the same numbers.

    python book/editions.py build       # both editions: _build/html/ and _build/html/zh/  (make book)
    python book/editions.py catalogs    # re-extract the English text, update the .po files (make catalogs)
    python book/editions.py extract DIR # only extract the .pot templates into DIR (the tests compare them)
    python book/editions.py notebooks   # Chinese notebooks in notebooks/zh/ (make notebooks-zh)
    python book/editions.py lint FILE.po ...  # untranslated, fuzzy, markup changed, terms (tests do the same)

The notebooks are executed once, by the English build (cached in
``_build/.jupyter_cache``); the Chinese build and the extraction read the outputs
stored in the notebooks, which nbval checks against a fresh run.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LOCALES = ROOT / "locales"
LANG = "zh_CN"
BUILD = ROOT / "_build"
WORK = BUILD / "editions"          # generated configs and the intermediate builds
HTML = BUILD / "html"              # English; the Chinese edition goes to HTML / "zh"
ZH_TITLE = "一步一步理解自注意力"
ZH_CAPTIONS = {"Before you start": "开始之前", "Chapters": "章节", "Reference": "参考"}  # the parts of _toc.yml


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


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
    cfg["execute"]["execute_notebooks"] = "off"   # the outputs stored in the notebooks (nbval checks them)
    config = sphinx.setdefault("config", {})
    if kind == "zh":
        cfg["title"] = ZH_TITLE
        config["language"] = LANG
        config["locale_dirs"] = [str(LOCALES)]
        config["togglebutton_hint"] = "点击展开"         # sphinx-togglebutton has no zh_CN catalog
        config["togglebutton_hint_hide"] = "点击收起"
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"_config_{kind}.yml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def _jupyter_book(*args: str, strict: bool = True) -> None:
    flags = ["-W", "-n", "--keep-going"] if strict else []
    subprocess.run([_bin("jupyter-book"), "build", str(ROOT), *args, *flags], cwd=ROOT, check=True)


def extract(out: Path) -> Path:
    """Write the .pot templates of every page into ``out`` (one per page, as the catalogs)."""
    out = Path(out)
    tmp = WORK / "gettext"
    shutil.rmtree(tmp, ignore_errors=True)
    _jupyter_book("--config", str(_config("gettext")), "--builder", "custom", "--custom-builder", "gettext",
                  "--path-output", str(tmp), "--all")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tmp / "_build" / "gettext", out)
    _add_exercise_titles(out)
    return out


EXERCISE = re.compile(r"^[ \t]*`{3,}\{exercise\}[ \t]+(\S.*?)[ \t]*$", re.M)


def _add_exercise_titles(pot_dir: Path) -> None:
    """Exercise titles and the figures' alt text, which the gettext builder misses, are added to
    their chapter's template by hand. (sphinx-exercise's post-transforms rebuild the title without a
    source; an image node gets no uid. Sphinx's Locale transform translates both once they are in
    the catalog.)"""
    import nbformat
    import polib

    for nb_path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        pot_path = pot_dir / "notebooks" / f"{nb_path.stem}.pot"
        if not pot_path.exists():
            continue
        pot = polib.pofile(str(pot_path), wrapwidth=0)
        known = {e.msgid for e in pot}
        nb = nbformat.read(nb_path, as_version=4)
        for i, cell in enumerate(nb.cells):
            alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
            if alt and alt not in known:
                known.add(alt)
                pot.append(polib.POEntry(msgid=alt, msgstr="", occurrences=[(f"notebooks/{nb_path.name}", str(i))]))
            if cell.cell_type != "markdown":
                continue
            for title in EXERCISE.findall(cell.source):
                if title not in known:
                    known.add(title)
                    pot.append(polib.POEntry(msgid=title, msgstr="",
                                             occurrences=[(f"notebooks/{nb_path.name}", str(i))]))
        pot.save(str(pot_path))


def catalogs() -> None:
    """Re-extract the English text and update locales/zh_CN: new messages empty, changed ones fuzzy."""
    pot = extract(WORK / "pot")
    subprocess.run([_bin("sphinx-intl"), "update", "-p", str(pot), "-l", LANG, "-d", str(LOCALES), "-w", "0"],
                   cwd=ROOT, check=True)


def _toc_zh() -> Path:
    """_toc.yml with the parts' captions in Chinese (a new part needs its caption in ZH_CAPTIONS)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    for part in toc.get("parts", []):
        if "caption" in part:
            if part["caption"] not in ZH_CAPTIONS:
                raise SystemExit(f"book/editions.py: no Chinese caption for the part {part['caption']!r} "
                                 "of _toc.yml: add it to ZH_CAPTIONS")
            part["caption"] = ZH_CAPTIONS[part["caption"]]
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / "_toc_zh.yml"
    path.write_text(yaml.safe_dump(toc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def build_zh() -> None:
    """The Chinese edition into _build/html/zh (after the English one, which it links to)."""
    tmp = WORK / "zh"
    _jupyter_book("--config", str(_config("zh")), "--toc", str(_toc_zh()), "--path-output", str(tmp), "--all")
    shutil.rmtree(HTML / "zh", ignore_errors=True)
    shutil.copytree(tmp / "_build" / "html", HTML / "zh")


def build() -> None:
    """Both editions: English (executes the notebooks, cached) at _build/html, Chinese at _build/html/zh."""
    shutil.rmtree(HTML, ignore_errors=True)
    _jupyter_book("--all")
    build_zh()


def notebooks(out: Path = ROOT / "notebooks" / "zh") -> list[Path]:
    """Chinese copies of the chapters: markdown from the catalogs, code and outputs untouched."""
    sys.path.insert(0, str(ROOT))
    from attnlib.translate import translate_notebook_file
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
        catalogs()
    elif command == "extract" and len(sys.argv) == 3:
        print(extract(Path(sys.argv[2])))
    elif command == "lint":
        sys.exit(1 if lint(sys.argv[2:]) else 0)
    elif command == "fullwidth":
        import polib
        for path in sys.argv[2:]:
            po = polib.pofile(path, wrapwidth=0)
            for e in po:
                if e.msgstr and CJK.search(e.msgstr) and not CJK.search(e.msgid):
                    e.msgstr = fullwidth(e.msgstr)
            po.save(path)
    elif command == "notebooks":
        for p in notebooks():
            print(p.relative_to(ROOT))
    else:
        sys.exit(__doc__)
