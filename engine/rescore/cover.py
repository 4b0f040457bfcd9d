"""Each named document's first bridge: in a question that names several documents ("which film
has the director born later, X or Y?"), the best candidate reached from each of them ranks
before a second candidate reached from any one.

Bridging (:mod:`spectrag.rescore.bridge`) lifts the chunks the named documents link to, but a
well-linked first document can fill the places under the named chunks with its own
neighbours (other films of its director, its cast) while the second document's director waits
at rank 6-9. Here the ranking is walked from the top, past the named documents' own chunks:
a candidate that the relational or citation edges reach from a named document not yet covered
is marked, and the document (with every other one that reaches it) is covered. The marked
candidates then rank right under the named chunks, in their own order, in the ranking and in
the scores the selection reads (each walked in its own order); every query that names fewer
than two documents is untouched.

The walk is one step per rank over the whole batch (``depth`` steps of ``[B]`` tensor work, no
per-query loop, no host read on a device) and the anchors come from the pools' induced
subgraphs, on any device; a CPU
batch runs the compiled kernels (:mod:`spectrag.kernels.compiled.cover`, the same marks), which
read the named chunks' CSR rows and walk each query's order alone. The anchors are found once
per batch (:func:`named_cover`) for both walks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from spectrag.kernels.blocks import BlockGraph
from spectrag.kernels.compiled.blocks import PoolGraphs
from spectrag.kernels.compiled.cover import cover_reach_compiled, first_bridges_compiled
from spectrag.kernels.compiled.documents import named_document_bits_compiled
from spectrag.kernels.topk import positions_by_score_then_id
from spectrag.rescore.bridge import lift_above

MAX_NAMED = 8  # named documents per query that can be covered (the rest count as named, not as anchors)


def named_document_bits(named: torch.Tensor, docs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each named candidate's document numbered within its query (0, 1, ... in document-code
    order; -1 elsewhere) and the number of named documents per query: a sort of each row, no
    host read. Shapes: ``named [B, P]`` bool, ``docs [B, P]`` int64 -> ``[B, P]`` int64, ``[B]`` int64."""
    none = torch.iinfo(torch.int64).max
    keyed, order = torch.sort(torch.where(named, docs, torch.full_like(docs, none)), dim=1)
    real = keyed != none
    new = real & torch.cat([torch.ones_like(real[:, :1]), keyed[:, 1:] != keyed[:, :-1]], dim=1)
    number = torch.where(real, torch.cumsum(new.to(torch.int64), dim=1) - 1, torch.full_like(docs, -1))
    return torch.empty_like(docs).scatter_(1, order, number), new.sum(dim=1)


def cover_anchors(graphs: list[BlockGraph], bits: torch.Tensor, named: torch.Tensor) -> torch.Tensor:
    """Which named documents reach each candidate: an entry from a named chunk (the bridging
    direction: source row, target column) to a candidate of no named document (``graphs``: the
    pools' blocks). Shapes: ``bits / named [B, P]`` -> bool ``[B, P, MAX_NAMED]``."""
    batch, width = named.shape
    out = torch.zeros(batch * width * MAX_NAMED, dtype=torch.uint8, device=named.device)
    flat_bits, flat_named = bits.reshape(-1), named.reshape(-1)
    for graph in graphs:  # every entry scattered, the unused as 0 (a fixed shape: no host read)
        src, col = graph.src, graph.col
        bit = flat_bits[src]
        use = flat_named[src] & ~flat_named[col] & (bit >= 0) & (bit < MAX_NAMED)
        out.scatter_reduce_(0, col * MAX_NAMED + bit.clamp(0, MAX_NAMED - 1), use.to(torch.uint8), reduce="amax")
    return out.reshape(batch, width, MAX_NAMED).bool()


def first_bridges(order_scores: torch.Tensor, anchors: torch.Tensor, named: torch.Tensor, candidates: torch.Tensor,
                  several: torch.Tensor, depth: int) -> torch.Tensor:
    """The candidates marked by the walk down ``order_scores`` (the ranking's scores; ties to the
    smaller id) past the named chunks, ``depth`` ranks deep: each that a not yet covered named
    document reaches. Only in the queries with ``several`` named documents. Shapes:
    ``order_scores / named / candidates [B, P]``, ``anchors [B, P, K]``, ``several [B]`` bool ->
    bool ``[B, P]``."""
    batch, width = candidates.shape
    marked = torch.zeros(batch, width, dtype=torch.bool, device=candidates.device)
    key = order_scores.masked_fill(named | (candidates < 0), float("-inf"))
    steps = min(depth, width)
    if steps == 0:
        return marked
    order = positions_by_score_then_id(key, candidates, steps)  # (B, steps)
    real = torch.isfinite(key.gather(1, order)) & several[:, None]
    covered = torch.zeros(batch, anchors.shape[2], dtype=torch.bool, device=candidates.device)
    rows = torch.arange(batch, device=candidates.device)
    for t in range(steps):  # one rank at a time, the whole batch at once
        reach = anchors[rows, order[:, t]]  # (B, K)
        new = (reach & ~covered).any(dim=1) & real[:, t]
        marked[rows, order[:, t]] = new
        covered |= reach & new[:, None]
    return marked


@dataclass(frozen=True)
class NamedCover:
    """What the walks of one batch share, found once: the queries naming several documents and
    which named documents reach each candidate (``anchors [B, P, K]`` bool on the blocks' device,
    or ``reach [B, P]`` uint64 bits for the compiled CPU walk). :meth:`lift` walks one order of
    scores (the ranking's, the selection's)."""

    candidates: torch.Tensor
    named: torch.Tensor
    bits: torch.Tensor
    several: torch.Tensor
    depth: int
    anchors: torch.Tensor | None = None
    reach: np.ndarray | None = None

    def lift(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores`` with the first bridges of ``scores``' own order lifted under the named chunks."""
        if self.reach is not None:
            marked = torch.from_numpy(first_bridges_compiled(
                self.candidates.numpy(), self.bits.numpy(), self.several.numpy(), scores.numpy(), self.reach, self.depth))
        else:
            marked = first_bridges(scores, self.anchors, self.named, self.candidates, self.several, self.depth)
        return lift_above(scores, marked, self.candidates, compiled=self.reach is not None)


def named_cover(graphs: list[BlockGraph | PoolGraphs], named: torch.Tensor, docs: torch.Tensor,
                candidates: torch.Tensor, *, depth: int) -> NamedCover | None:
    """The batch's :class:`NamedCover` (None on the CPU when no query names two documents: one host
    read; a device reads nothing back). ``named``: every candidate chunk of a named document;
    ``graphs``: the pools' relational and citation subgraphs. Shapes: ``[B, P]``."""
    # a CPU batch: the compiled kernels, the same numbers and marks
    compiled = bool(graphs) and isinstance(graphs[0], PoolGraphs)
    real = named & (candidates >= 0)
    if compiled:
        bits, count = (torch.from_numpy(a) for a in named_document_bits_compiled(real.numpy(), docs.numpy()))
    else:
        bits, count = named_document_bits(real, docs)
    several = count >= 2
    if candidates.device.type == "cpu" and not bool(several.any()):  # most queries name one document or none
        return None
    if compiled:
        reach = cover_reach_compiled(candidates.numpy(), bits.numpy(), several.numpy(),
                                     [(g.indptr, g.indices) for g in graphs], MAX_NAMED)
        return NamedCover(candidates, named, bits, several, depth, reach=reach)
    return NamedCover(candidates, named, bits, several, depth, anchors=cover_anchors(graphs, bits, named))


def cover_named(scores: torch.Tensor, graphs: list[BlockGraph | PoolGraphs], named: torch.Tensor, docs: torch.Tensor,
                candidates: torch.Tensor, *, depth: int) -> torch.Tensor:
    """``scores`` with each named document's first bridge lifted (module docstring): one walk,
    :func:`named_cover` then :meth:`NamedCover.lift`. Shapes: ``[B, P]`` -> ``[B, P]``."""
    cover = named_cover(graphs, named, docs, candidates, depth=depth)
    return scores if cover is None else cover.lift(scores)
