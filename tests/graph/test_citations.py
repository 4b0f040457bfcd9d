"""Citation edges (spectrag.graph.citations): hand-made chunks with every expected edge written
out, the sample corpus's links / footnotes / title mentions, and MuSiQue's title mentions. (The
title matcher itself: tests/extract/test_titles.py.)"""

from __future__ import annotations

import re

import numpy as np
import pytest

from spectrag.graph.citations import citation_edges, CitationEdges, FOOTNOTE, LINK, TITLE, URL
from spectrag.extract.titles import title_key
from spectrag.types import Chunk


def _chunk(doc_id: str, text: str, title: str = "", url: str = "") -> Chunk:
    return Chunk(doc_id, title, (), url, text, 1, 0, len(text))


def _edges(e: CitationEdges) -> set[tuple[int, int, int]]:
    return {(int(r), int(c), int(k)) for r, c, k in zip(e.rows, e.cols, e.kind)}


# --- citation_edges on hand-made chunks --------------------------------------------------------


def _hand_chunks() -> list[Chunk]:
    return [
        # 0, 1: a.md
        _chunk(
            "a.md",
            "See [Bravo Page](sub/b.md#intro), [C](c) and ![pic](sub/b.md). A note.[^1] "
            "Visit https://example.org/d/.",
            "Alpha Notes",
        ),
        _chunk("a.md", "[^1]: The note itself.", "Alpha Notes"),
        # 2..6: sub/b.md (five chunks; targets are its first four)
        _chunk("sub/b.md", "Back to [home](../a.md) and [self](b.md).", "Bravo Page"),
        _chunk("sub/b.md", "Part two.", "Bravo Page"),
        _chunk("sub/b.md", "Part three.", "Bravo Page"),
        _chunk("sub/b.md", "Part four.", "Bravo Page"),
        _chunk("sub/b.md", "Part five mentions cedar grove.", "Bravo Page"),
        # 7: c.txt
        _chunk("c.txt", "Cedar Grove links [Delta](https://example.org/d#top) and names bravo page.", "Cedar Grove"),
        # 8: d.md, with a url
        _chunk(
            "d.md",
            "Delta Station is [here](https://example.org/d) near Cedar Grove; "
            "see [A](/a.md) and [missing](../a.md) and [none](#top).",
            "Delta Station",
            "https://example.org/d",
        ),
        # 9: e.md, the same title as c.txt
        _chunk("e.md", "Cedar Grove again.", "Cedar Grove"),
    ]


def test_citation_edges_hand_made_exact():
    e = citation_edges(_hand_chunks())
    expected = {
        # chunk 0: link to b's first four chunks (the title mention of "Bravo Page" collapses
        # into the link), link to c.txt without extension, footnote, bare url of d.md
        (0, 2, LINK), (0, 3, LINK), (0, 4, LINK), (0, 5, LINK), (0, 7, LINK),
        (0, 1, FOOTNOTE),
        (0, 8, URL),
        # chunk 2: ../a.md from sub/ (its link to itself is no edge)
        (2, 0, LINK), (2, 1, LINK),
        # chunk 6: mentions the title shared by c.txt and e.md
        (6, 7, TITLE), (6, 9, TITLE),
        # chunk 7: a link by url to d.md; mentions Bravo Page; its own title is no edge (nor is
        # e.md, which has the same title)
        (7, 8, LINK),
        (7, 2, TITLE), (7, 3, TITLE), (7, 4, TITLE), (7, 5, TITLE),
        # chunk 8: its own url is no edge; /a.md is the corpus root
        (8, 0, LINK), (8, 1, LINK),
        (8, 7, TITLE), (8, 9, TITLE),
    }
    assert _edges(e) == expected
    assert e.counts == {"link": 10, "footnote": 1, "url": 1, "title": 8}
    assert len(e) == 20 and e.n_chunks == 10
    assert e.rows.dtype == np.int64 and e.cols.dtype == np.int64
    assert e.kind.dtype == np.int8 and e.weights.dtype == np.float32
    assert np.all(e.weights == 1.0)
    order = np.lexsort((e.cols, e.rows))
    assert np.array_equal(order, np.arange(len(e)))  # sorted by (row, col)


def test_citation_edges_options():
    chunks = _hand_chunks()
    few = _edges(citation_edges(chunks, max_targets_per_doc=2))
    assert {(r, c) for r, c, k in few if r == 0 and k == LINK} == {(0, 2), (0, 3), (0, 7)}
    no_titles = _edges(citation_edges(chunks, title_mentions=False))
    assert all(k != TITLE for _, _, k in no_titles)
    assert (0, 2, LINK) in no_titles and len(no_titles) == 12
    with pytest.raises(ValueError):
        citation_edges(chunks, max_targets_per_doc=0)
    empty = citation_edges([])
    assert len(empty) == 0 and empty.counts == {"link": 0, "footnote": 0, "url": 0, "title": 0}


def test_footnotes_within_a_document():
    chunks = [
        _chunk("f.md", "Intro with a claim.[^a] And another.[^b] And [^a] again."),
        _chunk("f.md", "Body.[^c]\n\n[^c]: Defined in the same chunk."),
        _chunk("f.md", "[^a]: First definition.\n[^b]: Second."),
        _chunk("f.md", "[^a]: First definition (overlap copy)."),
        _chunk("g.md", "Other document.[^a] [^zz]"),  # g.md defines no [^a]: no edge to f.md
    ]
    assert _edges(citation_edges(chunks)) == {(0, 2, FOOTNOTE), (0, 3, FOOTNOTE)}


def test_links_resolve_relative_paths_extensions_and_urls():
    chunks = [
        _chunk("docs/guide/intro.md", "[up](../ref/api.md) [sib](setup) [abs](/docs/ref/api) "
               "[enc](setup%2Emd) [img]: not a link ![x](setup.md) [ext](https://x.org/page)"),
        _chunk("docs/guide/setup.md", "setup"),
        _chunk("docs/ref/api.md", "api"),
        _chunk("page.md", "page", url="https://x.org/page/"),
    ]
    got = _edges(citation_edges(chunks, title_mentions=False))
    assert got == {(0, 1, LINK), (0, 2, LINK), (0, 3, LINK)}


# --- the sample corpus -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_chunks() -> list[Chunk]:
    from spectrag.config import ChunkConfig
    from spectrag.cli.demo import sample_corpus
    from spectrag.index.chunk import chunk_document
    from spectrag.index.load import load_documents

    return [c for d in load_documents(sample_corpus()) for c in chunk_document(d, ChunkConfig())]


def _doc_chunks(chunks: list[Chunk], doc_id: str, k: int = 4) -> list[int]:
    return [i for i, c in enumerate(chunks) if c.doc_id == doc_id][:k]


def test_sample_corpus_title_mention_and_links(sample_chunks):
    e = citation_edges(sample_chunks)
    got = _edges(e)
    # the Veltra Bridge chunk that names its designer mentions the title of her page
    veltra = [i for i in _doc_chunks(sample_chunks, "veltra_bridge.txt") if "Ilse Marrow" in sample_chunks[i].text]
    assert veltra
    marrow = _doc_chunks(sample_chunks, "ilse_marrow.md")
    assert marrow and all((veltra[0], j, TITLE) in got for j in marrow)
    assert e.counts["title"] > 0 and e.counts["link"] > 0 and e.counts["url"] == 0
    # no self-loops, no duplicate pairs, no edge inside a document other than footnotes
    assert not np.any(e.rows == e.cols)
    assert len({(r, c) for r, c, _ in got}) == len(got)
    for r, c, k in got:
        same_doc = sample_chunks[r].doc_id == sample_chunks[c].doc_id
        assert same_doc == (k == FOOTNOTE)


def test_sample_corpus_links_match_reference(sample_chunks):
    """Every Markdown link of the sample points at a file in the same folder."""
    first = {}
    for i, c in enumerate(sample_chunks):
        first.setdefault(c.doc_id, [])
        if len(first[c.doc_id]) < 4:
            first[c.doc_id].append(i)
    expected = set()
    for i, c in enumerate(sample_chunks):
        for target in re.findall(r"\]\(([^)#]+)\)", c.text):
            assert target in first, target
            if target != c.doc_id:
                expected.update((i, j) for j in first[target])
    got = {(r, c) for r, c, k in _edges(citation_edges(sample_chunks)) if k == LINK}
    assert got == expected and len(got) > 100


def test_sample_corpus_footnotes(sample_chunks):
    got = [(r, c) for r, c, k in _edges(citation_edges(sample_chunks)) if k == FOOTNOTE]
    assert {sample_chunks[r].doc_id for r, _ in got} == {"pieter_quell.md", "river_drum.md"}
    for r, c in got:
        assert "[^1]" in sample_chunks[r].text.replace("[^1]:", "")
        assert re.search(r"^\[\^1\]:", sample_chunks[c].text, re.M)


def test_musique_title_mention_edges():
    from conftest import shared_file

    from spectrag.config import ChunkConfig
    from spectrag.index.chunk import chunk_document
    from spectrag.index.load import load_documents

    docs = load_documents(shared_file("musique", "musique_train_corpus.json"))
    chunks = [c for d in docs for c in chunk_document(d, ChunkConfig())]
    e = citation_edges(chunks)
    assert e.counts["link"] == e.counts["url"] == e.counts["footnote"] == 0
    assert e.counts["title"] == len(e) > 1000
    # each edge: the source passage names the target passage's title, which is not its own
    titles = [c.title for c in chunks]
    for r, c in zip(e.rows[:500].tolist(), e.cols[:500].tolist()):
        assert title_key(titles[c]) in " ".join(chunks[r].text.casefold().split())
        assert title_key(titles[c]) != title_key(titles[r])
