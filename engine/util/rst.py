"""reStructuredText through docutils: a document's title and its section headings, located in
the source so the chunker can cut the text along them (``Document.headings``).

docutils parses the document (file inclusion and raw passthrough off, no message printed,
never halting); its sections give the headings' order, depth and plain text. Each one is then
found in the source among the adornment candidates (a title line under an optional overline
and over an underline of one repeated punctuation character), in order, by its plain text.
"""

from __future__ import annotations

import io
import re

_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1+[ \t\r]*")
_WORD = re.compile(r"\w+")


def _key(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _candidates(text: str) -> list[tuple[int, str, int]]:
    """(offset, title line, end of the underline) of every line that could be a section title."""
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    out = []
    for i in range(len(lines) - 1):
        title, under = lines[i], lines[i + 1]
        if not title.strip() or not _ADORNMENT.fullmatch(under) or _ADORNMENT.fullmatch(title):
            continue  # (an adornment over an adornment is an overline: its title is the next line)
        overlined = i > 0 and _ADORNMENT.fullmatch(lines[i - 1]) and lines[i - 1].rstrip()[0] == under.rstrip()[0]
        if title[0].isspace() and not overlined:
            continue  # only an overlined title may be inset
        start = i - 1 if overlined else i
        out.append((starts[start], title.strip(), starts[i + 1] + len(under)))
    return out


# explicit markup (``.. note::``, ``.. _target:``, ``.. comment``) or an interpreted-text role (``:ref:`x```)
_RST_MARKUP = re.compile(r"^\.\. \S|:[a-z][a-z0-9_.:+-]*:`", re.M)
_UNDERLINED = re.compile(r"^([^\s\n][^\n]*)\n([!-/:-@\[-`{-~])\2{2,}[ \t\r]*$", re.M)


def looks_like_rst(text: str) -> bool:
    """Whether ``text`` reads as reStructuredText: a title over an adornment line at least as long
    (rst's rule; a setext heading in Markdown needs no length) and rst's explicit markup or
    roles somewhere. A cheap scan, before docutils is asked."""
    if not _RST_MARKUP.search(text):
        return False
    return any(len(m.group(0).split("\n")[1].rstrip()) >= len(m.group(1).rstrip()) for m in _UNDERLINED.finditer(text))


def rst_structure(text: str, source: str) -> tuple[str | None, tuple[tuple[int, int, str, int], ...]]:
    """The document title (None without one) and the headings ``(offset, depth, title, end)``
    of the reStructuredText ``text``. Raises ``ValueError`` when docutils cannot parse it."""
    try:
        from docutils import nodes
        from docutils.core import publish_doctree
    except ImportError:  # a dependency of the package; named for a broken install
        raise ImportError("reading .rst files needs docutils: pip install docutils") from None
    settings = {"report_level": 5, "halt_level": 5, "file_insertion_enabled": False, "raw_enabled": False,
                "warning_stream": io.StringIO(), "_disable_config": True, "doctitle_xform": False}
    try:
        tree = publish_doctree(text, source_path=source, settings_overrides=settings)
    except Exception as exc:  # docutils raises many kinds on broken input: all mean "cannot parse"
        raise ValueError(f"reStructuredText that docutils cannot parse ({type(exc).__name__}: {str(exc)[:200]})") from None
    found: list[tuple[int, str]] = []

    def walk(node, depth: int) -> None:
        for child in node.children:
            if isinstance(child, nodes.section) and child.children and isinstance(child.children[0], nodes.title):
                found.append((depth, child.children[0].astext()))
                walk(child, depth + 1)
            elif isinstance(child, nodes.Element) and not isinstance(child, nodes.section):
                continue  # sections nest only in sections and the document

    walk(tree, 1)
    headings, k = [], 0
    candidates = _candidates(text)
    for depth, title in found:
        want = _key(title)
        j = k
        stop = min(len(candidates), k + 64)  # bounded look-ahead: linear time whatever is missed
        while j < stop and _key(candidates[j][1]) != want:
            j += 1
        if j == stop:
            continue  # not located (a title built by a directive): its text stays in its parent section
        pos, _, end = candidates[j]
        headings.append((pos, depth, " ".join(title.split())[:200], end))
        k = j + 1
    title = headings[0][2] if headings and headings[0][1] == 1 else None
    return title, tuple(headings)
