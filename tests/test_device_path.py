"""The device path of spectrag.pipeline.run (``backend = "torch"``, what runs on a GPU, here on
the CPU): the same rankings, scores and selections as the compiled CPU kernels, and a fixed
number of host synchronizations per batch (spectrag.util.syncs.SyncCounter around the whole
batch: every ``.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()``, ``nonzero``, boolean-mask
index and data-sized op), the same for a batch of 8 and of 256 of the same queries, and no
stage copying a tensor to the host."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import assert_same_results
from test_pipeline import DIM, N_TOPICS, write_corpus

from spectrag import pipeline
from spectrag.config import EmbedConfig, IndexConfig, RetrieverConfig
from spectrag.index.dense import DenseIndex
from spectrag.retriever import Retriever
from spectrag.util.syncs import SyncCounter

MODES = ("hybrid", "heat", "ppr", "spectral")
# host reads of one spectral batch of 8 on a 320-chunk index (measured here: 102; before the
# device path 158 at B = 8 and 206 at B = 256), a fixed number per stage plus one per 4 PPR
# iterations and per 4 selection steps
MAX_SYNCS = 110


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from spectrag.build import build_index
    from spectrag.index.chunk import chunk_document
    from spectrag.index.load import iter_documents

    root = tmp_path_factory.mktemp("device_path")
    (root / "corpus").mkdir()
    topics, texts = write_corpus(root / "corpus")
    config = IndexConfig(embed=EmbedConfig(cache_dir=""))
    doc_topic = {f"doc_{i:04d}.txt": t for i, t in enumerate(topics)}
    chunk_topics = [doc_topic[c.doc_id] for d in iter_documents(root / "corpus", "folder")
                    for c in chunk_document(d, config.chunk)]
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((N_TOPICS, DIM))
    vectors = centres[chunk_topics] + 1.2 * rng.standard_normal((len(chunk_topics), DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    qv = centres[np.arange(64) % N_TOPICS] + 1.5 * rng.standard_normal((64, DIM))
    qv = torch.from_numpy((qv / np.linalg.norm(qv, axis=1, keepdims=True)).astype(np.float32))
    return build_index(root / "corpus", root / "index", config, embeddings=vectors), texts, qv


def rows(result) -> list[dict]:
    """Each query's result without the batch's padding (its width depends on the batch)."""
    out = []
    for b in range(len(result.candidates)):
        real = result.candidates[b] >= 0
        ranking, selected = result.ranking()[b], result.selected_ids()[b]
        out.append(dict(candidates=result.candidates[b][real].tolist(), ranking=ranking[ranking >= 0].tolist(),
                        selected=selected[selected >= 0].tolist(), scores=result.scores[b][real].tolist(),
                        relevance=result.relevance[b][real].tolist(), used=int(result.used_tokens[b])))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_torch_path_equals_compiled_path(index, mode):
    idx, texts, qv = index
    got = Retriever(idx, RetrieverConfig(backend="torch")).score_batch(texts, mode=mode, qvecs=qv, budget=2500)
    want = Retriever(idx, RetrieverConfig(backend="compiled")).score_batch(texts, mode=mode, qvecs=qv, budget=2500)
    assert got.candidates.shape[0] == 64 and (got.selected >= 0).sum() > 64
    assert_same_results(rows(got), rows(want), where=mode)
    torch_path = Retriever(idx, RetrieverConfig(backend="torch"))
    for b in (0, 17, 63):  # a query alone gets what it gets in the batch
        alone = torch_path.score_batch(texts[b : b + 1], mode=mode, qvecs=qv[b : b + 1], budget=2500)
        assert_same_results(rows(alone)[0], rows(got)[b], where=f"{mode}, query {b} alone")


def count(retriever, texts, qv, mode) -> SyncCounter:
    batch = retriever.encode(texts, qv, named=True)  # host work on the query text, outside
    config = retriever.config.replace(mode=mode)
    pipeline.run(retriever.state, batch, config)  # warm: first-use copies of the graphs
    with SyncCounter(where=True) as syncs:
        pipeline.run(retriever.state, batch, config)
    return syncs


@pytest.mark.parametrize("mode", ("hybrid", "spectral"))
def test_host_syncs_per_batch_are_few_and_do_not_grow_with_b(index, mode):
    idx, texts, qv = index
    retriever = Retriever(idx, RetrieverConfig(backend="torch"))
    # the dense top-k as on a GPU (tiled matmul), not the CPU's FAISS-style scan through numpy
    retriever.state.dense = DenseIndex(np.asarray(idx.embeddings), backend="torch")
    small = count(retriever, texts[:8], qv[:8], mode)
    # the same 8 queries 32 times: what depends on the data (PPR iterations, selection steps)
    # is the same, so any difference would be a loop over queries or tiles of queries
    large = count(retriever, texts[:8] * 32, qv[:8].repeat(32, 1), mode)
    assert large.counts == small.counts, f"B = 8: {small.report()}; B = 256: {large.report()}"
    assert small.total <= MAX_SYNCS, small.places
    # no tensor is copied to the host; one short list is read (the selection's tile widths)
    assert not {"cpu", "numpy"} & set(small.counts) and small.counts["tolist"] <= 1, small.places
    # 256 different queries: more PPR iterations / selection steps at most, never per query
    varied = count(retriever, (texts * 4)[:256], qv.repeat(4, 1), mode)
    assert varied.total <= MAX_SYNCS + 40, varied.report()
