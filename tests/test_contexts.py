"""A budget smaller than the best chunk: the context is that chunk cut to the budget, flagged,
never empty and never a chunk of another page (spectrag.contexts, module docstring)."""

from __future__ import annotations

import pytest

from spectrag.retriever import Retriever
from spectrag.util.tokens import count_tokens, cut_to_tokens

QUESTION = "Who designed the bridge?"


@pytest.fixture(scope="module")
def retriever(sample_index):
    return Retriever(sample_index)


@pytest.mark.parametrize("text", ["Hello world, this is a plain sentence of words.", "日本語のテキストです。ünïcödé ok",
                                  "a" * 300, "   spaced   out   "])
def test_cut_to_tokens_gives_the_longest_fitting_prefix(text):
    from spectrag.util.tokens import get_encoding

    enc = get_encoding()
    ids = enc.encode_ordinary(text)
    # every prefix of the text that ends at a token boundary (a character cut in two dropped)
    prefixes = {enc.decode_bytes(ids[:k]).decode("utf-8", errors="ignore") for k in range(len(ids) + 1)}
    prefixes = [p for p in prefixes if text.startswith(p)]
    total = count_tokens([text])[0]
    for limit in range(0, total + 2):
        cut, n = cut_to_tokens(text, limit)
        assert text.startswith(cut) and n == count_tokens([cut])[0] <= limit
        longest = max((p for p in prefixes if count_tokens([p])[0] <= limit), key=len)
        assert len(cut) == len(longest), (limit, cut, longest)  # none of them fits and is longer
        if limit >= total:
            assert cut == text
    assert cut_to_tokens(text, 1)[1] == 1  # one token of any non-empty text


def test_a_budget_below_the_best_chunk_gives_that_chunk_cut(retriever):
    best = retriever.retrieve(QUESTION, k=1).ranking[0]
    full = retriever.index.chunks[best]
    for budget in (1, 5, full.n_tokens - 1):
        ctx = retriever.retrieve(QUESTION, budget=budget)
        assert ctx.truncated and len(ctx.chunks) == 1
        chunk = ctx.chunks[0]
        assert chunk.chunk_id == best and chunk.truncated and chunk.phase == "core"
        assert full.text.startswith(chunk.text) and 1 <= chunk.n_tokens <= budget
        assert chunk.text == cut_to_tokens(full.text, budget)[0]  # the longest prefix that fits
        assert chunk.n_tokens == count_tokens([chunk.text])[0] == ctx.used_tokens
        assert [h.chunk_id for h in ctx.hits] == [best] and ctx.hits[0].text == full.text
        assert ctx.to_json()["chunks"][0]["truncated"] is True


def test_a_budget_the_best_chunk_fits_in_is_the_selection_untouched(retriever):
    best = retriever.retrieve(QUESTION, k=1).ranking[0]
    ctx = retriever.retrieve(QUESTION, budget=retriever.index.chunks[best].n_tokens)
    assert not ctx.truncated and not any(c.truncated for c in ctx.chunks)
    assert best in [c.chunk_id for c in ctx.chunks]


def test_the_rule_is_the_same_alone_and_in_a_batch(retriever):
    other = "How long is the river?"
    alone = retriever.retrieve(QUESTION, budget=3)
    batch = retriever.retrieve([other, QUESTION, other], budget=3)
    assert batch[1].chunks == alone.chunks and batch[1].used_tokens == alone.used_tokens
