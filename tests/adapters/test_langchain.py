"""The LangChain adapter (spectrag.adapters.langchain) against langchain-core itself: LangChain's
own standard retriever tests (langchain-tests), batch/abatch as one tensor batch with a callback
run per input, metadata, and a retrieval chain with LangChain's fake chat model."""

from __future__ import annotations

import pytest
from conftest import assert_same_results
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_tests.integration_tests import RetrieversIntegrationTests

from spectrag.adapters.langchain import SpectragRetriever
from spectrag.cli.demo import sample_questions
from spectrag.retriever import Retriever

QUESTIONS = [q["question"] for q in sample_questions()]


@pytest.fixture(scope="module")
def engine(sample_index):
    return Retriever(sample_index)


class TestStandardRetriever(RetrieversIntegrationTests):
    """LangChain's standard suite: k in the constructor and in invoke, invoke/ainvoke -> Documents."""

    @pytest.fixture(autouse=True)
    def _engine(self, engine):
        type(self)._shared = engine  # the suite builds retrievers from properties, not fixtures

    @property
    def retriever_constructor(self) -> type[SpectragRetriever]:
        return SpectragRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"engine": self._shared, "budget": 1000}

    @property
    def retriever_query_example(self) -> str:
        return QUESTIONS[0]


class _Runs(BaseCallbackHandler):
    def __init__(self):
        self.starts, self.ends = [], 0

    def on_retriever_start(self, serialized, query, **kwargs):
        self.starts.append(query)

    def on_retriever_end(self, documents, **kwargs):
        self.ends += 1


def _count_batches(engine, monkeypatch):
    calls = []
    original = engine.score_batch
    monkeypatch.setattr(engine, "score_batch", lambda queries, **kw: calls.append(len(queries)) or original(queries, **kw))
    return calls


def test_documents_carry_the_hits_and_their_metadata(engine):
    docs = SpectragRetriever(engine=engine, k=5, budget=1000).invoke(QUESTIONS[0])
    hits = engine.retrieve(QUESTIONS[0], k=5, budget=1000).hits
    assert [(d.metadata["doc_id"], d.metadata["chunk_id"], d.metadata["score"]) for d in docs] == [tuple(h) for h in hits]
    first = docs[0]
    assert first.page_content == engine.index.chunks[hits[0].chunk_id].text and first.id == f"{hits[0].doc_id}#{hits[0].chunk_id}"
    assert first.metadata["rank"] == 1 and first.metadata["phase"] == "core" and first.metadata["mode"] == "spectral"
    assert {"title", "section", "url", "relevance", "proximity", "n_tokens"} <= first.metadata.keys()
    context = SpectragRetriever(engine=engine, k=None, output="context", budget=600).invoke(QUESTIONS[0])
    assert [d.metadata["chunk_id"] for d in context] == [c.chunk_id for c in engine.retrieve(QUESTIONS[0], budget=600).chunks]
    # k without a budget: the context is the k results (k means k, as a vector store's retriever)
    top = SpectragRetriever(engine=engine, k=3).invoke(QUESTIONS[1])
    as_context = SpectragRetriever(engine=engine, k=3, output="context").invoke(QUESTIONS[1])
    assert [d.id for d in top] == [d.id for d in as_context] and len(top) == 3
    assert all(d.metadata["phase"] == "ranked" and d.page_content for d in as_context)
    with pytest.raises(ValueError, match="output"):
        SpectragRetriever(engine=engine, output="all")


def test_batch_is_one_tensor_batch_with_a_run_per_input(engine, monkeypatch):
    retriever = SpectragRetriever(engine=engine, k=3, budget=800)
    want = [retriever.invoke(q) for q in QUESTIONS[:4]]
    calls, runs = _count_batches(engine, monkeypatch), _Runs()
    got = retriever.batch(QUESTIONS[:4], config={"callbacks": [runs]})
    assert_same_results(got, want)
    assert calls == [4] and runs.starts == QUESTIONS[:4] and runs.ends == 4
    assert_same_results(retriever.batch(QUESTIONS[:2], k=1), [w[:1] for w in want[:2]])
    assert calls == [4, 2]


async def test_async_and_abatch(engine, monkeypatch):
    retriever = SpectragRetriever(engine=engine, k=3, budget=800)
    want = [retriever.invoke(q) for q in QUESTIONS[:3]]
    assert_same_results(await retriever.ainvoke(QUESTIONS[0]), want[0])
    calls = _count_batches(engine, monkeypatch)
    assert_same_results(await retriever.abatch(QUESTIONS[:3]), want)
    assert calls == [3]


def test_a_retrieval_chain_with_a_fake_chat_model(engine):
    """retriever | format -> prompt -> LangChain's FakeListChatModel -> parser: the prompt the
    model received holds the retrieved chunks."""
    retriever = SpectragRetriever(engine=engine, k=2, budget=800)
    seen = []
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from the context.\n{context}"), ("human", "{question}")])
    chain = ({"context": retriever | (lambda docs: "\n\n".join(d.page_content for d in docs)),
              "question": RunnablePassthrough()}
             | prompt | RunnableLambda(lambda p: seen.append(p.to_string()) or p)
             | FakeListChatModel(responses=["Veltra."]) | StrOutputParser())
    assert chain.invoke(QUESTIONS[0]) == "Veltra."
    top = retriever.invoke(QUESTIONS[0])
    assert top[0].page_content in seen[0] and top[1].page_content in seen[0] and QUESTIONS[0] in seen[0]


def test_filter_per_call_default_and_in_batch(sample_index):
    """``invoke(q, filter=...)`` (a TypeError before), the ``filter`` field as the default, and
    ``batch(..., filter=...)``: the engine's ``where``; the chunk's metadata is in the Document's."""
    from test_filters import with_metadata

    from spectrag.store import load_index
    from spectrag.util.where import FilterError

    engine = Retriever(with_metadata(load_index(sample_index.path))[0])
    retriever = SpectragRetriever(engine=engine, k=4)
    docs = retriever.invoke(QUESTIONS[0], filter={"lang": "de"})
    hits = engine.retrieve(QUESTIONS[0], k=4, where={"lang": "de"}).hits
    assert [d.id for d in docs] == [f"{h.doc_id}#{h.chunk_id}" for h in hits] and len(docs) == 4
    assert all(d.metadata["lang"] == "de" and d.metadata["doc"] == d.metadata["doc_id"] for d in docs)
    default = SpectragRetriever(engine=engine, k=4, filter={"year": {"$gte": 2021}})
    assert all(d.metadata["year"] >= 2021 for d in default.invoke(QUESTIONS[1]))
    assert any(d.metadata["year"] < 2021 for d in default.invoke(QUESTIONS[1], filter={"year": {"$lt": 2021}}))
    batched = retriever.batch(QUESTIONS[:3], filter={"tags": "c"})
    assert len(batched) == 3 and all("c" in d.metadata["tags"] for docs in batched for d in docs)
    with pytest.raises(FilterError, match="unknown operator"):
        retriever.invoke(QUESTIONS[0], filter={"lang": {"$like": "d"}})
