"""int8 query vectors (``retriever.embed_backend = "onnx-int8"``): the int8 copy of the ONNX
export is made once, checked against the torch reference (a cosine of at least
``INT8_MIN_COSINE``) and reused; a query's vector is the same alone, in any batch and on any
number of lanes, on the light and the full path; texts longer than the model reads keep the
float32 export's pooled vectors; and the setting is refused where it cannot run."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from conftest import CountingSession, require_embedder, require_modules

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from spectrag.config import EmbedConfig, RetrieverConfig  # noqa: E402
from spectrag.errors import ConfigError  # noqa: E402
from spectrag.index.embed import INT8_MIN_COSINE, INT8_RECIPE, Embedder, down_projections, query_embedder  # noqa: E402
from spectrag.index.query_onnx import LightQueryEmbedder, verified_marker  # noqa: E402
from spectrag.retriever import query_backend  # noqa: E402

QUERIES = ["which railway company kept the line open during the winter of 1907",
           "a", "Who is the spouse of the director of Jump for Glory?",
           "How can I run just that callback on a given URL from the command line to see its output?",
           "  odd   spacing\tand Ünïcødé 東京  ", "word " * 300]  # the last: longer than the model reads
LONG = len(QUERIES) - 1


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    require_embedder()
    require_modules({"onnxruntime": "onnxruntime", "onnx": "onnx"}, "int8 query vectors")
    return tmp_path_factory.mktemp("int8-cache")


def config(cache, threads: int = 2) -> EmbedConfig:
    return EmbedConfig(cache_dir=str(cache), device="cpu", backend="onnx", num_threads=threads)


@pytest.fixture(scope="module")
def full(cache):
    """The full encoder with int8 queries; creating it exports, quantizes and verifies."""
    e = Embedder(config(cache), cache_vectors=False, int8=True)
    yield e
    e.close()


@pytest.fixture(scope="module")
def reference(cache):
    """The torch encoder's query vectors (what the index was built with)."""
    e = Embedder(EmbedConfig(cache_dir=str(cache), device="cpu"), cache_vectors=False)
    yield e.encode_queries(QUERIES)
    e.close()


def int8_export(cache):
    (path,) = (cache / "onnx").glob(f"*-{INT8_RECIPE}.onnx")
    return path


def test_the_int8_copy_is_checked_against_torch_and_marked(full, cache):
    import onnxruntime

    marker = json.loads(verified_marker(int8_export(cache)).read_text())
    assert marker["onnxruntime"] == onnxruntime.__version__
    assert INT8_MIN_COSINE <= marker["min_cosine"] < 0.9999  # quantized: close, not the float32 bits


def test_the_feed_forward_down_projections_stay_float32(full, cache):
    import onnx

    (export,) = [p for p in (cache / "onnx").glob("*.onnx") if INT8_RECIPE not in p.name]
    down = down_projections(export)
    assert len(down) == 6 and all("output/dense" in n and "attention" not in n for n in down), down  # MiniLM-L6
    quantized = onnx.load(str(int8_export(cache)))
    ops = {node.name: node.op_type for node in quantized.graph.node}
    assert all(ops[n] == "MatMul" for n in down)  # left as they were
    assert sum(op == "MatMulInteger" for op in ops.values()) >= 24  # Q, K, V, attention output, up-projection x 6


def test_int8_vectors_are_near_the_reference_and_long_texts_keep_the_float32_vector(full, cache, reference):
    got = full.encode_queries(QUERIES)
    cosine = (got * reference).sum(axis=1)
    assert cosine.min() >= INT8_MIN_COSINE, cosine
    short = np.arange(len(QUERIES)) != LONG
    assert (cosine[short] < 0.9999).all(), "the short queries ran on the float32 model"
    fp32 = Embedder(config(cache), cache_vectors=False)
    try:
        assert np.array_equal(got[LONG], fp32.encode_queries([QUERIES[LONG]])[0])  # pooled windows, float32
    finally:
        fp32.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_query_gets_the_same_bits_alone_in_any_batch_on_either_path(full, cache, threads):
    want = full.encode_queries(QUERIES)
    light = query_embedder(config(cache, threads), int8=True)
    try:
        assert isinstance(light, LightQueryEmbedder), "a verified int8 copy must give the light path"
        assert np.array_equal(light.encode_queries(QUERIES), want)
        assert np.array_equal(light.encode_queries(QUERIES[::-1]), want[::-1])
        for i, q in enumerate(QUERIES):
            assert np.array_equal(light.encode_queries([q])[0], want[i]), f"query {i} alone"
    finally:
        light.close()


def test_the_int8_copy_runs_each_text_alone(full, cache):
    """Dynamic quantization scales a call's activations by the whole call's range, so texts of
    one length are not stacked on the int8 copy as they are on the float32 export."""
    light = query_embedder(config(cache, 1), int8=True)
    texts = ["who founded the railway", "who closed the railway", "who built the railway", "when was the flood"]
    try:
        lengths = [len(x.ids) for x in light.encoder.tokenizer.encode_batch(texts)]
        assert len(set(lengths)) < len(texts), "no length repeats: the case would test nothing"
        light.encoder.session = spy = CountingSession(light.encoder.session)
        light.encode_queries(texts)
        assert sorted(spy.shapes) == sorted((1, n) for n in lengths)
    finally:
        light.close()


def test_the_int8_copy_is_reused_and_a_damaged_one_made_again(full, cache):
    path = int8_export(cache)
    stamp = path.stat().st_mtime_ns
    want = full.encode_queries(QUERIES[:3])
    again = Embedder(config(cache), cache_vectors=False, int8=True)
    try:
        assert path.stat().st_mtime_ns == stamp, "a verified copy was quantized again"
        assert np.array_equal(again.encode_queries(QUERIES[:3]), want)
    finally:
        again.close()
    path.write_bytes(b"not a model")  # damaged after it was verified: the full path quantizes again
    remade = query_embedder(config(cache), int8=True)
    try:
        assert isinstance(remade, Embedder)
        assert np.array_equal(remade.encode_queries(QUERIES[:3]), want)
    finally:
        remade.close()
    light = query_embedder(config(cache), int8=True)
    try:
        assert isinstance(light, LightQueryEmbedder) and np.array_equal(light.encode_queries(QUERIES[:3]), want)
    finally:
        light.close()


def test_the_setting_is_refused_where_it_cannot_run(cache):
    assert RetrieverConfig(embed_backend="onnx-int8").embed_backend == "onnx-int8"
    assert query_backend("onnx-int8", torch.device("cpu")) == "onnx-int8"
    with pytest.raises(ConfigError, match="onnx-int8.*CPU"):
        query_backend("onnx-int8", torch.device("cuda"))
    with pytest.raises(ConfigError, match="onnx-int8.*embed.backend is 'torch'"):
        Embedder(EmbedConfig(cache_dir=str(cache), device="cpu"), cache_vectors=False, int8=True)
    with pytest.raises(ConfigError, match="embed_backend"):
        RetrieverConfig(embed_backend="int8")


def test_a_retriever_embeds_each_query_alone_with_int8(sample_index):
    from spectrag.retriever import Retriever

    questions = ["Which railway company kept the Coastal Line open?", "Who founded it?", "When was the flood?"]
    retriever = Retriever(sample_index, RetrieverConfig(device="cpu", embed_backend="onnx-int8"))
    batch = retriever.embed(questions)
    for i, q in enumerate(questions):
        assert torch.equal(retriever.embed([q])[0], batch[i])
    default = Retriever(sample_index, RetrieverConfig(device="cpu", embed_backend="torch")).embed(questions)
    assert float((batch * default).sum(dim=1).min()) >= INT8_MIN_COSINE
