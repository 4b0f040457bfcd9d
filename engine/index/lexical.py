"""Stage 4b of the offline build: the BM25 lexical index (``bm25s``).

bm25s precomputes every (term, chunk) BM25 contribution into a sparse matrix at index time.
We store that matrix (CSR ``[vocab, n]``) and score a whole batch of queries as one sparse
product ``Q @ S`` with ``Q`` the ``[B, vocab]`` query term counts, then take a tiled top-k:
no per-query loop.

Beside the matrix we keep the tokenized chunks (token ids in the index vocabulary, as a ragged
array ``indptr [n + 1]``, ``ids [tokens]``), so that adding and removing chunks (:meth:`BM25Index.update`)
tokenizes only the new ones: the scores must still be recomputed over all chunks (IDF and the
mean chunk length are global), but from stored ids, in vectorized passes. Terms are numbered by first use in the
corpus (old chunks before new ones), so an extended index is the very index a full build of
the union makes, file for file. (bm25s numbers stems in the order of a Python set of strings,
which changes with the hash seed: its files differed from run to run, ours do not.)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.config import BM25Config
from spectrag.errors import ConfigError, CorpusError, IndexFormatError, brief
from spectrag.index.bm25_scores import first_use_order, score_matrix, select_tokens
from spectrag.kernels.csr import csr_entries, torch_csr
from spectrag.kernels.compiled.topk import product_topk
from spectrag.kernels.topk import topk_smallest_id_ties, topk_sparse_rows
from spectrag.util.checks import check_csr, check_indptr, check_ints, check_strings, load_npy

TOKEN_FILES = ("tokens.indptr.npy", "tokens.ids.npy")  # the tokenized chunks, beside the matrix

# the device path scores a tile of queries against every chunk densely: at most this many
# float32 scores (1 GiB) at once
DENSE_SCORES_MAX = 1 << 28


@dataclass(frozen=True)
class DeviceTerms:
    """Query term counts laid out on a device (:meth:`BM25Index.device_terms`), for BM25 on the
    device without a host round trip. ``terms [B, T]`` int64 term ids in each query's stored
    order, padded with ``vocab`` (an empty row); ``weights [B, T]`` float32 (0 on padding);
    ``tile_rows``: queries scored at once against every chunk; ``postings[tile][slot]``: how many
    (term, chunk) entries slot ``slot`` of that tile's queries reads, counted on the host when the
    batch is encoded, so the device never reports a size back."""

    terms: torch.Tensor
    weights: torch.Tensor
    tile_rows: int
    postings: tuple[tuple[int, ...], ...]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.terms.shape[0], -1)

    def __len__(self) -> int:
        return self.terms.shape[0]


_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # bm25s.tokenize's default token pattern (scikit-learn's)


def _bm25s():
    import bm25s

    return bm25s


def _stemmer(language: str):
    if not language:
        return None
    try:
        import Stemmer
    except ImportError:
        raise ConfigError("bm25.stemmer needs PyStemmer: pip install PyStemmer (or set stemmer = \"\")") from None
    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise ConfigError(f"bm25.stemmer: PyStemmer has no language {language!r}") from None


class BM25Index:
    """BM25 over chunk texts. Shapes: ``search(queries: list[str], k)`` -> scores, ids ``[B, k]``."""

    FOLDER = "bm25"

    def __init__(
        self,
        config: BM25Config,
        vocab: dict[str, int],
        matrix: sp.csr_matrix,
        tokens: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.config = config
        self.vocab = vocab
        self.matrix = matrix  # (vocab, n) BM25 contribution of each term to each chunk
        # (indptr [n + 1] int64, ids [tokens] int32): chunk i's token ids are ids[indptr[i]:indptr[i + 1]];
        # None for an index written before they were stored (an add then rebuilds in full)
        self.tokens = tokens
        self._stem = _stemmer(config.stemmer)
        self._stopwords: frozenset | None = None  # bm25s's list for config.stopwords, on first use
        self._device_matrix: dict = {}  # torch device -> the matrix as a torch CSR there, on first use

    @property
    def n(self) -> int:
        return self.matrix.shape[1]

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        """Each text's terms as ``bm25s.tokenize`` makes them (lower-cased, its token pattern,
        stopwords dropped, stems from one ``stemWords`` call over the distinct words), which the
        index's chunks were built with. Our own loop because bm25s rebuilds its stopword set for
        every text: a quarter of the tokenizing time of a batch of questions."""
        if self._stopwords is None:
            from bm25s.tokenization import _infer_stopwords

            self._stopwords = frozenset(_infer_stopwords(self.config.stopwords or None))
        stop, split = self._stopwords, _TOKEN.findall
        words = [[w for w in split(text.lower()) if w not in stop] for text in texts]
        if self._stem is None:
            return words
        distinct = list(dict.fromkeys(chain.from_iterable(words)))
        stem = dict(zip(distinct, self._stem.stemWords(distinct)))
        return [[stem[w] for w in text] for text in words]

    @classmethod
    def build(cls, texts: list[str], config: BM25Config) -> "BM25Index":
        """The index of ``texts`` (chunk i is ``texts[i]``): matrix ``[vocab, len(texts)]``;
        :class:`CorpusError` when no text has a single term (only stopwords and punctuation)."""
        ids, indptr, terms = _tokenize_ids(texts, config)
        if not terms:
            raise CorpusError(
                f"no chunk has a term BM25 can index: every word is a stopword ({config.stopwords or 'none'}) or "
                f"punctuation (e.g. {texts[0][:60]!r}); add text, or set [bm25] stopwords = \"\""
            )
        return cls._from_ids(config, terms, ids, indptr)

    @classmethod
    def extend(cls, old: "BM25Index", new_texts: list[str], config: BM25Config) -> "BM25Index":
        """The index of ``old``'s chunks followed by ``new_texts``: :meth:`update` keeping every chunk."""
        return cls.update(old, np.ones(old.n, dtype=bool), new_texts, config)

    @classmethod
    def update(cls, old: "BM25Index", keep: np.ndarray, new_texts: list[str], config: BM25Config) -> "BM25Index":
        """The index of ``old``'s chunks where ``keep [n]`` is true followed by ``new_texts``,
        equal (file for file) to :meth:`build` of those texts, tokenizing only ``new_texts``:
        the stored token ids are gathered, terms no chunk uses any more are dropped and the rest
        renumbered by first use, and document frequencies, lengths, the mean length and every
        score are recomputed from the ids (:mod:`spectrag.index.bm25_scores`). ``config`` may
        change k1, b and the method, not the tokenization (stemmer, stopwords), which the
        stored token ids already carry."""
        if old.tokens is None:
            raise IndexFormatError(
                f"{cls.FOLDER}/: this index has no stored token ids ({', '.join(TOKEN_FILES)}); build it in full"
            )
        for name in ("stemmer", "stopwords"):
            if getattr(config, name) != getattr(old.config, name):
                raise ConfigError(
                    f"bm25.{name}: the index was tokenized with {getattr(old.config, name)!r}, not "
                    f"{getattr(config, name)!r}; rebuild the index to change it"
                )
        old_terms = sorted(old.vocab, key=old.vocab.__getitem__)
        if len(old_terms) != old.matrix.shape[0]:
            raise IndexFormatError(
                f"{cls.FOLDER}/vocab.json: {len(old_terms)} terms for a matrix of {old.matrix.shape[0]} rows"
            )
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (old.n,):
            raise ValueError(f"keep must be a bool mask [{old.n}], got shape {keep.shape}")
        old_indptr, old_ids = old.tokens
        kept_ids, kept_ptr = select_tokens(np.asarray(old_ids), np.asarray(old_indptr), keep)
        terms, parts, ptr = list(old_terms), [kept_ids.astype(np.int32, copy=False)], kept_ptr
        if new_texts:
            new_ids, new_indptr, new_terms = _tokenize_ids(new_texts, config)
            # new terms (already in first-use order) take the old id or the next free one, in order
            vocab = dict(old.vocab)
            added = [t for t in new_terms if t not in vocab]
            vocab.update((t, len(old_terms) + j) for j, t in enumerate(added))
            terms += added
            to_old = np.fromiter((vocab[t] for t in new_terms), dtype=np.int32, count=len(new_terms))
            parts.append(to_old[new_ids])
            ptr = np.concatenate([kept_ptr, kept_ptr[-1] + new_indptr[1:]])
        order, ids = first_use_order(np.concatenate(parts), len(terms))
        if not len(order):
            raise CorpusError("no chunk left has a term BM25 can index: an index needs at least one")
        terms = [terms[i] for i in order.tolist()]
        return cls(config, {t: i for i, t in enumerate(terms)}, score_matrix(ids, ptr, len(terms), config), (ptr, ids))

    @classmethod
    def _from_ids(cls, config: BM25Config, terms: list[str], ids: np.ndarray, indptr: np.ndarray) -> "BM25Index":
        """Score matrix of the tokenized corpus (``ids [tokens]`` of ``terms``, chunk i at
        ``indptr[i]:indptr[i + 1]``) with bm25s, which takes pre-tokenized input."""
        bm25s = _bm25s()
        docs = _TokenLists(np.asarray(ids), np.asarray(indptr))
        model = bm25s.BM25(k1=config.k1, b=config.b, method=config.method)
        # a fresh dict: bm25s appends an empty-string term (no matrix row) to the one it is given
        model.index(bm25s.tokenization.Tokenized(ids=docs, vocab={t: i for i, t in enumerate(terms)}),
                    show_progress=False)
        s = model.scores
        # bm25s keeps a CSC matrix of shape (n_docs, vocab): exactly the CSR of (vocab, n_docs)
        matrix = sp.csr_matrix((s["data"], s["indices"], s["indptr"]), shape=(len(terms), s["num_docs"]))
        return cls(config, {t: i for i, t in enumerate(terms)}, matrix, (indptr, ids))

    def query_matrix(self, queries: list[str]) -> sp.csr_matrix:
        """Term counts of the queries over the index vocabulary; unknown terms are dropped.
        Shapes: ``[B]`` -> float32 ``[B, vocab]``."""
        return self.query_matrices(queries)[0]

    def query_matrices(self, *groups: list[str]) -> list[sp.csr_matrix]:
        """:meth:`query_matrix` of each list of texts, from one tokenizer call (its set-up is
        paid once). Shapes: ``[B_i]`` each -> float32 ``[B_i, vocab]`` each."""
        texts = [t for group in groups for t in group]
        vocab = self.vocab
        ids = [[vocab[t] for t in terms if t in vocab] for terms in self._tokenize(texts)] if texts else []
        starts = np.concatenate([[0], np.cumsum(np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)))])
        cols = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(starts[-1]))
        out, lo = [], 0
        for group in groups:
            hi = lo + len(group)
            m = sp.csr_matrix((np.ones(int(starts[hi] - starts[lo]), dtype=np.float32), cols[starts[lo]:starts[hi]],
                               starts[lo : hi + 1] - starts[lo]), shape=(len(group), len(vocab)))
            m.sum_duplicates()  # a term said twice counts 2; indices sorted
            out.append(m)
            lo = hi
        return out

    def score(self, queries: list[str]) -> sp.csr_matrix:
        """BM25 scores of every chunk for every query, as sparse ``[B, n]``."""
        return (self.query_matrix(queries) @ self.matrix).tocsr()

    def search(
        self, queries: list[str], k: int, *, tile: int = 256, device="cpu", backend: str = "auto"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` chunks per query text: :meth:`search_terms` of :meth:`query_matrix`.
        Shapes: -> scores, ids ``[B, min(k, n)]``."""
        return self.search_terms(self.query_matrix(queries), k, tile=tile, device=device, backend=backend)

    def search_terms(
        self, terms: sp.csr_matrix, k: int, *, tile: int = 256, device="cpu", backend: str = "auto"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` chunks per row of the query term counts ``terms [B, vocab]``, ties by smaller
        chunk id; slots past the last chunk with a non-zero score hold id -1 and score 0
        (FAISS's convention).

        ``backend``: ``compiled`` (CPU: the product and its top-k by a compiled kernel, one query
        at a time, :mod:`spectrag.kernels.compiled.topk`), ``scipy`` (CPU: scipy's sparse product,
        then a torch top-k; the same sums as compiled), ``torch`` (torch sparse products on
        ``device``; the matrix is copied there once) or ``auto``: compiled on the CPU, torch on
        any other device, so a GPU batch is not bound by the CPU. torch sums a chunk's term
        scores in its own order: scores agree to float32 rounding.

        Shapes: -> scores, ids ``[B, min(k, n)]``.
        """
        s, i = self.search_terms_tensors(terms, k, tile=tile, device=device, backend=backend)
        return s.cpu().numpy(), i.cpu().numpy()

    def search_terms_tensors(
        self, terms: sp.csr_matrix, k: int, *, tile: int = 256, device="cpu", backend: str = "auto",
        allowed: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`search_terms` with the results as tensors on ``device`` (a device batch never
        comes back to the host); ``allowed`` (bool ``[B, n]``, a metadata filter): the top-``k``
        among each query's allowed chunks. Shapes: -> scores (float32), ids (int64) ``[B, min(k, n)]``."""
        device = torch.device(device)
        if backend not in ("auto", "compiled", "scipy", "torch"):
            raise ConfigError(f"BM25 search backend must be auto, compiled, scipy or torch, got {backend!r}")
        if terms.shape[1] != self.matrix.shape[0]:
            raise ValueError(f"terms must be [B, vocab = {self.matrix.shape[0]}], got {terms.shape}")
        on_torch = backend == "torch" or (backend == "auto" and device.type != "cpu")
        k = min(k, self.n)
        if k > 0 and (backend == "compiled" or (backend == "auto" and device.type == "cpu")):
            # the product and its top-k compiled, one query at a time (same sums as scipy's)
            q, m = terms.tocsr(), self.matrix
            mask = None if allowed is None else allowed.detach().cpu().numpy()
            s, i = product_topk(q.indptr, q.indices, q.data, m.indptr, m.indices, m.data, self.n, k, allowed=mask)
            return torch.from_numpy(s).to(device), torch.from_numpy(i).to(device)
        scores, ids = [], []
        for lo in range(0, max(terms.shape[0], 1), tile):
            part = terms[lo : lo + tile]
            if not on_torch:
                rows = (part @ self.matrix).tocsr()  # (tile, n) sparse: only chunks sharing a term
                indptr, cols, vals = (torch.from_numpy(a) for a in (rows.indptr, rows.indices, rows.data))
            else:
                indptr, cols, vals = self._score_on(part, device)
            if allowed is not None:  # a disallowed chunk scores as no match (0: never in a top-k)
                row = torch.repeat_interleave(torch.arange(indptr.numel() - 1, device=indptr.device), torch.diff(indptr))
                ok = allowed[lo : lo + tile].to(cols.device)[row, cols.to(torch.int64)]
                vals = torch.where(ok, vals, torch.zeros_like(vals))
            s, i = top_k_scores(indptr, cols, vals, k)
            scores.append(s.to(device, torch.float32))
            ids.append(i.to(device, torch.int64))
        return torch.cat(scores)[: terms.shape[0]], torch.cat(ids)[: terms.shape[0]]

    def _score_on(self, q: sp.csr_matrix, device):
        """``q @ matrix`` as torch sparse products on ``device``: CSR ``(indptr, cols, values)``
        of the ``[B, n]`` scores."""
        cache = self._device_matrix
        if device not in cache:
            m = self.matrix
            cache[device] = torch_csr(m.indptr, m.indices, m.data, m.shape, dtype=torch.float32, device=device)
        q = torch_csr(q.indptr, q.indices, q.data, q.shape, dtype=torch.float32, device=device)
        rows = torch.sparse.mm(q, cache[device])
        return rows.crow_indices(), rows.col_indices(), rows.values()

    # -- the device path: query terms as tensors, BM25 on the device --------------------------

    def device_terms(self, terms: sp.csr_matrix, device) -> DeviceTerms:
        """``terms [B, vocab]`` (query term counts) as :class:`DeviceTerms` on ``device``: host
        work on the query batch (its shape and the postings each slot reads), done once when the
        batch is encoded."""
        if terms.shape[1] != self.matrix.shape[0]:
            raise ValueError(f"terms must be [B, vocab = {self.matrix.shape[0]}], got {terms.shape}")
        q = terms.tocsr()
        batch, vocab = q.shape[0], self.matrix.shape[0]
        lengths = np.diff(q.indptr)
        width = int(lengths.max()) if batch else 0
        ids = np.full((batch, width), vocab, dtype=np.int64)
        weights = np.zeros((batch, width), dtype=np.float32)
        row = np.repeat(np.arange(batch), lengths)
        slot = np.arange(q.nnz) - np.repeat(q.indptr[:-1], lengths)
        ids[row, slot] = q.indices
        weights[row, slot] = q.data
        degree = np.append(np.diff(self.matrix.indptr), 0)  # the padding term has no postings
        tile = max(1, min(batch, DENSE_SCORES_MAX // max(self.n, 1)))
        postings = tuple(tuple(int(v) for v in degree[ids[lo : lo + tile]].sum(axis=0))
                         for lo in range(0, batch, tile))
        device = torch.device(device)
        return DeviceTerms(torch.from_numpy(ids).to(device), torch.from_numpy(weights).to(device), tile, postings)

    def _device_arrays(self, device: torch.device) -> dict:
        """The matrix on ``device`` once: ``indptr [vocab + 2]`` (one empty padding row at the
        end), ``indices``, ``data`` float32, and ``keys = term * n + chunk`` sorted (rows in
        order, columns ascending in a row) for lookups."""
        key = ("arrays", str(device))
        if key not in self._device_matrix:
            m = self.matrix if self.matrix.has_sorted_indices else self.matrix.sorted_indices()
            indptr = np.append(m.indptr.astype(np.int64), m.indptr[-1])
            row = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
            self._device_matrix[key] = dict(
                indptr=torch.from_numpy(indptr).to(device),
                indices=torch.from_numpy(m.indices.astype(np.int64)).to(device),
                data=torch.from_numpy(m.data.astype(np.float32)).to(device),
                keys=torch.from_numpy(row * self.n + m.indices.astype(np.int64)).to(device),
                sorted=m,
            )
        return self._device_matrix[key]

    def dense_scores(self, terms: DeviceTerms, lo: int, hi: int) -> torch.Tensor:
        """BM25 of queries ``lo:hi`` (one tile of ``terms``) against every chunk, ``[hi - lo, n]``
        float32 on the terms' device, with the bits of scipy's product (and the compiled
        kernels'): each chunk's sum taken in float32, the query's terms in stored order, by one
        gather of the postings and one scatter-add per term slot (a slot adds at most once to
        a score, so the adds keep that order)."""
        a = self._device_arrays(terms.terms.device)
        rows = hi - lo
        nodes = terms.terms[lo:hi].T.reshape(-1)  # slot-major: each slot's postings contiguous
        total = sum(terms.postings[lo // terms.tile_rows])
        owner, pos = csr_entries(a["indptr"], nodes, total=total)
        target = (owner % rows) * self.n + a["indices"][pos]
        value = terms.weights[lo:hi].T.reshape(-1)[owner] * a["data"][pos]
        scores = torch.zeros(rows * self.n, dtype=torch.float32, device=nodes.device)
        start = 0
        for count in terms.postings[lo // terms.tile_rows]:
            scores.index_add_(0, target[start : start + count], value[start : start + count])
            start += count
        return scores.reshape(rows, self.n)

    def search_device(self, terms: DeviceTerms, k: int, *,
                      allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`search_terms` on the device: the top-``k`` positive scores per query of
        :meth:`dense_scores`, ties to the smaller chunk id, -1 / 0 past the last match; the same
        lists as the compiled kernel. ``allowed`` (bool ``[B, n]``, a metadata filter): a
        disallowed chunk scores as no match. Shapes: -> scores (float32), ids (int64) ``[B, min(k, n)]``."""
        k = min(k, self.n)
        batch = len(terms)
        if k == 0 or batch == 0:
            dev = terms.terms.device
            return torch.zeros(batch, k, device=dev), torch.full((batch, k), -1, dtype=torch.int64, device=dev)
        parts = []
        for lo in range(0, batch, terms.tile_rows):
            hi = min(batch, lo + terms.tile_rows)
            scores = self.dense_scores(terms, lo, hi)
            if allowed is not None:
                scores = scores.masked_fill(~allowed[lo:hi].to(scores.device), 0.0)
            s, i = topk_smallest_id_ties(scores, k)
            no_match = s <= 0
            parts.append((s.masked_fill(no_match, 0.0), i.masked_fill(no_match, -1)))
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def scores_at(self, terms: DeviceTerms, candidates: torch.Tensor) -> torch.Tensor:
        """BM25 of each query at its candidates, on the device, without scoring the other
        chunks: per term slot, the (term, candidate) entries looked up in the sorted keys and
        added in float32 in slot order (the bits of :func:`~spectrag.kernels.compiled.topk.product_at`).
        Shapes: ``candidates [B, P]`` (-1 padded) -> ``[B, P]`` float32, 0 where no term matches
        and on padding."""
        a = self._device_arrays(candidates.device)
        keys, data = a["keys"], a["data"]
        cand = candidates.clamp(min=0)
        out = torch.zeros(candidates.shape, dtype=torch.float32, device=candidates.device)
        if keys.numel() == 0:
            return out
        for j in range(terms.terms.shape[1]):
            want = terms.terms[:, j : j + 1] * self.n + cand  # the padding term's keys are past every key
            at = torch.searchsorted(keys, want).clamp(max=keys.numel() - 1)
            hit = (keys[at] == want) & (candidates >= 0)
            out = out + terms.weights[:, j : j + 1] * torch.where(hit, data[at], torch.zeros((), device=out.device))
        return out

    def save(self, folder: Path) -> None:
        out = folder / self.FOLDER
        out.mkdir()
        np.save(out / "data.npy", self.matrix.data.astype(np.float32))
        np.save(out / "indices.npy", self.matrix.indices.astype(np.int32))
        np.save(out / "indptr.npy", self.matrix.indptr.astype(np.int64))
        terms = sorted(self.vocab, key=self.vocab.__getitem__)
        info = {"terms": terms, "shape": list(self.matrix.shape)}
        (out / "vocab.json").write_text(json.dumps(info, ensure_ascii=False), encoding="utf-8")
        if self.tokens is not None:
            indptr, ids = self.tokens
            np.save(out / TOKEN_FILES[0], np.asarray(indptr, dtype=np.int64))
            np.save(out / TOKEN_FILES[1], np.asarray(ids, dtype=np.int32))

    @classmethod
    def load(cls, folder: Path, config: BM25Config, *, n_chunks: int | None = None,
             tokens: bool | None = None) -> "BM25Index":
        """The index saved under ``folder/bm25``, every array checked before use
        (:mod:`spectrag.util.checks`): a term x chunk CSR of ``n_chunks`` columns (default: the
        stored shape's) with indices in range and finite scores >= 0, distinct terms, token ids in
        the vocabulary. ``tokens``: whether to read the stored token ids (default: when present)."""
        src = folder / cls.FOLDER
        where = f"{src}/vocab.json"
        try:
            info = json.loads((src / "vocab.json").read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError, OSError) as exc:
            raise IndexFormatError(f"{where}: unreadable ({type(exc).__name__}: {str(exc)[:200]})") from None
        if not isinstance(info, dict) or set(info) != {"terms", "shape"}:
            raise IndexFormatError(f"{where}: expected an object {{terms, shape}}")
        terms = check_strings(info["terms"], f"{where} terms")
        shape = info["shape"]
        if not (isinstance(shape, list) and len(shape) == 2 and all(type(v) is int and v >= 0 for v in shape)):
            raise IndexFormatError(f"{where}: shape must be [terms, chunks], got {brief(shape)}")
        if n_chunks is not None and shape[1] != n_chunks:
            raise IndexFormatError(f"{where}: a matrix over {shape[1]} chunks, the index has {n_chunks}")
        if shape[0] != len(terms):
            raise IndexFormatError(f"{where}: {len(terms)} terms for a matrix of {shape[0]} rows")
        vocab = {t: i for i, t in enumerate(terms)}
        if len(vocab) != len(terms):
            raise IndexFormatError(f"{where}: terms repeat")
        parts = [load_npy(src / f"{name}.npy") for name in ("data", "indices", "indptr")]
        # BM25 scores are >= 0 in every bm25s variant (a zero is no match)
        check_csr(parts[2], parts[1], parts[0], f"{src}/{{data,indices,indptr}}.npy", (shape[0], shape[1]), lo=0.0)
        matrix = sp.csr_matrix(tuple(parts), shape=(shape[0], shape[1]))
        if tokens is None:
            tokens = all((src / name).exists() for name in TOKEN_FILES)
        return cls(config, vocab, matrix, _load_tokens(src, matrix.shape) if tokens else None)


def top_k_scores(indptr, cols, vals, k: int):
    """Top-``k`` positive entries per row of a ``[B, n]`` score CSR (torch tensors on any device),
    ties to the smaller chunk id; BM25 scores are >= 0 and a zero is no match, so rows with fewer
    positive entries end in id -1, score 0. Shapes: -> scores, ids ``[B, k]``."""
    scores, ids = topk_sparse_rows(indptr, cols, vals, k)  # positive entries rank first
    no_match = scores <= 0
    return scores.masked_fill(no_match, 0.0), ids.masked_fill(no_match, -1)


class _TokenLists:
    """The chunks' token ids as the sequence of Python lists bm25s iterates, made one chunk at a
    time: lists of all tokens at once doubled the build's memory at 10^6 chunks, and numpy arrays
    per chunk made bm25s's counting loops slower."""

    def __init__(self, ids: np.ndarray, indptr: np.ndarray) -> None:
        self.ids, self.indptr = ids, indptr

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def __getitem__(self, i: int) -> list[int]:
        return self.ids[self.indptr[i] : self.indptr[i + 1]].tolist()

    def __iter__(self):
        bounds = self.indptr.tolist()
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            yield self.ids[lo:hi].tolist()


def _tokenize_ids(texts: list[str], config: BM25Config) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Token ids of ``texts`` with terms numbered by first use: ``ids [tokens]`` int32,
    ``indptr [len(texts) + 1]`` int64 (text i at ``ids[indptr[i]:indptr[i + 1]]``) and the terms."""
    tokenized = _bm25s().tokenize(
        texts, lower=True, stopwords=config.stopwords or None, stemmer=_stemmer(config.stemmer),
        return_ids=True, show_progress=False,
    )
    lengths = np.fromiter(map(len, tokenized.ids), dtype=np.int64, count=len(texts))
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    ids = np.fromiter(chain.from_iterable(tokenized.ids), dtype=np.int32, count=int(indptr[-1]))
    by_id = sorted(tokenized.vocab, key=tokenized.vocab.__getitem__)
    used, first = np.unique(ids, return_index=True)
    order = used[np.argsort(first)]  # bm25s ids in the order of their first use
    renumber = np.full(len(by_id), -1, dtype=np.int32)
    renumber[order] = np.arange(len(order), dtype=np.int32)
    return renumber[ids], indptr, [by_id[i] for i in order]


def _load_tokens(src: Path, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The stored token ids (memory-mapped), checked: ``indptr [n + 1]`` a row pointer over
    ``ids``, every id a row of the ``[vocab, n]`` matrix."""
    indptr, ids = (load_npy(src / name) for name in TOKEN_FILES)
    if indptr.ndim != 1 or ids.ndim != 1 or indptr.shape != (shape[1] + 1,) or ids.shape != (int(indptr[-1]),):
        raise IndexFormatError(
            f"{src}/{TOKEN_FILES[0]}: {indptr.shape[0] if indptr.ndim else '?'} offsets and {ids.size} token ids do not "
            f"describe {shape[1]} chunks ({int(indptr[-1]) if indptr.ndim == 1 and indptr.size else '?'} tokens)"
        )
    check_indptr(indptr, f"{src}/{TOKEN_FILES[0]}", shape[1], ids.shape[0])
    check_ints(ids, f"{src}/{TOKEN_FILES[1]}", (None,), 0, shape[0])
    return indptr, ids
