"""What the online pipeline reads, laid out once on one device: :class:`QueryState`.

Built from a loaded index (:meth:`QueryState.from_index`) or from arrays in memory
(:meth:`QueryState.from_arrays`, e.g. a synthetic graph on a GPU). Building it copies the
embeddings and the graph arrays onto the device; every batch afterwards only gathers from it.
Nothing here is computed per query, and nothing is recomputed per batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.errors import SpectragError
from spectrag.graph.relational import specific_citations
from spectrag.index.dense import DenseIndex
from spectrag.index.lexical import BM25Index
from spectrag.kernels.csr import TorchCSR, torch_csr
from spectrag.kernels.pagerank import PageRankMatrix, RandomWalkOperator, random_walk_operator

# whole-graph PPR is solved exactly once up to this many chunks (a dense n x n float64 matrix:
# 128 MiB at 4096), by power iteration beyond
PPR_MATRIX_MAX_N = 4096
from spectrag.propagate.activation import KGState
from spectrag.seed.titles import TitleIndex
from spectrag.seed.utility import QuestionIndex
from spectrag.select.select import stub_chunks
from spectrag.util.checks import check_csr, check_symmetric
from spectrag.util.where import MetadataColumns


@dataclass
class QueryState:
    """Shapes: ``embeddings [n, d]`` float32, ``tokens/doc_codes/clusters [n]`` int64,
    ``coords [n, m]`` (rows L2-normalized) or None; ``weights`` (the fused graph) and
    ``relations`` (the relational graph, :mod:`spectrag.graph.relational`) as scipy CSR
    ``[n, n]`` for the CPU expansion, copied to the device as :class:`TorchCSR` on first use;
    ``dense`` the exact inner-product search over the embeddings; ``bm25`` the BM25 score
    matrix (None: dense seeds only); ``kg`` the knowledge graph as tensors (None: no KG modes);
    ``questions`` the utility questions' search (None: the index has none)."""

    n: int
    device: torch.device
    embeddings: torch.Tensor
    tokens: torch.Tensor
    doc_codes: torch.Tensor
    clusters: torch.Tensor
    dense: DenseIndex
    coords: torch.Tensor | None = None
    weights: sp.csr_matrix | None = None
    relations: sp.csr_matrix | None = None
    bm25: BM25Index | None = None
    kg: KGState | None = None
    titles: TitleIndex | None = None
    questions: QuestionIndex | None = None
    stubs: torch.Tensor | None = None  # [n] bool: chunks selection never spends budget on (select.select.stub_chunks)
    metadata: MetadataColumns | None = None  # the chunks' metadata, for where= filters (None: every chunk has none)
    _citations: tuple | None = field(default=None, repr=False, compare=False)  # the stored citation signal
    _torch_graphs: dict = field(default_factory=dict, repr=False, compare=False)  # name -> TorchCSR
    _kg_index: object = field(default=None, repr=False, compare=False)  # an index whose KG loads on first use

    @classmethod
    def from_arrays(
        cls,
        embeddings: np.ndarray | torch.Tensor,
        *,
        tokens: np.ndarray | torch.Tensor | None = None,
        doc_codes: np.ndarray | torch.Tensor | None = None,
        clusters: np.ndarray | torch.Tensor | None = None,
        coordinates: np.ndarray | torch.Tensor | None = None,
        weights: sp.csr_matrix | None = None,
        relations: sp.csr_matrix | None = None,
        bm25: BM25Index | None = None,
        kg: KGState | None = None,
        dense: DenseIndex | None = None,
        questions: QuestionIndex | None = None,
        device: str | torch.device = "cpu",
        check_graphs: bool = True,
    ) -> "QueryState":
        """A state from arrays in memory. Shapes: ``embeddings [n, d]`` (L2-normalized);
        ``tokens`` (default: 1 each), ``doc_codes`` (default: one document per chunk),
        ``clusters`` (default: 0) ``[n]``; ``coordinates [n, m]``; ``weights``, ``relations``
        scipy CSR ``[n, n]``, undirected: symmetric, non-negative, no self-loops (checked in
        O(nnz) unless ``check_graphs=False``, for graphs :func:`spectrag.graph.build.load_graph`
        already checked). The sparse block kernels read ``P^T = A D^{-1}`` off a block's own
        entries, which is the walk only when ``A`` is symmetric: a directed graph would give
        another PPR on the CPU (sparse) than on a GPU (dense blocks), so it is refused here."""
        device = torch.device(device)
        emb = torch.as_tensor(np.asarray(embeddings, dtype=np.float32) if not torch.is_tensor(embeddings)
                              else embeddings, dtype=torch.float32)
        n = emb.shape[0]

        def ints(a, fill):
            if a is None:
                return fill.to(device)
            return torch.as_tensor(np.asarray(a, dtype=np.int64) if not torch.is_tensor(a) else a,
                                   dtype=torch.int64).to(device)

        coords = None
        if coordinates is not None:
            z = torch.as_tensor(np.array(coordinates, dtype=np.float32) if not torch.is_tensor(coordinates)
                                else coordinates, dtype=torch.float32)
            coords = (z / z.norm(dim=1, keepdim=True).clamp(min=1e-12)).to(device)
        for name, g in (("weights", weights), ("relations", relations)):
            if g is None:
                continue
            if not sp.issparse(g) or g.format != "csr":
                raise SpectragError(f"{name} must be a scipy CSR matrix [n, n], got {type(g).__name__}")
            if g.shape != (n, n):
                raise SpectragError(f"{name} must be [n, n] = [{n}, {n}] over the embeddings' chunks, got {g.shape}")
            if check_graphs:
                check_csr(g.indptr, g.indices, g.data, name, (n, n), lo=0.0)
                check_symmetric(g.indptr, g.indices, g.data, name, n)
        if dense is None:
            dense = DenseIndex(emb.cpu().numpy(), device=str(device))
        return cls(
            n=n,
            device=device,
            embeddings=emb.to(device),
            tokens=ints(tokens, torch.ones(n, dtype=torch.int64)),
            doc_codes=ints(doc_codes, torch.arange(n)),
            clusters=ints(clusters, torch.zeros(n, dtype=torch.int64)),
            dense=dense,
            coords=coords,
            weights=weights,
            relations=relations,
            bm25=bm25,
            kg=kg,
            questions=questions,
        )

    @classmethod
    def from_index(cls, index, device: str | torch.device = "cpu", graph: dict | None = None) -> "QueryState":
        """The state of a loaded :class:`spectrag.store.Index`. ``graph`` (the keys of
        :func:`spectrag.graph.build.load_graph`: weights, relations, coordinates, clusters)
        replaces the index's stored graph, e.g. a graph re-fused without one signal."""
        device = torch.device(device)
        codes: dict[str, int] = {}
        doc_codes = [codes.setdefault(c.doc_id, len(codes)) for c in index.chunks]
        graph = index.graph if graph is None else graph
        arrays: dict = {}
        if graph is not None:
            w = graph["weights"]
            r = graph["relations"]
            arrays = dict(
                coordinates=graph["coordinates"],
                clusters=graph["clusters"],
                # private copies off the read-only memory maps
                weights=sp.csr_matrix((np.array(w.data), np.array(w.indices), np.array(w.indptr)), shape=w.shape),
                relations=sp.csr_matrix((np.array(r.data), np.array(r.indices), np.array(r.indptr)), shape=r.shape),
            )
        qs = graph.get("questions") if graph is not None else None
        state = cls.from_arrays(
            np.array(index.embeddings, dtype=np.float32),
            tokens=[c.n_tokens for c in index.chunks],
            doc_codes=doc_codes,
            bm25=index.bm25,
            dense=index.dense,
            questions=QuestionIndex(qs.vectors, qs.owners, device=device) if qs is not None else None,
            device=device,
            check_graphs=graph is not index.graph,  # load_graph checked the stored graph
            **arrays,
        )
        state._kg_index = index  # the KG's tensors are copied on the first activation batch
        state.titles = TitleIndex([c.title for c in index.chunks], index.bm25, np.asarray(doc_codes))
        state.stubs = stub_chunks(state.tokens, state.doc_codes, index.config.chunk.min_tokens)
        state.metadata = MetadataColumns([c.metadata for c in index.chunks])
        signals = graph.get("signals", {}) if graph is not None else {}
        if len(signals.get("citation", ((),))[0]):
            state._citations = signals["citation"]
        return state

    def allowed(self, wheres: list) -> torch.Tensor | None:
        """The chunks each query's filter (checked, or None) allows: bool ``[B, n]`` on the
        device, None when no query has one (:class:`~spectrag.util.where.MetadataColumns`)."""
        columns = self.metadata if self.metadata is not None else MetadataColumns([{}] * self.n)
        self.metadata = columns
        return columns.batch_mask(wheres, self.device)

    def citation_graph(self, min_specificity: float, *, on_device: bool = False) -> sp.csr_matrix | TorchCSR | None:
        """The citation edges between documents of specific titles
        (:func:`spectrag.graph.relational.specific_citations`), built once per bar: scipy CSR, or
        with ``on_device`` a :class:`TorchCSR` on the state's device (as :meth:`torch_graph`).
        None: the index has no citation edges."""
        if self._citations is None or self.titles is None:
            return None
        key = f"citations-{min_specificity!r}"
        if key not in self._torch_graphs:
            self._torch_graphs[key] = specific_citations(self._citations, self.titles.chunk_specificity, self.n,
                                                         min_specificity)
        if on_device and key + "-torch" not in self._torch_graphs:
            self._torch_graphs[key + "-torch"] = TorchCSR.from_scipy(self._torch_graphs[key], self.device)
        return self._torch_graphs[key + "-torch" if on_device else key]

    def torch_graph(self, name: str) -> TorchCSR:
        """``weights`` or ``relations`` as a :class:`TorchCSR` on the device, copied once."""
        if name not in self._torch_graphs:
            self._torch_graphs[name] = TorchCSR.from_scipy(getattr(self, name), self.device)
        return self._torch_graphs[name]

    def walk_operator(self) -> RandomWalkOperator:
        """The fused graph's transposed random-walk matrix for whole-graph PPR, built once."""
        if "walk" not in self._torch_graphs:
            w = self.weights
            A = torch_csr(w.indptr, w.indices, w.data, w.shape, dtype=torch.float64, device=self.device)
            self._torch_graphs["walk"] = random_walk_operator(A)
        return self._torch_graphs["walk"]

    def ppr_solver(self, damping: float) -> RandomWalkOperator | PageRankMatrix:
        """What whole-graph PPR runs on: the exact :class:`PageRankMatrix` of a graph of at most
        :data:`PPR_MATRIX_MAX_N` chunks (built once per damping, O(n^3)), else the walk
        operator for power iteration."""
        if self.n > PPR_MATRIX_MAX_N:
            return self.walk_operator()
        key = f"ppr-matrix-{damping!r}"
        if key not in self._torch_graphs:
            self._torch_graphs[key] = PageRankMatrix.build(self.walk_operator(), damping)
        return self._torch_graphs[key]

    def require_graph(self, mode: str) -> None:
        if self.weights is None:
            raise SpectragError(
                f"mode {mode!r} needs the chunk graph, but this index was built without it "
                "(graph.enabled = false); rebuild it or use mode dense, bm25 or hybrid"
            )

    def require_kg(self, mode: str) -> KGState:
        if self.kg is None and self._kg_index is not None:
            self.kg = KGState.from_index(self._kg_index, self.device)  # names what is missing
        if self.kg is None:
            raise SpectragError(
                f"mode {mode!r} needs the knowledge graph, but this state has none; build the index "
                "with `spectrag index ... --openie FILE` or kg.enabled = true"
            )
        return self.kg
