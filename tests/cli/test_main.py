"""The ``spectrag`` CLI: index / info / demo, JSON summaries, and one-line errors on bad input."""

from __future__ import annotations

import json
import os

import pytest
import torch
from click.testing import CliRunner
from conftest import FIXTURES

from spectrag.cli import main
from spectrag.generations import current_folder

FOLDER = str(FIXTURES / "formats" / "folder")


@pytest.fixture
def run(monkeypatch, embed_cache):
    monkeypatch.setenv("SPECTRAG_CACHE_DIR", embed_cache)
    runner = CliRunner()
    return lambda *args: runner.invoke(main, [str(a) for a in args])


def test_help_on_every_command(run):
    for cmd in ([], ["index"], ["info"], ["demo"], ["retrieve"], ["answer"], ["serve"], ["view"], ["eval"]):
        result = run(*cmd, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output


def test_long_commands_take_quiet_and_a_log_level(run):
    for cmd in ("index", "add", "retrieve", "eval", "answer", "view", "demo", "serve"):
        text = run(cmd, "--help").output
        assert "--quiet" in text and "--log-level" in text, cmd


def test_stage_lines_follow_the_log_level(run, tmp_path):
    """Not a terminal: no stage lines unless --log-level info asks; --quiet wins over it."""
    plain = run("index", FOLDER, "-o", tmp_path / "a", "--json")
    assert plain.exit_code == 0 and plain.stderr == "", plain.stderr
    told = run("index", FOLDER, "-o", tmp_path / "b", "--json", "--log-level", "info")
    assert told.exit_code == 0 and "embed: " in told.stderr and "graph: " in told.stderr, told.stderr
    quiet = run("index", FOLDER, "-o", tmp_path / "c", "--json", "--log-level", "info", "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr


def test_python_m_spectrag_demo_prints_no_third_party_noise(tmp_path, embed_cache):
    """``spectrag demo`` as a user runs it (a real process: FAISS and transformers write to the
    process's stderr, not to Python's): nothing on stderr, the demo's report on stdout."""
    import subprocess
    import sys

    env = {**os.environ, "SPECTRAG_CACHE_DIR": embed_cache}
    done = subprocess.run([sys.executable, "-m", "spectrag", "demo", "-k", "2"], capture_output=True, text=True,
                          timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == "", done.stderr[-2000:]
    assert "Gold documents in the top 2" in done.stdout
    quiet = subprocess.run([sys.executable, "-m", "spectrag", "info", "--help"], capture_output=True, text=True,
                           timeout=120, env=env)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_index_then_info(run, tmp_path):
    out = tmp_path / "idx"
    result = run("index", FOLDER, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["counts"]["documents"] == 3 and summary["source"]["format"] == "folder"
    assert set(summary["seconds"]) >= {"load", "chunk", "embed", "dense", "bm25"}
    result = run("info", out)
    assert result.exit_code == 0 and "documents" in result.output and "cl100k_base" in result.output
    info = json.loads(run("info", out, "--json").stdout)
    assert info["counts"] == summary["counts"]


def test_index_device_is_recorded_and_checked(run, tmp_path):
    """``--device`` sets embed.device and graph.device (recorded in the manifest's config; the
    graph entry names where the kNN search and the spectrum ran); a bad or absent device is a
    clear error before anything is written."""
    out = tmp_path / "idx"
    result = run("index", FOLDER, "-o", out, "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    manifest = json.loads((current_folder(out) / "manifest.json").read_text())
    assert manifest["config"]["embed"]["device"] == manifest["config"]["graph"]["device"] == "cpu"
    assert manifest["graph"]["knn"]["device"] == "cpu" and manifest["graph"]["spectrum"]["device"] == "cpu"
    result = run("index", FOLDER, "-o", tmp_path / "bad", "--device", "tpu")
    assert result.exit_code != 0 and "must be auto, cpu or cuda" in result.output
    assert not (tmp_path / "bad").exists()
    if not torch.cuda.is_available():
        result = run("index", FOLDER, "-o", tmp_path / "nocuda", "--device", "cuda")
        assert result.exit_code != 0 and "no CUDA device is available" in result.output
        assert not (tmp_path / "nocuda" / "CURRENT").exists() and not (tmp_path / "nocuda" / "manifest.json").exists()


def test_preset_and_config_file(run, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[chunk]\nmin_tokens = 4\n")
    result = run("index", FOLDER, "-o", tmp_path / "i", "--preset", "fine", "--config", cfg, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["chunking"] == {"chunk_size": 256, "overlap": 64, "min_tokens": 4, "structure": True}


def _bad(tmp_path, name: str, content: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda t: ["index", _bad(t, "e.json", b"[]"), "-o", t / "o"], "empty corpus"),
        (lambda t: ["index", _bad(t, "b.json", b"[{"), "-o", t / "o"], "invalid JSON"),
        (lambda t: ["index", _bad(t, "l.txt", b"\xff\xfe bad"), "-o", t / "o"], "not UTF-8"),
        (lambda t: ["index", _bad(t, "x.csv", b"a,b"), "-o", t / "o"], "unknown corpus file type"),
        (lambda t: ["index", FOLDER, "-o", t], "already exists; pass --overwrite"),
        (lambda t: ["index", FOLDER, "-o", t / "o", "--config", _bad(t, "m.toml", b"[embed]\nmodel = '/no/model'\n")],
         "neither all-MiniLM-L6-v2 nor an existing model folder"),
        (lambda t: ["info", t / "nothing"], "no such index folder"),
        (lambda t: ["info", t], "not a SpectRAG index"),
    ],
)
def test_bad_input_is_one_clear_line(run, tmp_path, make_args, message):
    result = run(*make_args(tmp_path))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output
    assert "Traceback" not in result.output


def test_empty_document_and_unknown_format(run, tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nText.")
    (corpus / "b.md").write_text("")
    result = run("index", corpus, "-o", tmp_path / "o")
    assert result.exit_code == 2 and "document 'b.md' is empty" in result.output
    result = run("index", corpus, "-o", tmp_path / "o", "--format", "xml")
    assert result.exit_code == 2 and "Invalid value for '--format'" in result.output


def test_debug_shows_the_exception(run, tmp_path):
    result = run("info", tmp_path / "nothing", "--debug")
    assert result.exit_code != 0 and result.exception is not None
    assert type(result.exception).__name__ == "IndexFormatError"


def test_demo_retrieves_for_every_sample_question(run, sample_index):
    """The demo shows the engine's method (spectral, through the Retriever) beside the hybrid
    baseline, each with gold markers and its count of gold documents."""
    from spectrag.config import RetrieverConfig
    from spectrag.retriever import Retriever

    result = run("demo", "--json", "-k", "5")
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)
    assert len(results) == 12
    assert all(len(r["hits"]) == 5 for r in results)
    found = sum(len(r["gold_found"]) for r in results)
    assert found >= 12  # at least one gold document per question on average
    assert all(set(r["methods"]) == {"spectral", "hybrid"} for r in results)
    assert all(r["methods"]["hybrid"]["hits"] == r["hits"] for r in results)
    contexts = Retriever(sample_index, RetrieverConfig(mode="spectral")).retrieve([r["question"] for r in results])
    for r, ctx in zip(results, contexts):
        hits = r["methods"]["spectral"]["hits"]
        assert [h["chunk"] for h in hits] == ctx.ranking[:5]
        assert all(h["gold"] == (h["doc_id"] in r["gold_docs"]) for h in hits)
        assert r["methods"]["spectral"]["gold_found"] == sorted({h["doc_id"] for h in hits if h["gold"]})
    from click.testing import CliRunner

    from spectrag.cli.demo import _print

    with CliRunner().isolation() as streams:
        _print(results, 5)
        text = streams[0].getvalue().decode()
    assert "spectral (this engine)" in text and "hybrid (dense+BM25)" in text and "Gold documents in the top 5" in text


# --- every bad input the audit of issue 16 found is one error line (exit 2), not a traceback ---


def _model_folder(t):
    model = t / "broken-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{not json")
    (model / "modules.json").write_text("[]")
    return model


AUDIT_CASES = [
    ("deeply nested JSON", lambda t: ["index", _bad(t, "n.json", b"[" * 100_000), "-o", t / "o"], "nested too deeply"),
    ("lone surrogate", lambda t: ["index", _bad(t, "s.jsonl", b'{"id": "a", "text": "x \\ud800 y"}\n'), "-o", t / "o"],
     "lone surrogate"),
    ("huge integer id", lambda t: ["index", _bad(t, "h.jsonl", b'{"id": ' + b"9" * 5000 + b', "text": "x"}\n'), "-o", t / "o"],
     "4300 digits"),
    ("no BM25 term", lambda t: ["index", _bad(t, "b.jsonl", b'{"id": "a", "text": "To be or not to be."}\n'), "-o", t / "o"],
     "no chunk has a term BM25 can index"),
    ("fractional chunk size", lambda t: ["index", FOLDER, "-o", t / "o", "--config", _bad(t, "c.toml", b"[chunk]\nchunk_size = 100.5\n")],
     "chunk.chunk_size must be an integer"),
    ("numeric device", lambda t: ["index", FOLDER, "-o", t / "o", "--config", _bad(t, "d.toml", b"[embed]\ndevice = 3\n")],
     "embed.device must be a string"),
    ("NaN tolerance", lambda t: ["index", FOLDER, "-o", t / "o", "--config", _bad(t, "t.toml", b"[graph]\nlanczos_tol = nan\n")],
     "graph.lanczos_tol must be a finite number"),
    ("broken model folder", lambda t: ["index", FOLDER, "-o", t / "o", "--config",
                                       _bad(t, "m.toml", f"[embed]\nmodel = '{_model_folder(t)}'\n".encode())],
     "is not a loadable sentence-transformers model"),
    ("duplicate ids", lambda t: ["index", _bad(t, "d.jsonl", b'{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n'), "-o", t / "o"],
     "occur more than once ('a')"),
    ("invalid UTF-8 in -q", lambda t: ["retrieve", t, "-q", "caf\udce9"], "-q argument 1"),
    ("lone surrogate in the query file", lambda t: ["retrieve", t, "--queries", _bad(t, "q.jsonl", b'{"query": "a \\udc00"}\n')],
     "lone surrogate"),
    ("-o into a missing folder", lambda t: ["retrieve", t, "-q", "x", "-o", t / "missing" / "out.jsonl"], "does not exist"),
    ("-o onto a folder", lambda t: ["retrieve", t, "-q", "x", "-o", t], "is a folder"),
    ("--trec onto a folder", lambda t: ["retrieve", t, "-q", "x", "--trec", t], "--trec"),
    ("empty query file", lambda t: ["retrieve", t, "--queries", _bad(t, "e.txt", b"\n\n  \n")], "holds none"),
    ("NaN in a retriever table", lambda t: ["retrieve", t, "-q", "x", "--config", _bad(t, "r.toml", b"[seed]\nrrf_k = nan\n")],
     "seed.rrf_k must be an integer"),
    # issue 25
    ("huge finite weight", lambda t: ["retrieve", t, "-q", "x", "--config", _bad(t, "w.toml", b"[seed]\nlexical_weight = 1e308\n")],
     "seed.lexical_weight must be a finite number in [0, 1,000,000], got 1e+308"),
    ("huge pool", lambda t: ["retrieve", t, "-q", "x", "--config", _bad(t, "p.toml", b"[expand]\nmax_candidates = 4611686018427387904\n")],
     "expand.max_candidates must be an integer in [1, 10,000], got 4611686018427387904"),
    ("huge chunk size", lambda t: ["index", FOLDER, "-o", t / "o", "--config", _bad(t, "z.toml", b"[chunk]\nchunk_size = 9223372036854775807\n")],
     "chunk.chunk_size must be an integer in [8, 65,536]"),
    ("100,000-item array", lambda t: ["index", FOLDER, "-o", t / "o", "--config",
                                      _bad(t, "a.toml", b"[chunk]\nchunk_size = [" + b", ".join(b"1" for _ in range(100_000)) + b"]\n")],
     "got [1, 1, 1, 1, 1, ... (100,000 items)]"),
    ("cache_dir is a file", lambda t: ["index", FOLDER, "-o", t / "o", "--config",
                                       _bad(t, "e.toml", f"[embed]\ncache_dir = '{_bad(t, 'f', b'x')}'\n".encode())],
     "cannot hold the embedding cache (a file, not a folder)"),
    ("cache_dir under a file", lambda t: ["index", FOLDER, "-o", t / "o", "--config",
                                          _bad(t, "u.toml", f"[embed]\ncache_dir = '{_bad(t, 'g', b'x')}/sub'\n".encode())],
     "cannot hold the embedding cache (Not a directory)"),
    ("corpus is a FIFO", lambda t: ["index", _fifo(t / "c.jsonl"), "-o", t / "o"], "is a FIFO (named pipe), not a corpus"),
    ("a non-UTF-8 name on a non-UTF-8 file", lambda t: ["index", _badly_named(t), "-o", t / "o"],
     "bad\\xff.md: not UTF-8 text"),  # the name spelled \xNN in the error line too
    ("a newline in a file name", lambda t: ["index", _badly_named(t, b"two\nlines.md"), "-o", t / "o"],
     "two\\nlines.md: not UTF-8 text"),  # still one line
]


def _badly_named(t, name=b"bad\xff.md"):
    import os

    folder = t / "named"
    folder.mkdir()
    (folder / os.fsdecode(name)).write_bytes(b"\xff\xfe not text")
    return folder


def _fifo(path):
    import os

    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make_args, message", [c[1:] for c in AUDIT_CASES], ids=[c[0] for c in AUDIT_CASES])
def test_audit_inputs_are_one_clear_line(run, tmp_path, make_args, message):
    result = run(*make_args(tmp_path))
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output


# --- the LLM stages (against the deterministic test server, tests/fake_llm.py) ----------------


def test_index_with_llm_utility_questions_and_kg(llm_index):
    """`spectrag index CORPUS --llm-base-url URL --llm-model M --utility-questions --kg llm`."""
    result, index = llm_index
    summary = json.loads(result.stdout)
    llm = summary["llm"]
    n = summary["counts"]["chunks"]
    assert llm["model"] == "fake-model" and llm["usage"]["stages"]["utility_questions"]["requests"] == n
    assert llm["utility_questions"]["malformed"] == 1 and llm["utility_questions"]["chunks_with_questions"] == n - 1
    assert llm["openie"]["malformed_triples"] == 3 and llm["openie"]["malformed"] == 0
    assert llm["usage"]["stages"]["openie"]["prompt_tokens"] > 0 and llm["usage"]["total"]["cost"] == 0.0
    assert summary["kg"]["source"] == "llm" and summary["kg"]["entities"] > 0
    assert summary["graph"]["signal_edges"]["utility"] > 0
    assert {"llm/questions.json", "llm/openie.json", "graph/questions.vectors.npy"} <= set(index.manifest["files"])


def test_llm_flags_without_an_endpoint_are_one_error_line(run, tmp_path):
    result = run("index", FOLDER, "-o", tmp_path / "x", "--utility-questions")
    assert result.exit_code == 2 and "graph.utility_questions needs an LLM endpoint" in result.output
    result = run("index", FOLDER, "-o", tmp_path / "x", "--kg", "llm")
    assert result.exit_code == 2 and "kg.source = 'llm' needs an LLM endpoint" in result.output
    assert not (tmp_path / "x").exists()


def test_answer_and_hyde_retrieve(run, llm_index, llm_server, tmp_path):
    _, index = llm_index
    flags = ["--llm-base-url", llm_server.url, "--llm-cache-dir", tmp_path / "c"]
    out = tmp_path / "answers.jsonl"
    result = run("answer", index.path, "-q", "Who designed the Veltra Bridge?", "-q", "Who founded Greywater?",
                 "--rounds", "2", "--budget", "800", "-o", out, *flags)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["rounds"] for r in rows] == [2, 2] and rows[0]["queries"][1].endswith("(more detail)")
    for r in rows:  # the test server answers with the first document's title and cites its first passage shown
        first = index.chunks[r["context"][0]]
        assert r["answer"] == first.title and len(r["citations"]) == 1
        assert r["citations"][0] in r["context"] and index.chunks[r["citations"][0]].doc_id == first.doc_id
    assert "llm step: 2 requests" in result.output and "llm answer: 2 requests" in result.output
    result = run("retrieve", index.path, "-q", "Who designed the Veltra Bridge?", "--mode", "hyde", "--no-text", *flags)
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert row["mode"] == "hyde" and row["chunks"]
    result = run("retrieve", index.path, "-q", "Who?", "--mode", "hyde")
    assert result.exit_code == 2 and "mode 'hyde' needs an LLM endpoint" in result.output


def _tiny_musique(folder):
    """Three MuSiQue-format questions over an eight-passage corpus (HippoRAG layout)."""
    passages = [
        ("Veltra Bridge", "The Veltra Bridge over the river Drum was designed by the engineer Ilse Marrow."),
        ("Ilse Marrow", "Ilse Marrow was an engineer born in the town of Cassel Reach."),
        ("Morwen Star", "The Morwen Star was a steamship built by the Greywater Shipping Company."),
        ("Greywater Shipping Company", "The Greywater Shipping Company was founded by Halvard Oren."),
        ("Halvard Oren", "Halvard Oren was a shipbuilder born in 1851."),
        ("Lake Sorrel", "Lake Sorrel is a lake north of Skarholt."),
        ("Skarholt", "Skarholt is a port city with a university."),
        ("Tessel Lighthouse", "The Tessel Lighthouse stands on the Isle of Fenna."),
    ]
    questions = [
        ("2hop__1_2", "In which town was the designer of the Veltra Bridge born?", [0, 1], "Cassel Reach", ["Cassel"]),
        ("3hop1__3_4_5", "When was the founder of the company that built the Morwen Star born?", [2, 3, 4], "1851", []),
        ("2hop__6_7", "Which city is Lake Sorrel north of?", [5, 6], "Skarholt", []),
    ]
    records = []
    for qid, text, gold, ans, aliases in questions:
        paragraphs = [{"idx": i, "title": t, "paragraph_text": p, "is_supporting": i in gold} for i, (t, p) in enumerate(passages)]
        records.append({"id": qid, "question": text, "paragraphs": paragraphs, "answer": ans, "answer_aliases": aliases,
                        "answerable": True})
    folder.mkdir()
    (folder / "tiny.json").write_text(json.dumps(records))
    (folder / "tiny_corpus.json").write_text(json.dumps([{"title": t, "text": p} for t, p in passages]))


def test_eval_generate_end_to_end(run, llm_server, tmp_path, monkeypatch):
    """`spectrag eval musique --generate --llm-base-url URL` on a tiny MuSiQue-format dataset."""
    monkeypatch.setenv("SPECTRAG_CACHE_DIR", str(tmp_path / "cache"))
    data, out = tmp_path / "tiny", tmp_path / "out"
    _tiny_musique(data)
    result = run("eval", "musique", "--data", data, "--generate", "--llm-base-url", llm_server.url, "--methods",
                 "dense,spectral,hyde", "--rounds", "2", "--budget", "400", "--out", out, "--no-plots", "--json")
    assert result.exit_code == 0, result.output
    res = json.loads(result.stdout)
    gen = res["generation"]
    assert list(gen) == ["dense", "spectral", "hyde"] and all(g["questions"] == 3 for g in gen.values())
    rows = [json.loads(line) for line in (out / "eval_musique_answers.jsonl").read_text().splitlines()]
    assert len(rows) == 9
    for r in rows:  # the server answers with the first passage's title after one follow-up
        assert r["rounds"] == 2 and r["queries"][1].endswith("(more detail)")
        assert r["EM"] == float(r["answer"].lower() in [g.lower() for g in r["gold"]])
    for method, g in gen.items():
        mine = [r for r in rows if r["method"] == method]
        assert g["EM"] == pytest.approx(sum(r["EM"] for r in mine) / 3, abs=1e-4)
        assert g["F1"] == pytest.approx(sum(r["F1"] for r in mine) / 3, abs=1e-4)
        assert g["rounds"] == 2.0
    stages = res["llm"]["stages"]
    assert stages["hyde"]["requests"] == 3 + 3  # the questions, then the follow-ups of the second round
    assert stages["step"]["requests"] == 9 and stages["answer"]["requests"] == 9
    assert "## Generated answers" in (out / "eval_musique.md").read_text()
    # a second run pays for nothing: every answer comes from the cache
    before = len(llm_server.requests)
    result = run("eval", "musique", "--data", data, "--generate", "--llm-base-url", llm_server.url, "--methods",
                 "dense", "--rounds", "2", "--budget", "400", "--json")
    assert result.exit_code == 0 and len(llm_server.requests) == before


def test_file_names_not_utf8_and_special_files_end_to_end(run, tmp_path):
    """The issue's repro (a file name with bytes 0xff 0xfe) indexes through the embedder: the
    document id spells them \\xff\\xfe, a note says so, a FIFO beside it is skipped with a note,
    no JSON file of the index holds a lone surrogate, and the document is retrieved by its text."""
    import os

    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / os.fsdecode(b"bad\xff\xfe.txt")).write_text("The lighthouse keeper of Tessel rowed out in the storm.\n")
    (corpus / "good.md").write_text("# Good\n\nThe harbour froze in the winter.\n")
    os.mkfifo(corpus / "pipe.md")
    result = run("index", corpus, "-o", tmp_path / "i")
    assert result.exit_code == 0, result.output
    assert "note: bad\\xff\\xfe.txt: the file name is not UTF-8" in result.output
    assert "note: pipe.md is a FIFO (named pipe), not a regular file: skipped" in result.output
    for path in (tmp_path / "i").rglob("*.json*"):
        text = path.read_bytes().decode("utf-8")  # strict: valid UTF-8
        assert "\\ud8" not in text.lower() and "\\udc" not in text.lower(), path  # no escaped lone surrogate

        def strings(v):
            if isinstance(v, str):
                v.encode("utf-8")
            elif isinstance(v, dict):
                [strings(x) for x in (*v.keys(), *v.values())]
            elif isinstance(v, list):
                [strings(x) for x in v]

        for line in (text.splitlines() if path.suffix == ".jsonl" else [text]):
            strings(json.loads(line))
    manifest = json.loads((current_folder(tmp_path / "i") / "manifest.json").read_text())
    assert any("pipe.md" in n for n in manifest["source"]["notes"])
    result = run("retrieve", tmp_path / "i", "-q", "lighthouse keeper in the storm", "-k", "1", "--budget", "100")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[0])["hits"][0]["doc_id"] == "bad\\xff\\xfe.txt"


def test_index_says_what_it_skipped_and_that_the_model_is_english_only(run, tmp_path):
    corpus = tmp_path / "c"
    for rel, text in {"docs/a.md": "# Alpha\nThe alpha station keeps the harbour light.\n", "docs/conf.py": "x = 1\n",
                      "node_modules/pkg/README.md": "# vendored\n", ".git/notes.md": "# hidden\n",
                      "drafts/b.md": "# Beta\nA draft.\n"}.items():
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_text(text, encoding="utf-8")
    done = run("index", corpus, "-o", tmp_path / "i", "--exclude", "drafts/", "--log-level", "info")
    assert done.exit_code == 0, done.output
    for line in ("skipped 4 file(s) and folder(s)", "hidden: 1 (.git/)", "vendor/build folder: 1 (node_modules/)",
                 "excluded by glob: 1 (drafts/)", "unsupported file type: 1 (.py 1)"):
        assert line in done.stderr, done.stderr
    assert "English only" in done.stdout and "English-only" in run("index", "--help").output
    manifest = json.loads((current_folder(tmp_path / "i") / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["source"]["skipped"]["vendor/build folder"] == {"count": 1, "examples": ["node_modules/"]}
    assert manifest["embedding"]["languages"].startswith("English only")
    assert manifest["config"]["corpus"]["exclude"] == ["drafts/"]
    assert not (tmp_path / ".i.lock").exists()
