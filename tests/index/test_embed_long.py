"""Texts longer than the embedding model reads (all-MiniLM-L6-v2: 256 wordpieces) are embedded
whole: cut into consecutive pieces that each fit, embedded, pooled (token-weighted mean,
renormalized); ``embed.long_texts = "truncate"`` keeps the model's own cut. The manifest records
which, and a truncating build says so in a log line naming the setting."""

from __future__ import annotations

import logging
import os
import re

import numpy as np
import pytest
from conftest import require_embedder

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from spectrag.config import EmbedConfig  # noqa: E402
from spectrag.index.embed import Embedder, resolve_model_path  # noqa: E402

SENTENCES = [f"Pier {i} of the Veltra Bridge carries lantern number {3 * i + 1} and a toll gate." for i in range(60)]
LONG = " ".join(SENTENCES)  # ~1,200 wordpieces
SHORT = "The Veltra Bridge toll gate."


@pytest.fixture(scope="module")
def model():
    require_embedder()  # the GPU image has no embedder package: skip with the reason
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(resolve_model_path(EmbedConfig().model)), device="cpu")


@pytest.fixture(scope="module")
def embedder():
    require_embedder()  # the GPU image has no embedder package: skip with the reason
    e = Embedder(EmbedConfig(cache_dir="", device="cpu"))
    yield e
    e.close()


def test_pieces_cover_the_text_and_each_fits(embedder):
    assert embedder.max_input_tokens == 256
    pieces, owner, weight = embedder.pieces([SHORT, LONG])
    assert pieces[0] == SHORT and owner.tolist()[0] == 0 and len(pieces) > 4
    tok = embedder.model.tokenizer
    long_pieces = [p for p, o in zip(pieces, owner) if o == 1]
    assert re.sub(r"\s", "", "".join(long_pieces)) == re.sub(r"\s", "", LONG)  # nothing lost, nothing repeated
    for p, w in zip(long_pieces, weight[owner == 1]):
        assert len(tok(p)["input_ids"]) <= embedder.max_input_tokens  # each piece read whole
        assert abs(len(tok(p, add_special_tokens=False)["input_ids"]) - w) <= 2  # weight: its wordpieces
    assert embedder.long_texts([SHORT, LONG, SHORT]) == [1]


def test_a_long_text_is_the_pooled_vector_of_its_pieces(embedder, model):
    pieces, owner, weight = embedder.pieces([SHORT, LONG])
    ref = model.encode(pieces, normalize_embeddings=True).astype(np.float64)  # the model on each piece
    want_long = (ref[owner == 1] * weight[owner == 1, None]).sum(axis=0)
    want_long /= np.linalg.norm(want_long)
    got = embedder.encode([SHORT, LONG])
    assert embedder.last_long == 1
    np.testing.assert_allclose(got[1], want_long, atol=1e-5)
    np.testing.assert_allclose(got[0], ref[0], atol=1e-5)  # a text that fits: the model's own vector
    truncated = model.encode([LONG], normalize_embeddings=True)[0]
    assert float(got[1] @ truncated) < 0.999  # pooling read more than the first window


def test_truncate_keeps_the_models_cut(model):
    e = Embedder(EmbedConfig(cache_dir="", device="cpu", long_texts="truncate"))
    try:
        got = e.encode([SHORT, LONG])
        assert e.last_long == 1
        np.testing.assert_allclose(got, model.encode([SHORT, LONG], normalize_embeddings=True), atol=1e-5)
    finally:
        e.close()


def test_the_cache_keeps_pooled_and_truncated_vectors_apart(tmp_path, embedder):
    pooled = embedder.encode([SHORT, LONG])
    trunc = Embedder(EmbedConfig(cache_dir=str(tmp_path), device="cpu", long_texts="truncate"))
    pool = Embedder(EmbedConfig(cache_dir=str(tmp_path), device="cpu"))
    try:
        first = trunc.encode([SHORT, LONG])
        second = pool.encode([SHORT, LONG])
        assert pool.last_cache_hits == 1  # the short text is shared, the long one has its own key
        np.testing.assert_allclose(second, pooled, atol=1e-6)
        assert float(first[1] @ second[1]) < 0.999
    finally:
        trunc.close()
        pool.close()


def test_the_manifest_records_long_chunks_and_a_truncating_build_says_so(tmp_path, caplog):
    from spectrag.build import build_index
    from spectrag.config import ChunkConfig, EmbedConfig, GraphConfig, IndexConfig

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "bridge.md").write_text("# Veltra Bridge\n\n" + LONG + "\n\n## Tolls\n\n" + SHORT + "\n")
    base = dict(chunk=ChunkConfig(chunk_size=1200, overlap=0), graph=GraphConfig(enabled=False))
    pooled = build_index(tmp_path / "corpus", tmp_path / "pooled", IndexConfig(**base, embed=EmbedConfig(cache_dir="")))
    emb = pooled.manifest["embedding"]
    assert emb["max_input_tokens"] == 256 and emb["chunks_over_input"] == 1 and emb["long_chunks"] == "pooled"
    assert pooled.report.notes == []
    with caplog.at_level(logging.WARNING, logger="spectrag"):
        cut = build_index(tmp_path / "corpus", tmp_path / "cut",
                          IndexConfig(**base, embed=EmbedConfig(cache_dir="", long_texts="truncate")))
    assert cut.manifest["embedding"]["long_chunks"] == "truncated"
    (note,) = cut.report.notes
    assert "embed.long_texts" in note and "chunk.chunk_size" in note
    assert f"1 of {len(cut.chunks)} chunks" in note
    assert note in caplog.text
