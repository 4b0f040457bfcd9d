"""The prompts of the LLM stages, after the two papers' descriptions of them.

==================  ===========================================================================
prompt              source
==================  ===========================================================================
utility questions   SpectRAG 3.2.1: "LLM-generated questions that each chunk answers, encoding
                    functional rather than surface similarity" (after GEM-RAG's utility questions)
OpenIE              SA-RAG 3.4: the LLM "is instructed to extract entities, relations, and entity
                    descriptions from the text"; written as HippoRAG's OpenIE records (named
                    entities, then (subject, relation, object) triples), the format the index reads
HyDE                SpectRAG 4 (HyDeRAG): "an LLM ... generate[s] a hypothetical answer to the
                    query. The generated synthetic document is then embedded and used in place
                    of the raw query embedding"
answer              SpectRAG Algorithm 1, line 13: the context "grouped by source document" and a
                    "grounded prompt"; SA-RAG 3.7: "reason through the knowledge text in a
                    step-by-step manner, verifying all arithmetic calculations ... the final
                    answer if it is able to deduce one based solely on the provided knowledge,
                    or otherwise notes that the question is not answerable"
iterative step      SA-RAG 4.2 (CoT retrieval): "reason over the context gathered in each
                    retrieval step and attempt to answer the original question. If the answer
                    cannot be determined from the current context, the LLM formulates a
                    follow-up question"; "a short-term memory containing summarised knowledge
                    from previous steps" (the notes)
==================  ===========================================================================

The papers give no verbatim prompt text (SA-RAG's appendix is not in the paper we have), so
the wording below is ours; ``tests/llm/test_prompts.py`` checks that each keeps the papers' key
instructions. Passages are shown with their chunk id in square brackets, which is what the
answer cites.
"""

from __future__ import annotations

from collections.abc import Sequence

from spectrag.types import Chunk

Messages = list[dict[str, str]]

UTILITY_SYSTEM = "You write utility questions for a search index: the questions that a passage answers."
UTILITY_USER = """Write {n} questions that the passage below answers.
- Each question must be answerable from the passage alone: its answer is stated in the passage.
- Ask about different facts, the ones a reader would search for.
- Name the people, places and things explicitly; never write "the passage", "this" or "it".
Return only JSON, in this form: {{"questions": ["...", "..."]}}

Title: {title}
Passage:
{text}"""

OPENIE_SYSTEM = ("You build a knowledge graph from text: you extract the named entities of a passage and the "
                 "relations between them.")
OPENIE_USER = """Extract the named entities of the passage below, and the relations between them as triples [subject, relation, object].
- Named entities: people, organizations, places, works, events, dates, numbers and other specific things, written as in the passage.
- Every triple involves at least one of the named entities, ideally two; the relation is a short verb phrase.
- Replace pronouns with the names they stand for.
Return only JSON, in this form: {{"named_entities": ["...", "..."], "triples": [["subject", "relation", "object"], ...]}}

Title: {title}
Passage:
{text}"""

HYDE_SYSTEM = "You write short encyclopedia passages."
HYDE_USER = """Write a short passage that answers the question below, as an encyclopedia article would. State the answer and the facts around it directly, as if you knew them: this hypothetical passage is only used to search for real documents, so a plausible guess is better than a refusal.

Question: {question}
Passage:"""

ANSWER_SYSTEM = "You answer questions using only the knowledge text you are given, and you cite it."
ANSWER_USER = """Answer the question using only the knowledge text below. It is grouped by source document; each passage starts with its id in square brackets.
Reason through the knowledge text step by step, verifying all arithmetic calculations if the question requires quantitative reasoning, and cite the passages you use by their ids, e.g. [3].
If the answer cannot be deduced solely from the knowledge text, say that the question is not answerable from the retrieved information and end with "Answer: unanswerable".
Otherwise end with one line "Answer: " followed by the short answer alone (a name, a date, a number, yes or no), not a sentence.
{notes}
Knowledge text:
{context}

Question: {question}"""

STEP_USER = """You answer a multi-hop question step by step, retrieving knowledge text as you go. It is grouped by source document; each passage starts with its id in square brackets.
Reason over the knowledge text gathered so far and your notes from previous steps, and attempt to answer the original question.
Reply in exactly this format:
Notes: <a short summary of what the knowledge text establishes for the question, citing passage ids, e.g. [3]>
then one of these two lines:
Answer: <the short answer alone>   (when the knowledge text is enough to answer)
Follow-up question: <one simple question about the missing fact>   (when the answer cannot be determined yet)
{notes}
Knowledge text:
{context}

Original question: {question}"""


def _messages(system: str, user: str) -> Messages:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def utility_prompt(title: str, text: str, n: int) -> Messages:
    return _messages(UTILITY_SYSTEM, UTILITY_USER.format(n=n, title=title or "(none)", text=text))


def openie_prompt(title: str, text: str) -> Messages:
    return _messages(OPENIE_SYSTEM, OPENIE_USER.format(title=title or "(none)", text=text))


def hyde_prompt(question: str) -> Messages:
    return _messages(HYDE_SYSTEM, HYDE_USER.format(question=question))


def _notes(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    return "\nNotes from previous steps:\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def answer_prompt(question: str, context: str, notes: Sequence[str] = ()) -> Messages:
    return _messages(ANSWER_SYSTEM, ANSWER_USER.format(question=question, context=context, notes=_notes(notes)))


def step_prompt(question: str, context: str, notes: Sequence[str] = ()) -> Messages:
    return _messages(ANSWER_SYSTEM, STEP_USER.format(question=question, context=context, notes=_notes(notes)))


def render_context(chunks: Sequence[tuple[int, Chunk]], relations: Sequence[str] = ()) -> str:
    """Passages grouped by source document (in order of first appearance), each labelled with
    its chunk id, then the knowledge-graph relation texts (SA-RAG 3.6), if any."""
    groups: dict[str, list[tuple[int, Chunk]]] = {}
    for cid, chunk in chunks:
        groups.setdefault(chunk.doc_id, []).append((cid, chunk))
    parts = []
    for doc_id, members in groups.items():
        first = members[0][1]
        head = f"## {first.title or doc_id}" + (f" ({first.url})" if first.url else "")
        body = []
        for cid, c in sorted(members, key=lambda m: m[0]):
            where = " > ".join(c.section)
            body.append(f"[{cid}] " + (f"({where}) " if where else "") + c.text.strip())
        parts.append(head + "\n" + "\n\n".join(body))
    if relations:
        parts.append("## Relations\n" + "\n".join(f"- {t}" for t in dict.fromkeys(relations)))
    return "\n\n".join(parts) if parts else "(no passages were retrieved)"
