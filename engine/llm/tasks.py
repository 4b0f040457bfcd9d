"""The LLM's jobs, each for many inputs at once (one :meth:`LLMClient.chat` call per job):

    utility_questions   chunks -> {chunk id: [questions]}      the questions-file format
    openie_records      chunks -> HippoRAG OpenIE records       the OpenIE-file format
    hyde_passages       queries -> one hypothetical passage each

Output a model got wrong is counted (``malformed`` in the stage's usage and in the facts) and
left out; nothing here raises on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spectrag.llm import parse, prompts
from spectrag.llm.client import LLMClient
from spectrag.types import Chunk

QUESTION_TOKENS = 384
OPENIE_TOKENS = 1024
HYDE_TOKENS = 256


def _source(client: LLMClient) -> dict[str, Any]:
    return {"model": client.model, "base_url": client.config.base_url}


def utility_questions(chunks: Sequence[Chunk], client: LLMClient, *, per_chunk: int = 3,
                      progress: bool = False) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """``per_chunk`` questions each chunk answers (SpectRAG's utility questions), as the
    questions file ``{"<chunk id>": [question, ...]}`` (chunks whose answer could not be parsed
    are absent), and facts: counts of chunks, questions and malformed answers."""
    asks = [prompts.utility_prompt(c.title, c.text, per_chunk) for c in chunks]
    answers = client.chat(asks, stage="utility_questions", max_tokens=QUESTION_TOKENS, json_output=True,
                          progress=progress)
    out: dict[str, list[str]] = {}
    malformed = []
    for i, completion in enumerate(answers):
        found = parse.questions(completion.text, per_chunk)
        if found is None:
            malformed.append(i)
        else:
            out[str(i)] = found
    client.note_malformed("utility_questions", len(malformed))
    facts = {**_source(client), "chunks": len(chunks), "chunks_with_questions": len(out),
             "questions": sum(len(q) for q in out.values()), "malformed": len(malformed),
             "malformed_chunks": malformed[:20], "per_chunk": per_chunk}
    return out, facts


def openie_records(chunks: Sequence[Chunk], client: LLMClient, *,
                   progress: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Named entities and triples of each chunk (SA-RAG 3.4), as HippoRAG OpenIE records
    (``title``, ``text`` = the chunk text, ``passage``, ``extracted_entities``,
    ``extracted_triples``, and ``idx`` = the chunk id), one per distinct (title, text); records
    whose answer could not be parsed are left out, malformed triples dropped; both counted in
    the facts."""
    first: dict[tuple[str, str], int] = {}
    for i, c in enumerate(chunks):
        first.setdefault((c.title, c.text), i)
    ids = list(first.values())
    answers = client.chat([prompts.openie_prompt(chunks[i].title, chunks[i].text) for i in ids], stage="openie",
                          max_tokens=OPENIE_TOKENS, json_output=True, progress=progress)
    docs: list[dict[str, Any]] = []
    malformed, bad_triples, bad_entities = [], 0, 0
    for i, completion in zip(ids, answers):
        found = parse.openie(completion.text)
        if found is None:
            malformed.append(i)
            continue
        bad_triples += found.bad_triples
        bad_entities += found.bad_entities
        c = chunks[i]
        docs.append({"idx": i, "title": c.title, "text": c.text,
                     "passage": f"{c.title}\n{c.text}" if c.title else c.text,
                     "extracted_entities": found.entities, "extracted_triples": found.triples})
    client.note_malformed("openie", len(malformed))
    facts = {**_source(client), "records": len(docs), "distinct_chunks": len(ids), "malformed": len(malformed),
             "malformed_chunks": malformed[:20], "malformed_triples": bad_triples, "malformed_entities": bad_entities,
             "entities": sum(len(d["extracted_entities"]) for d in docs),
             "triples": sum(len(d["extracted_triples"]) for d in docs)}
    return docs, facts


def hyde_passages(queries: Sequence[str], client: LLMClient, *, progress: bool = False) -> list[str]:
    """One hypothetical passage per query (HyDE). An empty answer falls back to the query
    itself (counted as malformed), so every query still gets a vector."""
    answers = client.chat([prompts.hyde_prompt(q) for q in queries], stage="hyde", max_tokens=HYDE_TOKENS,
                          progress=progress)
    out, empty = [], 0
    for q, completion in zip(queries, answers):
        text = completion.text.strip()
        if not text:
            empty += 1
            text = q
        out.append(text)
    client.note_malformed("hyde", empty)
    return out
