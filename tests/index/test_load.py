"""Corpus loaders: every format, auto-detection, and clear errors on bad files."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from spectrag.errors import CorpusError
from spectrag.index.load import detect_format, load_documents

F = FIXTURES / "formats"


@pytest.mark.parametrize(
    "name, fmt",
    [
        ("folder", "folder"),
        ("folder/alpha.md", "folder"),
        ("records.jsonl", "jsonl"),
        ("records.json", "json"),
        ("musique.json", "musique"),
        ("hotpotqa.json", "hotpotqa"),
        ("multihop_rag_corpus.json", "multihop-rag"),
        ("beir/corpus.jsonl", "beir"),
    ],
)
def test_auto_detects_each_format(name, fmt):
    assert detect_format(F / name) == fmt


def test_folder_reads_md_and_txt_recursively_with_titles():
    docs = load_documents(F / "folder")
    assert [d.doc_id for d in docs] == ["alpha.md", "notes.txt", "sub/beta.md"]
    assert [d.title for d in docs] == ["Alpha Station", "Field notes", "Beta Camp"]
    assert [d.markup for d in docs] == ["markdown", "text", "markdown"]
    assert all(d.kind == "document" for d in docs)
    assert docs[0].text == (F / "folder" / "alpha.md").read_text(encoding="utf-8")


def test_jsonl_and_json_records_keep_optional_fields():
    docs = load_documents(F / "records.jsonl")
    assert [d.doc_id for d in docs] == ["r1", "r2"]
    assert docs[0].url == "https://example.org/r1" and docs[0].metadata == {"lang": "en"}
    assert docs[1].title == ""
    docs = load_documents(F / "records.json")
    assert [d.doc_id for d in docs] == ["j1", "1"]  # a missing id falls back to the position


@pytest.mark.parametrize("fmt, name", [("musique", "musique.json"), ("2wiki", "2wiki.json")])
def test_passage_lists_keep_duplicate_titles_apart(fmt, name):
    docs = load_documents(F / name, fmt)
    assert [d.doc_id for d in docs] == ["0", "1", "2"]
    assert [d.title for d in docs] == ["Lake Orun", "Sava stream", "Lake Orun"]
    assert all(d.kind == "passage" for d in docs)


def test_hotpotqa_joins_sentences():
    docs = load_documents(F / "hotpotqa.json")
    assert docs[0].doc_id == "Mount Tek" and docs[0].text == "Mount Tek is a mountain. It is 2,100 m high."


def test_multihop_rag_uses_body_and_keeps_source_metadata():
    docs = load_documents(F / "multihop_rag_corpus.json")
    assert docs[0].text.startswith("The chipmaker")
    assert docs[0].url == "https://news.example/chip"
    assert docs[0].metadata["source"] == "Example News"
    assert docs[0].metadata["published_at"].startswith("2023-10-10")


def test_beir_uses_underscore_id():
    docs = load_documents(F / "beir" / "corpus.jsonl")
    assert [d.doc_id for d in docs] == ["d1", "d2"] and docs[0].title == "Aspirin"


def test_musique_real_corpus_loads_all_passages():
    from conftest import shared_file

    path = shared_file("musique", "musique_train_corpus.json")
    docs = load_documents(path)
    assert len(docs) == 1890 and len({d.title for d in docs}) == 1764


# --- bad input: each a CorpusError that names the file and the problem -------------------


def _write(tmp_path, name, content: bytes | str):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize(
    "name, content, fmt, expected",
    [
        ("bad.json", "[{\"text\": 1,}", "auto", "invalid JSON at line 1"),
        ("bad.jsonl", '{"text": "ok"}\n{oops}\n', "jsonl", "invalid JSON on line 2"),
        ("latin1.txt", "caf\xe9 ol\xe9".encode("latin-1"), "auto", "not UTF-8 text (invalid byte 0xe9"),
        ("empty.json", "[]", "auto", "empty corpus"),
        ("notext.json", '[{"title": "x", "body2": "y"}]', "json", "has no 'text' field"),
        ("table.csv", "a,b\n1,2\n", "auto", "unknown corpus file type '.csv'"),
        ("obj.json", '{"a": 1}', "auto", "not HotpotQA's title -> [sentences]"),
        ("hp.json", '{"t": [1, 2]}', "hotpotqa", "not a list of sentence strings"),
        ("nobody.json", '[{"title": "x", "text": "y"}]', "multihop-rag", "has no 'body' field"),
        ("beir.jsonl", '{"text": "y"}\n', "beir", "has no '_id' field"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path, name, content, fmt, expected):
    path = _write(tmp_path, name, content)
    with pytest.raises(CorpusError) as err:
        load_documents(path, fmt)
    assert expected in str(err.value)
    assert name in str(err.value)


def test_missing_path_and_unknown_format(tmp_path):
    with pytest.raises(CorpusError, match="no such file or folder"):
        load_documents(tmp_path / "nope")
    with pytest.raises(CorpusError, match="unknown format 'xml'"):
        load_documents(F / "records.json", "xml")


def test_folder_without_text_files(tmp_path):
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(CorpusError, match="holds no .md, .markdown, .rst or .txt files"):
        load_documents(tmp_path)


def test_wrong_explicit_format_names_the_expectation(tmp_path):
    path = _write(tmp_path, "h.json", json.dumps({"t": ["s."]}))
    with pytest.raises(CorpusError, match="expected a JSON list of records"):
        load_documents(path, "musique")


# --- real-world documents (issue 16) ---------------------------------------------------------

RST = """\
=============
 Veltra Guide
=============

The guide to the *Veltra* bridge, written in reStructuredText.

History
=======

Built in 1901 by `the council <https://example.org>`_.

Early years
-----------

A ferry ran before the bridge.

Repairs
=======

.. note:: A directive with text.

Repaired in 1950.
"""


def test_rst_files_are_read_with_their_sections(tmp_path):
    from spectrag.config import ChunkConfig
    from spectrag.index.chunk import chunk_document

    (tmp_path / "guide.rst").write_text(RST)
    (tmp_path / "notes.md").write_text("# Notes\n\nPlain notes.\n")
    docs = load_documents(tmp_path)
    assert [d.doc_id for d in docs] == ["guide.rst", "notes.md"]  # .rst is no longer skipped in a mixed folder
    rst = docs[0]
    assert rst.markup == "rst" and rst.title == "Veltra Guide" and rst.text == RST
    assert [(depth, title) for _, depth, title, _ in rst.headings] == [
        (1, "Veltra Guide"), (2, "History"), (3, "Early years"), (2, "Repairs")]
    sections = [c.section for c in chunk_document(rst, ChunkConfig(chunk_size=24, overlap=0, min_tokens=0))]
    assert ("Veltra Guide", "History", "Early years") in sections and ("Veltra Guide", "Repairs") in sections


def test_front_matter_is_metadata_and_gives_the_title(tmp_path):
    (tmp_path / "a.md").write_text("---\ntitle: The *Grey* Harbour\ntags: [port, history]\n---\n# Other heading\n\nBody.\n")
    (tmp_path / "b.md").write_text("---\nauthor: x\ndate: 2024-01-05\n---\nBody only.\n")
    (tmp_path / "c.md").write_text("---\n\nA thematic break, not front matter.\n")
    a, b, c = load_documents(tmp_path)
    assert a.title == "The Grey Harbour" and a.text == "# Other heading\n\nBody.\n"
    assert a.metadata == {"title": "The *Grey* Harbour", "tags": ["port", "history"]}
    assert b.title == "b" and b.text == "Body only.\n"
    assert b.metadata == {"author": "x", "date": "2024-01-05"}  # a YAML date as its ISO string
    assert c.text.startswith("---") and c.metadata == {}


def test_titles_skip_html_comments_and_read_setext_and_markup(tmp_path):
    (tmp_path / "a.md").write_text("<!--\n# Draft title\n-->\n# Real [Title](x.md) &amp; more\n")
    (tmp_path / "b.md").write_text("Setext Title\n============\n\ntext\n")
    (tmp_path / "c.md").write_text("<!-- # nope -->\nno heading here\n")
    assert [d.title for d in load_documents(tmp_path)] == ["Real Title & more", "Setext Title", "c"]


def test_invalid_files_fail_or_are_skipped_and_listed(tmp_path):
    (tmp_path / "good.md").write_text("# Good\n\nFine text.\n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (tmp_path / "bad.md").write_text("---\ntitle: [unclosed\n---\nBody.\n")
    with pytest.raises(CorpusError, match="bad.md: invalid YAML front matter"):
        load_documents(tmp_path)
    skipped: list = []
    docs = load_documents(tmp_path, skipped=skipped)
    assert [d.doc_id for d in docs] == ["good.md"]
    assert [where for where, _ in skipped] == ["bad.md", "latin1.txt"]
    assert "not UTF-8" in skipped[1][1]
    lines = tmp_path / "c.jsonl"
    lines.write_text('{"id": "a", "text": "one"}\n{oops\n[1]\n{"id": "b", "text": "\\ud800"}\n{"id": "c", "text": "two"}\n')
    skipped = []
    assert [d.doc_id for d in load_documents(lines, skipped=skipped)] == ["a", "c"]
    assert len(skipped) == 3 and "lone surrogate" in skipped[2][1]


def test_symlinks_out_of_the_corpus_are_refused_unless_followed(tmp_path):
    corpus, outside = tmp_path / "corpus", tmp_path / "outside"
    corpus.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("Not part of the corpus.\n")
    (corpus / "own.md").write_text("# Own\n\ntext\n")
    (corpus / "link.txt").symlink_to(outside / "secret.txt")
    (corpus / "inside.md").symlink_to(corpus / "own.md")  # a link within the folder is fine
    with pytest.raises(CorpusError, match="link.txt is a symbolic link to .*outside the corpus folder"):
        load_documents(corpus)
    assert [d.doc_id for d in load_documents(corpus, follow_symlinks=True)] == ["inside.md", "link.txt", "own.md"]
    (corpus / "link.txt").unlink()
    (corpus / "dir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(CorpusError, match="dir is a symbolic link"):
        load_documents(corpus)
    assert "dir/secret.txt" in [d.doc_id for d in load_documents(corpus, follow_symlinks=True)]


@pytest.mark.parametrize("content, message", [
    ("[" * 100_000, "nested too deeply"),
    ('[{"id": ' + "7" * 5000 + ', "text": "x"}]', "4300 digits"),
    ('[{"text": "a \\udc00 b"}]', "lone surrogate"),
    ('[{"title": "\\ud800", "text": "b"}]', "field 'title' holds a lone surrogate"),
])
def test_hostile_json_is_a_corpus_error(tmp_path, content, message):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(CorpusError, match=message):
        load_documents(path, "json")


# --- special files and file names that are not UTF-8 (issue 25) ---------------------------------


def _special_folder(tmp_path):
    """A corpus folder with a regular file, a FIFO, a socket and a broken link."""
    import os
    import socket

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.md").write_text("# Good\n\nFine text.\n")
    os.mkfifo(corpus / "pipe.md")  # opening it would block until a writer comes
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(corpus / "sock.txt"))
    (corpus / "gone.md").symlink_to(corpus / "missing.md")
    return corpus, sock


def _in_thread(fn, timeout=60):
    """``fn()`` in a thread that must finish within ``timeout`` s (a blocked read of a FIFO would not)."""
    import threading

    box = {}

    def target():
        try:
            box["out"] = fn()
        except BaseException as exc:  # noqa: BLE001  (raised again in the caller's thread)
            box["exc"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "reading the corpus blocked"
    if "exc" in box:
        raise box["exc"]
    return box["out"]


def test_special_files_are_skipped_with_a_note_never_opened(tmp_path):
    from spectrag.index.load import CorpusNote

    corpus, sock = _special_folder(tmp_path)
    try:
        notes: list = []
        docs = _in_thread(lambda: load_documents(corpus, notes=notes))
        assert [d.doc_id for d in docs] == ["good.md"]
        assert notes == ["gone.md is a broken symbolic link, not a regular file: skipped",
                         "pipe.md is a FIFO (named pipe), not a regular file: skipped",
                         "sock.txt is a socket, not a regular file: skipped"]
        with pytest.warns(CorpusNote) as warned:  # no list given: warnings
            assert len(_in_thread(lambda: load_documents(corpus))) == 1
        assert [str(w.message) for w in warned] == notes
        for special, fmt in (("pipe.md", "auto"), ("sock.txt", "folder"), ("pipe.md", "jsonl")):
            with pytest.raises(CorpusError, match=f"{special} is a (FIFO|socket).*not a corpus file or folder"):
                _in_thread(lambda: load_documents(corpus / special, fmt))
        (corpus / "c.jsonl").unlink(missing_ok=True)
        import os

        os.mkfifo(corpus / "c.jsonl")
        with pytest.raises(CorpusError, match="c.jsonl is a FIFO"):  # format detection reads nothing first
            _in_thread(lambda: load_documents(corpus / "c.jsonl"))
    finally:
        sock.close()


def test_file_names_that_are_not_utf8_get_escaped_ids_and_a_note(tmp_path):
    import os

    corpus = tmp_path / "corpus"
    (corpus / os.fsdecode(b"sub\xe9")).mkdir(parents=True)
    (corpus / os.fsdecode(b"bad\xff\xfe.txt")).write_text("plain words about the harbour in one line\n")
    (corpus / os.fsdecode(b"sub\xe9") / "caf\u00e9.md").write_text("no heading here\n")
    notes: list = []
    docs = load_documents(corpus, notes=notes)
    assert [(d.doc_id, d.title) for d in docs] == [("bad\\xff\\xfe.txt", "bad\\xff\\xfe"),
                                                   ("sub\\xe9/caf\u00e9.md", "caf\u00e9")]
    for d in docs:
        (d.doc_id + d.title).encode("utf-8")  # valid Unicode: it can be embedded and written to JSON
    assert notes == [f"{d.doc_id}: the file name is not UTF-8; its document id and title write each byte that is "
                     "not UTF-8 as \\xNN" for d in docs]
