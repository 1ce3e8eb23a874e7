"""Checks of a translation catalog: markup kept, terms used, Chinese typography.

    python book/editions.py lint FILE.po ...          # the same checks from the command line
    python book/catalog_lint.py fullwidth FILE.po ... # half-width punctuation in Chinese text made full-width
    python book/editions.py fullwidth FILE.po ...     # the same, but only where the English has no Chinese

``tests/test_translation.py`` runs ``lint_message`` on every message of every catalog.
The terms come from ``locales/zh_CN/terminology.md``.

What the typography checks enforce, on every message whose translation has Chinese text
outside the quotes (the spans of the translation that a quotation in the English holds
verbatim, e.g. a Chinese source quoted with its own half-width punctuation):

- full-width ，：；？！（） next to Chinese text (``fullwidth()`` says where, and fixes it);
- no paragraph ending in a half-width colon;
- no comma between digits other than a thousands separator ("4,12" reads as one number);
- no italics (``*...*``) on Chinese characters (slanted hanzi read badly: use bold or 「」);
- no reduction written as a multiple (少四倍, 少了 N 倍): a fraction (只有……的四分之一).

Python written as plain text, as in attnlib's checker hints (``torch.arange(T)[:, None]``,
``(B, T, n_heads * d_head)``), keeps its half-width marks: ``python_spans`` finds it, in every
message of attnlib.po and wherever the English writes code without backticks (``plain_code``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCALES = ROOT / "locales"
LANG = "zh_CN"

CJK = re.compile(r"[\u3400-\u9fff]")
ROLE = re.compile(r"\{[a-z:]+\}`[^`]*`")  # {ref}`...`, {glue:text}`...`, {cite:p}`...`
ROLE_TARGET = re.compile(r"\{([a-z:]+)\}`(?:[^`<]*<)?([^`>]*)>?`")
MATH = re.compile(r"\$\$.+?\$\$|\$[^$]+\$")
CODE = re.compile(r"``[^`]+``|`[^`]+`")  # inline code (roles removed first)
FOOTNOTE = re.compile(r"\[\^[^\]\s]+\]")  # a MyST footnote reference, [^label]


FULLWIDTH = {",": "\uff0c", ":": "\uff1a", ";": "\uff1b", "?": "\uff1f", "!": "\uff01"}
# a link target only when it looks like one: a URL, a path, a #anchor, a document name (never Chinese words)
_LINK = r"\]\((?:<[^<>\n]*>|[A-Za-z0-9_./#%~+=?&:@-]*)\)"
_URL = r"https?://[^\s()\u3000-\u303f\u3400-\u9fff\uff00-\uffef“”‘’]+"
_PROTECT = re.compile(r"\{[a-z:]+\}`[^`]*`|``[^`]+``|`[^`]+`|\$\$.+?\$\$|\$[^$]+\$|" + _LINK + "|" + _URL, re.S)
_CJK_CH = r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef“”‘’]"
_PUA = "[\ue000-\uf8ff]"  # placeholders of protected spans
_QUOTED = re.compile(r'"([^"\n]+)"|“([^”]+)”|「([^」]+)」|『([^』]+)』')
# a comma between digits that is not a thousands separator: "4,12" (1,024 and 6,755,078,400 are fine)
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d)(?!\d{3}(?!\d))")
_TUPLE = re.compile(r"\s*[\w.+\-−′']{1,12}(?:\s*,\s*[\w.+\-−′']{1,12})+\s*$", re.A)  # (i, j), (2, 8, 0)
_DIGIT_COMMA_FIX = re.compile(_DIGIT_COMMA.pattern + r"(?![^()]*\))")  # not in a tuple: (2,8,0)
_PARA_COLON = re.compile(r":[ \t]*(?=\n[ \t]*\n|\s*\Z)")  # a half-width colon that ends a paragraph


# Python written as plain text (attnlib's checker hints have no Markdown, so no backticks): an identifier
# followed by [...] / (...) groups, e.g. torch.arange(T)[:, None], w.reshape(n_heads, d_head // 2, 2, *w.shape[1:]),
# or a tuple whose items hold *, //, ... or [...], e.g. (B, T, n_heads * d_head). ASCII only: Chinese is never code.
_IDENT = re.compile(r"(?<![A-Za-z0-9_.])\*?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?=[(\[])")
_PAIRS = {"(": ")", "[": "]"}
_CODE_MARK = re.compile(r"[\[*,:=/]|\.\.\.")  # what the typography check would otherwise read as punctuation


def _group_end(text: str, i: int) -> int:
    """The end of the bracket group opened at ``text[i]`` (balanced, ASCII only, one line), or -1."""
    stack = []
    for j in range(i, len(text)):
        c = text[j]
        if ord(c) > 127 or c == "\n":
            return -1
        if c in _PAIRS:
            stack.append(_PAIRS[c])
        elif c in ")]":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return j + 1
    return -1


def python_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds Python written as plain text, as (start, end): a call or an index chain with
    punctuation inside (``torch.arange(T)[:, None]``; not a bare ``exp(s)``, which needs no protection) and
    a tuple with ``*``, ``//``, ``...`` or an index inside (``(B, T, n_heads * d_head)``), and a parenthesis
    after an operator (``-inf - (-inf)``)."""
    spans, pos = [], 0
    for m in _IDENT.finditer(text):
        if m.start() < pos:
            continue
        end = m.end()
        while end < len(text) and text[end] in "([":
            close = _group_end(text, end)
            if close < 0:
                break
            end = close
            attr = re.match(r"\.[A-Za-z_][A-Za-z0-9_]*", text[end:])  # .shape[1], .mean(-1)
            if attr and text[end + attr.end() : end + attr.end() + 1] in ("(", "["):
                end += attr.end()
        if end > m.end() and _CODE_MARK.search(text, m.end(), end):
            spans.append((m.start(), end))
            pos = end
    for m in re.finditer(r"(?<![A-Za-z0-9_\])])\(", text):
        close = _group_end(text, m.start())
        inner = text[m.start() + 1 : close - 1]
        operand = re.search(r"[-+*/=<>]\s*$", text[: m.start()])  # -inf - (-inf): arithmetic
        if (
            close > 0
            and ("," in inner and re.search(r"[*\[]|//|\.\.\.", inner) or operand)
            and not any(a <= m.start() < b for a, b in spans)
        ):
            spans.append((m.start(), close))
    return sorted(s for s in spans if not any(a < s[0] and s[1] <= b for a, b in spans))


def plain_code(source: str) -> bool:
    """Whether the English ``source`` writes Python as plain text (a checker hint of attnlib.po: no
    backticks, but code such as ``torch.arange(T)[:, None]``); its translation may then do the same."""
    return "`" not in source and bool(python_spans(source))


# "少四倍", "少了 {ratio} 倍", "减少了 3 倍": a reduction as a multiple, ambiguous in Chinese (write a fraction)
_TIMES_LESS = re.compile(
    r"(?:少|减少|降低|缩小)了?\s*(?:\{\w*\}|[\d.,]+|[一二两三四五六七八九十百千万]+|\$[^$]+\$|{glue:text}`[^`]*`)\s*倍"
)


def quotes(source: str) -> list[str]:
    """The quotations in a message ("...", “...”, 「...」), longest first; quote marks inside
    code, math and roles do not count."""
    if not source:
        return []
    blank = _PROTECT.sub(lambda m: "\ue000" * len(m.group(0)), source)  # same length, so positions hold
    found = {
        source[m.start(g) : m.end(g)] for m in _QUOTED.finditer(blank) for g in range(1, 5) if m.group(g) is not None
    }
    return sorted((q for q in found if len(q.strip()) > 1), key=len, reverse=True)


def _verbatim_quotes(text: str, source: str) -> list[str]:
    """The quotations of ``source`` that ``text`` holds verbatim."""
    return [q for q in quotes(source) if q in text]


def _protect(text: str, source: str = "", code: bool | None = None) -> tuple[str, list[str]]:
    """Text with its quotes of ``source``, math, code, roles, links and URLs replaced by placeholders;
    with ``code`` (by default: when ``source`` writes Python as plain text, see ``plain_code``), also
    the Python written as plain text."""
    kept: list[str] = []

    def keep(m):
        kept.append(m.group(0))
        return chr(0xE000 + len(kept) - 1)  # a placeholder from Unicode's private use area

    for q in _verbatim_quotes(text, source):
        text = re.sub(re.escape(q), keep, text)
    text = _PROTECT.sub(keep, text)
    if code is None:
        code = plain_code(source)
    if code:
        out, i = [], 0
        for a, b in python_spans(text):
            kept.append(text[a:b])
            out += [text[i:a], chr(0xE000 + len(kept) - 1)]
            i = b
        text = "".join(out) + text[i:]
    return text, kept


def _restore(text: str, kept: list[str]) -> str:
    return re.sub(_PUA, lambda m: kept[ord(m.group(0)) - 0xE000], text)


def _fullwidth(t: str, kept: list[str]) -> str:
    """fullwidth() on protected text (placeholders for math, code, quotes ...; ``kept`` holds them)."""
    chinese = bool(CJK.search(t))

    def paren(m):
        inner, before, after = m.group(1), t[: m.start()], t[m.end() :]
        if not re.search(_CJK_CH, inner):
            if _TUPLE.match(inner) or re.search(r"[A-Za-z_]$", before):  # (cat, a), (2, 8, 0); O(n), ln(11)
                return m.group(0)
            if re.fullmatch(_PUA, inner.strip()) and kept[ord(inner.strip()) - 0xE000].startswith("{glue"):
                return m.group(0)  # ({glue:text}`row`): a vector
        if (
            re.search(_CJK_CH, inner)
            or re.search(rf"{_CJK_CH}\**\s*$", before)
            or chinese
            and (
                re.match(rf"\s*\**{_CJK_CH}", after)  # ($n \times m$)相乘
                or re.search(rf"(?:{_PUA}|[\d\]）)])$", before)
            )
        ):  # 64([B]), $X$($n$)
            return f"\uff08{inner.strip()}\uff09"
        return m.group(0)

    t = re.sub(r"\(([^()]*)\)", paren, t)
    t = re.sub(
        rf"(?<=[^\d\s])[,:;?!](?=[^\s\d])|(?<={_CJK_CH})[,:;?!]|(?<=\*)[,:;?!](?=\s*{_CJK_CH})|"
        rf"[,:;?!](?=\s*\**{_CJK_CH})|(?<=\d)[,:;?!](?=[^\s\d])|(?<=[^\d\s])[,:;?!](?=\d)",
        lambda m: FULLWIDTH[m.group(0)],
        t,
    )
    if chinese:
        t = _PARA_COLON.sub("\uff1a", _DIGIT_COMMA_FIX.sub("\uff0c", t))
    marks = "[\uff08\uff09\uff0c\uff1a\uff1b\uff1f\uff01\u3001\u3002]"
    t = re.sub(rf"(?<=\S)[ \t]+(?={marks})", "", t)  # a line's indentation stays (attnlib's indented lines)
    return re.sub(rf"({marks})[ \t]+", r"\1", t)


def fullwidth(text: str, source: str = "", code: bool | None = None) -> str:
    """Chinese punctuation in Chinese text: ASCII , : ; ? ! and ( ) become full-width.

    A mark becomes full-width next to a Chinese character, or when no space follows it
    (Chinese style; an English comma has a space after it). Parentheses do when they hold,
    follow or precede Chinese text, or are glued to math, a number or a reference before
    them ("$X$($n \\times m$)", "64([B])"). A colon that ends a paragraph and a comma
    between digits that is not a thousands separator ("4,12") do too. Spaces around
    full-width marks go. Math, code, roles, link targets and URLs are left alone, and so
    are numbers (1,024), function calls (O(n)), tuples such as (cat, a) in English text,
    and the quotations of ``source`` (the English message) kept verbatim; with ``code`` (by
    default when ``source`` does it), Python written as plain text: torch.arange(T)[:, None].
    """
    t, kept = _protect(text, source, code)
    return _restore(_fullwidth(t, kept), kept)


def typography(msgstr: str, msgid: str = "", code: bool | None = None) -> list[str]:
    """The Chinese typography problems of one translation (none when it has no Chinese text of its own).
    ``code``: leave Python written as plain text alone (by default when ``msgid`` does it, as attnlib's
    checker hints do: ``plain_code``)."""
    t, kept = _protect(msgstr, msgid, code)
    if not CJK.search(t):
        return []
    problems = []
    commas = [_restore(t[max(0, m.start() - 6) : m.end() + 6], kept) for m in _DIGIT_COMMA.finditer(t)]
    if commas:
        problems.append(
            "a comma between digits that is not a thousands separator (reads as one number): "
            f"{', '.join(repr(c) for c in commas)}; write ，or 、 (in a tuple: a comma and a space)"
        )
    for m in _TIMES_LESS.finditer(_restore(t, kept)):
        problems.append(
            f"a reduction written as a multiple: '{m.group(0)}' (ambiguous in Chinese); write a fraction: "
            "只有……的四分之一, 只有后者的 1/N"
        )
    if _PARA_COLON.search(t):
        problems.append(f"a paragraph ends in a half-width colon: '…{_restore(t[-12:], kept).strip()}'; use ：")
    plain = t.replace("\\*", "").replace("**", "")
    plain = re.sub(r"(?m)^[ \t]*\*[ \t]", "", plain)  # list bullets
    for m in re.finditer(r"\*([^*\n]+)\*", plain):
        if CJK.search(_restore(m.group(1), kept)):
            problems.append(f"italics on Chinese characters: '{_restore(m.group(0), kept)}'; use **bold** or 「」")
    t = _PARA_COLON.sub("\uff1a", _DIGIT_COMMA_FIX.sub("\uff0c", t))  # reported above
    fixed = _fullwidth(t, kept)
    if fixed != t:
        where = next((i for i, (a, b) in enumerate(zip(t, fixed)) if a != b), min(len(t), len(fixed)))
        problems.append(
            "half-width punctuation in Chinese text (, : ; ? ! ( )): "
            f"'{_restore(t[max(0, where - 10) : where + 10], kept)}'; "
            "`python book/catalog_lint.py fullwidth FILE.po` fixes it"
        )
    return problems


def _text_args(math: str) -> tuple[str, list[str]]:
    """Display math with the words of each \\text{...} taken out; a \\text{} that names a
    variable's subscript or superscript (d_{\\text{model}}) is kept, as it is notation."""
    out, words, i = [], [], 0
    for m in re.finditer(r"\\text\s*\{", math):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(math) and depth:
            depth += {"{": 1, "}": -1}.get(math[j], 0) if math[j - 1] != "\\" else 0
            j += 1
        if re.search(r"[A-Za-z][_^]\{?\s*$", math[: m.start()]):
            continue
        out.append(math[i : m.end()] + "\u2026}")
        words.append(math[m.end() : j - 1])
        i = j
    out.append(math[i:])
    return "".join(out), words


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


def lint_message(msgid: str, msgstr: str, terms=None, never=None, code: bool | None = None) -> list[str]:
    """What is wrong with one translation: markup that differs, a term not used, a forbidden word,
    Chinese typography (see the module's docstring). ``code``: Python written as plain text is left
    alone by the typography check (by default when ``msgid`` writes it so; ``lint`` sets it for attnlib.po)."""
    if terms is None:
        terms, never = terminology()
    problems = []
    if not msgstr.strip():
        return ["untranslated"]
    if msgid.startswith("\n"):  # a display-math block: only the words in \text{...} may be translated
        if _text_args(msgstr)[0] != _text_args(msgid)[0]:
            return [
                "a display-math block ($$...$$, the message starts with a line break): copy it exactly; "
                "only the words inside \\text{...} may be translated (not a subscript such as d_{\\text{model}})"
            ]
        return [
            f"\\text{{{w}}} in display math: {p}" for w in _text_args(msgstr)[1] if CJK.search(w) for p in typography(w)
        ]
    if FOOTNOTE.search(CODE.sub("", msgid)):
        problems.append(
            "a footnote reference ([^label]): the Chinese build drops it from the translated message and fails "
            "(Sphinx: inconsistent footnote references); write the note as a {margin} block in the English"
        )
    for name, pattern in (("role", ROLE_TARGET), ("math", MATH), ("code", CODE)):
        src, dst = (msgid, msgstr) if name == "role" else (ROLE.sub("", msgid), ROLE.sub("", msgstr))
        a = sorted(m if isinstance(m, str) else "|".join(m) for m in pattern.findall(src))
        b = sorted(m if isinstance(m, str) else "|".join(m) for m in pattern.findall(dst))
        if a != b:
            problems.append(f"{name} differs: {sorted(set(a) ^ set(b)) or 'counts'}")
    plain = ROLE.sub("", CODE.sub("", MATH.sub("", msgstr.replace("\\*", ""))))  # \* is a literal asterisk
    if code or code is None and plain_code(msgid):  # Python as plain text: its * multiply or unpack
        plain = "".join(
            plain[b:a]
            for (_, b), (a, _) in zip([(0, 0), *python_spans(plain)], [*python_spans(plain), (len(plain), 0)])
        )
    for mark, count in (("**", plain.count("**")), ("*", plain.replace("**", "").count("*"))):
        if count % 2:
            problems.append(f"unbalanced {mark}")
    for m in re.finditer(r"\*\*([^*]+)\*\*", msgstr):
        inner, before = m.group(1), msgstr[: m.start()]
        after = msgstr[m.end() :]
        punct = "[“”‘’「」(),。:;、!?\uff08\uff09\uff0c\uff1a\uff1b\uff1f\uff01]"
        if (
            re.match(punct, inner) and before and not re.search(r"\s$", before) and not re.search(punct + "$", before)
        ) or (re.search(punct + "$", inner) and after and not re.match(r"\s", after) and not re.match(punct, after)):
            problems.append(f"bold that Markdown will not parse (punctuation inside the **): {m.group(0)}")
    prose = msgid
    for q in _verbatim_quotes(msgstr, msgid):  # a Chinese source or code quoted verbatim: the source's words
        if CJK.search(q) or re.search(r"[()=_\[\]@*]", q):  # ("input 1", "for now": ours to translate)
            prose = prose.replace(q, " ")
    prose = ROLE.sub("", CODE.sub("", MATH.sub("", prose)))  # terms in formulas and code are not words
    for pattern, zh in terms:
        if pattern.search(prose) and zh not in msgstr:
            problems.append(f"term: '{pattern.pattern[5:-3]}' should be {zh}")
    for word in never:
        if word in msgstr and word not in msgid:
            problems.append(f"forbidden word {word}")
    problems += typography(msgstr, msgid, code)
    return problems


def lint(paths) -> int:
    import polib

    terms, never = terminology()
    bad = 0
    for path in paths:
        code = True if Path(path).name == "attnlib.po" else None  # checker hints: code as plain text
        for entry in polib.pofile(str(path)):
            if entry.obsolete:
                continue
            problems = lint_message(entry.msgid, entry.msgstr, terms, never, code)
            if "fuzzy" in entry.flags:
                problems.append("fuzzy")
            for p in problems:
                bad += 1
                print(f"{path}: {entry.msgid[:70]!r}: {p}")
    return bad


def fix_fullwidth(paths) -> int:
    """fullwidth() on every translated message of the catalogs (quotes of the English kept); how many changed."""
    import polib

    changed = 0
    for path in paths:
        po = polib.pofile(str(path), wrapwidth=0)
        for e in po:
            if e.msgstr and not e.msgid.startswith("\n") and CJK.search(e.msgstr):
                new = fullwidth(e.msgstr, e.msgid, True if Path(path).name == "attnlib.po" else None)
                changed += new != e.msgstr
                e.msgstr = new
        po.save(str(path))
    return changed


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 2 and sys.argv[1] == "lint":
        sys.exit(1 if lint(sys.argv[2:]) else 0)
    elif len(sys.argv) > 2 and sys.argv[1] == "fullwidth":
        print(f"{fix_fullwidth(sys.argv[2:])} messages changed")
    else:
        sys.exit("usage: python book/catalog_lint.py lint|fullwidth FILE.po ...")
