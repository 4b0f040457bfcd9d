"""Benchmark: the audits of issues 16 and 25 as a repeatable run: >= 10,000 fuzzed and
hand-written inputs across their categories, each outcome classified.

    python bench/bench_fuzz.py                      # about 15 minutes on 2 busy cores
    python bench/bench_fuzz.py --scale 0.1          # a tenth of the inputs, for a quick look
    python bench/bench_fuzz.py --only shutdown,random\ kills   # some categories

Categories (seeded, deterministic):

* **corpus**: JSONL / JSON / Markdown / reStructuredText / arbitrary bytes, random and
  hand-written (deep nesting, lone surrogates, 5,000-digit ids, front matter, comments, fences,
  links out of the folder, file names that are not UTF-8, FIFOs, broken links): loaded (with and
  without ``skipped``) and chunked; a sample built end to end (supplied embeddings) and loaded
  back. Document ids and titles must be valid Unicode; a read that blocks is a crash.
* **config**: TOML files of random tables, keys and values (NaN, infinities, huge integers,
  extreme finite numbers such as 1e308 and 2^62, 20,000-item arrays and strings, wrong types;
  every numeric field of every config class), read by ``load_config`` and
  ``load_retriever_config``: an accepted config must hold every value within its stated range.
* **queries**: random query batches through ``Retriever.retrieve`` on the sample index, and
  query files and ``-q`` texts through ``spectrag retrieve``.
* **damaged indexes**: a copy of the sample index with one file damaged (array entries poked
  with out-of-range or non-finite values, dtypes and shapes changed, files truncated, JSON
  edited, manifest entries dropped or pointed elsewhere), checksums resealed to match, and the
  same damage without resealing; each loaded and, when it loads, queried, in a worker process
  (a segfault or abort is counted, not fatal to the run).
* **value damage** (issue 25): one value changed so that the file stays well-formed and finite
  (an embedding row scaled to norm 1000 or 0, a negative BM25 score, one side of a graph edge
  changed, an eigenvalue past 2, a FAISS vector changed, a chunk with 0 tokens), checksums
  resealed: the index must load exactly when a numpy / scipy reference says the format still
  holds.
* **kills**: ``--overwrite`` and ``add`` killed at every point of the index swap, both swap
  methods: the path must load afterwards.
* **random kills**, **concurrent adds** (issue 25, ``fuzz_writes.py``): kills at random moments
  and timed to the temporary folder and its manifest (old or new index byte for byte, at most
  one stray temporary folder, none after the next write's cleanup); two adds at once both land.
* **request bodies**, **shutdown** (issue 25, ``fuzz_server.py``): chunked, oversized, stalled
  and malformed bodies against the server (413 / 408 / 400, never a 500); shutdown under load at
  random moments with random grace periods (200 or 503, never a 500, exit within the grace
  period plus the backstop).

A share of the refused corpus and config inputs, and every fifth damaged index (``spectrag
info``), also go through the command line (in process), where the outcome must be exit 0 or
exit 2 with one ``error:`` line; the query category runs ``spectrag retrieve`` on query files.

Outcomes: *ok* (it worked and the result passed its checks), *refused* (a SpectragError: one
clear message of at most ``MAX_MESSAGE`` characters), *crash* (any other exception, or a
signal), *traceback* (a CLI run that did not end in one ``error:`` line), *wrong* (it worked but
the result is wrong: a non-finite or out-of-range config value accepted, an unresealed damaged
index loaded, an index whose values break the format loaded, an out-of-range chunk id returned,
the index missing after a kill, an error message too long, a 500), *text lost* (a non-blank
character of a document in no chunk).
Goals: 0 crashes, 0 tracebacks, 0 wrong, 0 text lost.

Results: ``bench/results/fuzz_cpu.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path

from _common import ROOT, ensure_spectrag, pin_threads  # noqa: E402

pin_threads("1", passive=True)

from _common import finish_record, md_table, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
import numpy as np  # noqa: E402

from fuzz_server import run_bodies, run_shutdowns  # noqa: E402
from fuzz_writes import KILL_WORKER, run_concurrent_adds, run_random_kills, write_corpus  # noqa: E402

from spectrag.errors import SpectragError  # noqa: E402

OUTCOMES = ("ok", "refused", "crash", "traceback", "wrong", "text lost")
MAX_MESSAGE = 1000  # characters of one error message (a path or two, a brief value)
WORDS = ["river", "Bridge", "the", "harbour", "Veltra", "a", "to", "be", "é", "東京", "\U0001F600", "1901", "and"]
PIECES = ["# ", "## Title\n", "###### x #\n", "Title\n===\n", "---\n", "```\n", "~~~py\n", "|a|b|\n", "<!--", "-->",
          "1. Intro\n", "- item\n", "Word ", "sentence. ", "\n", "\n\n", "  ", "\t", "[link](x.md) ", "*em* ", "&amp; ",
          "\r\n", ".", "\u3000", "`code` ", "\\", "=====\n", "..\n"]


def rand_text(rng: random.Random, n: int = 40) -> str:
    return "".join(rng.choice(PIECES + WORDS + [" "] * 5) for _ in range(rng.randint(0, n)))


def rand_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**63, 10**30, rng.randint(-1000, 1000)])
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e308, float("nan"), float("inf")])
    if kind in (4, 5):
        return rand_text(rng, 10) + rng.choice(["", "\ud800", "\udcff"] if rng.random() < 0.1 else [""])
    if kind == 6:
        return [rand_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["id", "text", "title", "url", "_id", "body", "metadata", "x"]): rand_json(rng, depth + 1)
            for _ in range(rng.randint(0, 4))}


class Tally:
    def __init__(self) -> None:
        self.counts: dict[str, Counter] = {}
        self.examples: dict[str, list[str]] = {}
        self.details: dict[str, Counter] = {}  # per category: what the inputs were (kill timings, versions left)

    def detail(self, category: str, what: str) -> None:
        self.details.setdefault(category, Counter())[what] += 1

    def add(self, category: str, outcome: str, detail: str = "") -> None:
        self.counts.setdefault(category, Counter())[outcome] += 1
        if outcome not in ("ok", "refused"):
            self.examples.setdefault(category, [])
            if len(self.examples[category]) < 5:
                self.examples[category].append(f"{outcome}: {detail[:300]}")

    def run(self, category: str, fn, check=None) -> None:
        """``fn()``; its result checked by ``check`` (returns an outcome or None for ok). A
        refusal whose message is longer than ``MAX_MESSAGE`` characters is *wrong* (error lines
        are short: values are echoed briefly)."""
        try:
            result = fn()
        except SpectragError as exc:
            if len(str(exc)) > MAX_MESSAGE:
                self.add(category, "wrong", f"an error of {len(str(exc)):,} characters: {str(exc)[:200]}")
                return "wrong"
            self.add(category, "refused")
            return "refused"
        except Exception as exc:  # the point: anything else is a crash
            self.add(category, "crash", f"{type(exc).__name__}: {exc} | {traceback.format_exc(limit=-3)}")
            return "crash"
        outcome = check(result) if check is not None else None
        self.add(category, outcome or "ok", "" if not outcome else repr(result)[:200])
        return outcome or "ok"

    def cli(self, category: str, args: list[str]) -> None:
        """``spectrag ARGS`` in this process: exit 0, or exit 2 with one ``error:`` line (refused);
        anything else is a traceback."""
        from click.testing import CliRunner

        from spectrag.cli import main

        result = CliRunner().invoke(main, [str(a) for a in args])
        lines = result.output.strip().splitlines()
        if result.exit_code == 0:
            self.add(category, "ok")
        elif result.exit_code == 2 and lines and lines[-1].startswith("error: ") and "Traceback" not in result.output:
            if len(lines[-1]) > MAX_MESSAGE + 10:
                self.add(category, "wrong", f"{args}: an error line of {len(lines[-1]):,} characters")
            else:
                self.add(category, "refused")
        else:
            self.add(category, "traceback", f"{args}: {result.output[-300:]} {result.exception!r}")


def text_lost(doc, chunks) -> bool:
    covered = bytearray(len(doc.text))
    for c in chunks:
        if c.text != doc.text[c.start : c.end] or not c.text.strip():
            return True
        covered[c.start : c.end] = b"\x01" * (c.end - c.start)
    return any(not covered[i] and not ch.isspace() for i, ch in enumerate(doc.text))


# ------------------------------------------------------------------------------------- corpus


def corpus_case(rng: random.Random, folder: Path) -> tuple[Path, str]:
    kind = rng.randrange(7)
    if kind == 0:
        path = folder / "c.jsonl"
        lines = [json.dumps(rand_json(rng)) if rng.random() < 0.3 else json.dumps({"id": f"d{i}", "text": rand_text(rng, 60)})
                 for i in range(rng.randint(1, 5))]
        if rng.random() < 0.2:
            lines.append(rng.choice(["{oops", "[" * 5000, '{"id": ' + "9" * 5000 + ', "text": "x"}', '{"text": "\\ud800"}']))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        return path, "jsonl"
    if kind == 1:
        path = folder / "c.json"
        records = [rand_json(rng) if rng.random() < 0.3 else {"title": rand_text(rng, 5), "text": rand_text(rng, 60)}
                   for _ in range(rng.randint(0, 5))]
        path.write_text(json.dumps(records), encoding="utf-8", errors="surrogatepass")
        return path, rng.choice(["json", "musique", "auto"])
    sub = folder / "docs"
    sub.mkdir()
    for i in range(rng.randint(1, 4)):
        suffix = rng.choice([".md", ".rst", ".txt", ".markdown"])
        text = rand_text(rng, 120)
        if suffix == ".md" and rng.random() < 0.3:
            text = "---\n" + rng.choice(["title: A *T*\n", "title: [\n", "a: &x [1]\nb: *x\n", "- 1\n"]) + "---\n" + text
        if suffix == ".rst" and rng.random() < 0.5:
            text = "Title\n=====\n\n" + text + "\n\nSub\n---\n\n.. include:: /etc/passwd\n\n" + rand_text(rng, 20)
        data = text.encode("utf-8", errors="surrogatepass")
        if rng.random() < 0.1:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 50)))
        name = f"f{i}".encode()
        if rng.random() < 0.15:  # issue 25: a file name that is not UTF-8 (any bytes but / and NUL)
            name += bytes(rng.choice([b for b in range(1, 256) if b != 0x2F]) for _ in range(rng.randint(1, 4)))
        (sub / os.fsdecode(name + suffix.encode())).write_bytes(data)
    if rng.random() < 0.1:
        (sub / "out.txt").symlink_to("/etc/hostname")
    if rng.random() < 0.05:  # issue 25: a FIFO (reading it would block) and a broken link
        os.mkfifo(sub / rng.choice(["pipe.md", "pipe.txt", "pipe"]))
        (sub / "gone.md").symlink_to(sub / "missing.md")
    return sub, "folder"


def run_corpus(tally: Tally, n: int, builds: int, seed: int) -> None:
    from spectrag import build_index
    from spectrag.config import EmbedConfig, GraphConfig, IndexConfig, PRESETS
    from spectrag.index.chunk import chunk_document
    from spectrag.index.load import load_documents

    rng = random.Random(seed)
    configs = [PRESETS["default"], PRESETS["fine"], PRESETS["fine"].__class__(chunk_size=16, overlap=4, min_tokens=2)]
    index_config = IndexConfig(embed=EmbedConfig(cache_dir=""), graph=GraphConfig(enabled=False))
    for i in range(n):
        with tempfile.TemporaryDirectory() as tmp:
            path, fmt = corpus_case(rng, Path(tmp))
            skipped = [] if rng.random() < 0.5 else None

            def load_and_chunk():
                signal.alarm(60)  # a blocked read (a FIFO opened) would hang the run: a crash instead
                try:
                    docs = load_documents(path, fmt, skipped=skipped, notes=[])
                finally:
                    signal.alarm(0)
                return [(d, chunk_document(d, rng.choice(configs))) for d in docs]

            def check(pairs):
                for d, chunks in pairs:
                    if text_lost(d, chunks):
                        return "text lost"
                    try:
                        (d.text + d.doc_id + d.title).encode("utf-8")  # ids of non-UTF-8 names too
                    except UnicodeEncodeError:
                        return "wrong"
                return None

            outcome = tally.run("corpus", load_and_chunk, check)
            if outcome == "refused" and skipped is None and i % 4 == 0:  # the same input through `spectrag index`
                tally.cli("corpus", ["index", path, "-o", Path(tmp) / "cli-out", "--format", fmt])
            if i < builds:
                def build():
                    from spectrag.index.chunk import chunk_corpus

                    docs = load_documents(path, fmt, notes=[])
                    m = len(chunk_corpus(docs, index_config.chunk))
                    v = np.random.default_rng(i).standard_normal((m, 8)).astype(np.float32)
                    v /= np.linalg.norm(v, axis=1, keepdims=True)
                    return build_index(path, Path(tmp) / "idx", index_config, fmt=fmt, embeddings=v)

                tally.run("corpus", build, lambda index: None if len(index) == index.embeddings.shape[0] else "wrong")


# ------------------------------------------------------------------------------------- config

TABLE_KEYS = {
    "chunk": ["chunk_size", "overlap", "min_tokens", "structure"], "embed": ["model", "device", "batch_size", "backend"],
    "bm25": ["k1", "b", "method", "stemmer", "stopwords"],
    "graph": ["min_cos", "entity_top_k", "tau", "lanczos_tol", "k_semantic", "weights", "knn", "spectral_dim"],
    "retriever": ["mode", "budget", "device"], "seed": ["rrf_k", "k_dense"], "expand": ["hops", "max_candidates"],
    "propagate": ["alpha", "t", "damping", "tol"], "activation": ["tau_a", "tau_d", "tau_r", "c", "k"],
    "select": ["lam", "rho", "precision_floor"], "unknown": ["x"],
}
TOML_VALUES = ["nan", "-nan", "inf", "-inf", "0", "-1", "1", "100.5", "1e400", "99999999999999999999", "true", '"x"', '"cuda:0"',
               "3", "[1, 2]", "{a = 1}", "0.5", "1.0", '""', '"lucene"', '"spectral"', "1e-300", "-0.0", '"\\ud800"',
               # issue 25: extreme finite numbers, huge integers, long values
               "1e308", "-1e308", "5e-324", "4611686018427387904", "9223372036854775807", "-9223372036854775808",
               "1e6", "1000001", "100", "10000", "100001", "65536", "65537", "10000000", "10000001",
               "[" + ", ".join("1" for _ in range(20_000)) + "]", '"' + "y" * 20_000 + '"']


def _table_keys() -> dict[str, list[str]]:
    """TABLE_KEYS and every numeric field of every config class (new ones included)."""
    from spectrag.config import config_classes, numeric_fields

    keys = {table: list(names) for table, names in TABLE_KEYS.items()}
    for cls in config_classes():
        if cls.SECTION == "llm":
            continue
        keys.setdefault(cls.SECTION, [])
        keys[cls.SECTION] += [name for name, _, _ in numeric_fields(cls) if name not in keys[cls.SECTION]]
    return keys


def _within_bounds(config) -> bool:
    """Every numeric field of an accepted config (and its stage tables) within its stated range."""
    import dataclasses

    from spectrag.config import numeric_fields

    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not _within_bounds(value):
            return False
    for name, _, meta in numeric_fields(type(config)):
        value = getattr(config, name)
        if not (meta["lo"] <= value <= meta["hi"]):
            return False
    return True


def run_config(tally: Tally, n: int, seed: int) -> None:
    import math

    from spectrag.config import load_config, load_retriever_config

    rng = random.Random(seed)
    table_keys = _table_keys()

    def finite(value) -> bool:
        if isinstance(value, float):
            return math.isfinite(value)
        if isinstance(value, dict):
            return all(finite(v) for v in value.values())
        return True

    def bounded(config) -> bool:  # finite, and within the stated ranges (issue 25)
        return finite(config.to_dict()) and _within_bounds(config)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        for _ in range(n):
            lines = []
            for table in rng.sample(list(table_keys), rng.randint(1, 3)):
                lines.append(f"[{table}]")
                lines += [f"{rng.choice(table_keys[table])} = {rng.choice(TOML_VALUES)}" for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.05:
                lines.append(rng.choice(["[[x]]", "= 1", "[chunk", "a = 'unterminated"]))
            path.write_bytes("\n".join(lines).encode("utf-8", errors="surrogatepass"))
            for load, command in ((load_config, ["index", ROOT / "tests" / "fixtures" / "formats" / "folder", "-o",
                                                 Path(tmp) / "o"]),
                                  (load_retriever_config, ["retrieve", Path(tmp) / "no-index", "-q", "x"])):
                outcome = tally.run("config", lambda: load(path), lambda c: None if bounded(c) else "wrong")
                if outcome == "refused" and rng.random() < 0.1:  # the same file through the CLI
                    tally.cli("config", [*command, "--config", path])


# ------------------------------------------------------------------------------------ queries


def run_queries(tally: Tally, index_dir: Path, n: int, cli: int, seed: int) -> None:
    from click.testing import CliRunner

    from spectrag import load_index
    from spectrag.cli import main
    from spectrag.config import RetrieverConfig
    from spectrag.retriever import Retriever

    rng = random.Random(seed)
    index = load_index(index_dir)
    retrievers = [Retriever(index, RetrieverConfig(mode=m, device="cpu")) for m in ("spectral", "hybrid", "ppr")]
    specials = ["", "   ", "\ud800", "\x00", "a" * 5000, "# ## ###", "To be or not to be", "\u202e", "\ufeff", "Veltra"]

    def query(r: random.Random) -> str:
        return r.choice(specials) if r.random() < 0.3 else rand_text(r, 12)

    for _ in range(n):
        retriever = rng.choice(retrievers)
        batch = [query(rng) for _ in range(rng.randint(0, 3))]
        budget = rng.choice([None, 1, 50, 1000, -3, 0])

        def check(contexts, batch=batch):
            if len(contexts) != len(batch):
                return "wrong"
            for c in contexts:
                if c.used_tokens > c.budget or any(not 0 <= x.chunk_id < len(index) for x in c.chunks):
                    return "wrong"
            return None

        tally.run("queries", lambda: retriever.retrieve(batch, budget=budget), check)
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(cli):
            qfile = Path(tmp) / rng.choice(["q.jsonl", "q.json", "q.txt"])
            content = rng.choice([
                "\n".join(json.dumps({"query": query(rng)}) for _ in range(rng.randint(0, 2))),
                json.dumps([query(rng) for _ in range(rng.randint(0, 2))]), "{oops", "[" * 3000, "\n\n",
                '{"query": "\\ud800"}', "plain question\n", '[{"question": 5}]'])
            qfile.write_text(content, encoding="utf-8", errors="surrogatepass")
            args = ["retrieve", str(index_dir), "--queries", str(qfile), "--budget", "200"]
            if rng.random() < 0.3:
                args += rng.choice([["-o", tmp], ["-o", str(Path(tmp) / "no" / "o.jsonl")], ["--trec", tmp],
                                    ["-q", "caf\udce9"], ["-o", str(Path(tmp) / f"o{i}.jsonl")], ["--batch-size", "0"]])
            result = runner.invoke(main, args)
            lines = result.output.strip().splitlines()
            if result.exit_code == 0:
                tally.add("queries", "ok")
            elif result.exit_code == 2 and lines and lines[-1].startswith("error: ") and "Traceback" not in result.output:
                tally.add("queries", "refused")
            else:
                tally.add("queries", "traceback", f"{args[3:]}: {result.output[-300:]} {result.exception!r}")


# ---------------------------------------------------------------------------- damaged indexes

WORKER = r"""
import json, sys, shutil, hashlib, random
from pathlib import Path
import numpy as np
import torch
from spectrag import load_index
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever
from spectrag.config import RetrieverConfig
from spectrag.index.dense import _FLAT
from spectrag.reference.index_format import broken_invariants

base, work, first, count, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
values = sys.argv[6] == "values"  # issue 25: value damage that breaks what the format documents, always resealed
manifest0 = json.loads((base / "manifest.json").read_text())
files = sorted(manifest0["files"])
qvecs = torch.from_numpy(np.asarray(load_index(base).embeddings[:2], dtype=np.float32).copy())

def reseal(folder):
    m = json.loads((folder / "manifest.json").read_text())
    if isinstance(m, dict) and isinstance(m.get("files"), dict):
        for rel in m["files"]:
            f = folder / rel
            if f.is_file() and not f.is_symlink():
                m["files"][rel] = {"bytes": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(m))

def damage(folder, rng):
    rel = rng.choice(files + ["manifest.json"] * 3)
    path = folder / rel
    kind = rng.randrange(6)
    if rel.endswith(".npy"):
        a = np.load(path)
        if kind <= 2 and a.size:
            flat = a.reshape(-1).copy()
            vals = [-1, 10**6, 2**31 - 1, len(flat) + 5] if a.dtype.kind in "iu" else [np.nan, np.inf, -1e30, 5.0]
            for _ in range(rng.randint(1, 3)):
                flat[rng.randrange(flat.size)] = rng.choice(vals) if a.dtype.kind != "u" else 255
            a = flat.reshape(a.shape)
        elif kind == 3:
            a = a.astype(rng.choice([np.float64, np.int32, np.float16, np.int8]))
        elif kind == 4:
            a = a.reshape(-1)[: max(0, a.size - rng.randint(1, 3))]
        else:
            a = a[::-1].copy() if a.ndim == 1 else a.T.copy()
        np.save(path, a)
    elif rel.endswith(".json"):
        data = json.loads(path.read_text())
        node, key = data, None
        for _ in range(rng.randint(1, 3)):
            if isinstance(node, dict) and node:
                key = rng.choice(sorted(node))
                if rng.random() < 0.5 and isinstance(node[key], (dict, list)):
                    node = node[key]
                    key = None
                    continue
                break
            if isinstance(node, list) and node:
                key = rng.randrange(len(node))
                break
        value = rng.choice([None, -1, 10**9, "x", [], {}, float("nan"), "../../etc/hostname", {"bytes": 1, "sha256": "0" * 64}])
        if key is not None:
            if rng.random() < 0.2 and isinstance(node, dict):
                del node[key]
            else:
                node[key] = value
        elif isinstance(node, dict):
            node[rng.choice(["../x", "/etc/hostname", "graph/signals/utility.rows.npy", "z"])] = value
        path.write_text(json.dumps(data))
    else:
        data = bytearray(path.read_bytes())
        if kind <= 2 and data:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 3:
            data = data[: rng.randrange(len(data) + 1)]
        else:
            lines = data.split(b"\n")
            rng.shuffle(lines)
            data = b"\n".join(lines)
        path.write_bytes(bytes(data))
    return rel

VALUE_FILES = ["embeddings.npy", "bm25/data.npy", "graph/weights.data.npy", "graph/relations.data.npy",
               "graph/eigenvalues.npy", "graph/signals/semantic.weights.npy", "dense.faiss", "chunks.jsonl"]

def damage_values(folder, rng):
    # one value changed so that it stays finite and the file keeps its shape and dtype: a row or
    # entry scaled, set to an extreme finite value, negated, or (for the graphs) one side of an edge changed
    rel = rng.choice(VALUE_FILES)
    path = folder / rel
    if rel == "chunks.jsonl":
        lines = path.read_text().splitlines()
        i = rng.randrange(len(lines))
        row = json.loads(lines[i])
        row["n_tokens"] = rng.choice([0, -1, row["n_tokens"], row["n_tokens"] + 1])
        lines[i] = json.dumps(row, ensure_ascii=False)
        path.write_text("\n".join(lines) + "\n")
        return rel
    if rel == "dense.faiss":
        raw = bytearray(path.read_bytes())
        at = _FLAT.size + 4 * rng.randrange((len(raw) - _FLAT.size) // 4)
        raw[at : at + 4] = np.float32(rng.choice([0.0, 1.0, -0.5, 1e-3, 1e38])).tobytes()
        path.write_bytes(bytes(raw))
        return rel
    a = np.load(path)
    flat = a.reshape(-1).copy()
    i = rng.randrange(flat.size)
    kind = rng.randrange(4)
    if rel == "embeddings.npy" and kind == 0:
        flat.reshape(a.shape)[i // a.shape[1]] *= rng.choice([0.0, 0.5, 0.98, 0.999, 1.001, 1.5, 1000.0, 1e38])
    elif kind == 1:
        flat[i] = rng.choice([0.0, 1.0, 2.0, 2.5, 1e6, 1e38, -1e-6, 3e-39])
    elif kind == 2:
        flat[i] = -flat[i]
    else:
        flat[i] = flat[i] * rng.choice([0.5, 0.999999, 1.000001, 2.0])
    np.save(path, flat.reshape(a.shape).astype(a.dtype))
    return rel

for case in range(first, first + count):
    rng = random.Random(seed * 1_000_003 + case)
    folder = work / f"c{case}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(base, folder)
    resealed = values or rng.random() < 0.75
    rel = damage_values(folder, rng) if values else damage(folder, rng)
    if resealed:
        reseal(folder)
    holds = not broken_invariants(folder) if values else True
    print(f"start {case} {rel} {int(resealed)}", flush=True)
    try:
        index = load_index(folder)
        outcome = "ok"
        for mode in ("spectral", "hybrid", "bm25"):
            r = Retriever(index, RetrieverConfig(mode=mode, device="cpu"))
            res = r.score_batch(["who designed the bridge?", "harbour"], qvecs=qvecs.clone())
            ids = res.ranking()
            if bool(((ids < -1) | (ids >= len(index))).any()):
                outcome = "wrong"
        if not resealed and outcome == "ok":
            same = all((folder / f).read_bytes() == (base / f).read_bytes() for f in files if (base / f).exists() and (folder / f).exists())
            outcome = "ok" if same else "wrong"
        if not holds:  # loaded although its values break the format
            outcome = "wrong " + rel
    except SpectragError as exc:
        outcome = "refused" if len(str(exc)) <= 1000 else "wrong long error"
    except Exception as exc:
        outcome = "crash " + type(exc).__name__ + ": " + str(exc)[:200].replace("\n", " ")
    if case % 5 == 0:  # `spectrag info` on the same damage: exit 0 or one error line
        from click.testing import CliRunner
        from spectrag.cli import main
        res = CliRunner().invoke(main, ["info", str(folder)])
        lines = res.output.strip().splitlines()
        refused = res.exit_code == 2 and lines and lines[-1].startswith("error: ") and "Traceback" not in res.output
        print(f"cli {case} {'ok' if res.exit_code == 0 else 'refused' if refused else 'traceback'}", flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    print(f"done {case} {outcome}", flush=True)
"""


def run_damaged(tally: Tally, index_dir: Path, n: int, seed: int, *, values: bool = False) -> None:
    """Damaged copies of the index, loaded and queried in worker processes; ``values``: the
    value damage of issue 25 (category "value damage"), else the structural damage of issue 16."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    category = "value damage" if values else "damaged indexes"
    with tempfile.TemporaryDirectory() as tmp:
        case = 0
        while case < n:
            proc = subprocess.run([sys.executable, "-c", WORKER, str(index_dir), tmp, str(case), str(n - case), str(seed),
                                   "values" if values else "structure"],
                                  capture_output=True, text=True, env=env, timeout=3600)
            last_start, done = None, set()
            for line in proc.stdout.splitlines():
                parts = line.split(" ", 2)
                if parts[0] == "start":
                    last_start = (int(parts[1]), parts[2])
                elif parts[0] == "cli":
                    tally.add(category, parts[2], f"spectrag info on case {parts[1]}")
                elif parts[0] == "done":
                    done.add(int(parts[1]))
                    outcome = parts[2]
                    tally.add(category, outcome.split(" ")[0], outcome)
            if proc.returncode != 0:  # a signal (segfault, abort) or a crash outside the guarded call
                if last_start is not None and last_start[0] not in done:
                    tally.add(category, "crash", f"exit {proc.returncode} on case {last_start}: {proc.stderr[-300:]}")
                    case = last_start[0] + 1
                else:
                    tally.add(category, "crash", f"worker exit {proc.returncode}: {proc.stderr[-300:]}")
                    break
            else:
                case = n


# -------------------------------------------------------------------------------------- kills

# a build over an index and an add write a new generation and replace CURRENT last (spectrag.generations);
# the folder swaps (exchange or renames) now only put a new index into a path that holds none
POINTS = {True: ["generation:written", "generation:synced", "generation:current"], False: []}


def run_kills(tally: Tally) -> None:
    from spectrag import load_index
    from spectrag.store import clean_stale

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        base, other, more = (write_corpus(tmp / "base.jsonl", 0, 6), write_corpus(tmp / "other.jsonl", 100, 9),
                             write_corpus(tmp / "more.jsonl", 200, 3))
        subprocess.run([sys.executable, "-c", KILL_WORKER, "build", str(base), str(tmp / "seed"), "0"], env=env, check=True)
        jobs = []
        for exchange in (True, False):
            for point in POINTS[exchange]:
                for mode in ("build", "add"):
                    target = tmp / f"{mode}-{int(exchange)}-{point.replace(':', '_')}" / "idx"
                    target.parent.mkdir()
                    shutil.copytree(tmp / "seed", target)
                    e = {**env, "SPECTRAG_KILL_AT": point, **({} if exchange else {"SPECTRAG_NO_RENAME_EXCHANGE": "1"})}
                    jobs.append((target, f"{mode} {point} exchange={exchange}",
                                 [sys.executable, "-c", KILL_WORKER, mode, str(other if mode == "build" else more), str(target), "1"], e))
        for lo in range(0, len(jobs), 4):  # four at a time
            procs = [(t, what, subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                     for t, what, cmd, e in jobs[lo : lo + 4]]
            for target, what, proc in procs:
                proc.wait(timeout=600)
                try:
                    docs = load_index(target).manifest["counts"]["documents"]
                    clean_stale(target)
                    left = [p.name for p in target.parent.iterdir() if p.name.startswith(".idx.") and p.is_dir()]
                    tally.add("kills", "ok" if docs in (6, 9) and not left else "wrong", f"{what}: {docs} docs, left {left}")
                except SpectragError as exc:
                    tally.add("kills", "wrong", f"{what}: no loadable index after the kill ({exc})")
                except Exception as exc:
                    tally.add("kills", "crash", f"{what}: {type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every category's count (default: 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "fuzz_cpu.md"))
    ap.add_argument("--only", default="", help="comma-separated categories to run (default: all)")
    args = ap.parse_args()

    def blocked(*_):
        raise TimeoutError("a read blocked (signal.alarm ran out)")

    signal.signal(signal.SIGALRM, blocked)
    s = args.scale
    record = new_record("each input once; seeded (--seed), deterministic")
    tally = Tally()
    from spectrag import build_index
    from spectrag.cli.demo import sample_corpus
    from spectrag.config import EmbedConfig, IndexConfig
    from spectrag.generations import current_folder  # the damage goes to the files of the generation served

    with tempfile.TemporaryDirectory() as tmp:
        index_dir = Path(tmp) / "sample"
        build_index(sample_corpus(), index_dir, IndexConfig(embed=EmbedConfig(cache_dir=str(Path(tmp) / "cache"))))
        retriever = []  # made once, for the server categories

        def serving():
            from spectrag.retriever import Retriever

            retriever[:] = retriever or [Retriever(str(index_dir))]
            return retriever[0]

        steps = [("corpus", lambda: run_corpus(tally, int(4500 * s), int(60 * s), args.seed)),
                 ("config", lambda: run_config(tally, int(2000 * s), args.seed)),
                 ("queries", lambda: run_queries(tally, index_dir, int(1200 * s), int(40 * s), args.seed)),
                 ("damaged indexes", lambda: run_damaged(tally, current_folder(index_dir), int(3000 * s), args.seed)),
                 ("value damage", lambda: run_damaged(tally, current_folder(index_dir), int(1000 * s), args.seed,
                                                      values=True)),
                 ("kills", lambda: run_kills(tally)),
                 ("random kills", lambda: run_random_kills(tally, max(int(49 * s), 3), args.seed)),
                 ("concurrent adds", lambda: run_concurrent_adds(tally, max(int(5 * s), 1))),
                 ("request bodies", lambda: run_bodies(tally, serving(), int(400 * s), args.seed)),
                 ("shutdown", lambda: run_shutdowns(tally, serving(), max(int(8 * s), 2), args.seed))]
        only = {c.strip() for c in args.only.split(",") if c.strip()}
        for name, step in steps:
            if only and name not in only:
                continue
            print(f"{name} ...", flush=True)
            step()
            print(f"  {dict(tally.counts.get(name, {}))}", flush=True)
    finish_record(record)
    rows = []
    for category, counts in tally.counts.items():
        rows.append({"category": category, "inputs": sum(counts.values()), **{o: counts.get(o, 0) for o in OUTCOMES}})
    total = {"category": "all", "inputs": sum(r["inputs"] for r in rows), **{o: sum(r[o] for r in rows) for o in OUTCOMES}}
    rows.append(total)
    record.update(rows=rows, examples=tally.examples, details={c: dict(d) for c, d in tally.details.items()})
    lines = results_header("Fuzzing the engine's inputs (issues 16 and 25)", record)
    lines += md_table(rows, [("category", "category", ""), ("inputs", "inputs", "d"), *((o, o, "d") for o in OUTCOMES)])
    goal = all(total[o] == 0 for o in ("crash", "traceback", "wrong", "text lost"))
    lines += ["", f"Goals (0 crashes, 0 tracebacks, 0 wrong results, 0 text lost): {'met' if goal else 'NOT met'}. "
              "*refused* is a SpectragError: one clear message (the CLI's `error:` line); *ok* passed its checks.", ""]
    for category, details in tally.details.items():
        lines += [f"Details ({category}): " + ", ".join(f"{what}: {k}" for what, k in sorted(details.items())) + ".", ""]
    for category, examples in tally.examples.items():
        lines += [f"Examples ({category}):", ""] + [f"- `{e}`" for e in examples] + [""]
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
