"""The LlamaIndex adapter (spectrag.adapters.llamaindex) against llama-index-core itself:
BaseRetriever's retrieve / aretrieve with str and QueryBundle, NodeWithScore with doc id, section,
phase and scores in metadata, retrieve_batch as one tensor batch, and a RetrieverQueryEngine
answering with LlamaIndex's MockLLM."""

from __future__ import annotations

import pytest
from conftest import assert_same_results
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from spectrag.adapters.llamaindex import SpectragLlamaRetriever
from spectrag.cli.demo import sample_questions
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever

QUESTIONS = [q["question"] for q in sample_questions()]


@pytest.fixture(scope="module")
def engine(sample_index):
    return Retriever(sample_index)


def _key(nodes):
    return [(n.node.node_id, n.score, n.node.get_content()) for n in nodes]


def test_nodes_with_scores_and_metadata(engine):
    retriever = SpectragLlamaRetriever(engine, k=4, budget=1000)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve(QUESTIONS[0])
    hits = engine.retrieve(QUESTIONS[0], k=4, budget=1000).hits
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
    assert [(n.node.metadata["doc_id"], n.node.metadata["chunk_id"], n.score) for n in nodes] == [tuple(h) for h in hits]
    first = nodes[0].node
    assert first.ref_doc_id == hits[0].doc_id and first.node_id == f"{hits[0].doc_id}#{hits[0].chunk_id}"
    assert first.metadata["phase"] == "core" and isinstance(first.metadata["section"], str)
    assert first.metadata["relevance"] is not None and first.metadata["proximity"] is not None
    assert _key(retriever.retrieve(QueryBundle(QUESTIONS[0]))) == _key(nodes)
    context = SpectragLlamaRetriever(engine, k=None, output="context", budget=500).retrieve(QUESTIONS[0])
    assert [n.node.metadata["chunk_id"] for n in context] == [c.chunk_id for c in engine.retrieve(QUESTIONS[0], budget=500).chunks]
    with pytest.raises(SpectragError, match="k must be >= 1"):
        SpectragLlamaRetriever(engine, k=0)


async def test_aretrieve_equals_retrieve(engine):
    retriever = SpectragLlamaRetriever(engine, k=3, budget=800)
    assert _key(await retriever.aretrieve(QUESTIONS[1])) == _key(retriever.retrieve(QUESTIONS[1]))


def test_retrieve_batch_is_one_tensor_batch(engine, monkeypatch):
    retriever = SpectragLlamaRetriever(engine, k=3, budget=800)
    want = [_key(retriever.retrieve(q)) for q in QUESTIONS[:4]]
    calls, original = [], engine.score_batch
    monkeypatch.setattr(engine, "score_batch", lambda queries, **kw: calls.append(len(queries)) or original(queries, **kw))
    assert_same_results([_key(n) for n in retriever.retrieve_batch(QUESTIONS[:3] + [QueryBundle(QUESTIONS[3])])], want)
    assert calls == [4]


async def test_a_query_engine_with_the_mock_llm(engine):
    """RetrieverQueryEngine over our retriever with LlamaIndex's MockLLM (it answers with its
    prompt): the answer's sources are our nodes and the prompt carried their text."""
    retriever = SpectragLlamaRetriever(engine, k=2, budget=800)
    query_engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = query_engine.query(QUESTIONS[0])
    nodes = retriever.retrieve(QUESTIONS[0])
    assert _key(response.source_nodes) == _key(nodes)
    assert nodes[0].node.get_content() in str(response) and QUESTIONS[0] in str(response)
    again = await query_engine.aquery(QUESTIONS[0])
    assert _key(again.source_nodes) == _key(nodes)


def test_metadata_filters_map_onto_where(sample_index):
    """LlamaIndex ``MetadataFilters`` (operators, nesting, AND / OR) as the engine's ``where``."""
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters
    from test_filters import with_metadata

    from spectrag.adapters.llamaindex import where_of
    from spectrag.errors import SpectragError
    from spectrag.store import load_index

    filters = MetadataFilters(filters=[
        MetadataFilter(key="lang", value="de", operator="!="),
        MetadataFilters(filters=[MetadataFilter(key="year", value=2021, operator=">="),
                                 MetadataFilter(key="tags", value=["b", "x"], operator="any")], condition="or")])
    where = {"$and": [{"lang": {"$ne": "de"}}, {"$or": [{"year": {"$gte": 2021}}, {"tags": {"$in": ["b", "x"]}}]}]}
    assert where_of(filters) == where
    assert where_of(MetadataFilters(filters=[MetadataFilter(key="tags", value=["a", "b"], operator="all")])) == {
        "$and": [{"$and": [{"tags": {"$eq": "a"}}, {"tags": {"$eq": "b"}}]}]}["$and"][0]
    assert where_of(MetadataFilters(filters=[MetadataFilter(key="tags", value="a", operator="contains")])) == {
        "tags": {"$eq": "a"}}
    with pytest.raises(SpectragError, match="operator 'text_match'"):
        where_of(MetadataFilters(filters=[MetadataFilter(key="lang", value="d", operator="text_match")]))
    with pytest.raises(SpectragError, match="condition 'not'"):
        where_of(MetadataFilters(filters=[MetadataFilter(key="lang", value="d")], condition="not"))
    engine = Retriever(with_metadata(load_index(sample_index.path))[0])
    nodes = SpectragLlamaRetriever(engine, k=5, filters=filters).retrieve(QUESTIONS[2])
    hits = engine.retrieve(QUESTIONS[2], k=5, where=where).hits
    assert [n.node.node_id for n in nodes] == [f"{h.doc_id}#{h.chunk_id}" for h in hits] and len(nodes) == 5
    assert all(n.node.metadata["lang"] != "de" for n in nodes)
