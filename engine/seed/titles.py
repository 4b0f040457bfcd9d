"""The documents a question names: corpus titles mentioned in the query text.

A multi-hop question names its first-hop entities ("Which film came out first, X or Y?", "Where
was the director of film X born?"); in title-keyed corpora (encyclopedias, documentation) their
articles are the passages whose title the question contains. Matching is the citation signal's
(:class:`spectrag.extract.titles.TitleMatcher`: whole words, casefolded, the longest of nested
matches, no titles that are one common word). The named chunks feed a third seed list and are
kept above bridged chunks in the ranking (:func:`spectrag.rescore.bridge.protect_named`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from spectrag.extract.titles import TitleMatcher

_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")  # "Hello Love (song)", "Beatrice (1987 film)"


class TitleIndex:
    """Titles of a corpus and the chunks of each. Built once per state from the chunk titles.
    A title ending in a parenthesized qualifier is also found by its base name ("Hello Love"
    names "Hello Love (song)"): questions name the entity, not the disambiguated article."""

    def __init__(self, chunk_titles: Sequence[str]) -> None:
        keys: dict[str, int] = {}
        owner = np.fromiter((keys.setdefault(t, len(keys)) if t else -1 for t in chunk_titles), dtype=np.int64,
                            count=len(chunk_titles))
        self.n = len(chunk_titles)
        titles = list(keys)
        has = owner >= 0
        chunks = np.flatnonzero(has)
        # title -> its chunks, as CSR rows
        self.chunks_of = sp.csr_matrix((np.ones(len(chunks), dtype=np.float32), (owner[has], chunks)),
                                       shape=(len(titles), self.n))
        names, self._title_of = list(titles), list(range(len(titles)))
        for i, t in enumerate(titles):
            base = _QUALIFIER.sub("", t)
            if base and base != t:
                names.append(base)
                self._title_of.append(i)
        self._title_of = np.asarray(self._title_of, dtype=np.int64)
        self.matcher = TitleMatcher(names)

    def named(self, queries: Sequence[str]) -> sp.csr_matrix:
        """``[B, n]`` with 1 for every chunk of every document a query names."""
        hits = self.matcher.find(list(queries))
        rows = np.repeat(np.arange(len(hits)), [len(h) for h in hits])
        cols = self._title_of[np.fromiter((t for h in hits for t in h), dtype=np.int64, count=len(rows))]
        pick = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)),
                             shape=(len(hits), self.chunks_of.shape[0]))
        pick.data[:] = 1.0  # a title found twice (itself and its base name) counts once
        out = (pick @ self.chunks_of).tocsr()
        out.data[:] = 1.0
        return out
