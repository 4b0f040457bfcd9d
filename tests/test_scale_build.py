"""Large-corpus build helpers held to their plain versions: the chunker's one-window fast path
gives the chunks of the sentence-by-sentence path, the process pool gives the serial result in
order, and the stage meter sees memory a stage allocates."""

from __future__ import annotations

import random

import numpy as np
import pytest

from spectrag.config import PRESETS, ChunkConfig
from spectrag.cli.demo import sample_corpus
from spectrag.index import chunk as chunking
from spectrag.util import usage
from spectrag.types import Document
from spectrag.index.load import load_documents
from spectrag.util.pool import map_blocks, resolve_workers

WORDS = "river bridge town engineer harbour council railway lake island festival ship north".split()


def _documents(seed: int = 0) -> list[Document]:
    """Sample corpus plus short Markdown documents whose sections sit on both sides of the
    fast path's byte limit, with multi-byte text (bytes > characters)."""
    rng = random.Random(seed)
    docs = load_documents(sample_corpus())
    for d in range(40):
        parts = [f"# Doc {d}", ""]
        for s in range(rng.randint(1, 6)):
            words = [rng.choice(WORDS + ["café", "naïve", "東京", "Ωmega"]) for _ in range(rng.randint(2, 60))]
            parts += [f"## Part {s}", "", " ".join(words).capitalize() + ".", ""]
        docs.append(Document(f"d{d}.md", f"Doc {d}", "\n".join(parts), markup="markdown"))
    return docs


@pytest.mark.parametrize("config", [PRESETS["default"], PRESETS["fine"], ChunkConfig(chunk_size=64, overlap=8, min_tokens=4)])
def test_one_window_fast_path_gives_the_same_chunks(config, monkeypatch):
    docs = _documents()
    fast = [chunking.chunk_document(d, config) for d in docs]
    monkeypatch.setattr(chunking, "_one_window", lambda *a: False)
    slow = [chunking.chunk_document(d, config) for d in docs]
    assert fast == slow


def test_chunk_corpus_in_a_pool_equals_serial():
    docs = _documents(1) * 60  # > 2 blocks of 2,048 documents
    serial = chunking.chunk_corpus(docs, ChunkConfig(), workers=1)
    assert chunking.chunk_corpus(docs, ChunkConfig(), workers=2) == serial
    assert serial == [c for d in docs for c in chunking.chunk_document(d, ChunkConfig())]


def test_map_blocks_keeps_order_and_checks_workers():
    data = list(range(103))
    assert map_blocks(lambda lo, hi: [x * 2 for x in data[lo:hi]], len(data), workers=2, block=10) == [x * 2 for x in data]
    assert map_blocks(lambda lo, hi: [], 0, workers=2, block=10) == []
    assert resolve_workers(3, 10) == 3 and resolve_workers(0, 10) == 1
    with pytest.raises(ValueError, match="workers must be an int >= 0"):
        resolve_workers(-1, 10)


def test_stage_meter_sees_what_a_stage_allocates():
    outer = usage.begin()
    inner = usage.begin()
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
    wall, cpu, peak = usage.end(inner)
    del block
    _, _, outer_peak = usage.end(outer)
    assert wall >= 0 and cpu >= 0
    if usage.exact():
        assert peak >= usage.rss_mib() + 48  # the freed block still counts in the stage's peak
    assert outer_peak >= peak  # nested measurements keep the inner peak
