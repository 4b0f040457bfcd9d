"""Per-query reference of the token-budgeted selection: :func:`spectrag.kernels.select.budget_select`
written as plain Python over lists, one query at a time (dot products as Python sums). The
tests hold the batched kernel to it; ``bench/bench_select.py`` measures against it."""

from __future__ import annotations

import math
import operator
from typing import Optional, Union

import numpy as np
import torch

from spectrag.kernels.select import (
    PHASE_BACKFILL,
    PHASE_CORE,
    PHASE_PAD,
    PHASE_TAIL,
    SelectParams,
    SelectResult,
    _empty_result,
    _validate,
    _work_dtype,
)


def budget_select_reference(
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
    """The same selection as :func:`budget_select`, one query at a time in plain Python.

    Inputs are validated like :func:`budget_select`, then every query is converted to Python
    lists and selected with explicit loops (dot products as Python sums).  Used by the tests as
    the independent reference and by ``bench/bench_select.py`` as the baseline.
    """
    if ids is not None:  # embeddings is the [n, d] table of the candidates' rows
        embeddings = embeddings[ids.clamp(min=0)]
    cfg = SelectParams(core_size, a, b, c, d, lam, rho, precision_floor, backfill, backfill_floor, stop_floor)
    inp = _validate(scores, prox, tokens, mask, embeddings, clusters, docs, budget)
    B, P = scores.shape
    device = scores.device
    work = _work_dtype(device)
    orders, phases, utils, used, core_steps, greedy_steps = [], [], [], [], 0, 0
    for q in range(B):
        valid = inp.mask[q].tolist()
        ids = [i for i in range(P) if valid[i]]
        s = inp.scores[q].tolist()
        if cfg.stop_floor > 0 and ids:  # (0) the evidence cut: the median and the best real score
            ranked = sorted((s[i] for i in ids), reverse=True)
            median = ranked[len(ranked) // 2]
            cut = median + cfg.stop_floor * (ranked[0] - median)
            kept = keep[q].tolist() if keep is not None else [False] * P
            ids = [i for i in ids if s[i] >= cut or kept[i]]
        p = inp.prox[q].tolist()
        ln = inp.tokens[q].tolist()
        cl = inp.clusters[q].tolist()
        dc = inp.docs[q].tolist()
        emb = inp.embeddings[q].tolist()
        remaining = int(inp.budget[q])
        norm = [float(ln[i]) ** cfg.rho for i in range(P)]
        chosen: list[int] = []
        ph: list[int] = []
        ut: list[float] = []
        taken = [False] * P
        red = [0.0] * P
        seen_clusters: set = set()
        seen_docs: set = set()

        def take(i: int, phase_id: int, value: float) -> None:
            nonlocal remaining
            chosen.append(i)
            ph.append(phase_id)
            ut.append(value)
            taken[i] = True
            remaining -= ln[i]
            seen_clusters.add(cl[i])
            seen_docs.add(dc[i])
            ei = emb[i]
            for j in ids:
                dot = float(np.float32(sum(map(operator.mul, emb[j], ei))))  # as the kernel: rounded to float32
                if dot > red[j]:
                    red[j] = dot

        # (1) protected core
        by_score = sorted(ids, key=lambda i: (-s[i], i))
        core = by_score[: cfg.core_size]
        for i in core:
            if ln[i] <= remaining:
                take(i, PHASE_CORE, s[i])
        core_steps = max(core_steps, len(core))

        # (2) tail with the precision floor
        floor = cfg.precision_floor * max(s[i] for i in ids) if ids else 0.0
        n_greedy = 0
        while True:
            best, best_key = -1, 0.0
            for i in ids:
                if taken[i] or ln[i] > remaining or not s[i] >= floor:
                    continue
                cluster_gain = 0.0 if cl[i] in seen_clusters else 1.0
                doc_gain = 0.0 if dc[i] in seen_docs else 1.0
                u = cfg.a * s[i] + cfg.b * p[i] + cfg.c * cluster_gain + cfg.d * doc_gain - cfg.lam * red[i]
                k = u / norm[i]
                if best < 0 or k > best_key:
                    best, best_key = i, k
            if best < 0:
                break
            take(best, PHASE_TAIL, best_key)
            n_greedy += 1

        # (3) backfill by descending s, above the backfill floor
        back_floor = cfg.backfill_floor * max(s[i] for i in ids) if ids else 0.0
        while cfg.backfill:
            best = -1
            for i in ids:
                if not taken[i] and ln[i] <= remaining and s[i] >= back_floor and (best < 0 or s[i] > s[best]):
                    best = i
            if best < 0:
                break
            take(best, PHASE_BACKFILL, s[best])
            n_greedy += 1
        greedy_steps = max(greedy_steps, n_greedy)

        orders.append(chosen)
        phases.append(ph)
        utils.append(ut)
        used.append(int(inp.budget[q]) - remaining)

    K = max((len(o) for o in orders), default=0)
    if K == 0:
        return _empty_result(B, P, device, work, core_steps + greedy_steps)
    pad = lambda rows, fill: [r + [fill] * (K - len(r)) for r in rows]  # noqa: E731
    selected = [[False] * P for _ in range(B)]
    for q, o in enumerate(orders):
        for i in o:
            selected[q][i] = True
    return SelectResult(
        order=torch.tensor(pad(orders, -1), dtype=torch.int64, device=device),
        selected=torch.tensor(selected, dtype=torch.bool, device=device).reshape(B, P),
        used_tokens=torch.tensor(used, dtype=torch.int64, device=device),
        phase=torch.tensor(pad(phases, PHASE_PAD), dtype=torch.int8, device=device),
        utility=torch.tensor(pad(utils, math.nan), dtype=work, device=device),
        n_steps=core_steps + greedy_steps,
    )
