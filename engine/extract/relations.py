"""The LLM-free source of entities and relations: the extractor of the entity edge signal
(:func:`spectrag.extract.entities.extract_entities`) run per sentence, with co-occurrence relations.

* **Entities**: every entity the extractor finds in a sentence of a chunk (its rules: dates,
  numbers, capitalized spans, acronyms, corpus titles); the chunk describes them. The surface
  form is the sentence's own spelling where the key can be found in it.
* **Relations**: entities of one sentence, in order of appearance, are linked to the next
  ``window`` entities of that sentence (all pairs when a sentence has at most ``window + 1``;
  a long list of names gives a band, not a clique). The predicate is ``co-occurs with`` and
  the relation text -- what is embedded and weighed against the query -- is the sentence.
* **Aliases** (:func:`acronym_aliases`): ``Long Form Name (LFN)`` defines ``lfn`` as an alias
  of ``long form name`` when the acronym's capitals are the initials of the capitalized words
  before it; an acronym defined differently in two places is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from spectrag.extract.entities import extract_entities, normalize_entity
from spectrag.types import Extraction, Triple

COOCCURS = "co-occurs with"

# a sentence ends at . ! ? (plus closing quotes/brackets) before whitespace and an upper-case
# letter, digit or opening quote; a line break always ends one (headings, list items, cells)
_SENTENCE = re.compile(r"(?<=[.!?])[\"')\]’”]*\s+(?=[\"'(\[“‘A-Z0-9\u00C0-\u024F])|\s*\n\s*")
_ACRONYM_DEF = re.compile(r"((?:[\w'’-]+[ \t]+){1,10}?)\(([A-Z][A-Za-z&]{1,9})\)")


def split_sentences(text: str) -> list[str]:
    """Non-empty sentences of ``text``, whitespace collapsed."""
    return [" ".join(s.split()) for s in _SENTENCE.split(text) if s and s.strip()]


def _surface(sentence: str, key: str) -> tuple[int, str]:
    """Position and spelling of ``key`` in ``sentence`` (casefolded search; the key itself and
    the sentence's end when it cannot be found, e.g. for a normalized date)."""
    folded = sentence.casefold()
    at = folded.find(key)
    if at < 0:
        return len(sentence), key
    if len(folded) == len(sentence):  # casefold kept every length: the slice is the spelling
        return at, sentence[at : at + len(key)]
    return at, key


def extract(texts: Sequence[str], titles: Sequence[str] | None = None, *, window: int = 3) -> Extraction:
    """Entities and co-occurrence relations of each chunk text. Shapes: ``[n_chunks]`` texts ->
    :class:`Extraction` with ``mentions [n_chunks][*]``."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    owners: list[int] = []
    sentences: list[str] = []
    for c, text in enumerate(texts):
        for s in split_sentences(text):
            owners.append(c)
            sentences.append(s)
    found = extract_entities(sentences, titles)
    mentions: list[list[str]] = [[] for _ in texts]
    triples: list[Triple] = []
    for c, sentence, keys in zip(owners, sentences, found):
        placed = sorted((*_surface(sentence, k), k) for k in keys)  # (position, surface, key)
        mentions[c].extend(surface for _, surface, _ in placed)
        for i, (_, s_form, _) in enumerate(placed):
            for _, o_form, _ in placed[i + 1 : i + 1 + window]:
                triples.append(Triple(c, s_form, COOCCURS, o_form, sentence))
    facts = {"sentences": len(sentences), "window": window, "cooccurrences": len(triples)}
    return Extraction(mentions, triples, facts)


def acronym_aliases(texts: Sequence[str]) -> tuple[dict[str, str], int]:
    """Acronyms defined in the texts as ``alias key -> long-form key``, and how many acronyms
    were left out for having two different definitions."""
    defs: dict[str, set[str]] = {}
    for text in texts:
        for m in _ACRONYM_DEF.finditer(text):
            words = m.group(1).split()
            acronym = m.group(2)
            letters = "".join(ch for ch in acronym if ch.isupper())
            caps = [i for i, w in enumerate(words) if w[:1].isupper()]
            if len(letters) < 2 or len(caps) < len(letters):
                continue
            tail = caps[-len(letters) :]
            if "".join(words[i][0] for i in tail) != letters:
                continue
            long_key = normalize_entity(" ".join(words[tail[0] :]))
            short_key = normalize_entity(acronym)
            if long_key and short_key and long_key != short_key:
                defs.setdefault(short_key, set()).add(long_key)
    aliases = {a: next(iter(k)) for a, k in defs.items() if len(k) == 1}
    return aliases, len(defs) - len(aliases)
