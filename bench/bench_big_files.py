"""Big single-file corpora: time per stage and peak memory of indexing one 5 .. 50 MB Markdown
file and one 3 .. 30 MB text file, and the corpus embedding's rate and memory on a slice
(results: ``results/big_files_cpu.md``).

The files are made from real passages (2wiki-dev and MuSiQue in ``../shared/data``), drawn at
random (seed 0), half of them with their words shuffled so the text is varied: Markdown with a
``##`` heading every five passages, text with a line break every seventh passage and nothing
else. Each step runs in its own process so that its peak RSS is its own::

    python bench/bench_big_files.py gen md 50 /tmp/big50.md      # write a corpus file
    python bench/bench_big_files.py build /tmp/big50.md /tmp/idx  # index it, random unit vectors supplied
    python bench/bench_big_files.py embed /tmp/big5.md 1024       # embed its first 1,024 chunks with the model
    python bench/bench_big_files.py offsets /tmp/big5.md window   # RSS of finding long chunks (window | all)

``build`` supplies random unit vectors instead of running the model (the model's rate on this
CPU would make a 50 MB file take hours), so it measures every other stage at full size: load,
chunk, BM25, the graph signal by signal, the dense index and the write; the manifest's per-stage
wall and CPU seconds and peak RSS are printed. ``embed`` measures the model on a slice: chunks
per wall and per CPU second after a warm-up, and the RSS it adds. Wall seconds on a shared
machine mostly measure the other tenants: compare CPU seconds.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _hwm_mib() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM")) / 1024


def gen(kind: str, mb: float, out: Path) -> None:
    passages = []
    for f in [DATA / "2wiki-dev" / "2wikimultihopqa_corpus.json", *sorted((DATA / "musique").glob("*corpus*.json"))]:
        passages += [(r["title"], r["text"]) for r in json.loads(f.read_text())]
    rng = random.Random(0)
    target, size, parts, i = int(mb * 1e6), 0, [], 0
    while size < target:
        title, text = passages[rng.randrange(len(passages))]
        words = text.split()
        if rng.random() < 0.5:
            rng.shuffle(words)
        text = " ".join(words)
        piece = ((f"## {title} {i}\n\n" if i % 5 == 0 else "") + text + "\n\n") if kind == "md" else \
            text + (" " if i % 7 else "\n")
        parts.append(piece)
        size += len(piece)
        i += 1
    out.write_text(("# Big document\n\n" if kind == "md" else "") + "".join(parts), encoding="utf-8")
    print(out, out.stat().st_size, "bytes")


def build(src: str, out: str) -> None:
    import numpy as np

    from spectrag.build import build_index
    from spectrag.config import IndexConfig
    from spectrag.index.chunk import chunk_documents
    from spectrag.index.load import iter_documents
    from spectrag.util.console import configure_logging

    configure_logging("info")  # the stage lines and the progress lines of a log
    config = IndexConfig()
    n = sum(1 for _ in chunk_documents(iter_documents(src), config.chunk))  # counted, not kept
    vectors = np.random.default_rng(0).standard_normal((n, 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    load = os.getloadavg()
    m = build_index(src, out, config, overwrite=True, embeddings=vectors, progress=True).manifest
    print(json.dumps({"chunks": n, "wall": m["seconds"], "cpu": m["cpu_seconds"], "peak_rss_mib": m["memory"]["peak_rss_mib"],
                      "graph_cpu": m["graph"].get("cpu_seconds"), "graph_peak_rss_mib": m["graph"].get("peak_rss_mib"),
                      "load_average": [load, os.getloadavg()]}))


def _texts(src: str, n: int | None = None) -> list[str]:
    from spectrag.build import embedding_text
    from spectrag.config import IndexConfig
    from spectrag.index.chunk import chunk_corpus
    from spectrag.index.load import iter_documents

    chunks = chunk_corpus(list(iter_documents(src)), IndexConfig().chunk)
    return [embedding_text(c, True) for c in chunks[:n]]


def embed(src: str, n: int) -> None:
    import torch

    from spectrag.config import EmbedConfig
    from spectrag.index.embed import Embedder

    texts = _texts(src, n)
    model = Embedder(EmbedConfig(cache_dir=""))
    model.encode(texts[:64])  # warm-up
    base, t, c = _hwm_mib(), time.perf_counter(), time.process_time()
    model.encode(texts)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(f"{len(texts)} chunks: wall {wall:.1f} s ({len(texts) / wall:.1f} chunks/s), cpu {cpu:.1f} s "
          f"({len(texts) / cpu:.1f} chunks per CPU-s), threads {torch.get_num_threads()}, peak RSS {base:.0f} -> "
          f"{_hwm_mib():.0f} MiB, load {os.getloadavg()}")


def offsets(src: str, how: str) -> None:
    from spectrag.config import EmbedConfig
    from spectrag.index.embed import Embedder

    texts = _texts(src)
    model = Embedder(EmbedConfig(cache_dir=""))
    base, c = _hwm_mib(), time.process_time()
    if how == "all":  # what Embedder.lookup did before: the wordpiece offsets of every chunk at once
        n = len(model.long_texts(texts))
    else:
        n = sum(len(model.long_texts(texts[lo:hi])) for lo, hi in model.windows(len(texts)))
    print(f"{how}: {len(texts)} texts, {n} long; peak RSS {base:.0f} -> {_hwm_mib():.0f} MiB, "
          f"cpu {time.process_time() - c:.1f} s")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import ensure_spectrag

    ensure_spectrag()
    step, *args = sys.argv[1:]
    {"gen": lambda: gen(args[0], float(args[1]), Path(args[2])), "build": lambda: build(args[0], args[1]),
     "embed": lambda: embed(args[0], int(args[1])), "offsets": lambda: offsets(args[0], args[1])}[step]()
