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

CJK = re.compile(r"[\u3400-\u9fff]")
ROLE = re.compile(r"\{[a-z:]+\}`[^`]*`")                     # {ref}`...`, {glue:text}`...`, {cite:p}`...`
ROLE_TARGET = re.compile(r"\{([a-z:]+)\}`(?:[^`<]*<)?([^`>]*)>?`")
MATH = re.compile(r"\$\$.+?\$\$|\$[^$]+\$")
CODE = re.compile(r"``[^`]+``|`[^`]+`")                      # inline code (roles removed first)


FULLWIDTH = {",": "\uff0c", ":": "\uff1a", ";": "\uff1b", "?": "\uff1f", "!": "\uff01"}
_PROTECT = re.compile(r"\{[a-z:]+\}`[^`]*`|``[^`]+``|`[^`]+`|\$\$.+?\$\$|\$[^$]+\$|\]\([^)]*\)|https?://\S+", re.S)
_CJK_CH = r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef“”‘’]"


def fullwidth(text: str) -> str:
    """Chinese punctuation in Chinese text: ASCII , : ; ? ! and ( ) become full-width.

    A mark becomes full-width next to a Chinese character, or when no space follows it
    (Chinese style; an English comma has a space after it). Parentheses do when they hold
    or follow Chinese text. Spaces around full-width marks go. Math, code, roles and
    link targets are left alone, and so are numbers (1,024) and tuples such as (cat, a).
    """
    kept: list[str] = []

    def keep(m):
        kept.append(m.group(0))
        return chr(0xE000 + len(kept) - 1)          # a placeholder from Unicode's private use area

    t = _PROTECT.sub(keep, text)
    t = re.sub(r"\(([^()]*)\)", lambda m: f"\uff08{m.group(1).strip()}\uff09"
               if re.search(_CJK_CH, m.group(1)) or re.search(rf"{_CJK_CH}\**\s*$", t[:m.start()]) else m.group(0), t)
    t = re.sub(rf"(?<=[^\d\s])[,:;?!](?=[^\s\d])|(?<={_CJK_CH})[,:;?!]|(?<=\*)[,:;?!](?=\s*{_CJK_CH})|"
               rf"[,:;?!](?=\s*\**{_CJK_CH})|(?<=\d)[,:;?!](?=[^\s\d])|(?<=[^\d\s])[,:;?!](?=\d)",
               lambda m: FULLWIDTH[m.group(0)], t)
    t = re.sub(r"[ \t]*([\uff08\uff09\uff0c\uff1a\uff1b\uff1f\uff01\u3001\u3002])[ \t]*", r"\1", t)
    return re.sub("[\ue000-\uf8ff]", lambda m: kept[ord(m.group(0)) - 0xE000], t)

def terminology() -> tuple[list[tuple[re.Pattern, str]], list[str]]:
    """The term table and the forbidden words of locales/zh_CN/terminology.md."""
    text = (LOCALES / LANG / "terminology.md").read_text(encoding="utf-8")
    terms, never = [], []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        # table cells; "\\|" inside a cell is a literal | (in the regular expressions)
        cells = [c.replace("\\|", "|").strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith("`"):
            terms.append((re.compile(rf"\b(?:{cells[0][1:-1]})\b", re.I), cells[1]))
        elif len(cells) == 2 and CJK.search(cells[0]) and not cells[0].startswith("never"):
            never.append(cells[0])
    return terms, never


def lint_message(msgid: str, msgstr: str, terms=None, never=None) -> list[str]:
    """What is wrong with one translation: markup that differs, a term not used, a forbidden word."""
    if terms is None:
        terms, never = terminology()
    problems = []
    if not msgstr.strip():
        return ["untranslated"]
    if msgid.startswith("\n"):   # a display-math block: copied as it is, no words to check
        return [] if msgstr == msgid else \
            ["a display-math block ($$...$$, the message starts with a line break): copy it exactly, msgstr = msgid"]
    for name, pattern in (("role", ROLE_TARGET), ("math", MATH), ("code", CODE)):
        src, dst = (msgid, msgstr) if name == "role" else (ROLE.sub("", msgid), ROLE.sub("", msgstr))
        a = sorted(m if isinstance(m, str) else "|".join(m) for m in pattern.findall(src))
        b = sorted(m if isinstance(m, str) else "|".join(m) for m in pattern.findall(dst))
        if a != b:
            problems.append(f"{name} differs: {sorted(set(a) ^ set(b)) or 'counts'}")
    plain = ROLE.sub("", CODE.sub("", MATH.sub("", msgstr.replace("\\*", ""))))   # \* is a literal asterisk
    for mark, count in (("**", plain.count("**")), ("*", plain.replace("**", "").count("*"))):
        if count % 2:
            problems.append(f"unbalanced {mark}")
    for m in re.finditer(r"\*\*([^*]+)\*\*", msgstr):
        inner, before = m.group(1), msgstr[:m.start()]
        after = msgstr[m.end():]
        punct = "[“”‘’「」(),。:;、!?\uff08\uff09\uff0c\uff1a\uff1b\uff1f\uff01]"
        if (re.match(punct, inner) and before and not re.search(r"\s$", before) and not re.search(punct + "$", before)) or \
           (re.search(punct + "$", inner) and after and not re.match(r"\s", after) and not re.match(punct, after)):
            problems.append(f"bold that Markdown will not parse (punctuation inside the **): {m.group(0)}")
    prose = ROLE.sub("", CODE.sub("", MATH.sub("", msgid)))   # terms in formulas and code are not words
    prose = prose.replace("Illustrated: Self-Attention", "")  # [E]'s title: a name, kept or translated
    for pattern, zh in terms:
        if pattern.search(prose) and zh not in msgstr and not CJK.search(msgid):
            problems.append(f"term: '{pattern.pattern[5:-3]}' should be {zh}")
    for word in never:
        if word in msgstr and word not in msgid:
            problems.append(f"forbidden word {word}")
    if CJK.search(msgstr) and not CJK.search(msgid) and fullwidth(msgstr) != msgstr:
        problems.append("half-width punctuation in Chinese text (, : ; ? ! ( )): "
                        "`python book/editions.py fullwidth FILE.po` fixes it")
    return problems


def lint(paths) -> int:
    import polib
    terms, never = terminology()
    bad = 0
    for path in paths:
        for entry in polib.pofile(str(path)):
            if entry.obsolete:
                continue
            problems = lint_message(entry.msgid, entry.msgstr, terms, never)
            if "fuzzy" in entry.flags:
                problems.append("fuzzy")
            for p in problems:
                bad += 1
                print(f"{path}: {entry.msgid[:70]!r}: {p}")
    return bad


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
