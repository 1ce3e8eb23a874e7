"""Checks of a translation catalog: markup kept, terms used, Chinese typography.

    python book/editions.py lint FILE.po ...       # the same checks from the command line
    python book/editions.py fullwidth FILE.po ...  # half-width punctuation in Chinese text made full-width

``tests/test_translation.py`` runs ``lint_message`` on every message of every catalog.
The terms come from ``locales/zh_CN/terminology.md``.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCALES = ROOT / "locales"
LANG = "zh_CN"

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
