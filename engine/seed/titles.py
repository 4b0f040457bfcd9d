"""The documents a question names: corpus titles mentioned in the query text, weighed by how
specific each title is in this corpus.

A multi-hop question names its first-hop entities ("Which film came out first, X or Y?", "Where
was the director of film X born?"); in title-keyed corpora (encyclopedias, documentation) their
articles are the passages whose title the question contains. Matching is the citation signal's
(:class:`spectrag.extract.titles.TitleMatcher`: whole words, casefolded, the longest of nested
matches, no titles that are one common word). The named chunks feed a third seed list and are
kept above bridged chunks in the ranking (:func:`spectrag.rescore.bridge.protect_named`).

**Specificity.** A title is evidence of what a question is about only when its words are rare
in this corpus: "Veltra Bridge" names one article, while "Arguments", "Settings" or a library's
own name in its documentation occur in a large part of the chunks, so a question that uses them
names nothing. The specificity of a title is the inverse document frequency of its rarest term
over the BM25 index (the documents of the chunks that hold it, titles included: a long page's
own chunks count once), scale-free:

.. math::
    \\mathrm{spec}(T) = \\max_{t \\in T} \\frac{\\log (N / \\mathrm{df}_t)}{\\log N} \\in [0, 1]

(``N`` documents; 1: a term found in one document; 0.5: in sqrt(N) documents; 0: in every one;
0 for a title with no indexed term). A question names a document only through a title of
specificity at least ``seed.named_specificity``; the citation edges the best candidates vouch
along (:func:`spectrag.graph.relational.specific_citations`) use the same bar.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.extract.titles import TitleMatcher

_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")  # "Hello Love (song)", "Beatrice (1987 film)"


def title_specificity(names: Sequence[str], bm25, doc_codes: np.ndarray | None = None) -> np.ndarray:
    """``spec`` of each name (module docstring) from a :class:`spectrag.index.lexical.BM25Index`:
    its terms as the index tokenizes a query, each term's frequency from the stored ``[vocab, n]``
    score matrix. With ``doc_codes`` (each chunk's document, ``[n]``) frequencies count
    documents over the number of documents, so a page split into many chunks does not make its
    own title look common; without, chunks. Shapes: ``[T]`` names -> ``[T]`` float64."""
    if not len(names):
        return np.zeros(0)
    terms = bm25.query_matrix(list(names)).tocsr()  # [T, vocab] term counts
    matrix = bm25.matrix
    if doc_codes is None:
        n, df_of = bm25.n, lambda t: np.diff(matrix.indptr)[t].astype(np.float64)
    else:
        doc_codes = np.asarray(doc_codes, dtype=np.int64)
        n = len(np.unique(doc_codes))
        span = int(doc_codes.max()) + 1 if len(doc_codes) else 1

        def df_of(t: np.ndarray) -> np.ndarray:  # distinct documents among each term's chunks
            used, inverse = np.unique(t, return_inverse=True)
            rows = matrix[used].tocoo()
            pairs = np.unique(rows.row.astype(np.int64) * span + doc_codes[rows.col])
            return np.bincount(pairs // span, minlength=len(used)).astype(np.float64)[inverse]
    if n <= 1:
        return np.ones(len(names))
    idf = np.log(n / np.maximum(df_of(terms.indices), 1.0)) / math.log(n) if terms.nnz else np.zeros(0)
    rows = np.repeat(np.arange(len(names)), np.diff(terms.indptr))
    spec = np.zeros(len(names))
    np.maximum.at(spec, rows, np.clip(idf, 0.0, 1.0))
    return spec


class TitleIndex:
    """Titles of a corpus and the chunks of each. Built once per state from the chunk titles.
    A title ending in a parenthesized qualifier is also found by its base name ("Hello Love"
    names "Hello Love (song)"): questions name the entity, not the disambiguated article.
    ``bm25``: the index's BM25 index, for each name's specificity (without it every name has
    specificity 1)."""

    def __init__(self, chunk_titles: Sequence[str], bm25=None, doc_codes: np.ndarray | None = None) -> None:
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
        self.names = names
        self.specificity = title_specificity(names, bm25, doc_codes) if bm25 is not None else np.ones(len(names))
        self._specificity_list = self.specificity.tolist()  # read per match: a list item, not a numpy scalar
        # each chunk's own title's specificity (0 without a title): titles come first in ``names``
        self.chunk_specificity = np.where(has, self.specificity[np.maximum(owner, 0)], 0.0) if len(titles) \
            else np.zeros(self.n)
        self.matcher = TitleMatcher(names)

    def named(self, queries: Sequence[str], *, min_specificity: float = 0.0) -> sp.csr_matrix:
        """``[B, n]`` with 1 for every chunk of every document a query names through a title (or
        base name) of specificity at least ``min_specificity``."""
        return self.read(queries, min_specificity=min_specificity)[0]

    def without_names(self, queries: Sequence[str], *, min_specificity: float = 0.0) -> list[str]:
        """Each query, casefolded, with the titles (or base names) of specificity at least
        ``min_specificity`` that it names blanked out: what it asks beyond the documents it
        names ("which film has the director who was born later, or ?"), the lexical evidence
        of a chunk that bridging reaches from them (:func:`spectrag.rescore.bridge.graph_evidence`).
        Shapes: ``[B]`` -> ``[B]`` strings."""
        return self.read(queries, min_specificity=min_specificity)[1]

    def read(self, queries: Sequence[str], *, min_specificity: float = 0.0, blanked: bool = True
             ) -> tuple[sp.csr_matrix, list[str] | None, list[str]]:
        """:meth:`named`, :meth:`without_names` (None unless ``blanked``: the retriever needs
        only the names) and the names themselves (each query's matches of that specificity,
        space-separated) from one scan of each query."""
        specificity = self._specificity_list
        hits, rest, names = [], [] if blanked else None, []
        for text in queries:  # string matching: host work per text, the automaton's own loop
            t, spans = self.matcher.spans(text)
            found: set[int] = set()
            cut = []
            for start, end, ids in spans:
                specific = [i for i in ids if specificity[i] >= min_specificity]
                if specific:
                    found.update(specific)
                    cut.append((start, end))
            hits.append(sorted(found))
            names.append(" ".join(t[start:end] for start, end in cut))
            if blanked:
                for start, end in reversed(cut):  # from the end: earlier offsets stay valid
                    t = t[:start] + " " + t[end:]
                rest.append(t)
        rows = np.repeat(np.arange(len(hits)), [len(h) for h in hits])
        cols = self._title_of[np.fromiter((t for h in hits for t in h), dtype=np.int64, count=len(rows))]
        pick = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)),
                             shape=(len(hits), self.chunks_of.shape[0]))
        pick.data[:] = 1.0  # a title found twice (itself and its base name) counts once
        out = (pick @ self.chunks_of).tocsr()
        out.data[:] = 1.0
        return out, rest, names


@dataclass(frozen=True)
class NamedChunks:
    """The chunks of the documents each query names (:meth:`TitleIndex.named`) as one tensor on
    a device: ``keys [M]`` int64, ``query * n + chunk`` sorted (row, then chunk id). Host work
    on the query batch, done once when it is encoded; the device path reads it without a round
    trip (``nnz`` is known on the host)."""

    keys: torch.Tensor
    n: int
    batch: int

    @classmethod
    def from_csr(cls, named: sp.csr_matrix, device) -> "NamedChunks":
        """From ``named [B, n]`` (scipy CSR, the stored entries are the named chunks)."""
        named = named.tocsr()
        rows = np.repeat(np.arange(named.shape[0], dtype=np.int64), np.diff(named.indptr))
        keys = np.unique(rows * named.shape[1] + named.indices.astype(np.int64))
        return cls(torch.from_numpy(keys).to(torch.device(device)), named.shape[1], named.shape[0])

    @property
    def nnz(self) -> int:
        return self.keys.numel()

    @property
    def shape(self) -> tuple[int, int]:
        return (self.batch, self.n)

    def rows(self) -> torch.Tensor:
        """The query of each entry. ``[M]``."""
        return self.keys // self.n

    def ids(self) -> torch.Tensor:
        """The chunk of each entry. ``[M]``."""
        return self.keys % self.n
