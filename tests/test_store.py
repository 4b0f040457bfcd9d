"""Reading an index back (spectrag.store): a round trip gives identical search results, and a
corrupt, truncated or missing file, a wrong format version or a broken manifest is refused with
the file named."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from spectrag import load_index
from spectrag.errors import IndexFormatError
from spectrag.store import MANIFEST

QUESTIONS = ["In which town was the designer of the Veltra Bridge born?", "Who founded the Greywater Shipping Company?"]


def test_round_trip_gives_identical_results(sample_index):
    again = load_index(sample_index.path)
    assert again.chunks == sample_index.chunks
    np.testing.assert_array_equal(np.asarray(again.embeddings), np.asarray(sample_index.embeddings))
    for a, b in zip(again.bm25_search(QUESTIONS, 8), sample_index.bm25_search(QUESTIONS, 8)):
        np.testing.assert_array_equal(a, b)
    xq = sample_index.embed_queries(QUESTIONS)
    for a, b in zip(again.dense_search(xq, 8), sample_index.dense_search(xq, 8)):
        np.testing.assert_array_equal(a, b)


def test_corrupt_file_is_detected(index_copy):
    emb = index_copy / "embeddings.npy"
    data = bytearray(emb.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    emb.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="embeddings.npy is corrupt"):
        load_index(index_copy)


def test_truncated_and_missing_files_are_detected(index_copy, sample_index):
    (index_copy / "dense.faiss").unlink()
    with pytest.raises(IndexFormatError, match="dense.faiss listed in the manifest is missing"):
        load_index(index_copy)
    shutil.copy(sample_index.path / "dense.faiss", index_copy / "dense.faiss")
    (index_copy / "chunks.jsonl").write_text("")
    with pytest.raises(IndexFormatError, match="chunks.jsonl has 0 bytes"):
        load_index(index_copy, verify=False)


def test_version_and_manifest_problems(index_copy, tmp_path):
    manifest = json.loads((index_copy / MANIFEST).read_text())
    manifest["format_version"] = 99
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="format version 99, this engine reads version 1"):
        load_index(index_copy)
    (index_copy / MANIFEST).write_text("{not json")
    with pytest.raises(IndexFormatError, match="corrupt manifest"):
        load_index(index_copy)
    (index_copy / MANIFEST).unlink()
    with pytest.raises(IndexFormatError, match="not a SpectRAG index"):
        load_index(index_copy)
    with pytest.raises(IndexFormatError, match="no such index folder"):
        load_index(tmp_path / "missing")
