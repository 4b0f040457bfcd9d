"""Online step 3a: query-aware bridging, relevance carried along relational edges (max-plus).

A multi-hop question names the first passage's topic; the second passage is about what the
first one mentions (its bridge entity), so it matches the query only weakly by itself. Its
evidence is the *path*: a strongly relevant passage that links to it. Each round, the ``m``
best-scored candidates pass their score to their relational neighbours in the pool:

.. math::
    x'_c = \\max\\Big(x_c,\\ \\max_{s \\in \\mathrm{top}_m(x),\\, w_{sc} > 0}
           (1 - \\lambda)\\, x_s + \\lambda\\, r_c - \\gamma\\, (1 - w_{sc})\\Big)

with ``r`` the candidate's own relevance, ``x_0 = r`` and ``w`` the relational graph (entity,
title mention / citation, section, adjacency, utility; not semantic kNN) in [0, 1]. After one
round a chunk scores at most the weighted mean of its best linked seed and itself, so a chunk
the query does not match at all (small ``r_c``) is not lifted above its seed, and ``gamma``
makes weak links count less. ``rounds`` > 1 follows longer paths (three- and four-hop
questions). It is a max-plus product over the edges of the sparse relational blocks: no
per-query loop, and scores never decrease, so the dense top stays where it was unless a
bridged chunk overtakes it.
"""

from __future__ import annotations

import torch

from spectrag.config import BridgeConfig
from spectrag.kernels.blocks import BlockGraph
from spectrag.kernels.compiled.blocks import PoolGraphs
from spectrag.kernels.compiled.bridge import bridge_compiled
from spectrag.kernels.compiled.documents import best_per_document_compiled
from spectrag.kernels.compiled.lift import lift_above_compiled, protected_compiled
from spectrag.kernels.csr import csr_entries
from spectrag.kernels.topk import positions_by_score_then_id


def bridge_relevance(
    relations: BlockGraph | PoolGraphs,
    relevance: torch.Tensor,
    candidates: torch.Tensor,
    *,
    sources: int = 5,
    lam: float = 0.3,
    gamma: float = 0.05,
    rounds: int = 1,
    start: torch.Tensor | None = None,
    anchors: torch.Tensor | None = None,
    docs: torch.Tensor | None = None,
) -> torch.Tensor:
    """Bridged relevance ``x [B, P]`` (see the module docstring).

    Args:
        relations: the relational graph of each pool's induced subgraph, weights in [0, 1]
            (:class:`spectrag.kernels.blocks.BlockGraph`, ``B`` blocks of ``P x P``; or, for a
            CPU batch, :class:`~spectrag.kernels.compiled.blocks.PoolGraphs`: then the compiled
            kernel, :func:`spectrag.kernels.compiled.bridge.bridge_compiled`, runs, with the same
            float32 arithmetic; this torch version is its reference).
        relevance: the candidates' own relevance ``r`` (``[B, P]``).
        candidates: chunk ids, -1 on padding (``[B, P]``); ties in the top-``m`` go to the
            smaller id.
        sources: ``m``, the best-scored candidates that pass score on per round (default: 5).
        lam: ``lambda``, the target's share of a bridged score (default: 0.3).
        gamma: penalty per unit of missing link weight (default: 0.05).
        rounds: hops of bridging (default: 1).
        start: the scores ``x_0`` bridging starts from (default: ``relevance``), e.g. with the
            chunks the question names lifted to the top so that they are the sources.
        anchors: ``[B, P]`` bool, the candidates that may be sources (default: every one), e.g.
            the chunks of the documents the question names; a query without any bridges nothing.
        docs: ``[B, P]`` document code of each candidate (default: none known). A bridge leads to
            another document: a source's own document gets nothing from it, and of each document
            reached only its best-bridged chunk (ties: the smaller id) takes the bridged score,
            so one anchor's neighbours in one long page cannot fill the top of the ranking.

    Per round only the edges leaving the ``m`` source rows are read (a CSR slice) and each
    target keeps its best bridged score (``scatter_reduce`` amax): no ``[B, P, P]`` work.
    Shapes: -> ``[B, P]`` in relevance's dtype; padding keeps its input value.
    """
    mask = candidates >= 0
    x = relevance if start is None else start
    batch, p = relevance.shape
    if rounds < 1 or sources < 1 or p == 0:
        return x
    if isinstance(relations, PoolGraphs):
        return torch.from_numpy(bridge_compiled(
            relations, relevance.numpy(), sources=sources, lam=lam, gamma=gamma, rounds=rounds, start=x.numpy(),
            anchors=None if anchors is None else anchors.numpy(), docs=None if docs is None else docs.numpy()))
    target = (lam * relevance).masked_fill(~mask, float("-inf")).reshape(-1)  # (B P,)
    m = min(sources, p)
    rows = torch.arange(batch, device=relevance.device)[:, None] * p
    weight = relations.val.to(relevance.dtype)
    can = mask if anchors is None else mask & anchors
    for _ in range(rounds):
        key = x.masked_fill(~can, float("-inf"))
        order = positions_by_score_then_id(key, candidates, m)  # (B, m)
        source = (rows + order)[can.gather(1, order)]  # flat slots of the real sources
        owner, pos = csr_entries(relations.crow, source)  # their edges, in CSR order
        w, col = weight[pos], relations.col[pos]
        via = (1.0 - lam) * x.reshape(-1)[source][owner] + target[col] - gamma * (1.0 - w)
        via = via.masked_fill(~(w > 0), float("-inf"))
        if docs is not None:
            flat_docs = docs.reshape(-1)
            via = via.masked_fill(flat_docs[source][owner] == flat_docs[col], float("-inf"))
        best = torch.full((batch * p,), float("-inf"), dtype=x.dtype, device=x.device)
        best = best.scatter_reduce(0, col, via, reduce="amax", include_self=True).reshape(batch, p)
        if docs is not None:
            best = best_per_document(best, docs, candidates)
        x = torch.where(mask, torch.maximum(x, best), x)
    return x


def best_per_document(best: torch.Tensor, docs: torch.Tensor, candidates: torch.Tensor, *,
                      compiled: bool = False) -> torch.Tensor:
    """``best`` kept at each query's best entry per document (ties: the smaller chunk id), -inf
    elsewhere; ``compiled``: by the compiled CPU kernel (this is its reference; the same bits).
    Shapes: ``best/docs/candidates [B, P]`` (-inf / -1 where nothing) -> ``[B, P]``."""
    if compiled:
        return torch.from_numpy(best_per_document_compiled(best.numpy(), docs.numpy(), candidates.numpy()))
    live = torch.isfinite(best) & (candidates >= 0)
    if not bool(live.any()):
        return best
    batch, p = best.shape
    row = torch.arange(batch, device=best.device)[:, None].expand(batch, p)
    span = int(docs.max()) + 1
    _, group = torch.unique((row * span + docs.clamp(min=0))[live], return_inverse=True)  # (query, document)
    n = int(group.max()) + 1
    top = torch.full((n,), float("-inf"), dtype=best.dtype, device=best.device)
    top = top.scatter_reduce(0, group, best[live], reduce="amax", include_self=True)
    ids = torch.where(best[live] == top[group], candidates[live], torch.full_like(candidates[live], torch.iinfo(torch.int64).max))
    first = torch.full((n,), torch.iinfo(torch.int64).max, dtype=torch.int64, device=best.device)
    first = first.scatter_reduce(0, group, ids, reduce="amin", include_self=True)
    keep = torch.zeros_like(live)
    keep[live] = candidates[live] == first[group]
    return best.masked_fill(~keep, float("-inf"))


def protect_named(scores: torch.Tensor, relevance: torch.Tensor, named: torch.Tensor, candidates: torch.Tensor, *,
                  floor: float = 0.5, eps: float = 1e-3, compiled: bool = False) -> torch.Tensor:
    """Chunks of documents the question names stay on top: a named candidate whose relevance is
    at least ``floor`` times its query's best gets ``max(s, o) + eps (1 + s)``, ``o`` the best
    score of the other candidates, so it ranks above every one of them and the named chunks keep
    their own order (the map is increasing in ``s``). Bridging can then add second-hop chunks
    but cannot push down the passages the question asks about by name.

    ``compiled``: by the compiled CPU kernels (this is their reference; the same bits).
    Shapes: ``scores/relevance/candidates [B, P]`` (-inf / -1 on padding), ``named [B, P]`` bool.
    """
    if compiled:
        keep = protected_compiled(relevance.numpy(), named.numpy(), candidates.numpy(), floor)
        return lift_above(scores, torch.from_numpy(keep), candidates, eps=eps, compiled=True) if keep.any() else scores
    mask = candidates >= 0
    r_top = relevance.masked_fill(~mask, float("-inf")).amax(dim=1, keepdim=True)
    keep = named & mask & (relevance >= floor * r_top)
    if not bool(keep.any()):
        return scores
    return lift_above(scores, keep, candidates, eps=eps)


def lift_above(scores: torch.Tensor, keep: torch.Tensor, candidates: torch.Tensor, *, eps: float = 1e-3,
               compiled: bool = False) -> torch.Tensor:
    """``scores`` with the ``keep`` candidates above every other real one, in their own order:
    ``max(s, o) + eps (1 + s)``, ``o`` the best score of the others (increasing in ``s``). The
    lift of the named chunks (:func:`protect_named`) and of their first bridges
    (:mod:`spectrag.rescore.cover`); ``compiled``: by the compiled CPU kernel (the same bits).
    Shapes: ``[B, P]`` -> ``[B, P]``."""
    if compiled:
        return torch.from_numpy(lift_above_compiled(scores.numpy(), keep.numpy(), candidates.numpy(), eps))
    mask = candidates >= 0
    others = scores.masked_fill(~mask | keep, float("-inf")).amax(dim=1, keepdim=True)
    lifted = torch.maximum(scores, others) + eps * (1.0 + scores)
    return torch.where(keep, lifted, scores)


def named_best_chunks(named: torch.Tensor, relevance: torch.Tensor, docs: torch.Tensor,
                      candidates: torch.Tensor, *, compiled: bool = False) -> torch.Tensor:
    """Of each document a query names, its most relevant candidate chunk (ties: the smaller id):
    the document's representative, protected and vouching; its other chunks keep their own
    scores (a long page's sections would otherwise fill the top of the ranking); ``compiled``: by
    the compiled CPU kernel (:func:`best_per_document`). Shapes:
    ``named/relevance/docs/candidates [B, P]`` -> bool ``[B, P]``."""
    keyed = torch.where(named, relevance.to(torch.float64), torch.full_like(relevance, float("-inf"), dtype=torch.float64))
    return torch.isfinite(best_per_document(keyed, docs, candidates, compiled=compiled))


def graph_evidence(relations: BlockGraph, citations: BlockGraph | None, relevance: torch.Tensor,
                   candidates: torch.Tensor, named: torch.Tensor | None, docs: torch.Tensor,
                   config: BridgeConfig, *, target: torch.Tensor | None = None) -> torch.Tensor:
    """What the graph adds to the relevance ``r`` (online step 4's ``x``), two kinds of vouching:

    * **named anchors** (``config.anchors = "named"``): the chunks of the documents the question
      names pass their score along every relational edge (entity, title mention, citation,
      section, adjacency), ``lam`` of the target's own relevance kept: the second hop of a
      multi-hop question lands right under the passage the question asks about;
    * **cited documents** (``config.cited``): the ``sources`` best candidates pass their score
      along the citation edges between documents of specific titles only (links, mentions of
      a title that names one thing), ``cited_lam`` kept: a page the best hits refer to rises
      halfway to them, a second page for a question that needs two, and a strong first-stage
      hit is not buried by every page a good hit mentions.

    With ``config.other_documents`` a bridge leads to another document, one chunk per document
    reached (:func:`bridge_relevance`). ``target``: the relevance ``r_c`` a chunk reached along
    the relational edges brings (default: ``relevance``), e.g. that of the question without the
    titles it names (``config.target_lexical_weight``). With ``config.others_beyond_names`` and a
    ``target``, in a query that names documents every other candidate starts from the lower of
    its relevance and its target, so it ranks by the question beyond the names too (the named
    chunks' start is unchanged). Shapes: ``[B, P]``; ``named`` bool or None (no query names a
    document), ``docs`` the candidates' document codes (-1 padded) -> ``[B, P]``.
    """
    start = protect_named(relevance, relevance, named, candidates, floor=config.named_floor,
                          compiled=isinstance(relations, PoolGraphs)) \
        if named is not None and config.named_sources else relevance
    if config.others_beyond_names and target is not None and named is not None:
        untouched = named | ~named.any(dim=1, keepdim=True)  # the named chunks, and queries that name none
        start = torch.where(untouched, start, torch.minimum(target, relevance))
    anchors = None
    if config.anchors == "named":
        anchors = named if named is not None else torch.zeros_like(candidates, dtype=torch.bool)
    docs = docs if config.other_documents else None
    x = bridge_relevance(relations, relevance if target is None else target, candidates, sources=config.sources,
                         lam=config.lam, gamma=config.gamma, rounds=config.rounds, start=start, anchors=anchors,
                         docs=docs)
    if citations is not None:
        cited = bridge_relevance(citations, relevance, candidates, sources=config.sources, lam=config.cited_lam,
                                 gamma=config.gamma, rounds=config.rounds, start=start, docs=docs)
        x = torch.maximum(x, cited)
    return x
