"""The prompts keep the papers' key instructions (SpectRAG 3.2.1, 4 and Algorithm 1; SA-RAG 3.4,
3.7 and 4.2), and render passages with the chunk ids the answers cite."""

from __future__ import annotations

from spectrag.llm import prompts
from spectrag.types import Chunk


def _text(messages) -> str:
    return "\n".join(m["content"] for m in messages).lower()


def test_utility_questions_ask_for_questions_the_chunk_answers():
    p = _text(prompts.utility_prompt("Veltra Bridge", "The Veltra Bridge was designed by Ilse Marrow.", 3))
    # SpectRAG 3.2.1: "LLM-generated questions that each chunk answers"
    assert "write 3 questions that the passage below answers" in p and "utility questions" in p
    assert "answerable from the passage alone" in p and "ilse marrow" in p and '"questions"' in p


def test_openie_asks_for_entities_and_relations():
    p = _text(prompts.openie_prompt("T", "Some text."))
    # SA-RAG 3.4: "extract entities, relations ... from the text"; HippoRAG's record fields
    assert "named entities" in p and "relations between them" in p and "[subject, relation, object]" in p
    assert '"named_entities"' in p and '"triples"' in p and "knowledge graph" in p


def test_hyde_asks_for_a_hypothetical_answer_passage():
    p = _text(prompts.hyde_prompt("Who designed the bridge?"))
    # SpectRAG 4: "an LLM ... generate[s] a hypothetical answer to the query", embedded for search
    assert "passage that answers the question" in p and "hypothetical" in p and "search" in p
    assert "who designed the bridge?" in p


def test_answer_prompt_is_grounded_and_step_by_step():
    p = _text(prompts.answer_prompt("Q?", "[1] text"))
    # SA-RAG 3.7 and SpectRAG Algorithm 1, line 13 (a grounded prompt, grouped by source document)
    assert "using only the knowledge text" in p and "step by step" in p
    assert "verifying all arithmetic calculations" in p and "solely from the knowledge text" in p
    assert "not answerable" in p and "answer: unanswerable" in p
    assert "grouped by source document" in p and "cite" in p and '"answer: "' in p


def test_step_prompt_reasons_then_answers_or_asks_a_follow_up():
    p = _text(prompts.step_prompt("Q?", "[1] text", ["earlier note"]))
    # SA-RAG 4.2: reason over the context, attempt the original question, else a follow-up question,
    # with a short-term memory of summarised knowledge (the notes)
    assert "attempt to answer the original question" in p and "follow-up question:" in p
    assert "cannot be determined" in p and "notes from previous steps" in p and "- earlier note" in p


def test_render_context_groups_by_document_with_chunk_ids():
    a = Chunk("d1", "Doc One", ("Intro",), "", "alpha text", 2, 0, 10)
    b = Chunk("d2", "Doc Two", (), "http://x", "beta text", 2, 0, 9)
    c = Chunk("d1", "Doc One", (), "", "gamma text", 2, 11, 21)
    out = prompts.render_context([(7, c), (2, b), (3, a)], ["A rel B", "A rel B"])
    assert out.index("## Doc One") < out.index("## Doc Two")  # order of first appearance
    assert "[3] (Intro) alpha text\n\n[7] gamma text" in out  # chunk-id order inside a document
    assert "## Doc Two (http://x)\n[2] beta text" in out
    assert out.endswith("## Relations\n- A rel B")
    assert prompts.render_context([]) == "(no passages were retrieved)"
