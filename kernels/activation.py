r"""Batched spreading activation over a knowledge graph (SA-RAG, sections 3.5-3.6, Algorithm 1)
for ``B`` queries at once.

Per query ``b``: the seeds are the top-``k`` entities by cosine with the query; each edge
``e`` (a relation) gets the weight :math:`w_{eb} = \cos(q_b, r_e)` rescaled by

.. math::
    w'_{eb} = \max\Bigl(0, \frac{w_{eb} - c}{1 - c}\Bigr)

and activation spreads for ``n`` synchronous rounds from 1 on the seeds:

.. math::
    a^{(0)} = \mathbb{1}_{\text{seeds}}, \qquad
    a^{(t)}_j = \min\Bigl(1,\; a^{(0)}_j + \sum_{e:\,i \to j} w'_{eb}\, a^{(t-1)}_i\Bigr).

This is the paper's update :math:`a_j \leftarrow \min(1, a_j + \sum_i a_i w_{ij})` with each
node forwarding only the activation it *gained* in the previous round (so every unit of
activation crosses an edge once, as in the paper's BFS where a node fires once): with
non-negative gains, capping every round equals capping the running sum, which telescopes to the
formula above. Re-sending the whole ``a_i`` every round instead would let a seed push ``w``
again each round (a path ``s -> x`` gives ``x = t w`` after ``t`` rounds), which no BFS does.

**Synchronous vs the paper's BFS.** The paper's code visits nodes in BFS order and each node
fires once, with whatever activation it holds when dequeued, so a node of BFS level ``L`` may
or may not have received the contribution of another level-``L`` node depending on the queue
order. Here all nodes update together from the previous round, which is order-free, monotone
(in the seeds, in every weight, hence non-increasing in ``c``), stays in ``[0, 1]`` and batches
as one gather-multiply-scatter per round. Both agree wherever the BFS order cannot matter:
on directed trees and on layered DAGs (every edge from level ``L`` to ``L + 1``), and on
undirected trees with one seed for ``n <= 3``; on undirected graphs the synchronous rounds
also let activation come back along an edge (``x -> y -> x``) up to ``n`` times, where the BFS
lets each node send once (``tests/kernels/test_activation.py`` shows both the agreement and
a case of the difference).

**Subgraph.** Activation that starts on the seeds reaches only nodes within ``t`` hops after
``t`` rounds, so ``n`` rounds on the whole graph equal ``n`` rounds on each query's ``n``-hop
neighbourhood (the paper's subgraph): no per-query masking is needed, and only edges leaving
nodes within ``n - 1`` hops can ever carry activation. Those are the edges used.

**Reached subgraph (the default).** Only nodes with positive activation forward anything, and
an edge with ``w' = 0`` carries nothing, so the same activations come from spreading over the
nodes *reached* (activation > 0) and the positive-weight edges out of them: round ``t`` expands
the nodes first reached in round ``t - 1`` (the seeds in round 1), computes the cosines of their
out-edges only, keeps those with ``w' > 0`` and spreads over all kept edges. Every node with
positive activation and its value are the same as in the full ``n``-hop subgraph
(``subgraph="full"``, the paper's); what is left out are nodes that stay at 0 and edges that
carry 0. The edges reported are every positive-weight edge between two reached nodes (the full
subgraph reports the edges leaving nodes within ``n - 1`` hops, so it misses an edge between
two nodes at depth ``n``). The work follows the activated nodes, not the
neighbourhood: at the paper's ``c = 0.4`` most edges weigh 0 and most of the neighbourhood is
never reached.

**Layouts** of the full subgraph (same results): ``ragged`` -- every query's own neighbourhood as flat
``(query, node)`` pairs and ``(query, edge)`` pairs, spread as one ``[pairs, 1]`` column (work
proportional to the sum of the neighbourhood sizes); ``dense`` -- the union of the
neighbourhoods with an ``[E_union, B]`` weight block (one matrix product for the weights; wins
when the neighbourhoods overlap). ``auto`` takes ``dense`` when its block is at most twice the
ragged pair count and under ``dense_max`` entries.

Both rounds use :func:`spectrag.kernels.edge_propagate.edge_propagate` (``Y[dst, b] += W[e, b] X[src,
b]``), so a faster backend there speeds this up too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from spectrag.kernels.csr import csr_entries
from spectrag.kernels.edge_propagate import edge_propagate, propagator
from spectrag.kernels.topk import tiled_topk_ip

__all__ = ["ActivationResult", "khop_pairs", "rescale_weights", "spread", "spreading_activation"]

LAYOUTS = ("auto", "ragged", "dense")
SUBGRAPHS = ("reached", "full")


def rescale_weights(w: torch.Tensor, c: float = 0.4) -> torch.Tensor:
    """``max(0, (w - c) / (1 - c))`` elementwise (paper 3.6), ``0 <= c < 1``. Any shape."""
    if not 0.0 <= c < 1.0:
        raise ValueError(f"c must be in [0, 1), got {c}")
    return ((w - c) / (1.0 - c)).clamp(min=0.0)


def spread(
    src: torch.Tensor,
    dst: torch.Tensor,
    weight: torch.Tensor,
    a0: torch.Tensor,
    hops: int,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    r"""``hops`` synchronous rounds :math:`a \leftarrow \min(1, a_0 + P_W a)` from ``a0``.

    Args:
        src, dst: directed edges ``i -> j``, int64 ``[E]`` (an undirected link is two edges).
        weight: rescaled weights in ``[0, 1]``, ``[E, B]`` (or ``[E]`` shared by all columns).
        a0: initial activation in ``[0, 1]``, ``[N, B]`` (1 on the seeds).
        hops: rounds ``n >= 0``.
        backend: passed to :func:`edge_propagate` (default: auto).

    Shapes: -> ``[N, B]`` in ``a0``'s dtype, values in ``[0, 1]``.
    """
    if hops < 0:
        raise ValueError(f"hops must be >= 0, got {hops}")
    if not a0.is_floating_point() or a0.ndim != 2:
        raise ValueError(f"a0 must be a floating [N, B] tensor, got {a0.dtype} {tuple(a0.shape)}")
    if a0.numel() and (bool(torch.isnan(a0).any()) or float(a0.min()) < 0 or float(a0.max()) > 1):
        raise ValueError("a0 must hold values in [0, 1] (no NaN)")
    if weight.numel() and (bool(torch.isnan(weight).any()) or float(weight.min()) < 0):
        raise ValueError("weight must be non-negative and not NaN (rescale cosines with rescale_weights)")
    a = a0
    step = propagator(src, dst, weight, a0, a0.shape[0], backend=backend) if hops else None  # checked once
    for _ in range(hops):
        a = (a0 + step(a)).clamp_(max=1.0)
    return a


def _take(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[idx]`` along dim 0 (``index_select``: several times faster than advanced indexing on
    the CPU)."""
    return x.index_select(0, idx)


def _seed_keys(seeds: torch.Tensor, n: int) -> torch.Tensor:
    """Sorted unique ``b * n + seed`` keys of the seeds (``-1`` for none). ``[B, k]`` -> ``[S]``."""
    rows = torch.arange(seeds.shape[0], device=seeds.device).repeat_interleave(seeds.shape[1])
    flat = seeds.reshape(-1)
    return torch.unique(rows[flat >= 0] * n + flat[flat >= 0])


def khop_pairs(
    indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, hops: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's ``hops``-hop neighbourhood of its seeds, for all queries at once.

    A frontier of ``(query, node)`` keys ``b * N + node`` is expanded through the CSR once per
    hop (no loop over queries).

    Args:
        indptr, indices: the graph as CSR over ``N`` nodes (int64 ``[N + 1]``, ``[nnz]``).
        seeds: seed node ids per query, ``-1`` for none, int64 ``[B, k]``.
        hops: radius ``n >= 0``.

    Shapes: -> keys ``[P]`` (int64, sorted, ``b * N + node``) and BFS depth ``[P]`` (0 on seeds).
    """
    n = indptr.numel() - 1
    keys = _seed_keys(seeds, n)
    depth = torch.zeros_like(keys)
    frontier = keys
    for h in range(1, hops + 1):
        if frontier.numel() == 0:
            break
        owner, pos = csr_entries(indptr, frontier % n)
        cand = torch.unique(_take(frontier // n * n, owner) + _take(indices, pos))
        at = torch.searchsorted(keys, cand).clamp(max=max(keys.numel() - 1, 0))
        frontier = cand[_take(keys, at) != cand]
        keys, order = torch.sort(torch.cat([keys, frontier]))
        depth = _take(torch.cat([depth, torch.full_like(frontier, h)]), order)
    return keys, depth


@dataclass(frozen=True)
class ActivationResult:
    """Spreading activation of ``B`` queries, as flat pairs (sparse ``[B, N]`` in COO form).

    Shapes:
        seeds, seed_scores: ``[B, k]`` seed node ids (by cosine, descending) and their cosines.
        query, node, depth, value: ``[P]`` sorted by (query, node); ``value`` the final
            activation in ``[0, 1]``. ``full``: every node of each query's ``n``-hop
            neighbourhood, ``depth`` its BFS depth. ``reached``: every node with positive
            activation, ``depth`` the round that first reached it (0 on the seeds).
        edge_query, edge, edge_src, edge_dst, edge_cos, edge_weight: ``[Ep]`` per query, sorted by
            (query, CSR position): its CSR position, endpoints (indices into the ``P`` pairs),
            raw cosine ``w`` and rescaled weight ``w'``. ``full``: every edge leaving a node
            within ``n - 1`` hops; ``reached``: every edge with ``w' > 0`` between two reached
            nodes (leaving a node first reached in the last round: only where both ends have at
            least ``report_min``).
        layout: the layout that ran (``ragged`` or ``dense``; ``reached`` is ragged).
    """

    seeds: torch.Tensor
    seed_scores: torch.Tensor
    query: torch.Tensor
    node: torch.Tensor
    depth: torch.Tensor
    value: torch.Tensor
    edge_query: torch.Tensor
    edge: torch.Tensor
    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    edge_cos: torch.Tensor
    edge_weight: torch.Tensor
    layout: str

    def to_dense(self, n_nodes: int) -> torch.Tensor:
        """Activation as a dense ``[B, N]`` block (for small graphs and tests)."""
        out = torch.zeros(self.seeds.shape[0], n_nodes, dtype=self.value.dtype, device=self.value.device)
        out[self.query, self.node] = self.value
        return out


def _check_inputs(q, node_emb, edge_emb, indptr, indices, edge_index, k, hops, c, layout) -> None:
    for name, t in (("q", q), ("node_emb", node_emb), ("edge_emb", edge_emb)):
        if not isinstance(t, torch.Tensor) or t.ndim != 2 or not t.is_floating_point():
            raise ValueError(f"{name} must be a floating 2-D tensor, got {getattr(t, 'shape', type(t))}")
    if not (q.shape[1] == node_emb.shape[1] == edge_emb.shape[1]):
        raise ValueError(
            f"q, node_emb and edge_emb must share d, got {q.shape[1]}, {node_emb.shape[1]}, {edge_emb.shape[1]}"
        )
    if q.shape[0] < 1 or node_emb.shape[0] < 1:
        raise ValueError(f"need at least one query and one node, got q {tuple(q.shape)}, node_emb {tuple(node_emb.shape)}")
    if bool(torch.isnan(q).any()):
        raise ValueError("q holds NaN")
    for name, t in (("indptr", indptr), ("indices", indices), ("edge_index", edge_index)):
        if t.dtype != torch.int64 or t.ndim != 1:
            raise ValueError(f"{name} must be 1-D int64, got {t.dtype} {tuple(t.shape)}")
    if indptr.numel() != node_emb.shape[0] + 1:
        raise ValueError(f"indptr must have N + 1 = {node_emb.shape[0] + 1} entries, got {indptr.numel()}")
    if indices.numel() != edge_index.numel() or int(indptr[-1]) != indices.numel():
        raise ValueError(
            f"indices ({indices.numel()}), edge_index ({edge_index.numel()}) and indptr[-1] ({int(indptr[-1])}) must agree"
        )
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= edge_emb.shape[0]):
        raise ValueError(f"edge_index must be in [0, {edge_emb.shape[0]}), got [{int(edge_index.min())}, {int(edge_index.max())}]")
    devices = {t.device for t in (q, node_emb, edge_emb, indptr, indices, edge_index)}
    if len(devices) > 1:
        raise ValueError(f"all inputs must share one device, got {sorted(map(str, devices))}")
    if k < 1 or hops < 0:
        raise ValueError(f"need k >= 1 and hops >= 0, got k={k}, hops={hops}")
    if not 0.0 <= c < 1.0:
        raise ValueError(f"c must be in [0, 1), got {c}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")


def _pair_cos(q: torch.Tensor, rows: torch.Tensor, edge_emb: torch.Tensor, cols: torch.Tensor,
              *, ratio: int = 32, tile: int | None = None) -> torch.Tensor:
    """``<q[rows[i]], edge_emb[cols[i]]>`` for every pair. ``[M]``.

    When the distinct rows of ``edge_emb`` times ``B`` are at most ``ratio`` x the pairs, one
    matrix product ``[U, d] x [d, B]`` and a gather (a GEMM does a multiply-add far cheaper than
    a gathered row does); otherwise a gathered dot product per pair, in tiles of ``tile`` pairs
    (default: 2^18 / d, about 1 MB of gathered rows: tiles of 16k pairs x 384 dims were 5-9x
    slower, their fresh buffers page-faulting every call).
    """
    tile = tile or max(256, (1 << 18) // q.shape[1])
    batch = q.shape[0]
    used, inverse = torch.unique(cols, return_inverse=True)
    if used.numel() * batch <= ratio * cols.numel():
        block = _take(edge_emb, used).to(q.dtype) @ q.T  # (U, B)
        return block.reshape(-1).index_select(0, inverse * batch + rows)
    out = torch.empty(rows.numel(), dtype=q.dtype, device=q.device)
    for lo in range(0, rows.numel(), tile):
        out[lo : lo + tile] = (_take(q, rows[lo : lo + tile]) * _take(edge_emb, cols[lo : lo + tile]).to(q.dtype)).sum(1)
    return out


def _spread_reached(q, edge_emb, indptr, indices, edge_index, seeds, seed_scores, hops, c, backend,
                    report_min) -> ActivationResult:
    """``hops`` synchronous rounds over the reached subgraph (module docstring): each round
    expands the nodes first reached in the previous one, keeps their positive-weight out-edges
    and spreads over every edge kept so far; at the end the nodes reached in the last round with
    activation >= ``report_min`` add their positive-weight edges to reached nodes with as much
    (reported, not spread).

    Reached (query, node) pairs are numbered in the order they are reached (keys ``b * N +
    node``), so the edges' endpoint numbers never change; a sorted copy of the keys answers
    "reached yet?", and everything is put in (query, node) order once at the end."""
    n, dev = indptr.numel() - 1, q.device
    keys = _seed_keys(seeds, n)  # (P,) reached pairs, in reach order
    depth = torch.zeros_like(keys)
    a0 = torch.ones(keys.numel(), dtype=q.dtype, device=dev)
    value = a0
    sorted_keys, sorted_at = keys, torch.arange(keys.numel(), device=dev)  # keys sorted, and their numbers
    empty = torch.zeros(0, dtype=torch.int64, device=dev)
    e_src, e_dst, e_pos, e_cos = [empty], [empty], [empty], [torch.zeros(0, dtype=q.dtype, device=dev)]

    def lookup(k: torch.Tensor) -> torch.Tensor:
        """The pair number of each key, -1 where not reached yet. ``[M]`` -> ``[M]``."""
        at = torch.searchsorted(sorted_keys, k).clamp(max=max(sorted_keys.numel() - 1, 0))
        return torch.where(_take(sorted_keys, at) == k, _take(sorted_at, at), -1)

    def expand(sources: torch.Tensor, *, into: torch.Tensor | None = None) -> None:
        """Positive-weight out-edges of the pairs numbered ``sources``, appended to the edge
        lists; new destinations join the pairs. With ``into`` (bool per pair) only edges into
        those pairs, and nothing joins."""
        nonlocal keys, depth, a0, value, sorted_keys, sorted_at
        owner, pos = csr_entries(indptr, _take(keys, sources) % n)
        src = _take(sources, owner)
        src_key = _take(keys, src)
        dst_key = src_key // n * n + _take(indices, pos)
        dst = lookup(dst_key)
        if into is not None:
            sel = torch.nonzero(dst >= 0).squeeze(1)
            sel = _take(sel, torch.nonzero(_take(into, _take(dst, sel))).squeeze(1))
            src, pos, src_key, dst_key, dst = (_take(x, sel) for x in (src, pos, src_key, dst_key, dst))
        # always the gathered dot (ratio 0): a query's cosines must not depend on its batch,
        # and a GEMM rounds differently (relations tied on the sentence they share flipped order)
        cos = _pair_cos(q, src_key // n, edge_emb, _take(edge_index, pos), ratio=0)
        keep = torch.nonzero(cos > c).squeeze(1)  # w' > 0
        src, pos, dst_key, dst, cos = (_take(x, keep) for x in (src, pos, dst_key, dst, cos))
        new_keys, new_of = torch.unique(dst_key[dst < 0], return_inverse=True)
        dst[dst < 0] = keys.numel() + new_of
        e_src.append(src)
        e_dst.append(dst)
        e_pos.append(pos)
        e_cos.append(cos)
        if new_keys.numel():
            grown = new_keys.numel()
            sorted_keys, order = torch.sort(torch.cat([sorted_keys, new_keys]))
            sorted_at = _take(torch.cat([sorted_at, keys.numel() + torch.arange(grown, device=dev)]), order)
            keys = torch.cat([keys, new_keys])
            depth = torch.cat([depth, torch.full((grown,), len(e_src) - 1, dtype=torch.int64, device=dev)])
            a0 = torch.cat([a0, a0.new_zeros(grown)])
            value = torch.cat([value, value.new_zeros(grown)])

    first = 0  # pairs from here on are not expanded yet
    for _ in range(hops):
        if first < keys.numel():
            reached = keys.numel()
            expand(torch.arange(first, reached, device=dev))
            first = reached
        src, dst, cos = torch.cat(e_src), torch.cat(e_dst), torch.cat(e_cos)
        if src.numel() == 0:
            break  # nothing can spread (and nothing was reached): every later round gives a0 again
        value = (a0 + edge_propagate(src, dst, rescale_weights(cos, c), value[:, None], keys.numel(),
                                     backend=backend)[:, 0]).clamp_(max=1.0)
    if first < keys.numel():  # reached in the last round: their edges to reached nodes, for the report
        enough = value >= report_min
        last = torch.arange(first, keys.numel(), device=dev)
        expand(_take(last, torch.nonzero(_take(enough, last)).squeeze(1)), into=enough)
    # pairs in (query, node) order, edges in (query, CSR position) order
    order = torch.argsort(keys)
    number = torch.empty_like(order)
    number[order] = torch.arange(order.numel(), device=dev)
    src, dst, pos, cos = (torch.cat(x) for x in (e_src, e_dst, e_pos, e_cos))
    query_of_edge = _take(keys, src) // n
    e_order = torch.argsort(query_of_edge * indptr[-1].clamp(min=1) + pos)
    src, dst, pos, cos = (_take(x, e_order) for x in (src, dst, pos, cos))
    keys = _take(keys, order)
    return ActivationResult(
        seeds=seeds, seed_scores=seed_scores, query=keys // n, node=keys % n, depth=_take(depth, order),
        value=_take(value, order), edge_query=_take(query_of_edge, e_order), edge=pos,
        edge_src=_take(number, src), edge_dst=_take(number, dst), edge_cos=cos, edge_weight=rescale_weights(cos, c),
        layout="ragged",
    )


def spreading_activation(
    q: torch.Tensor,
    node_emb: torch.Tensor,
    edge_emb: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    edge_index: torch.Tensor,
    *,
    k: int = 3,
    hops: int = 4,
    c: float = 0.4,
    layout: str = "auto",
    dense_max: int = 1 << 24,
    backend: str = "auto",
    seeds: torch.Tensor | None = None,
    subgraph: str = "reached",
    report_min: float = 0.0,
) -> ActivationResult:
    """Seeds, ``n``-hop subgraphs, per-query edge weights and synchronous spreading for ``B``
    queries (see the module docstring for the update and the layouts).

    Args:
        q: query vectors, L2-normalized, ``[B, d]``.
        node_emb: entity (description or name) embeddings, L2-normalized, ``[N, d]``.
        edge_emb: relation-text embeddings, L2-normalized, ``[T, d]``.
        indptr, indices: directed adjacency as CSR over the ``N`` entities (an undirected link
            appears in both rows), int64 ``[N + 1]``, ``[nnz]``.
        edge_index: row of ``edge_emb`` for each CSR entry, int64 ``[nnz]``.
        k: seeds per query, the top-``k`` entities by cosine; ties go to the smaller id
            (default: 3).
        hops: rounds and subgraph radius ``n`` (default: 4).
        c: weight rescaling offset (default: 0.4).
        layout: ``auto`` | ``ragged`` | ``dense``, for ``subgraph="full"`` (default: auto).
        dense_max: largest ``[E_union, B]`` block ``auto`` may take (default: 2^24 entries).
        backend: :func:`edge_propagate` backend (default: auto).
        seeds: seed entity ids ``[B, k']`` (-1 for none) to use instead of the top-``k`` search
            (``seed_scores`` are then their cosines) (default: None).
        subgraph: ``reached`` (the nodes with positive activation and the positive-weight
            edges between them) | ``full`` (the ``n``-hop neighbourhood); the same activation on
            every node either reports, see the module docstring (default: reached).
        report_min: ``reached`` only: an edge leaving a node first reached in the last round
            (it carried nothing) is reported only when both its ends have at least this
            activation; the last round's nodes are the most numerous, and a caller that keeps
            only active nodes' edges need not expand the others (default: 0, every such edge).

    Shapes: -> :class:`ActivationResult` (pairs in ``q``'s dtype and device).
    """
    _check_inputs(q, node_emb, edge_emb, indptr, indices, edge_index, k, hops, c, layout)
    if subgraph not in SUBGRAPHS:
        raise ValueError(f"subgraph must be one of {', '.join(SUBGRAPHS)}, got {subgraph!r}")
    n, batch, dev = node_emb.shape[0], q.shape[0], q.device
    if seeds is None:
        seed_scores, seeds = tiled_topk_ip(q, node_emb, k)  # (B, k)
    else:
        if seeds.ndim != 2 or seeds.shape[0] != batch or seeds.dtype != torch.int64 or (seeds.numel() and int(seeds.max()) >= n):
            raise ValueError(f"seeds must be int64 [B={batch}, k'] with ids < {n} (-1 for none), got {seeds.dtype} {tuple(seeds.shape)}")
        seed_scores = (_take(node_emb, seeds.clamp(min=0).reshape(-1)).to(q.dtype).reshape(*seeds.shape, -1) * q[:, None, :]).sum(2)
        seed_scores = seed_scores.masked_fill(seeds < 0, float("-inf"))
    if subgraph == "reached":
        return _spread_reached(q, edge_emb, indptr, indices, edge_index, seeds, seed_scores, hops, c, backend,
                               report_min)
    keys, depth = khop_pairs(indptr, indices, seeds, hops)  # (P,)
    query, node = keys // n, keys % n

    # edges leaving nodes within hops - 1 (the only ones that can carry activation in n rounds)
    sources = torch.nonzero(depth < hops).squeeze(1)
    owner, edge = csr_entries(indptr, _take(node, sources))
    edge_src = _take(sources, owner)
    edge_query = _take(query, edge_src)
    edge_dst = torch.searchsorted(keys, edge_query * n + _take(indices, edge))  # always present: depth <= n

    a0_pairs = (depth == 0).to(q.dtype)
    union_edges, edge_u = torch.unique(edge, return_inverse=True) if layout != "ragged" else (edge[:0], edge[:0])
    dense = layout == "dense" or (
        layout == "auto" and union_edges.numel() * batch <= min(2 * edge.numel(), dense_max)
    )
    if not dense:
        cos = _pair_cos(q, edge_query, edge_emb, _take(edge_index, edge))
        weight = rescale_weights(cos, c)
        value = spread(edge_src, edge_dst, weight, a0_pairs[:, None], hops, backend=backend)[:, 0]
    else:
        # union of the neighbourhoods: nodes U, edges E_u, one [E_u, B] weight block
        union_nodes, node_u = torch.unique(node, return_inverse=True)
        src_u = torch.zeros(union_edges.numel(), dtype=torch.int64, device=dev)
        dst_u = torch.zeros_like(src_u)
        src_u[edge_u] = _take(node_u, edge_src)
        dst_u[edge_u] = _take(node_u, edge_dst)
        block = _take(edge_emb, _take(edge_index, union_edges)).to(q.dtype) @ q.T  # (E_u, B)
        a0 = torch.zeros(union_nodes.numel(), batch, dtype=q.dtype, device=dev)
        a0[node_u, query] = a0_pairs
        act = spread(src_u, dst_u, rescale_weights(block, c), a0, hops, backend=backend)  # (U, B)
        value = act[node_u, query]
        cos = block[edge_u, edge_query]
        weight = rescale_weights(cos, c)
    return ActivationResult(
        seeds=seeds, seed_scores=seed_scores, query=query, node=node, depth=depth, value=value,
        edge_query=edge_query, edge=edge, edge_src=edge_src, edge_dst=edge_dst, edge_cos=cos,
        edge_weight=weight, layout="dense" if dense else "ragged",
    )
