"""The shape of a chapter, and the link between every source check and its errata row.

A chapter is: a main path (what you will learn, the topic in small steps, a summary),
then a part "## Source checks" with one subsection per correction of a source, then
"## Exercises". A source check is titled "Source check [B]: what is true" and carries
a label ``(sc-b-...)=``; it links to its chapter's section of the errata page, and that
section has exactly one row linking back to it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ERRATA = ROOT / "book" / "errata.md"
MAIN_PATH_WORDS = 2000
CHAPTERS = [pytest.param(p, id=p.name) for p in NOTEBOOKS]  # test parameters named by file

SC_TITLE = re.compile(r"^(#+) Source check \[([A-E](?:, [A-E])*)\]: \S.*$", re.M)
SC_LABEL = re.compile(r"^\((sc-[a-e]+-[a-z0-9-]+)\)=\s*$")
ERRATA_LABEL = re.compile(r"^\((errata-[a-z0-9-]+)\)=\s*$", re.M)
REF = re.compile(r"\{ref\}`(?:[^`<]*<)?([a-z0-9-]+)>?`")


def _src(cell: dict) -> str:
    s = cell["source"]
    return s if isinstance(s, str) else "".join(s)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _errata_section(path: Path) -> str:
    """The label of the errata section a page's source checks belong to: errata-ch04, errata-notation."""
    m = re.match(r"(\d\d)_", path.name)
    return f"errata-ch{m.group(1)}" if m else f"errata-{path.stem}"


def _parts(path: Path) -> dict[str, str]:
    """A chapter's markdown split into its main path, source checks and exercises."""
    parts = {"main": [], "checks": [], "exercises": []}
    part = "main"
    for cell in _cells(path):
        src = _src(cell)
        if cell["cell_type"] == "markdown":
            if re.search(r"^## Source checks\s*$", src, re.M):
                part = "checks"
            if re.search(r"^## Exercises\s*$", src, re.M):
                part = "exercises"
            parts[part].append(src)
    return {k: "\n\n".join(v) for k, v in parts.items()}


def _source_checks(text: str) -> list[tuple[str, str, str]]:
    """(label, source letters, the check's text up to the next heading of its level or higher)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = SC_TITLE.match(line)
        if not m:
            continue
        label = SC_LABEL.match(lines[i - 1]) if i else None
        assert label, f"source check {line!r} needs a label line (sc-<letters>-<slug>)= right above it"
        level = len(m.group(1))
        body = []
        for nxt in lines[i + 1 :]:
            h = re.match(r"^(#+) ", nxt)
            if h and len(h.group(1)) <= level:
                break
            body.append(nxt)
        found.append((label.group(1), m.group(2), "\n".join(body)))
    return found


def _all_source_checks() -> dict[str, tuple[Path, str, str]]:
    checks = {}
    pages = NOTEBOOKS + sorted((ROOT / "book").glob("*.md"))
    for path in pages:
        text = _parts(path)["checks"] if path.suffix == ".ipynb" else path.read_text(encoding="utf-8")
        for label, letters, body in _source_checks(text):
            assert label not in checks, f"source check label {label} is used twice"
            checks[label] = (path, letters, body)
    return checks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_has_its_parts_in_order(path):
    heads = [
        line
        for c in _cells(path)
        if c["cell_type"] == "markdown"
        for line in _src(c).splitlines()
        if re.match(r"^## (Summary|Source checks|Exercises)\s*$", line)
    ]
    order = [h for h in heads]
    assert "## Summary" in order and "## Exercises" in order, f"{path.name}: needs ## Summary and ## Exercises"
    expected = [h for h in ("## Summary", "## Source checks", "## Exercises") if h in order]
    assert order == expected, f"{path.name}: the parts must come in the order {expected}, found {order}"


@pytest.mark.parametrize("path", CHAPTERS)
def test_main_path_is_at_most_2000_words(path):
    words = len(_parts(path)["main"].split())
    assert words <= MAIN_PATH_WORDS, (
        f"{path.name}: the main path (prose before '## Source checks' / "
        f"'## Exercises') has {words} words, more than {MAIN_PATH_WORDS}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_source_checks_only_in_their_part(path):
    parts = _parts(path)
    for part in ("main", "exercises"):
        stray = [m.group(0) for m in SC_TITLE.finditer(parts[part])]
        assert not stray, f"{path.name}: source checks outside '## Source checks': {stray}"
    loose = [
        h
        for h in re.findall(r"^#+ .*[Ss]ource check.*$", parts["checks"], re.M)
        if not re.match(r"^## Source checks\s*$", h)
    ]
    bad = [h for h in loose if not SC_TITLE.match(h) or "$" in h]  # {ref} shows a title's TeX raw
    assert not bad, (
        f"{path.name}: titles must read 'Source check [B]: what is true', without $math$ (write √d_k, −∞), found {bad}"
    )


@pytest.mark.parametrize("path", CHAPTERS)
def test_chapter_shows_the_overview_figure(path):
    cells = [c for c in _cells(path) if c["cell_type"] == "code" and "plot.overview(" in _src(c)]
    assert cells, f"{path.name}: show attnlib.plot.overview with this chapter's step highlighted"
    meta = cells[0].get("metadata", {}).get("mystnb", {})
    assert meta.get("figure", {}).get("caption") and meta.get("image", {}).get("alt"), (
        f"{path.name}: the overview figure needs a caption and alt text (metadata mystnb.figure/image)"
    )


@pytest.mark.parametrize("path", CHAPTERS)
def test_sources_are_named_by_letter(path):
    text = "\n".join(_src(c) for c in _cells(path))
    old = sorted(set(re.findall(r"[Ss]ource 00[0-4]|\b00[0-4]'s\b", text)))
    assert not old, f"{path.name}: call the sources [A]-[E] as the errata and references do, found {old}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_figures_show_under_any_backend(path):
    first_plot = next((c for c in _cells(path) if c["cell_type"] == "code" and "matplotlib" in _src(c)), None)
    assert first_plot is not None and "%matplotlib inline" in _src(first_plot), (
        f"{path.name}: the cell that imports matplotlib must run %matplotlib inline, or the figures vanish "
        "where MPLBACKEND=Agg is set"
    )


def test_every_source_check_links_to_its_errata_row_and_back():
    checks = _all_source_checks()
    assert checks, "no source checks found"
    errata = ERRATA.read_text(encoding="utf-8")
    # the errata page: sections labelled (errata-...)=, each with a table of rows
    sections: dict[str, list[str]] = {}
    current = None
    for line in errata.splitlines():
        m = ERRATA_LABEL.match(line)
        if m:
            current = m.group(1)
            sections[current] = []
        elif line.startswith("|") and current and not re.match(r"^\|\s*-", line) and not line.startswith("| Source |"):
            sections[current].append(line)
    rows_by_label: dict[str, list[tuple[str, str]]] = {}
    for section, rows in sections.items():
        for row in rows:
            linked = [r for r in REF.findall(row) if r.startswith("sc-")]
            assert len(linked) == 1, f"errata row must link to exactly one source check: {row[:160]}"
            rows_by_label.setdefault(linked[0], []).append((section, row))
    for label, (path, letters, body) in checks.items():
        rows = rows_by_label.get(label, [])
        assert len(rows) == 1, f"source check {label} ({path.name}) has {len(rows)} errata rows, expected 1"
        section, row = rows[0]
        assert section == _errata_section(path), (
            f"the errata row of {label} is under ({section}), expected ({_errata_section(path)})"
        )
        cited = re.match(r"^\|\s*([^|]*)\|", row).group(1)
        for letter in letters.split(", "):
            assert f"[{letter}]" in cited, f"errata row of {label} must name source [{letter}] first: {row[:120]}"
        assert _errata_section(path) in REF.findall(body), (
            f"source check {label} ({path.name}) must link to its errata rows: {{ref}}`... <{_errata_section(path)}>`"
        )
    orphans = sorted(set(rows_by_label) - set(checks))
    assert not orphans, f"errata rows link to source checks that do not exist: {orphans}"


def _notebook_text(path: Path) -> str:
    """A notebook's code and everything it printed or glued, as one string."""
    parts = []
    for cell in _cells(path):
        if cell["cell_type"] != "code":
            continue
        parts.append(_src(cell))
        for out in cell.get("outputs", []):
            parts.append(out.get("text", "") if isinstance(out.get("text"), str) else "".join(out.get("text", [])))
            for value in out.get("data", {}).values():
                parts.append(value if isinstance(value, str) else "".join(value) if isinstance(value, list) else "")
    return "\n".join(parts)


def test_errata_numbers_come_from_the_chapters():
    """A number the errata page states (outside quotes, glue and code spans) must be one the linked
    chapter's code wrote down or printed: the page does not carry numbers of its own."""
    checks = _all_source_checks()
    errata = ERRATA.read_text(encoding="utf-8")
    texts = {}
    for line in errata.splitlines():
        if not line.startswith("| ["):
            continue
        cols = [c.strip() for c in line.strip("|").split("|")]
        label = next(r for r in REF.findall(line) if r.startswith("sc-"))
        path = checks[label][0]
        if path.suffix != ".ipynb":
            continue
        if path not in texts:
            texts[path] = _notebook_text(path).replace(",", "").replace("_", "")
        claim = " ".join(cols[1:3])  # what it says, what is true
        claim = re.sub(r"\{glue:text\}`[^`]*`|\{ref\}`[^`]*`|`[^`]*`|\"[^\"]*\"|“[^”]*”", " ", claim)
        claim = re.sub(r"\$[^$]*\$", lambda m: m.group(0) if re.search(r"\d{2,}|\d\.\d", m.group(0)) else " ", claim)
        for number in re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", claim):
            plain = number.replace(",", "")
            if len(plain.replace(".", "").lstrip("0")) < 2 and "." not in plain:
                continue  # 0-9: counts, indices
            assert plain in texts[path], (
                f"errata row of {label} states {number}, which {path.name} neither "
                "computes nor prints: glue it or print it there"
            )


def _toc_chapters() -> list[str]:
    """The chapter notebooks in the order of _toc.yml: ["01_embeddings", ...]."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [entry["file"] for part in toc.get("parts", []) for entry in part.get("chapters", [])]
    return [Path(f).stem for f in files if re.match(r"^\d\d_", Path(f).name)]


NEXT = re.compile(r"^Next, (?:\{doc\}`)?chapter (\d+)(?: <\.\./notebooks/([\w]+)>`)?", re.M)


@pytest.mark.parametrize("path", CHAPTERS)
def test_next_points_to_the_next_chapter_in_the_toc(path):
    """A chapter's main path ends with one "Next, chapter N ..." line, N the chapter that follows
    it in _toc.yml (a chapter inserted later must not be skipped); the last chapter has none."""
    order = _toc_chapters()
    assert path.stem in order, f"{path.name} is not in _toc.yml"
    found = NEXT.findall(_parts(path)["main"])
    following = order[order.index(path.stem) + 1 :]
    if not following:
        assert not found, f"{path.name} is the last chapter but says what comes next: {found}"
        return
    assert len(found) == 1, f"{path.name}: expected one 'Next, chapter N' line in the main path, found {found}"
    number, target = found[0]
    assert int(number) == int(following[0][:2]), (
        f"{path.name}: 'Next' names chapter {number}, the toc has {following[0]}"
    )
    assert target in ("", following[0]), f"{path.name}: 'Next' links to {target}, the toc has {following[0]}"
