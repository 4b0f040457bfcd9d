"""Markdown facts the loader and the chunker share: titles as plain text (a real Markdown parser,
markdown-it-py, renders the inline markup: links, emphasis, code, entities, images, inline HTML),
HTML comments (nothing inside one is a title or a section), and YAML front matter.

Every function here runs in time linear in its input (the chunker calls them on every document);
the inline parser only sees titles, capped at :data:`MAX_TITLE` characters.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

MAX_TITLE = 200  # characters of a title or section name kept (a 1 MB "# # # ..." line is no title)
_MARKUP = re.compile(r"[*_`\[\]<>&\\!~]")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n")
_FRONT_MATTER_END = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.M)


@lru_cache(maxsize=1)
def _parser():
    from markdown_it import MarkdownIt  # a dependency; imported on first use (spectrag --help stays fast)

    return MarkdownIt("commonmark")


def _inline_text(tokens) -> str:
    out = []
    for tok in tokens:
        if tok.type in ("text", "code_inline"):
            out.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif tok.type == "image":
            out.append(_inline_text(tok.children or []))
        elif tok.children:
            out.append(_inline_text(tok.children))
    return "".join(out)


@lru_cache(maxsize=65_536)
def plain_title(text: str) -> str:
    """``text`` (one line of inline Markdown) as plain text, whitespace collapsed, at most
    :data:`MAX_TITLE` characters: ``"The [Veltra](v.md) *Bridge* &amp; co"`` -> ``"The Veltra
    Bridge & co"``. Text without markup characters is returned as it is (no parse)."""
    text = text[: 4 * MAX_TITLE]
    if _MARKUP.search(text):
        text = "".join(_inline_text(tok.children or []) for tok in _parser().parseInline(text))
    return " ".join(text.split())[:MAX_TITLE]


def comment_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each HTML comment ``<!-- ... -->``; an unclosed one runs to the end."""
    spans, pos = [], 0
    while (start := text.find("<!--", pos)) >= 0:
        close = text.find("-->", start + 4)
        end = len(text) if close < 0 else close + 3
        spans.append((start, end))
        pos = end
    return spans


def split_front_matter(text: str) -> tuple[dict[str, Any] | None, int]:
    """YAML front matter at the start of ``text`` (``---`` line, YAML, ``---`` or ``...`` line):
    the parsed mapping and the offset where the body starts; ``(None, 0)`` when there is none.
    Raises ``ValueError`` for front matter that is not a valid YAML mapping."""
    head = _FRONT_MATTER.match(text)
    if head is None:
        return None, 0
    end = _FRONT_MATTER_END.search(text, head.end())
    if end is None:
        return None, 0  # an opening rule without a closing one is a thematic break, not front matter
    import yaml  # a dependency; imported on first use

    try:
        data = yaml.safe_load(text[head.end() : end.start()])
    except (yaml.YAMLError, RecursionError) as exc:
        raise ValueError(f"invalid YAML front matter: {str(exc).splitlines()[0][:200]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"YAML front matter must be a mapping, got a {type(data).__name__}")
    body = end.end()
    if body < len(text) and text[body] == "\r":
        body += 1
    if body < len(text) and text[body] == "\n":
        body += 1
    return data, body
