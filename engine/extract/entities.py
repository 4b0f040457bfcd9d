"""Entities per chunk for the entity edge signal (SpectRAG paper 3.2.1: "overlap in named
entities, technical terms, organizations, or dates extracted per chunk").

Two sources of per-chunk entity lists, both as sorted unique *normalized keys*
(:func:`normalize_entity`: casefolded, whitespace collapsed, punctuation stripped at the ends,
a leading "the " dropped):

* :func:`extract_entities` -- the default, LLM-free extractor: one pass of one precompiled
  regular expression over each text, plus an Aho-Corasick scan for corpus titles. Rules:

  1. **Dates**: ``4 May 1912`` and ``May 4, 1912`` (both give ``4 may 1912``), ``March 1911``
     (``march 1911``); full English month names. The year of a date is also emitted (rule 2).
  2. **Numbers**: three or more digits (``1907``, ``214``, a decade ``1920s``), numbers with
     thousands separators (``23,400``) or decimals (``1.355``). A range ``1702–1822`` gives
     both years.
  3. **Capitalized spans**: runs of capitalized words (a word starts with an upper-case letter;
     ``Jean-Paul``, ``O'Brien`` are one word; a possessive ``'s`` stays only before another
     capitalized word, as in ``St Orla's Church``, and is dropped in ``Venning's``) on one
     line, joined by spaces and by at most three short lower-case connectors (``of the de
     del della di da du des la le van von der den and y for``), e.g. ``Northern Rail
     Authority``, ``Jan Philip Solovej``, ``University of Skarholt``. Leading function words
     (:data:`LEADING_WORDS`: articles, prepositions, pronouns, weekdays...) are dropped
     (``The Harrowtop Observatory`` -> ``harrowtop observatory``, ``In Skarholt`` ->
     ``skarholt``, which then follows rule 4 as a non-initial word). A span joined by ``and``
     also gives its two sides (``Orsby and Gull Bay`` -> that, ``orsby``, ``gull bay``).
  4. **Single capitalized words** are kept only when they are not sentence-initial (after
     ``. ! ?``, at a line start, after a Markdown ``#``, ``|``, ``>`` or a list bullet; a
     period after an abbreviation such as ``St.`` or an initial does not end a sentence), at
     least two characters long and not a common word (:data:`STOPWORDS`: the common English
     words of :data:`spectrag.graph.citations.COMMON_WORDS`, months, weekdays, pronouns, roman
     numerals, heading words such as ``Introduction``). A section number before a heading word
     (``## 2.1 Conquest``) makes it sentence-initial, and is itself no number entity.
  5. **Acronyms**: a word of 2--6 capitals followed by optional digits (``NRA``, ``VMTC``,
     ``HCR2``) is kept even when sentence-initial; roman numerals are not acronyms. Mixed forms
     (``G20``, ``UoS``) follow rule 4; dotted ones (``U.S.``) are missed.
  6. **Corpus titles** (``titles=``) mentioned in the text, whole-word and case-insensitive
     (:class:`spectrag.graph.citations.TitleMatcher`), e.g. ``Great Flood of 1907``.

* :func:`load_openie_entities` -- HippoRAG's OpenIE output (``extracted_entities`` per
  passage, produced by an LLM), mapped onto chunks by their text.

:func:`entity_incidence` turns either into a binary sparse ``[n_chunks, n_entities]`` matrix
with IDF weights, dropping entities too rare to make an edge or too frequent to mean anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import numpy as np
import scipy.sparse as sp

from spectrag.extract.titles import COMMON_WORDS, TitleMatcher
from spectrag.util.pool import map_blocks, resolve_workers

# --- normalization ---------------------------------------------------------------------------

# punctuation, symbols and spaces stripped at the ends of an entity (``#``/``+`` kept at the end
# for C#, C++; ``%`` kept at the end)
_EDGE = re.compile(r"^[\W_]+|(?:(?![#+%])[\W_])+$")
_SPACES = re.compile(r"\s+")


@lru_cache(maxsize=1 << 18)
def normalize_entity(s: str) -> str:
    """The key of an entity: casefolded, whitespace collapsed, punctuation stripped at the ends,
    a leading "the " dropped. ``"  The  Northern Rail\\nAuthority."`` -> ``"northern rail
    authority"``. May be empty (for pure punctuation)."""
    key = _EDGE.sub("", _SPACES.sub(" ", s.casefold()).strip())
    if key.startswith("the "):
        key = _EDGE.sub("", key[4:])
    return key


# --- the extractor -----------------------------------------------------------------------------


def _char_class(pred, ranges: Sequence[tuple[int, int]]) -> str:
    """A regex character class body of the code points in ``ranges`` satisfying ``pred``."""
    out: list[str] = []
    run_start = None
    prev = None
    for lo, hi in ranges:
        for cp in range(lo, hi + 1):
            if pred(chr(cp)):
                if run_start is None:
                    run_start = cp
                elif prev != cp - 1:
                    out.append(f"{re.escape(chr(run_start))}-{re.escape(chr(prev))}")
                    run_start = cp
                prev = cp
    if run_start is not None:
        out.append(f"{re.escape(chr(run_start))}-{re.escape(chr(prev))}")
    return "".join(out)


_UPPER = _char_class(
    lambda c: c.isupper() or c.istitle(),
    [(0x41, 0x5A), (0xC0, 0x24F), (0x370, 0x52F), (0x1E00, 0x1FFF)],
)

MONTHS = (
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY_PLURALS = tuple(d + "s" for d in WEEKDAYS)
_CONNECTORS = "of|the|de|del|della|di|da|du|des|la|le|van|von|der|den|and|y|for"
_MONTH_RE = "|".join(m.capitalize() for m in MONTHS)

# words that are not entities on their own when capitalized (sentence starts, headings, titles
# of address, months, weekdays, roman numerals) on top of the common English words
STOPWORDS = COMMON_WORDS | frozenset(MONTHS) | frozenset(WEEKDAYS + _WEEKDAY_PLURALS) | frozenset(
    """
    according additionally afterwards ah also although among another anyway because besides
    both despite did does during each either etc even every everyone few following further
    furthermore hence her hers herself hi him himself his hmm how however i i'm in indeed it
    it's its meanwhile mine moreover mr mrs ms dr prof sir madam nevertheless no nor not oh ok
    once one ones otherwise ours ourselves she since some such than thank thanks that thereby
    therefore these they this those though thus today tomorrow unlike unless via whereas which
    whichever while who whom whose yesterday yet you yours ii iii iv vi vii viii ix xi xii xiii
    xiv xv chapter section figure table part volume see note notes introduction overview
    summary contents references
    """.split()
)

# function words dropped from the start of a multi-word span ("The Winter Assemblies" ->
# "winter assemblies", "In Skarholt" -> "skarholt"); content words such as "Great" or "New" stay
LEADING_WORDS = frozenset(
    """
    a an the in on at of for by with from to into onto upon over under after before during
    since until about against among between through within without across along around near
    and but or nor so yet as if when where while although though because unless whereas
    it its he she his her hers they their them we our us you your i my me this that these those
    there here which who whom whose what each every some any all both either neither such many
    most much several few other another no not also however thus hence then therefore moreover
    meanwhile today is was were are be been has had have did does do will would can could may
    might must shall should mr mrs ms dr prof sir according
    """.split()
) | frozenset(WEEKDAYS + _WEEKDAY_PLURALS)

# a period after one of these (or after a single letter) does not end a sentence
_ABBREVIATIONS = frozenset(
    "st mt dr mr mrs ms prof sr jr no nos vs co inc ltd gen col capt lt sgt rev hon fr ft ave"
    " dept univ est approx fig vol ch pp jan feb mar apr jun jul aug sep sept oct nov dec".split()
)

# a capitalized word; a possessive 's stays inside a span only before another capitalized word
_CAP_WORD = rf"[{_UPPER}]\w*(?:[-'’][{_UPPER}]\w*)*(?:['’]s(?=[ \t]+[{_UPPER}]))?"
_PATTERN = re.compile(
    rf"""
    (?P<dmy>\b(?P<d1>\d{{1,2}})\s+(?P<m1>{_MONTH_RE})\s+(?P<y1>\d{{3,4}})\b)
  | (?P<mdy>\b(?P<m2>{_MONTH_RE})\s+(?P<d2>\d{{1,2}}),?\s+(?P<y2>\d{{3,4}})\b)
  | (?P<my>\b(?P<m3>{_MONTH_RE})\s+(?:of\s+)?(?P<y3>\d{{4}})\b)
  | (?P<num>\b(?:\d{{1,3}}(?:,\d{{3}})+(?:\.\d+)?|\d+\.\d+|\d{{3,}}s?)\b)
  | (?P<cap>\b{_CAP_WORD}(?:(?:[ \t]+(?:{_CONNECTORS})){{0,3}}[ \t]+{_CAP_WORD})*)
    """,
    re.X,
)
_ACRONYM = re.compile(r"[A-Z]{2,6}\d*")
_ROMAN = re.compile(r"[IVXLCDM]+")
_SPLIT_WORDS = re.compile(r"[ \t]+")
_CONNECTOR_SET = frozenset(_CONNECTORS.split("|"))
_SKIP_BACK = " \t\"'“‘«([*_"
_SENTENCE_END = ".!?\n|#>•"


def _sentence_initial(text: str, pos: int) -> bool:
    """Whether the word at ``pos`` opens a sentence, a line, a heading, a cell or an item."""
    j = pos - 1
    while j >= 0 and text[j] in _SKIP_BACK:
        j -= 1
    if j < 0:
        return True
    ch = text[j]
    if ch == ".":
        k = j - 1
        while k >= 0 and text[k].isalpha():
            k -= 1
        word = text[k + 1 : j]
        # an initial ("J. Smith") or a known abbreviation ("St. Orla") does not end a sentence
        return not (len(word) == 1 and word.isupper()) and word.casefold() not in _ABBREVIATIONS
    if ch in _SENTENCE_END:
        return True
    if ch.isdigit():  # a section number: "## 2.1 Conquest", "2.1 Datasets" at a line start
        k = j
        while k >= 0 and (text[k].isdigit() or text[k] == "."):
            k -= 1
        while k >= 0 and text[k] in " \t#":
            k -= 1
        return k < 0 or text[k] == "\n"
    if ch in "-+–—" and (j == 0 or text[j - 1] == "\n"):
        return True  # a list bullet
    return False


def _section_number(text: str, start: int, end: int) -> bool:
    """Whether the decimal at ``[start, end)`` numbers a heading ("## 2.1 Conquest")."""
    k = start - 1
    while k >= 0 and text[k] in " \t#":
        k -= 1
    return (k < 0 or text[k] == "\n") and text[end : end + 1] in (" ", "\t", ".")


def _span_entity(text: str, start: int, span: str, out: set[str] | None = None) -> str | None:
    """The entity key of one capitalized span starting at ``start`` (rules 3--5), or None;
    ``start < 0`` means "not sentence-initial". The parts of a span joined by "and" go to
    ``out`` too."""
    if " " not in span and "\t" not in span:
        if _ACRONYM.fullmatch(span) and not _ROMAN.fullmatch(span):
            key = span.casefold()
            return None if key in STOPWORDS else key
        if len(span) < 2 or span.casefold() in STOPWORDS or (start >= 0 and _sentence_initial(text, start)):
            return None
        return normalize_entity(span)
    words = _SPLIT_WORDS.split(span)
    if "and" in words[1:-1]:  # "Orsby and Gull Bay": the whole span and each part
        cut = words.index("and", 1)
        head, tail = " ".join(words[:cut]), " ".join(words[cut + 1 :])
        for part, pos in ((head, start), (tail, -1)):
            key = _span_entity(text, pos, part, out)
            if key and out is not None:
                out.add(key)
    i = 0
    while i < len(words) - 1 and words[i].casefold() in LEADING_WORDS:
        i += 1
        while i < len(words) - 1 and words[i] in _CONNECTOR_SET:
            i += 1
    if i == len(words) - 1:  # one word left, and it is not sentence-initial
        last = words[-1]
        if _ACRONYM.fullmatch(last) and not _ROMAN.fullmatch(last):
            return last.casefold()
        if len(last) < 2 or last.casefold() in STOPWORDS:
            return None
        return normalize_entity(last)
    return normalize_entity(" ".join(words[i:]))


# Every alternative of _PATTERN starts with a word boundary and a digit or an upper-case letter
# (months are capitalized), so a match can only start where this class matches. Scanning for
# the class uses the regex engine's fast charset loop; trying the five alternatives at every
# position (what ``finditer`` does) was several times dearer on English prose.
_START = re.compile(rf"[\d{_UPPER}]")


def _matches(text: str) -> Iterator[re.Match[str]]:
    """The matches of ``_PATTERN.finditer(text)``, found by trying the pattern only at
    :data:`_START` candidates (``match`` at ``pos`` sees the text before ``pos`` for ``\b``)."""
    end = 0
    match = _PATTERN.match
    for cand in _START.finditer(text):
        pos = cand.start()
        if pos < end:
            continue
        m = match(text, pos)
        if m is not None:
            end = m.end()
            yield m


def _extract_one(text: str, out: set[str]) -> None:
    for m in _matches(text):
        kind = m.lastgroup
        if kind == "cap":
            key = _span_entity(text, m.start(), m.group("cap"), out)
            if key:
                out.add(key)
        elif kind == "num":
            num = m.group("num")
            if "." in num and "," not in num and _section_number(text, m.start(), m.end()):
                continue
            out.add(num)
        elif kind == "dmy":
            out.add(f"{int(m.group('d1'))} {m.group('m1').casefold()} {m.group('y1')}")
            out.add(m.group("y1"))
        elif kind == "mdy":
            out.add(f"{int(m.group('d2'))} {m.group('m2').casefold()} {m.group('y2')}")
            out.add(m.group("y2"))
        else:  # month year
            out.add(f"{m.group('m3').casefold()} {m.group('y3')}")
            out.add(m.group("y3"))


def extract_entities(
    texts: Sequence[str], titles: Sequence[str] | None = None, *, workers: int = 0,
    matcher: TitleMatcher | None = None,
) -> list[list[str]]:
    """Sorted unique normalized entity keys of each text (rules in the module docstring); with
    ``titles``, the corpus titles each text mentions are added. Shapes: ``[T]`` -> ``[T][*]``.

    ``workers``: processes (0: the usable CPUs, at most 8, from 20,000 texts on, else 1); the
    texts are split into contiguous blocks (:func:`spectrag.util.pool.map_blocks`), so the result
    does not depend on it.
    """
    if matcher is None:  # (a caller that extracts several times passes one built of ``titles``)
        matcher = TitleMatcher(titles) if titles else None
    keys = [normalize_entity(t) for t in titles] if titles else []

    def block(lo: int, hi: int) -> list[list[str]]:
        part = texts[lo:hi]
        out: list[set[str]] = []
        for text in part:
            found: set[str] = set()
            _extract_one(text, found)
            out.append(found)
        if matcher is not None:
            for found, hits in zip(out, matcher.find(part)):
                found.update(keys[t] for t in hits if keys[t])
        return [sorted(found) for found in out]

    workers = resolve_workers(workers, len(texts))
    return map_blocks(block, len(texts), workers=workers, block=4_096)


# --- incidence matrix ----------------------------------------------------------------------------


@dataclass(frozen=True)
class EntityIncidence:
    """Binary chunk-entity incidence. Shapes: ``matrix`` float32 CSR ``[n_chunks, n_entities]``
    (1 where the chunk holds the entity); ``vocab`` ``[n_entities]`` sorted keys; ``idf`` float32
    ``[n_entities]`` = ``log(n_chunks / df)``; ``dropped_frequent``: entities removed for
    occurring in more than the ``max_df`` limit of chunks."""

    matrix: sp.csr_matrix
    vocab: list[str]
    idf: np.ndarray
    dropped_frequent: int


def entity_incidence(
    entities: Sequence[Sequence[str]],
    *,
    max_df: int | float = 0.01,
    min_df: int = 2,
    max_count: int | None = None,
) -> EntityIncidence:
    """The incidence of the entities kept: those in at least ``min_df`` chunks (rarer ones can
    make no edge) and at most ``max_df`` chunks -- an int is a count, a float a fraction of the
    chunks with a floor of 50 chunks (an entity in half the corpus links everything to
    everything) -- and, when given, at most ``max_count`` chunks whatever the corpus size. The
    entity edges cost ``sum_e df(e)^2`` products, so a fractional limit alone makes them grow
    like ``n^2`` (an entity in 1 % of 10^6 chunks is 10^8 pairs); with ``max_count`` they cost
    at most ``max_count * nnz``, linear in the corpus. Duplicate entities within a chunk count
    once. Shapes: ``[n][*]`` -> ``[n, V]``."""
    indptr, cols, names = entity_ids(entities)
    return incidence_from_ids(indptr, cols, names, max_df=max_df, min_df=min_df, max_count=max_count)


def entity_ids(entities: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Entity lists as ids into their keys, numbered by first appearance. Shapes: ``[n][*]`` ->
    ``indptr [n + 1]`` int64, ``ids [m]`` int64, ``names [V]``."""
    lengths = np.fromiter((len(e) for e in entities), dtype=np.int64, count=len(entities))
    flat = list(chain.from_iterable(entities))
    names = list(dict.fromkeys(flat))
    column = dict(zip(names, range(len(names))))
    ids = np.fromiter(map(column.__getitem__, flat), dtype=np.int64, count=len(flat))
    indptr = np.zeros(len(entities) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return indptr, ids, names


def incidence_from_ids(
    indptr: np.ndarray,
    ids: np.ndarray,
    names: Sequence[str],
    *,
    max_df: int | float = 0.01,
    min_df: int = 2,
    max_count: int | None = None,
) -> EntityIncidence:
    """:func:`entity_incidence` of entity lists given as ids into ``names``: chunk ``i`` holds
    ``names[j]`` for ``j`` in ``ids[indptr[i]:indptr[i + 1]]``. Shapes: ``indptr [n + 1]``,
    ``ids [m]`` -> ``[n, V]``."""
    n = len(indptr) - 1
    limit = df_limit(n, max_df=max_df, max_count=max_count)
    if min_df < 1:
        raise ValueError(f"min_df must be >= 1, got {min_df}")
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.asarray(indptr, dtype=np.int64)))
    # one entry per (chunk, entity): COO -> CSR sums duplicates (in C); then binarize
    full = sp.csr_matrix(
        (np.ones(len(ids), dtype=np.float32), (rows, np.asarray(ids, dtype=np.int64))), shape=(n, len(names)),
        dtype=np.float32,
    )
    full.sum_duplicates()
    df = np.bincount(full.indices, minlength=len(names))
    too_frequent = df > limit
    kept = np.flatnonzero((df >= min_df) & ~too_frequent)
    # kept columns in sorted vocabulary order
    order = np.asarray(sorted(kept.tolist(), key=names.__getitem__), dtype=np.int64)
    remap = np.full(len(names), -1, dtype=np.int64)
    remap[order] = np.arange(order.shape[0], dtype=np.int64)
    new_cols = remap[full.indices]
    sel = new_cols >= 0
    kept_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(full.indptr))[sel]
    matrix = sp.csr_matrix(
        (np.ones(int(sel.sum()), dtype=np.float32), (kept_rows, new_cols[sel])),
        shape=(n, order.shape[0]),
        dtype=np.float32,
    )
    df_kept = df[order].astype(np.float64)
    idf = np.log(n / df_kept).astype(np.float32) if order.shape[0] else np.zeros(0, dtype=np.float32)
    return EntityIncidence(
        matrix=matrix,
        vocab=[names[c] for c in order.tolist()],
        idf=idf,
        dropped_frequent=int(too_frequent.sum()),
    )


def df_limit(n: int, *, max_df: int | float, max_count: int | None) -> int:
    """The most chunks an entity may occur in to be kept, for ``n`` chunks (see
    :func:`entity_incidence`)."""
    if max_count is not None and (isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1):
        raise ValueError(f"max_count must be an int >= 1 or None, got {max_count!r}")
    if isinstance(max_df, bool) or not isinstance(max_df, (int, float)):
        raise ValueError(f"max_df must be an int count or a float fraction, got {max_df!r}")
    if isinstance(max_df, float):
        if not 0.0 < max_df <= 1.0:
            raise ValueError(f"a fractional max_df must be in (0, 1], got {max_df}")
        limit = max(int(math.floor(max_df * n)), 50)
    else:
        if max_df < 1:
            raise ValueError(f"max_df must be >= 1, got {max_df}")
        limit = max_df
    return min(limit, max_count) if max_count is not None else limit
