"""reStructuredText chunking: a heading (with its over- and underline) opens its section's chunk,
``chunk_size`` holds for every chunk, link targets travel with the heading they label, and rst
records in JSON lines / BEIR corpora are read as rst (by their ``.rst`` id or by their text).
The documents are written here."""

from __future__ import annotations

import json
import random

import pytest

from spectrag.config import ChunkConfig
from spectrag.index.chunk import chunk_document
from spectrag.index.load import load_documents
from spectrag.types import Document
from spectrag.util.rst import looks_like_rst
from spectrag.util.tokens import count_tokens

WORDS = "bridge harbour ferry council engineer river toll tower cable deck pier lantern".split()


def _prose(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
        out.append(words[0].capitalize() + " " + " ".join(words[1:]) + ".")
    return " ".join(out)


def _rst(seed: int = 0) -> tuple[str, list[str]]:
    """An rst page: overlined title, sections underlined with = - ~ (a three-letter title over
    exactly ``~~~``, which a Markdown reader takes for a code fence), link targets before
    headings, one long section; and its heading titles in order."""
    rng = random.Random(seed)
    titles = ["Veltra Bridge", "Design goals", "Cable settings", "Maintenance log", "API", "How the toll works",
              "Pier lanterns"]
    lines = [".. _veltra-bridge:", "", "=" * 13, titles[0], "=" * 13, "", _prose(rng, 3), ""]
    marks = ["=", "~", "-", "~", "~", "~"]  # a long section between the ~~~~ and the ~~~ underline
    for title, mark in zip(titles[1:], marks):
        lines += [f".. _{title.lower().replace(' ', '-')}:", "", title, mark * len(title), ""]
        lines += [_prose(rng, 60 if title == "Maintenance log" else rng.randint(2, 6)), "",
                  ".. note::", "", "   " + _prose(rng, 1), ""]
    return "\n".join(lines), titles


CONFIG = ChunkConfig(chunk_size=96, overlap=16, min_tokens=8)


def _chunks(doc: Document):
    return chunk_document(doc, CONFIG)


def _folder_doc(tmp_path, text: str) -> Document:
    (tmp_path / "bridge.rst").write_text(text)
    return load_documents(tmp_path)[0]


def test_every_chunk_fits_and_the_text_is_covered(tmp_path):
    text, _ = _rst()
    doc = _folder_doc(tmp_path, text)
    assert doc.markup == "rst"
    chunks = _chunks(doc)
    assert max(c.n_tokens for c in chunks) <= CONFIG.chunk_size  # before: the ~~~ underlines paired as a fence
    assert all(c.n_tokens == count_tokens([c.text])[0] for c in chunks)
    covered = bytearray(len(text))
    for c in chunks:
        assert text[c.start:c.end] == c.text
        covered[c.start:c.end] = b"\x01" * (c.end - c.start)
    assert all(covered[i] or text[i].isspace() for i in range(len(text)))


def test_a_heading_opens_its_sections_chunk(tmp_path):
    text, titles = _rst()
    chunks = _chunks(_folder_doc(tmp_path, text))
    for title in titles[1:]:
        (first,) = [c for c in chunks if c.section and c.section[-1] == title and c is
                    next(d for d in chunks if d.section == c.section)]
        body = first.text.split("\n")
        at = body.index(title)  # the heading is in its own section's first chunk ...
        assert set(body[at + 1]) == set(body[at + 1][:1]) and len(body[at + 1]) >= len(title)  # ... with its underline
        assert all(line.startswith(".. _") or not line.strip() for line in body[:at])  # only its label before it
    for c in chunks:  # and no chunk ends on a heading line that its underline does not follow
        last = c.text.rstrip().split("\n")[-1]
        assert last not in titles


def test_jsonl_and_beir_records_with_rst_text_are_chunked_as_rst(tmp_path):
    text, _ = _rst()
    folder = _chunks(_folder_doc(tmp_path, text))
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": "docs/bridge.rst", "title": "Veltra Bridge",
                                                       "text": text}) + "\n")
    (tmp_path / "records.jsonl").write_text(json.dumps({"id": "bridge", "title": "Veltra Bridge", "text": text}) + "\n")
    for path, fmt in ((tmp_path / "corpus.jsonl", "beir"), (tmp_path / "records.jsonl", "jsonl")):
        (doc,) = load_documents(path, fmt)
        assert doc.markup == "rst", fmt
        assert [(c.start, c.end, c.section) for c in _chunks(doc)] == [(c.start, c.end, c.section) for c in folder]


def test_rst_detection_needs_rst_markup_not_only_an_underline():
    text, _ = _rst()
    assert looks_like_rst(text)
    assert not looks_like_rst("Title\n=====\n\nA Markdown page with a setext heading.\n")
    assert not looks_like_rst("Plain text. :role:`x` without any underlined title.\n")


@pytest.mark.parametrize("markup", ["text", "markdown"])
def test_underlined_titles_stay_with_their_underline_in_plain_text(markup):
    text, titles = _rst(seed=3)
    chunks = chunk_document(Document("bridge.txt", "Veltra Bridge", text, markup=markup), CONFIG)
    assert max(c.n_tokens for c in chunks) <= CONFIG.chunk_size
    for c in chunks:
        assert c.text.rstrip().split("\n")[-1] not in titles  # a title never ends a chunk without its underline
