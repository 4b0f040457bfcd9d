r"""Token-budgeted greedy context selection (SpectRAG section 3.8, eq. 19-22, Algorithm 1
lines 8-12), vectorized across queries.

``B`` queries each have a padded pool of ``P`` candidates (``mask`` marks the real ones).  Every
batched step picks at most one candidate for *every* query with ``[B, K]`` tensor operations;
the Python loop runs over steps, never over queries.

Per query, with relevance ``s``, proximity ``Prox``, token lengths ``l`` and budget ``B_tok``:

0. **evidence cut** (``stop_floor > 0``): only the candidates with
   ``s_i >= m + stop_floor * (max_j s_j - m)`` (or marked ``keep``), ``m`` the median of the query's real scores (the
   lower middle one for an even count), may enter the context at all: the selection stops when
   what is left stands out from the pool by less than that share of the best chunk's lead, and
   leaves the rest of the budget unused rather than pad it with pages nobody asked for
   (:func:`evidence_cut`; scale-free: any affine map of the scores keeps the same chunks);
1. **protected core**: the top ``core_size`` candidates by ``s`` (ties: smaller position) are
   taken in ``s`` order, each one only if it fits in the remaining budget (a core candidate
   that does not fit is skipped, not replaced);
2. **tail**: greedy on the token-normalised marginal utility (eq. 21-22)

   .. math::
       U(i \mid C) = a\,s_i + b\,\mathrm{Prox}_i + c\,\mathrm{ClusterGain}(i, C)
                     + d\,\mathrm{DocGain}(i, C) - \lambda\,\mathrm{Red}(i, C),
       \qquad i^\ast = \arg\max_i \frac{U(i \mid C)}{\ell_i^{\rho}}

   over the feasible candidates: unselected, real, ``l_i <= remaining budget`` and above the
   precision floor ``s_i >= precision_floor * max_j s_j`` (``j`` over the query's real
   candidates);
3. **backfill** (``backfill=True``), once no tail candidate is feasible: the remaining candidates
   that fit, by descending ``s``, until nothing fits (only those with
   ``s >= backfill_floor * max_j s_j``).

``ClusterGain`` (``DocGain``) is 1 when no selected chunk of the query shares the candidate's
cluster (document) id, else 0; ``Red`` is the largest cosine between the candidate and the
selected chunks of its query, clamped at 0 (0 while nothing is selected).

How it is batched: only the tail reads coverage and redundancy, only for candidates above the
precision floor, and only the core and tail picks count towards redundancy. So the tail runs on
each query's compacted set ``K`` (above-floor candidates and the core, in position order) with
one Gram block ``[B, |K|, |K|]`` computed once and read row by row as picks happen; the
backfill needs no greedy step at all (a chunk that does not fit now never will), so it is one
pass over the score order with ``[B]``-vector operations. Ties in every ``argmax`` go to the
smaller position, so the result is deterministic and equal to the per-query reference
:func:`spectrag.reference.select.budget_select_reference`.

Scores, utilities and the precision floor are computed in float64 (float32 on MPS, which has
no float64); cosines in float64, rounded to float32 (see :func:`_k_gram`).  ``l ** rho`` is evaluated once per
distinct token length, so equal lengths get bit-identical normalisers.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional, Union

import torch

__all__ = ["SelectParams", "SelectResult", "budget_select", "check_inputs", "evidence_cut"]

PHASE_CORE, PHASE_TAIL, PHASE_BACKFILL, PHASE_PAD = 0, 1, 2, -1


# ---------------------------------------------------------------------------------------------
# Configuration and result
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectParams:
    """The selection's keyword arguments, checked (one record, so the batched kernel and the
    reference read the same values). Defaults are neutral: score-order filling of the budget."""

    core_size: int = 0
    a: float = 1.0
    b: float = 0.0
    c: float = 0.0
    d: float = 0.0
    lam: float = 0.0
    rho: float = 0.0
    precision_floor: float = 0.0
    backfill: bool = True
    backfill_floor: float = 0.0
    stop_floor: float = 0.0

    def __post_init__(self) -> None:
        v = self.core_size
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"core_size must be an int >= 0, got {v!r}")
        for name, lo, hi in (
            ("a", 0.0, math.inf), ("b", 0.0, math.inf), ("c", 0.0, math.inf),
            ("d", 0.0, math.inf), ("lam", 0.0, math.inf), ("rho", 0.0, 1.0),
            ("precision_floor", 0.0, 1.0), ("backfill_floor", 0.0, 1.0), ("stop_floor", 0.0, 1.0),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name} must be a real number, got {v!r}")
            if not (math.isfinite(v) and lo <= v <= hi):
                allowed = f"[{lo:g}, {hi:g}]" if math.isfinite(hi) else f">= {lo:g} and finite"
                raise ValueError(f"{name} must be {allowed}, got {v!r}")
        if not isinstance(self.backfill, bool):
            raise TypeError(f"backfill must be a bool, got {self.backfill!r}")


@dataclass(frozen=True)
class SelectResult:
    """Output of :func:`budget_select` (``K`` = the largest number of picks over the queries).

    Attributes:
        order: ``[B, K]`` int64, selected positions in selection order, padded with -1.
        selected: ``[B, P]`` bool, ``selected[q, i]`` iff position ``i`` was picked.
        used_tokens: ``[B]`` int64, tokens of the selected chunks (``<=`` the budget).
        phase: ``[B, K]`` int8, 0 core, 1 tail, 2 backfill, -1 padding.
        utility: ``[B, K]`` float, ``U / l**rho`` at pick time for tail picks, ``s`` for core and
            backfill picks, NaN for padding.
        n_steps: batched steps run: ``min(core_size, max real candidates per query)`` core steps
            plus the largest number of tail + backfill picks of a query.
    """

    order: torch.Tensor
    selected: torch.Tensor
    used_tokens: torch.Tensor
    phase: torch.Tensor
    utility: torch.Tensor
    n_steps: int


# ---------------------------------------------------------------------------------------------
# Input validation (shared by the batched kernel and the reference)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Inputs:
    scores: torch.Tensor
    prox: torch.Tensor
    tokens: torch.Tensor  # int64, 1 at padded positions
    mask: torch.Tensor
    embeddings: torch.Tensor
    clusters: torch.Tensor
    docs: torch.Tensor
    budget: torch.Tensor  # int64 [B]


def _first_where(bad: torch.Tensor) -> list:
    return bad.nonzero()[0].tolist()


def _check_finite(name: str, T: torch.Tensor, mask: torch.Tensor) -> None:
    """Raise unless ``T`` is finite at the real positions (``mask`` broadcast over trailing dims)."""
    if T.numel() == 0 or bool(torch.isfinite(T.sum())):
        return  # a finite sum proves every entry finite (NaN and inf propagate); one cheap pass
    finite = torch.isfinite(T)
    m = mask.reshape(mask.shape + (1,) * (T.dim() - mask.dim()))
    bad = ~finite & m
    if bool(bad.any()):
        where = _first_where(bad)
        value = T[tuple(where)].item()
        idx = ", ".join(map(str, where))
        raise ValueError(
            f"{name} must be finite where mask is True, found {value!r} at {name}[{idx}]"
        )


def _validate(scores, prox, tokens, mask, embeddings, clusters, docs, budget, *, rows_finite: bool = True) -> _Inputs:
    """Checked inputs; ``rows_finite=False``: the embeddings are a stand-in view of a table whose
    rows are checked where they are gathered (:func:`_k_gram`)."""
    named = (("scores", scores), ("prox", prox), ("tokens", tokens), ("mask", mask),
             ("embeddings", embeddings), ("clusters", clusters), ("docs", docs))
    for name, T in named:
        if not isinstance(T, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(T).__name__}")
        if T.layout != torch.strided:
            raise TypeError(f"{name} must be a dense (strided) tensor, got layout {T.layout}")
    if scores.dim() != 2:
        raise ValueError(f"scores must be 2-D [B, P], got shape {tuple(scores.shape)}")
    B, P = scores.shape
    device = scores.device
    for name, T in named:
        want = (B, P, None) if name == "embeddings" else (B, P)
        if T.dim() != len(want) or tuple(T.shape[:2]) != (B, P) or (
            name == "embeddings" and T.shape[2] < 1
        ):
            shape = f"[{B}, {P}, d] with d >= 1" if name == "embeddings" else f"[{B}, {P}]"
            raise ValueError(
                f"{name} must have shape {shape} (B, P from scores), got {tuple(T.shape)}"
            )
        if T.device != device:
            raise ValueError(
                f"{name} is on {T.device} but scores is on {device}; put all inputs on one device"
            )
    for name, T in (("scores", scores), ("prox", prox), ("embeddings", embeddings)):
        if not T.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {T.dtype}")
    for name, T in (("tokens", tokens), ("clusters", clusters), ("docs", docs)):
        if T.is_floating_point() or T.is_complex() or T.dtype == torch.bool:
            raise TypeError(f"{name} must have an integer dtype, got {T.dtype}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must have dtype torch.bool, got {mask.dtype}")

    _check_finite("scores", scores, mask)
    _check_finite("prox", prox, mask)
    if rows_finite:
        _check_finite("embeddings", embeddings, mask)
    out_of_range = mask & ((prox < 0) | (prox > 1))
    if bool(out_of_range.any()):
        where = _first_where(out_of_range)
        raise ValueError(
            f"prox must be in [0, 1] where mask is True, found {prox[tuple(where)].item()!r} "
            f"at prox[{where[0]}, {where[1]}]"
        )
    tok = tokens.to(torch.int64)
    short = mask & (tok < 1)
    if bool(short.any()):
        where = _first_where(short)
        raise ValueError(
            f"tokens must be >= 1 where mask is True, found {tok[tuple(where)].item()} at "
            f"[{where[0]}, {where[1]}]"
        )
    tok = torch.where(mask, tok, torch.ones((), dtype=torch.int64, device=device))

    if isinstance(budget, torch.Tensor):
        if budget.is_floating_point() or budget.is_complex() or budget.dtype == torch.bool:
            raise TypeError(f"budget must be an int or an integer tensor, got dtype {budget.dtype}")
        if budget.dim() > 1 or (budget.dim() == 1 and budget.shape[0] != B):
            raise ValueError(
                f"budget must be an int, a 0-d tensor or a [B] = [{B}] tensor, got shape "
                f"{tuple(budget.shape)}"
            )
        if budget.device != device:
            raise ValueError(
                f"budget is on {budget.device} but scores is on {device}; put all inputs on one device"
            )
        bud = budget.to(torch.int64).expand(B).clone()
        if bool((bud < 0).any()):
            where = _first_where(bud < 0)[0]
            raise ValueError(f"budget must be >= 0, found {bud[where].item()} at budget[{where}]")
    else:
        if isinstance(budget, bool) or not isinstance(budget, int):
            raise TypeError(f"budget must be an int >= 0 or an integer tensor [B], got {budget!r}")
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        bud = torch.full((B,), budget, dtype=torch.int64, device=device)
    return _Inputs(scores, prox, tok, mask, embeddings, clusters, docs, bud)


def check_inputs(scores, prox, tokens, mask, embeddings, ids, clusters, docs, budget) -> _Inputs:
    """The checked inputs of :func:`budget_select` (and of its compiled twin): ``embeddings``
    is ``[B, P, d]``, or with ``ids`` the ``[n, d]`` table, whose rows are checked where they
    are read."""
    if ids is not None:  # embeddings is the [n, d] table: validate a [B, P, d] stand-in view
        return _validate(scores, prox, tokens, mask, _rows_view(embeddings, ids, scores), clusters, docs, budget,
                         rows_finite=False)
    return _validate(scores, prox, tokens, mask, embeddings, clusters, docs, budget)


def _work_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def _empty_result(B: int, P: int, device, dtype, n_steps: int = 0) -> SelectResult:
    return SelectResult(
        order=torch.full((B, 0), -1, dtype=torch.int64, device=device),
        selected=torch.zeros((B, P), dtype=torch.bool, device=device),
        used_tokens=torch.zeros(B, dtype=torch.int64, device=device),
        phase=torch.full((B, 0), PHASE_PAD, dtype=torch.int8, device=device),
        utility=torch.full((B, 0), math.nan, dtype=dtype, device=device),
        n_steps=n_steps,
    )


# ---------------------------------------------------------------------------------------------
# Batched kernel
# ---------------------------------------------------------------------------------------------


def budget_select(
    scores: torch.Tensor,
    prox: torch.Tensor,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    embeddings: torch.Tensor,
    clusters: torch.Tensor,
    docs: torch.Tensor,
    *,
    budget: Union[int, torch.Tensor],
    ids: Optional[torch.Tensor] = None,
    core_size: int = 0,
    a: float = 1.0,
    b: float = 0.0,
    c: float = 0.0,
    d: float = 0.0,
    lam: float = 0.0,
    rho: float = 0.0,
    precision_floor: float = 0.0,
    backfill: bool = True,
    backfill_floor: float = 0.0,
    stop_floor: float = 0.0,
    keep: Optional[torch.Tensor] = None,
) -> SelectResult:
    r"""Greedy token-budgeted context selection for ``B`` queries at once.

    Per query: protected core, then the tail greedy

    .. math::
        i^\ast = \arg\max_{i \in F} \frac{a\,s_i + b\,\mathrm{Prox}_i
            + c\,\mathrm{ClusterGain}(i, C) + d\,\mathrm{DocGain}(i, C)
            - \lambda \max\bigl(0, \max_{j \in C} \langle e_i, e_j \rangle\bigr)}{\ell_i^{\rho}}

    over the feasible set ``F`` (unselected, real, ``l_i <= B_tok - sum_{j in C} l_j``,
    ``s_i >= precision_floor * max s``), then backfill by ``s``; see the module docstring.
    Ties go to the smaller position.  The sum of the selected lengths never exceeds the budget;
    a query whose candidates are all longer than its budget gets an empty selection.

    Args:
        scores: re-scored relevance ``s`` (any finite real values, used as given).
        prox: graph proximity to the seeds, in ``[0, 1]``.
        tokens: token lengths ``l``, ``>= 1`` where ``mask`` is True.
        mask: True for real candidates; padded positions are never selected and their values
            (even NaN) are ignored.
        embeddings: candidate embeddings ``[B, P, d]``, L2-normalised (the inner product is
            used as the cosine; not checked); or, with ``ids``, the ``[n, d]`` table whose rows
            ``ids [B, P]`` they are (then only the rows the tail needs are ever gathered).
        clusters: spectral cluster id of each candidate.
        docs: document id of each candidate.
        budget: token budget ``B_tok`` per query, ``>= 0``: an int or an integer tensor ``[B]``
            on the inputs' device.
        core_size: size of the protected core, ``>= 0`` (default: 0).
        a, b, c, d: weights of ``s``, ``Prox``, ``ClusterGain`` and ``DocGain``, ``>= 0``
            (default: 1, 0, 0, 0).
        lam: redundancy penalty ``lambda``, ``>= 0`` (default: 0).
        rho: length-normalisation exponent in ``U / l**rho``, in ``[0, 1]`` (default: 0).
        precision_floor: tail candidates need ``s >= precision_floor * max s`` of their query,
            in ``[0, 1]`` (default: 0).
        backfill: fill the remaining budget by descending ``s`` once the tail is exhausted
            (default: True).
        backfill_floor: backfill only candidates with ``s >= backfill_floor * max s``, in
            ``[0, 1]``: at small budgets an unrelated short chunk does not fill the last tokens
            (default: 0).
        stop_floor: the evidence cut, in ``[0, 1]``: no phase takes a candidate with
            ``s < m + stop_floor * (max s - m)``, ``m`` the median real score (0: no cut; see
            :func:`evidence_cut`) (default: 0).
        keep: ``[B, P]`` bool, candidates that pass the evidence cut whatever their score
            (the chunks bridging raised: second-hop evidence scores low by nature) (default: none).

    The defaults are neutral (the budget filled in score order); the engine's values are in
    :class:`spectrag.config.SelectConfig`.

    Returns:
        :class:`SelectResult`, every tensor on the device of ``scores``.

    Shapes:
        scores, prox, tokens, mask, clusters, docs ``[B, P]``; embeddings ``[B, P, d]``;
        budget ``[B]`` -> order, phase, utility ``[B, K]``; selected ``[B, P]``;
        used_tokens ``[B]``.
    """
    cfg = SelectParams(core_size, a, b, c, d, lam, rho, precision_floor, backfill, backfill_floor, stop_floor)
    table = embeddings if ids is not None else None
    inp = check_inputs(scores, prox, tokens, mask, embeddings, ids, clusters, docs, budget)
    B, P = scores.shape
    device = scores.device
    work = _work_dtype(device)
    valid = inp.mask
    s = inp.scores.to(work)  # (B, P)
    if cfg.stop_floor > 0 and B and P:  # (0) the evidence cut: what falls below it is no candidate
        passed = s >= evidence_cut(s, valid, cfg.stop_floor)
        if keep is not None:
            passed = passed | check_keep(keep, scores)
        valid = valid & passed
    n_valid_max = int(valid.sum(1).max()) if B and P else 0
    if n_valid_max == 0:
        return _empty_result(B, P, device, work)

    tok = inp.tokens  # (B, P) int64
    neg_inf = torch.tensor(-math.inf, dtype=work, device=device)
    rows = torch.arange(B, device=device)
    top = torch.where(valid, s, neg_inf).amax(1, keepdim=True)  # (B, 1)
    above_floor = valid & (s >= cfg.precision_floor * top)
    by_score = torch.sort(torch.where(valid, s, neg_inf), dim=1, descending=True, stable=True)[1]  # ties: position
    n_core = min(cfg.core_size, n_valid_max)
    core = by_score[:, :n_core]  # (B, n_core)

    # Only the tail reads coverage and redundancy, and only for candidates above the precision
    # floor; its picks and the core are the only chunks whose redundancy counts. So the tail
    # runs on the compacted set K = above-floor + core, in position order (ties keep the
    # smaller position), and the Gram block is |K| x |K| per query, not P x P.
    in_k = above_floor.clone()
    in_k[rows[:, None], core] |= valid.gather(1, core)
    k_count = in_k.sum(1)  # (B,)
    kw = int(k_count.max())
    k_pos = torch.sort(torch.where(in_k, torch.arange(P, device=device), P), dim=1, stable=True)[0][:, :kw]  # (B, kw)
    k_real = k_pos < P
    k_pos = k_pos.clamp(max=P - 1)
    to_k = torch.full((B, P), -1, dtype=torch.int64, device=device)
    to_k[rows[:, None].expand(-1, kw)[k_real], k_pos[k_real]] = torch.arange(kw, device=device).expand(B, -1)[k_real]

    def at_k(t: torch.Tensor) -> torch.Tensor:
        return t.gather(1, k_pos)

    base = cfg.a * at_k(s) + cfg.b * at_k(inp.prox).to(work)  # same operation order as the reference
    tok_k, clusters_k, docs_k, floor_k = at_k(tok), at_k(inp.clusters), at_k(inp.docs), at_k(above_floor) & k_real
    uniq, inverse = torch.unique(tok_k, return_inverse=True)
    length_norm = (uniq.to(work) ** cfg.rho)[inverse]  # bit-identical for equal lengths

    # running state: budget and the record of picks over the pool; coverage, redundancy and the
    # open set over K. Coverage is kept as the term it adds to the utility (c while a cluster is
    # unseen, else 0: the same bits as c * ClusterGain)
    remaining = inp.budget.clone()  # (B,)
    red = torch.zeros((B, kw), dtype=work, device=device)  # running max(0, max cos)
    c_term = torch.full((B, kw), cfg.c, dtype=work, device=device)
    d_term = torch.full((B, kw), cfg.d, dtype=work, device=device)
    open_k = floor_k.clone()  # tail candidates not yet taken
    count = torch.zeros(B, dtype=torch.int64, device=device)
    # one spare column (index P) absorbs the writes of queries that do not pick in a step
    order = torch.full((B, P + 1), -1, dtype=torch.int64, device=device)
    phase = torch.full((B, P + 1), PHASE_PAD, dtype=torch.int8, device=device)
    utility = torch.full((B, P + 1), math.nan, dtype=work, device=device)
    sink = torch.full((B,), P, dtype=torch.int64, device=device)

    def record(pos: torch.Tensor, act: torch.Tensor, ph: torch.Tensor, value: torch.Tensor) -> None:
        """Record positions ``pos [B, 1]`` for the queries in ``act [B]``; charge the budget."""
        col = torch.where(act, count, sink).unsqueeze(1)
        order.scatter_(1, col, pos)
        phase.scatter_(1, col, ph)
        utility.scatter_(1, col, value)
        count.add_(act)
        remaining.sub_(torch.where(act, tok.gather(1, pos).squeeze(1), 0))

    def cover(kp: torch.Tensor, act_col: torch.Tensor | None) -> None:
        """Coverage of the picks ``kp [B, 1]`` (into K), for the rows in ``act_col`` (all: None)."""
        same_c = clusters_k == clusters_k.gather(1, kp)
        same_d = docs_k == docs_k.gather(1, kp)
        c_term.masked_fill_(same_c if act_col is None else same_c & act_col, 0.0)
        d_term.masked_fill_(same_d if act_col is None else same_d & act_col, 0.0)

    def k_rows(group: torch.Tensor, width: int) -> torch.Tensor:  # (g, width, d)
        pos = k_pos[group, :width]
        if table is not None:
            return table[ids[group].gather(1, pos).clamp(min=0)]
        return inp.embeddings[group[:, None], pos]

    gram = _k_gram(k_rows, k_real, k_count) if cfg.lam != 0.0 else None  # (B, kw, kw)

    # (1) protected core: top core_size by s, each taken only if it fits
    if n_core:
        core_real = valid.gather(1, core)
        core_k = to_k.gather(1, core).clamp(min=0)  # the core is in K
        took = torch.zeros((B, n_core), dtype=torch.bool, device=device)
        ph_core = torch.full((B, 1), PHASE_CORE, dtype=torch.int8, device=device)
        for j in range(n_core):
            pos = core[:, j : j + 1]
            act = core_real[:, j] & (tok.gather(1, pos).squeeze(1) <= remaining)
            took[:, j] = act
            record(pos, act, ph_core, s.gather(1, pos))
            cover(core_k[:, j : j + 1], act.unsqueeze(1))
        taken = torch.zeros((B, kw), dtype=torch.int64, device=device).scatter_add_(1, core_k, took.to(torch.int64))
        open_k &= taken == 0  # (scatter_add: core_k repeats where a query has fewer real chunks than the core)
        if gram is not None:  # core picks do not look at Red: one update for all of them
            cos = torch.where(took.unsqueeze(2), gram[rows.unsqueeze(1), core_k], 0.0)  # (B, n_core, kw)
            torch.maximum(red, cos.amax(1).to(work), out=red)

    # (2) tail greedy over K with the precision floor, one pick per query per step. A query
    # whose open set is empty never picks again (the set only shrinks), so the updates below may
    # touch its state freely.
    n_tail = torch.zeros(B, dtype=torch.int64, device=device)
    ph_tail = torch.full((B, 1), PHASE_TAIL, dtype=torch.int8, device=device)
    for step in itertools.count():
        open_k &= tok_k <= remaining.unsqueeze(1)  # (B, kw)
        act = open_k.any(1)
        # the host asks whether any query still picks every TAIL_CHECK_EVERY steps only (a host
        # synchronization on a GPU); a step where none picks changes nothing it returns
        if step % TAIL_CHECK_EVERY == 0 and not bool(act.any()):
            break
        key = (base + c_term + d_term - cfg.lam * red) / length_norm  # the reference's order of operations
        kp = torch.where(open_k, key, neg_inf).argmax(1, keepdim=True)  # first max: smaller position
        record(k_pos.gather(1, kp), act, ph_tail, key.gather(1, kp))
        open_k.scatter_(1, kp, False)
        cover(kp, None)
        if gram is not None:
            torch.maximum(red, gram[rows, kp.squeeze(1)].to(work), out=red)
        n_tail.add_(act)

    picked = order[:, :P]  # (column P is the sink)
    hits = torch.zeros((B, P + 1), dtype=torch.int64, device=device)
    hits.scatter_add_(1, torch.where(picked >= 0, picked, P), torch.ones_like(picked))
    selected = hits[:, :P] > 0  # core and tail picks

    # (3) backfill by descending s, what fits in score order. A chunk that does not fit now
    # never will (the budget only shrinks), and among those that do, the picks are the longest
    # prefix whose running sum fits; so each round drops what cannot fit and takes that prefix,
    # the same picks as one at a time, in a few rounds of [B, R] operations.
    n_back = torch.zeros(B, dtype=torch.int64, device=device)
    if cfg.backfill:
        rest = valid & ~selected & (s >= cfg.backfill_floor * top)
        n_rest = int(rest.sum(1).max())
        cand = torch.sort(torch.where(rest, s, neg_inf), dim=1, descending=True, stable=True)[1][:, :n_rest]
        open_ = rest.gather(1, cand)  # (B, R) undecided
        cand_tok = tok.gather(1, cand)
        took = torch.zeros_like(open_)
        while True:
            open_ &= cand_tok <= remaining.unsqueeze(1)
            if not bool(open_.any()):
                break
            run = torch.cumsum(torch.where(open_, cand_tok, 0), dim=1)
            take = open_ & (run <= remaining.unsqueeze(1))
            took |= take
            open_ &= ~take
            remaining.sub_(torch.where(take, cand_tok, 0).sum(1))
        n_back = took.sum(1)
        slot = torch.where(took, count.unsqueeze(1) + torch.cumsum(took, 1) - 1, P)  # sink: P
        order.scatter_(1, slot, cand)
        phase.scatter_(1, slot, torch.full_like(slot, PHASE_BACKFILL, dtype=torch.int8))
        utility.scatter_(1, slot, s.gather(1, cand))
        selected[rows[:, None].expand_as(cand)[took], cand[took]] = True
        count.add_(n_back)

    K = int(count.max())
    return SelectResult(
        order=order[:, :K].contiguous(),
        selected=selected,
        used_tokens=inp.budget - remaining,
        phase=phase[:, :K].contiguous(),
        utility=utility[:, :K].contiguous(),
        n_steps=n_core + int((n_tail + n_back).max()),
    )


def check_keep(keep: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """``keep`` as a bool ``[B, P]`` tensor on the scores' device, or a ValueError naming it."""
    if not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool or tuple(keep.shape) != tuple(scores.shape) \
            or keep.device != scores.device:
        raise ValueError(f"keep must be a bool {list(scores.shape)} tensor on {scores.device}, got "
                         f"{getattr(keep, 'dtype', type(keep).__name__)} {list(getattr(keep, 'shape', []))}")
    return keep


def evidence_cut(s: torch.Tensor, valid: torch.Tensor, floor: float) -> torch.Tensor:
    """``m + floor * (top - m)`` per query: ``top`` the best real score, ``m`` the median one (of
    ``n`` real scores in descending order, the one at index ``n // 2``: the lower middle one for
    an even count), so the cut is a share of how far the best chunk stands out from the pool's
    typical candidate. A rank statistic, not a sum: every backend gets the same bits, alone or
    in any batch. Shapes: ``s/valid [B, P]`` -> ``[B, 1]`` (NaN for a query with no candidate)."""
    neg_inf = torch.tensor(-math.inf, dtype=s.dtype, device=s.device)
    desc = torch.sort(torch.where(valid, s, neg_inf), dim=1, descending=True)[0]
    at = (valid.sum(1, keepdim=True) // 2).clamp(max=s.shape[1] - 1)
    top, median = desc[:, :1], desc.gather(1, at)
    return median + floor * (top - median)


def _rows_view(table: torch.Tensor, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """A ``[B, P, d]`` view of ``table``'s first row for the input checks (no copy; the rows
    themselves are gathered where they are used)."""
    if not isinstance(table, torch.Tensor) or table.dim() != 2:
        raise ValueError(f"with ids, embeddings must be the [n, d] table, got {getattr(table, 'shape', table)!r}")
    if not isinstance(ids, torch.Tensor) or tuple(ids.shape) != tuple(scores.shape):
        raise ValueError(f"ids must be [B, P] = {tuple(scores.shape)}, got {getattr(ids, 'shape', ids)!r}")
    if ids.numel() and int(ids.max()) >= table.shape[0]:
        raise ValueError(f"ids must be < n = {table.shape[0]}, found {int(ids.max())}")
    return table[:1].expand(scores.shape[0], scores.shape[1], table.shape[1]) if table.shape[0] else table


# the tail greedy checks for a query still picking once per this many steps
TAIL_CHECK_EVERY = 4

# the gathered candidate rows of one tile of :func:`_k_gram` (float64), at most
GRAM_ROWS_BYTES = 1 << 28


def _k_gram(rows, k_real: torch.Tensor, k_count: torch.Tensor, tile: int = 16) -> torch.Tensor:
    """Cosines between the compacted candidates of each query: ``[B, kw, kw]`` float32;
    ``rows(queries, width)`` gives the first ``width`` compacted vectors ``[len(queries), width, d]``
    of those queries.

    Each cosine is a float64 product rounded to float32. BLAS kernels sum in an order that
    depends on the shapes and even on the alignment of the buffers; in float64 those orders
    differ by about 1e-16, which the rounding to float32 removes, so a query gets the same bits
    alone or in any batch, and two identical chunks get identical cosines (their utilities tie
    exactly and the smaller position wins, as in the reference). Queries go in tiles of similar
    set sizes (sorted by size), each as wide as its largest set, and the gathered rows of a
    tile stay in cache (on the CPU, ``tile`` queries; on a GPU, as many as fit in
    :data:`GRAM_ROWS_BYTES` of gathered rows: one product for a batch of usual size). The tiles'
    widths are read from the device at once and the finiteness check once at the end, so the
    host waits twice whatever the number of tiles.
    """
    B, kw = k_real.shape
    dev = k_real.device
    gram = torch.zeros((B, kw, kw), dtype=torch.float32, device=dev)
    wide = _work_dtype(dev)  # float64 (float32 on MPS)
    if B == 0 or kw == 0:
        return gram
    if dev.type != "cpu":
        dim = rows(torch.zeros(1, dtype=torch.int64, device=dev), 1).shape[-1]
        tile = max(tile, min(B, GRAM_ROWS_BYTES // (kw * max(dim, 1) * 8)))
    by_size = torch.argsort(k_count, stable=True)
    sizes = k_count[by_size]
    last = torch.arange(tile - 1, B + tile - 1, tile, device=dev).clamp(max=B - 1)  # each tile's widest set
    widths = sizes[last].tolist()
    finite = torch.ones((), dtype=torch.bool, device=dev)
    for lo, width in zip(range(0, B, tile), widths):
        if width == 0:
            continue
        group = by_size[lo : lo + tile]
        e = rows(group, width).to(wide)
        e = torch.where(k_real[group, :width].unsqueeze(2), e, torch.zeros((), dtype=wide, device=e.device))
        finite &= torch.isfinite(e.sum())  # only rows the tail reads (a table's others never matter)
        gram[group, :width, :width] = torch.bmm(e, e.transpose(1, 2)).to(torch.float32)
    if not bool(finite):
        raise ValueError("embeddings must be finite at the candidates' rows (the [n, d] table with ids)")
    return gram
