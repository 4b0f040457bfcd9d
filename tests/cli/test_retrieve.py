"""``spectrag retrieve`` (spectrag.cli.retrieve): queries from JSONL / ``qid<TAB>text`` files and
``-q`` in batches, JSON lines or text, ``-k`` hits, TREC runs (chunk and max-passage document level,
with the final scores), unique query ids; no queries is a usage error."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from spectrag.cli.demo import sample_questions
from spectrag.cli.retrieve import doc_hits, query_ids
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever

QUESTIONS = [q["question"] for q in sample_questions()]


def _run(*args):
    from spectrag.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_retrieve_writes_jsonl_and_trec(sample_index, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"id": f"x{i}", "question": q}) + "\n" for i, q in enumerate(QUESTIONS[:3])))
    out, trec = tmp_path / "out.jsonl", tmp_path / "run.trec"
    result = _run("retrieve", sample_index.path, "--queries", queries, "-o", out, "--trec", trec, "--budget", 1000,
                  "--batch-size", 2, "--depth", 7, "--device", "cpu")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["x0", "x1", "x2"]
    assert all(r["used_tokens"] <= r["budget"] == 1000 for r in rows)
    for r in rows:  # no -k: the hits are the context's chunks, in rank order, with their text
        chosen = {c["chunk_id"]: c["text"] for c in r["chunks"]}
        assert [h["chunk_id"] for h in r["hits"]] == [c for c in r["ranking"] if c in chosen]
        assert all(h["text"] == chosen[h["chunk_id"]] for h in r["hits"])
    lines = [line.split() for line in trec.read_text().splitlines()]
    assert len(lines) == 3 * 7 and lines[0][:4] == ["x0", "Q0", str(rows[0]["ranking"][0]), "1"]
    # real scores: the final scores of the Retriever's top-k, falling with rank
    want = Retriever(sample_index).retrieve(QUESTIONS[0], k=7, budget=1000).hits
    x0 = [line for line in lines if line[0] == "x0"]
    assert [(int(d), float(s)) for _, _, d, _, s, _ in x0] == [(h.chunk_id, pytest.approx(h.score, abs=1e-6)) for h in want]
    bad = _run("retrieve", sample_index.path)
    assert bad.exit_code == 2 and "no queries" in bad.output


def test_cli_retrieve_doc_level_tsv_queries_k_and_text(sample_index, tmp_path):
    tsv = tmp_path / "topics.tsv"
    tsv.write_text(f"q1\t{QUESTIONS[0]}\nt2\t{QUESTIONS[1]}\n")
    out, trec = tmp_path / "out.jsonl", tmp_path / "docs.trec"
    result = _run("retrieve", sample_index.path, "-q", QUESTIONS[2], "--queries", tsv, "-k", 4, "-o", out,
                  "--trec", trec, "--level", "doc", "--budget", 800)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q2", "q1", "t2"]  # -q ids skip the file's (q1 is taken)
    assert all(len(r["hits"]) == 4 and r["budget"] == 800 for r in rows)  # -k with --budget: the budgeted context
    ranking = Retriever(sample_index).retrieve(QUESTIONS[0], budget=800).ranking
    docs = [line.split() for line in trec.read_text().splitlines() if line.startswith("q1 ")]
    assert [d[2] for d in docs] == list(dict.fromkeys(sample_index.chunks[c].doc_id for c in ranking))  # max-passage
    assert len({d[2] for d in docs}) == len(docs) and all(float(a[4]) >= float(b[4]) for a, b in zip(docs, docs[1:]))
    text = _run("retrieve", sample_index.path, "-q", QUESTIONS[0], "--format", "text", "-k", 2)
    assert text.exit_code == 0, text.output
    assert text.output.count("  chunk ") == 2 and f"[q1] {QUESTIONS[0]}" in text.output
    only_k = _run("retrieve", sample_index.path, "-q", QUESTIONS[0], "-k", 3)  # k means k: a context of 3 chunks
    row = json.loads(only_k.output)
    assert len(row["hits"]) == len(row["chunks"]) == 3 and row["budget"] is None and row["hits"][0]["text"]


def test_query_ids_and_max_passage():
    assert query_ids(["a", "b"], [("q1", "x"), ("3", "y")]) == [("q2", "a"), ("q3", "b"), ("q1", "x"), ("3", "y")]
    with pytest.raises(SpectragError, match="query id 'z' appears twice"):
        query_ids([], [("z", "x"), ("z", "y")], "f.tsv")
    ranked = [("a", 0.9), ("b", 0.8), ("a", 0.7), ("c", 0.8)]
    assert doc_hits(ranked) == [("a", 0.9), ("b", 0.8), ("c", 0.8)]


def test_cli_retrieve_bad_options(sample_index, tmp_path):
    for args, message in ((["-k", 0], "-k must be >= 1"), (["--depth", 0], "--depth must be >= 1"),
                          (["-k", 500], "k = 500 is more than mode 'spectral' ranks per query"),
                          (["--device", "gpu"], "device must be auto, cpu or cuda"), (["--batch-size", 0], "--batch-size must be >= 1")):
        result = _run("retrieve", sample_index.path, "-q", "x", *args)
        assert result.exit_code == 2 and message in result.output, result.output
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("\tno id\n")
    result = _run("retrieve", sample_index.path, "--queries", tsv)
    assert result.exit_code == 2 and "line 1 has a tab but no id" in result.output


@pytest.fixture(scope="module")
def front_matter_index(tmp_path_factory, index_config):
    """The sample corpus with YAML front matter on its Markdown files (the bodies, so the chunks
    and their cached vectors, unchanged): metadata from front matter, end to end."""
    import shutil

    from spectrag import build_index
    from spectrag.cli.demo import sample_corpus

    root = tmp_path_factory.mktemp("front")
    corpus = root / "corpus"
    shutil.copytree(sample_corpus(), corpus)
    for i, path in enumerate(sorted(corpus.glob("*.md"))):
        lang = ["en", "de"][i % 2]
        path.write_text(f"---\nlang: {lang}\nyear: {2019 + i % 4}\nupdated: 2024-0{1 + i % 9}-01\n---\n" + path.read_text())
    return build_index(corpus, root / "idx", index_config)


def test_cli_retrieve_where_and_metadata_in_json_and_text(front_matter_index, tmp_path):
    index = front_matter_index
    md = {c.doc_id for c in index.chunks if c.doc_id.endswith(".md")}
    assert all(c.metadata.get("updated", "").startswith("2024-") for c in index.chunks if c.doc_id in md)
    assert all(c.metadata == {} for c in index.chunks if c.doc_id not in md)
    out = tmp_path / "out.jsonl"
    result = _run("retrieve", index.path, "-q", QUESTIONS[0], "-q", QUESTIONS[1], "-k", 4, "-o", out,
                  "--where", '{"lang": "de", "year": {"$gte": 2020}}')
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(len(r["hits"]) == 4 for r in rows)
    assert all(h["metadata"]["lang"] == "de" and h["metadata"]["year"] >= 2020 for r in rows for h in r["hits"])
    assert all(c["metadata"]["lang"] == "de" for r in rows for c in r["chunks"])
    text = _run("retrieve", index.path, "-q", QUESTIONS[0], "-k", 2, "--format", "text", "--where", '{"lang": "en"}')
    assert text.exit_code == 0 and text.output.count("lang=en") == 2, text.output
    for where, message in (('{"lang": ', "--where is not JSON"), ('["en"]', "--where must be an object"),
                           ('{"lang": {"$regexp": "e"}}', 'unknown operator "$regexp"')):
        bad = _run("retrieve", index.path, "-q", "x", "--where", where)
        assert bad.exit_code == 2 and message in bad.output, bad.output
def test_cli_budget_below_the_best_chunk_and_the_text_format(sample_index):
    question = sample_questions()[0]["question"]
    best = Retriever(sample_index).retrieve(question, k=1)
    out = _run("retrieve", sample_index.path, "-q", question, "--budget", "1")
    assert out.exit_code == 0, out.output
    row = json.loads(out.output)
    assert [c["chunk_id"] for c in row["chunks"]] == [best.ranking[0]] and row["chunks"][0]["truncated"] is True
    text = _run("retrieve", sample_index.path, "-q", question, "--budget", "1", "--format", "text").output
    assert "1 chunks, 1 of 1 tokens, the best chunk cut to the budget" in text
    hit = best.hits[0]
    shown = _run("retrieve", sample_index.path, "-q", question, "-k", "1", "--format", "text").output
    assert shown.count(f"{hit.title} > ") <= 1 and f"{hit.title} > {hit.title}" not in shown


def test_cli_embed_backend_flag_picks_the_query_encoder_over_the_config(sample_index, tmp_path):
    from spectrag.cli.main import _retriever_config
    from spectrag.config import RetrieverConfig

    config = tmp_path / "torch.toml"
    config.write_text('[retriever]\nembed_backend = "torch"\n')
    assert _retriever_config(config, None).embed_backend == "torch"
    assert _retriever_config(config, None, None, "onnx-int8").embed_backend == "onnx-int8"  # the flag wins
    out = tmp_path / "out.jsonl"
    for backend in ("onnx-int8", "torch"):
        result = _run("retrieve", sample_index.path, "-q", QUESTIONS[0], "-k", 5, "--device", "cpu", "--config", config,
                      "--embed-backend", backend, "-o", out)
        assert result.exit_code == 0, result.output
        (row,) = [json.loads(line) for line in out.read_text().splitlines()]
        want = Retriever(sample_index, RetrieverConfig(device="cpu", embed_backend=backend)).retrieve(QUESTIONS[0], k=5)
        assert [h["chunk_id"] for h in row["hits"]] == [h.chunk_id for h in want.hits], backend
        assert [h["score"] for h in row["hits"]] == pytest.approx([h.score for h in want.hits], abs=1e-6), backend
    bad = _run("retrieve", sample_index.path, "-q", "x", "--embed-backend", "int4")
    assert bad.exit_code == 2 and "int4" in bad.output
