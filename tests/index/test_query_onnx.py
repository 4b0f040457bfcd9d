"""The light ONNX query path (spectrag.index.query_onnx): the same token ids and the same vector
bits as the full encoder's ONNX path (which runs the same OnnxQueryEncoder: these tests hold the
two products' paths together), each vector the bits of sentence-transformers' own tokenizer and
pooling modules on the same model run (the independent reference), a query's vector the same
alone and in any batch, and a cold start that never imports sentence-transformers once the
export is verified."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import CountingSession, forked_result, require_embedder, require_modules

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from spectrag.config import EmbedConfig  # noqa: E402
from spectrag.index.embed import Embedder, query_embedder, resolve_model_path  # noqa: E402
from spectrag.index.query_onnx import LightQueryEmbedder, model_plan, verified_marker  # noqa: E402

WORDS = ("which railway company kept the line from Vessmark to Skarholt open during the winter "
         "of 1907 and who founded it").split()
# 16 to ~300 wordpieces, odd whitespace and scripts, and texts around the model's 256-token window
TEXTS = ([" ".join(WORDS[: 3 + (5 * i) % 19]) for i in range(14)]
         + ["  leading and trailing spaces  ", "tab\tand\nnewline", "Ünïcødé façade, naïve 東京の橋 😀", "a", "?",
            "word " * 249, "word " * 251, "word " * 400])


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    require_embedder()
    require_modules({"onnxruntime": "onnxruntime", "onnx": "onnx"}, "the ONNX query path")
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def full(cache):
    """The full encoder on ONNX Runtime; creating it exports the model and marks it verified."""
    e = Embedder(EmbedConfig(cache_dir=str(cache), device="cpu", backend="onnx", num_threads=2), cache_vectors=False)
    yield e
    e.close()


def light(cache, **kw) -> LightQueryEmbedder:
    got = query_embedder(EmbedConfig(cache_dir=str(cache), device="cpu", backend="onnx", **kw))
    assert isinstance(got, LightQueryEmbedder), "a verified export must give the light path"
    return got


def test_the_export_is_marked_verified_under_this_runtime(full, cache):
    import onnxruntime

    (export,) = (cache / "onnx").glob("*.onnx")
    marker = json.loads(verified_marker(export).read_text())
    assert marker["onnxruntime"] == onnxruntime.__version__ and marker["min_cosine"] >= 0.9999


def test_token_ids_equal_the_full_encoders(full, cache):
    """The tokenizers library with the model's settings (stripping, truncation at 256, the
    [CLS]/[SEP] template) gives sentence-transformers' ids for every text."""
    encoder = light(cache).encoder
    features = full._preprocess(TEXTS)
    for i, encoding in enumerate(encoder.tokenizer.encode_batch([t.strip() for t in TEXTS])):
        n = int(features["attention_mask"][i].sum())
        assert features["input_ids"][i][:n].tolist() == encoding.ids, repr(TEXTS[i][:40])


@pytest.mark.parametrize("long_texts", ["pool", "truncate"])
def test_vectors_are_the_full_encoders_bits_alone_and_in_any_batch(cache, full, long_texts):
    e = light(cache, long_texts=long_texts)
    ref = Embedder(EmbedConfig(cache_dir=str(cache), device="cpu", backend="onnx", long_texts=long_texts),
                   cache_vectors=False)
    try:
        want = ref.encode_queries(TEXTS)
        np.testing.assert_array_equal(e.encode_queries(TEXTS), want)
        alone = np.stack([e.encode_queries([t])[0] for t in TEXTS])
        np.testing.assert_array_equal(alone, want)
        np.testing.assert_array_equal(e.encode_queries(TEXTS[::-1] + TEXTS[:3])[: len(TEXTS)], want[::-1])
        # long texts: the pooled windows only with "pool", and then through the full encoder
        assert (e._full is not None) == (long_texts == "pool")
    finally:
        e.close()
        ref.close()


def test_each_vector_is_sentence_transformers_pooling_of_its_own_model_run(cache, full):
    """An independent reference for the tokenizing, pooling and normalizing the light encoder
    does itself: each text tokenized by sentence-transformers' tokenizer, run alone on the same
    ONNX session, then pooled and normalized by the model's own sentence-transformers modules
    (``Embedder._pooled``). The light encoder's vector of the text, alone and in the batch, has
    those bits."""
    import torch

    e = light(cache)
    try:
        batch, long = e.encoder.encode(TEXTS)
        short = [i for i in range(len(TEXTS)) if i not in long]
        assert len(short) >= len(TEXTS) - 3  # the 251- and 400-word texts are the long ones
        for i in short:
            features = full._preprocess([TEXTS[i]])
            feed = {name: features[name].numpy() for name in full._ort_inputs}
            with torch.inference_mode():
                want = full._pooled(dict(features), full._ort.run(None, feed)[0])[0]
            np.testing.assert_array_equal(e.encoder.encode([TEXTS[i]])[0][0], want, err_msg=repr(TEXTS[i][:40]))
            np.testing.assert_array_equal(batch[i], want, err_msg=repr(TEXTS[i][:40]))
    finally:
        e.close()


def test_vectors_agree_with_the_torch_reference(cache, full):
    torch_vectors = Embedder(EmbedConfig(cache_dir="", device="cpu"), cache_vectors=False).encode_queries(TEXTS)
    got = light(cache).encode_queries(TEXTS)
    assert float((got * torch_vectors).sum(axis=1).min()) >= 0.99999


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_lanes_and_threads_do_not_move_a_vector(cache, full, threads):
    """Each text runs at its own length: on ``threads`` lanes of one intra-op thread each
    (the light path) or one text at a time on the full encoder's two-thread session, alone or
    in any batch, a query's vector has the same bits."""
    e = light(cache, num_threads=threads)
    try:
        assert e.encoder.lanes == threads and e.encoder.session.get_session_options().intra_op_num_threads == 1
        want = full.encode_queries(TEXTS)
        np.testing.assert_array_equal(e.encode_queries(TEXTS), want)
        np.testing.assert_array_equal(e.encode_queries(TEXTS[3:9])[::-1], want[3:9][::-1])
        np.testing.assert_array_equal(np.stack([e.encode_queries([t])[0] for t in TEXTS[:6]]), want[:6])
    finally:
        e.close()
    assert e.encoder._pool is None  # closed with the embedder


def test_lanes_take_the_largest_calls_first(cache, full):
    """Largest calls first, so the lanes finish together; each row still lands at its text's place."""
    e = light(cache, num_threads=2)
    lengths = [len(x.ids) for x in e.encoder.tokenizer.encode_batch([t.strip() for t in TEXTS[:8]])]
    seen = []

    class InOrder:  # the lanes' pool, run in the calling thread so that the order is observable
        def map(self, fn, items):
            return [fn(rows) for rows in items if not seen.append(sum(lengths[i] for i in rows))]

    e.encoder._pool, e.encoder._pool_pid = InOrder(), os.getpid()
    try:
        got = e.encode_queries(TEXTS[:8])
        e.encoder._pool = None
        assert seen == sorted(seen, reverse=True) and len(set(seen)) > 1
        np.testing.assert_array_equal(got, full.encode_queries(TEXTS[:8]))
    finally:
        e.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_texts_of_one_length_share_a_call_and_keep_their_bits(cache, full, threads):
    """Texts of one token length run stacked in one call ``[n, L]`` (cut in parts for the
    lanes), every other text in calls of its own length, never padded; each row is its text's
    bits alone, as the full encoder gives them."""
    e = light(cache, num_threads=threads)
    texts = [" ".join(WORDS[k : k + 6]) for k in range(len(WORDS) - 6)] + TEXTS[:10]
    lengths = [len(x.ids) for x in e.encoder.tokenizer.encode_batch(texts)]
    counts = Counter(lengths)
    assert max(counts.values()) >= 4, "no length repeats: the case would test nothing"
    e.encoder.session = spy = CountingSession(e.encoder.session)
    try:
        got = e.encode_queries(texts)
        alone = np.stack([e.encode_queries([t])[0] for t in texts])
    finally:
        e.close()
    calls = spy.shapes[: len(spy.shapes) - len(texts)]  # the batch's calls, before the ones alone
    assert sum(n * width for n, width in calls) == sum(lengths)  # never padded
    assert sum(n for n, _ in calls) == len(texts) and {width for _, width in calls} == set(counts)
    if threads == 1:  # one call per length
        assert sorted(calls) == sorted((n, width) for width, n in counts.items())
    else:
        assert len(calls) < len(texts)
    np.testing.assert_array_equal(got, alone)
    np.testing.assert_array_equal(got, full.encode_queries(texts))


def test_the_calls_share_the_tokens_among_the_lanes():
    from types import SimpleNamespace

    from spectrag.index.query_onnx import MAX_CALL_TOKENS, OnnxQueryEncoder

    lengths = [5, 3, 5, 5, 5, 5, 5, 5, 5]
    two = OnnxQueryEncoder.calls(SimpleNamespace(stack=True, lanes=2), lengths)
    assert two == [[0, 2, 3, 4], [5, 6, 7, 8], [1]]  # 40 tokens of length 5 in two parts, largest first
    assert OnnxQueryEncoder.calls(SimpleNamespace(stack=True, lanes=1), lengths) == [[0, 2, 3, 4, 5, 6, 7, 8], [1]]
    alone = OnnxQueryEncoder.calls(SimpleNamespace(stack=False, lanes=2), [3, 7, 5])
    assert alone == [[1], [2], [0]]  # each text alone, longest first
    assert OnnxQueryEncoder.calls(SimpleNamespace(stack=True, lanes=2), []) == []
    # long texts: at most MAX_CALL_TOKENS tokens a call (its attention scores grow with n L^2)
    long = OnnxQueryEncoder.calls(SimpleNamespace(stack=True, lanes=1), [256] * 20 + [MAX_CALL_TOKENS + 1])
    assert sorted(len(rows) for rows in long) == [1, 6, 7, 7] and [20] in long  # the over-long text alone
    stacked = [r for r in long if r != [20]]
    assert all(256 * len(r) <= MAX_CALL_TOKENS for r in stacked) and sorted(sum(stacked, [])) == list(range(20))


def _encode_in_child(queue, embedder) -> None:
    queue.put(embedder.encode_queries(TEXTS[:6]))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_encodes_on_lanes_of_its_own(cache, full):
    """The lanes' threads do not survive a fork: a child process makes its own and gets the
    parent's bits, instead of waiting forever on the parent's pool."""
    e = light(cache, num_threads=2)
    try:
        want = e.encode_queries(TEXTS[:6])  # the parent's pool exists
        np.testing.assert_array_equal(forked_result(_encode_in_child, e), want)
    finally:
        e.close()


def test_an_unverified_or_foreign_export_takes_the_full_path(cache, full, tmp_path):
    folder = tmp_path / "c"
    shutil.copytree(cache, folder)
    (export,) = (folder / "onnx").glob("*.onnx")
    marker = verified_marker(export)
    marker.write_text(json.dumps({"onnxruntime": "0.0.1", "min_cosine": 1.0}))
    config = EmbedConfig(cache_dir=str(folder), device="cpu", backend="onnx")
    first = query_embedder(config)
    try:
        assert isinstance(first, Embedder)  # checked again against torch, and marked for this runtime
        assert isinstance(query_embedder(config), LightQueryEmbedder)
    finally:
        first.close()
    marker.unlink()
    again = query_embedder(config)
    assert isinstance(again, Embedder)
    again.close()


def test_a_verified_export_damaged_afterwards_is_exported_again(cache, full, tmp_path):
    folder = tmp_path / "c"
    shutil.copytree(cache, folder)
    (export,) = (folder / "onnx").glob("*.onnx")
    want = full.encode_queries(TEXTS[:4])
    export.write_bytes(b"not a model")  # its marker still says verified under this runtime
    config = EmbedConfig(cache_dir=str(folder), device="cpu", backend="onnx")
    first = query_embedder(config)
    try:
        assert isinstance(first, Embedder) and np.array_equal(first.encode_queries(TEXTS[:4]), want)
    finally:
        first.close()
    light_again = query_embedder(config)
    try:
        assert isinstance(light_again, LightQueryEmbedder) and np.array_equal(light_again.encode_queries(TEXTS[:4]), want)
    finally:
        light_again.close()


@pytest.mark.parametrize("change", ["lowercase", "max_pooling", "no_tokenizer_json", "extra_module"])
def test_models_of_other_shapes_are_left_to_the_full_encoder(tmp_path, change):
    require_embedder()
    folder = tmp_path / "model"
    shutil.copytree(resolve_model_path(EmbedConfig().model), folder)
    if change == "lowercase":
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": True}))
    elif change == "max_pooling":
        config = json.loads((folder / "1_Pooling" / "config.json").read_text())
        config.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(config))
    elif change == "no_tokenizer_json":
        (folder / "tokenizer.json").unlink()
    else:
        modules = json.loads((folder / "modules.json").read_text())
        modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
        (folder / "modules.json").write_text(json.dumps(modules))
    assert model_plan(folder) is None
    assert model_plan(resolve_model_path(EmbedConfig().model)) is not None


def test_a_cold_first_query_never_imports_sentence_transformers(cache, full, tmp_path):
    """With the export verified, a fresh Python embeds queries with tokenizers and ONNX Runtime
    alone, and gets the same bits."""
    want = light(cache).encode_queries(TEXTS[:6])
    np.save(tmp_path / "want.npy", want)
    code = (
        "import sys, json, numpy as np\n"
        "from spectrag.config import EmbedConfig\n"
        "from spectrag.index.embed import query_embedder\n"
        f"e = query_embedder(EmbedConfig(cache_dir={str(cache)!r}, device='cpu', backend='onnx'))\n"
        f"got = e.encode_queries({TEXTS[:6]!r})\n"
        f"assert np.array_equal(got, np.load({str(tmp_path / 'want.npy')!r}))\n"
        "print(json.dumps(sorted(m for m in ('sentence_transformers', 'transformers', 'sklearn') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
