"""The CPU fast path of ``Embedder``: token-budget batches, thread choice and the optional ONNX
Runtime backend give the vectors of plain ``SentenceTransformer.encode``, in the input order,
whatever the batching."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest
from conftest import require_embedder

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from spectrag.config import EmbedConfig  # noqa: E402
from spectrag.errors import ConfigError  # noqa: E402
from spectrag.index.embed import WIDTH_STEP, Embedder, resolve_model_path  # noqa: E402

WORDS = ("the harbour of Vessmark froze in the winter of 1907 while the northern rail authority "
         "kept the line to Skarholt open with three engines and a crew of volunteers").split()
# 21 texts from empty to ~170 tokens, in no length order, with some duplicates
TEXTS = [" ".join(WORDS[: (7 * i) % 26 + 1] * (1 + i % 5)) for i in range(18)] + ["", "Veltra Bridge", "Veltra Bridge"]
ATOL = 1e-5
MIN_COS = 0.9999


def cpu_config(**kw) -> EmbedConfig:
    return EmbedConfig(cache_dir="", device="cpu", **kw)


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    require_embedder()  # the GPU image has no embedder package: skip with the reason
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(resolve_model_path(EmbedConfig().model)), device="cpu")
    return model.encode(TEXTS, batch_size=32, normalize_embeddings=True)


@pytest.fixture(scope="module")
def embedder():
    require_embedder()  # the GPU image has no embedder package: skip with the reason
    e = Embedder(cpu_config())
    yield e
    e.close()


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    assert float((got * want).sum(axis=1).min()) >= MIN_COS


def test_default_encode_equals_sentence_transformers(embedder, reference):
    assert embedder._fast  # the CPU fast path is what runs
    got = embedder.encode(TEXTS)
    assert_close(got, reference)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert embedder.dim == 384 and embedder.model_name == "all-MiniLM-L6-v2"
    assert embedder.last_cache_hits == 0


def test_order_is_preserved(embedder, reference):
    perm = np.random.default_rng(0).permutation(len(TEXTS))
    got = embedder.encode([TEXTS[i] for i in perm])
    assert_close(got, reference[perm])
    # duplicates in the input get the same vector, and one text alone gives its row
    np.testing.assert_allclose(got[list(perm).index(19)], got[list(perm).index(20)], atol=ATOL)
    assert_close(embedder.encode([TEXTS[5]]), reference[5:6])


@pytest.mark.parametrize("batch_size, max_batch_tokens", [(1, 2048), (3, 0), (64, 0), (64, 40), (7, 256)])
def test_batching_does_not_change_vectors(reference, batch_size, max_batch_tokens):
    e = Embedder(cpu_config(batch_size=batch_size, max_batch_tokens=max_batch_tokens, num_threads=1))
    try:
        assert_close(e.encode(TEXTS), reference)
    finally:
        e.close()


def test_batches_respect_token_budget_and_cover_every_row(embedder):
    import dataclasses

    e = embedder
    saved = e.config
    e.config = dataclasses.replace(saved, max_batch_tokens=64, batch_size=5)
    try:
        features = e._preprocess(TEXTS)
        lengths = features["attention_mask"].sum(1).numpy()
        seen = []
        for rows, batch, tokens in e._batches(features, len(TEXTS)):
            width = int(batch["input_ids"].shape[1])
            # one width per batch: each row's token count rounded up to WIDTH_STEP
            assert all(width == max(WIDTH_STEP, -(-int(n) // WIDTH_STEP) * WIDTH_STEP) for n in lengths[rows])
            assert batch["input_ids"].shape == (len(rows), width) and tokens == len(rows) * width
            assert len(rows) <= 5 and (tokens <= 64 or len(rows) == 1)
            seen.extend(rows.tolist())
        assert sorted(seen) == list(range(len(TEXTS)))
    finally:
        e.config = saved


def test_thread_count_is_restored(embedder):
    """The embedder picks its thread count per batch (spectrag.util.threads, tested there) and
    leaves torch's setting as it found it."""
    import torch

    before = torch.get_num_threads()
    embedder.encode(TEXTS[:4])
    assert torch.get_num_threads() == before


def test_empty_input(embedder):
    assert embedder.encode([]).shape == (0, 384)


def test_config_rejects_bad_values():
    for bad in ({"backend": "tensorrt"}, {"max_batch_tokens": -1}, {"num_threads": -2}):
        with pytest.raises(ConfigError):
            EmbedConfig(**bad)


def test_onnx_backend_without_onnxruntime_names_the_install_command(monkeypatch):
    require_embedder()  # the model path comes from the embedder package
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    with pytest.raises(ImportError, match="pip install onnxruntime onnx"):
        Embedder(cpu_config(backend="onnx"))


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None,
    reason="onnxruntime / onnx not installed (optional: pip install onnxruntime onnx)",
)
def test_onnx_backend_equals_torch(reference, tmp_path):
    e = Embedder(EmbedConfig(cache_dir=str(tmp_path), device="cpu", backend="onnx"))
    try:
        assert e._ort is not None
        assert_close(e.encode(TEXTS), reference)
    finally:
        e.close()
    (exported,) = (tmp_path / "onnx").glob("*.onnx")  # exported once into the cache folder...
    stamp = exported.stat().st_mtime_ns
    again = Embedder(EmbedConfig(cache_dir=str(tmp_path), device="cpu", backend="onnx", batch_size=3))
    try:  # ...and reused by the next embedder
        assert exported.stat().st_mtime_ns == stamp
        assert_close(again._encode_uncached(TEXTS, False), reference)
    finally:
        again.close()


def test_encode_is_its_windows_each_embedded_alone(embedder, monkeypatch):
    """``encode`` embeds uncached texts window by window (what a distributed build farms out to
    its actors): equal, bit for bit, to ``encode_window`` on each of ``Embedder.windows``."""
    monkeypatch.setattr(Embedder, "_WINDOW", 5)
    texts = TEXTS[:13]
    assert Embedder.windows(len(texts)) == [(0, 5), (5, 10), (10, 13)]
    want = np.concatenate([embedder.encode_window(texts[lo:hi]) for lo, hi in Embedder.windows(len(texts))])
    np.testing.assert_array_equal(embedder.encode(texts), want)
    with pytest.raises(ValueError, match="at most 5 texts"):
        embedder.encode_window(texts)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_vector_is_a_function_of_its_text_alone(embedder, threads):
    """Batch invariance (README "Batch invariance"): a text gets the same vector, bit for bit,
    alone or among any companions, in any batch size and thread count."""
    import torch

    alone = np.concatenate([embedder.encode_window([t]) for t in TEXTS])
    rng = np.random.default_rng(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for batch_size in (2, 5, len(TEXTS)):
            e = Embedder(cpu_config(batch_size=batch_size, num_threads=threads))
            try:
                perm = rng.permutation(len(TEXTS))
                np.testing.assert_array_equal(e.encode([TEXTS[i] for i in perm]), alone[perm])
            finally:
                e.close()
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None,
    reason="onnxruntime / onnx not installed (optional: pip install onnxruntime onnx)",
)
def test_onnx_query_vectors_are_the_same_alone_and_in_any_batch(reference, tmp_path):
    """``encode_queries`` with ONNX Runtime runs each text alone at its own length: a query's
    vector is the same, bit for bit, alone, in any batch, at any thread count, and close to
    torch's; without a vector cache the export is still kept in the cache folder."""
    e = Embedder(EmbedConfig(cache_dir=str(tmp_path), device="cpu", backend="onnx", num_threads=2),
                 cache_vectors=False)  # two intra-op threads
    one = Embedder(EmbedConfig(cache_dir=str(tmp_path), device="cpu", backend="onnx", num_threads=1),
                   cache_vectors=False)  # the same at one thread
    try:
        assert e.cache is None and len(list((tmp_path / "onnx").glob("*.onnx"))) == 1
        alone = np.stack([e.encode_queries([t])[0] for t in TEXTS])
        assert_close(alone, reference)
        np.testing.assert_array_equal(e.encode_queries(TEXTS), alone)
        np.testing.assert_array_equal(e.encode_queries(TEXTS[::-1] + TEXTS[:4])[: len(TEXTS)], alone[::-1])
        np.testing.assert_array_equal(one.encode_queries(TEXTS[5:9]), alone[5:9])
        np.testing.assert_array_equal(one.encode_queries(TEXTS), alone)
        padded = e.encode(TEXTS)  # the batch recipe pads to widths of 8: not the same bits for every text
        assert_close(padded, alone)
    finally:
        e.close()
        one.close()


CHILD_MKL = """
import os, sys
import torch
import spectrag
from spectrag.index.embed import check_row_invariance, reproducible_products
before = os.environ.get("MKL_CBWR")
reproducible_products()  # as an Embedder does first
model = torch.nn.Sequential(torch.nn.Linear(384, 1536), torch.nn.Linear(1536, 384))
print(before, os.environ.get("MKL_CBWR"), check_row_invariance(model))
"""


@pytest.mark.parametrize("given", [None, "AUTO,STRICT"])
def test_embedders_make_matrix_rows_independent_of_their_batch(given):
    """An embedder asks for MKL's strict mode before the process's first product (``import
    spectrag`` alone does not: a server keeps MKL's faster paths), under which a row's product
    has the same bits whatever the row count: on AVX-512 CPUs the default paths differ with it
    (bench/results/embed_invariance_cpu.md), which broke the embeddings' batch invariance. An
    explicit ``MKL_CBWR`` is kept."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if given is not None:
        env["MKL_CBWR"] = given
    out = subprocess.run([sys.executable, "-c", CHILD_MKL], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(given), "AUTO,STRICT", "True"]
