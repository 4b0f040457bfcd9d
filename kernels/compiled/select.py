"""Token-budgeted greedy selection, compiled, one query at a time: the phases, float64
utilities, tie rules and float32-rounded cosines of :func:`spectrag.kernels.select.budget_select`
(the reference and GPU path; its docstring has the method). The tail is evaluated lazily (see
``_select_rows``): cosines only for the candidates that can still win a step, never the whole
Gram block."""

from __future__ import annotations

import math

import numpy as np
import torch

from spectrag.kernels.compiled.runtime import jit, parallel_rows
from spectrag.kernels.select import (PHASE_BACKFILL, PHASE_CORE, PHASE_PAD, PHASE_TAIL, SelectParams, SelectResult,
                                     check_inputs, check_keep)


def _cosine(table, a, c):
    """float32(<table[a], table[c]> in float64), as a float64: the torch kernel's rounding of
    its float64 Gram block (the compiler may order the sum: see ``jit``); NaN where not finite."""
    acc = 0.0
    for t in range(table.shape[1]):
        acc += np.float64(table[a, t]) * np.float64(table[c, t])
    return np.float64(np.float32(acc)) if math.isfinite(acc) else np.nan


def _drop_shared_gains(b, pos, kw, k_pos, clusters, docs, c_term, d_term):
    """A pick at ``pos`` ends the cluster and document gains of the candidates sharing them."""
    for k in range(kw):
        if clusters[b, k_pos[k]] == clusters[b, pos]:
            c_term[k] = 0.0
        if docs[b, k_pos[k]] == docs[b, pos]:
            d_term[k] = 0.0


def _select_rows(lo, hi, scores, prox, tokens, mask, table, ids, clusters, docs, budget, core_size, a, bw, c, d, lam,
                 rho, precision_floor, backfill, backfill_floor, stop_floor, keep, order, phase, utility, counts, steps,
                 reals, used, status):
    width = scores.shape[1]
    neg = -np.inf
    s = np.empty(width, np.float64)
    by_score = np.empty(width, np.int64)
    keyed = np.empty(width, np.float64)
    in_k = np.empty(width, np.bool_)
    selected = np.empty(width, np.bool_)
    k_pos = np.empty(width, np.int64)
    to_k = np.empty(width, np.int64)
    base = np.empty(width, np.float64)
    norm = np.empty(width, np.float64)
    c_term = np.empty(width, np.float64)
    d_term = np.empty(width, np.float64)
    red = np.empty(width, np.float64)
    red_upto = np.empty(width, np.int64)  # picks folded into red[k] so far
    picks = np.empty(width, np.int64)  # rows of the core and tail picks, in order
    open_k = np.empty(width, np.bool_)
    seen = np.empty(width, np.bool_)
    real = np.empty(width, np.bool_)  # the real candidates above the evidence cut
    for b in range(lo, hi):
        n_valid = 0
        top = neg
        for i in range(width):
            s[i] = np.float64(scores[b, i])
            real[i] = mask[b, i]
            keyed[i] = s[i] if mask[b, i] else neg
            if mask[b, i]:
                n_valid += 1
                if s[i] > top:
                    top = s[i]
            selected[i] = False
        by_score[:] = np.argsort(-keyed, kind="mergesort")  # stable: ties keep the smaller position
        if stop_floor > 0.0 and n_valid > 0:  # (0) the evidence cut (evidence_cut): the rest is no candidate
            median = keyed[by_score[n_valid // 2]]
            cut = median + stop_floor * (top - median)
            for i in range(width):
                real[i] = real[i] and (s[i] >= cut or keep[b, i])
            # the candidates left in score order: the stable sort of a subset is the subset of
            # the stable sort (only the first n_valid entries of by_score are read below)
            kept = 0
            for j in range(n_valid):
                if real[by_score[j]]:
                    by_score[kept] = by_score[j]
                    kept += 1
            n_valid = kept
        n_core = min(core_size, n_valid)
        floor = precision_floor * top
        for i in range(width):
            in_k[i] = real[i] and s[i] >= floor
        for j in range(n_core):
            in_k[by_score[j]] = True
        kw = 0
        for i in range(width):
            to_k[i] = -1
            if in_k[i]:
                k_pos[kw] = i
                to_k[i] = kw
                kw += 1
        for k in range(kw):
            i = k_pos[k]
            base[k] = a * s[i] + bw * np.float64(prox[b, i])
            norm[k] = np.float64(tokens[b, i]) ** rho
            c_term[k] = c
            d_term[k] = d
            red[k] = 0.0
            red_upto[k] = 0
            open_k[k] = real[i] and s[i] >= floor
        remaining = budget[b]
        count = 0
        n_picks = 0
        # (1) protected core: the top core_size by s, each taken if it fits
        for j in range(n_core):
            pos = by_score[j]
            if tokens[b, pos] > remaining:
                continue
            order[b, count], phase[b, count], utility[b, count] = pos, PHASE_CORE, s[pos]
            count += 1
            remaining -= tokens[b, pos]
            selected[pos] = True
            open_k[to_k[pos]] = False
            picks[n_picks] = ids[b, pos]
            n_picks += 1
            _drop_shared_gains(b, pos, kw, k_pos, clusters, docs, c_term, d_term)
        n_taken_core = count
        # (2) tail greedy over K, lazily: redundancy only grows, so a candidate's utility with
        # the redundancy of the picks folded in so far bounds its utility from above (and
        # rounding is monotone). Candidates are brought up to date (the newer picks' cosines
        # folded in) in order of that bound until no other can beat or tie the best: the
        # argmax, first on ties, of the eager greedy, with the same floats, from far fewer
        # cosines
        while True:
            for k in range(kw):
                if open_k[k] and tokens[b, k_pos[k]] > remaining:
                    open_k[k] = False
                seen[k] = False
            kp = -1
            best = neg
            while True:
                cand = -1
                bound = neg
                for k in range(kw):
                    if open_k[k] and not seen[k]:
                        o = (base[k] + c_term[k] + d_term[k] - lam * red[k]) / norm[k]
                        if cand < 0 or o > bound:
                            cand, bound = k, o
                if cand < 0 or (kp >= 0 and (bound < best or (bound == best and cand > kp))):
                    break
                seen[cand] = True
                if lam != 0.0:
                    row = ids[b, k_pos[cand]]
                    for j in range(red_upto[cand], n_picks):
                        cos = _cosine(table, picks[j], row)
                        if not math.isfinite(cos):  # a row the tail reads is not finite
                            status[b] = 1
                        if cos > red[cand]:
                            red[cand] = cos
                    red_upto[cand] = n_picks
                key = (base[cand] + c_term[cand] + d_term[cand] - lam * red[cand]) / norm[cand]
                if kp < 0 or key > best or (key == best and cand < kp):
                    kp, best = cand, key
            if kp < 0:
                break
            pos = k_pos[kp]
            order[b, count], phase[b, count], utility[b, count] = pos, PHASE_TAIL, best
            count += 1
            remaining -= tokens[b, pos]
            selected[pos] = True
            open_k[kp] = False
            picks[n_picks] = ids[b, pos]
            n_picks += 1
            _drop_shared_gains(b, pos, kw, k_pos, clusters, docs, c_term, d_term)
        # (3) backfill by descending s: what fits, in score order
        if backfill:
            bfloor = backfill_floor * top
            for j in range(n_valid):
                pos = by_score[j]
                if selected[pos] or not s[pos] >= bfloor or tokens[b, pos] > remaining:
                    continue
                order[b, count], phase[b, count], utility[b, count] = pos, PHASE_BACKFILL, s[pos]
                count += 1
                remaining -= tokens[b, pos]
                selected[pos] = True
        for j in range(count, width):
            order[b, j], phase[b, j], utility[b, j] = -1, PHASE_PAD, np.nan
        counts[b] = count
        steps[b] = count - n_taken_core  # tail and backfill picks
        reals[b] = n_valid  # candidates above the evidence cut
        used[b] = budget[b] - remaining


_cosine = jit(_cosine, reassociate=True)
_drop_shared_gains = jit(_drop_shared_gains)
_select_rows = jit(_select_rows)


def budget_select_compiled(scores: torch.Tensor, prox: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                           table: torch.Tensor, ids: torch.Tensor, clusters: torch.Tensor, docs: torch.Tensor, *,
                           budget: int | torch.Tensor, params: SelectParams, keep: torch.Tensor | None = None,
                           threads: int | None = None) -> SelectResult:
    """:func:`spectrag.kernels.select.budget_select` with the ``[n, d]`` table and ``ids`` on
    the CPU, compiled; the inputs are checked as there. Shapes as there."""
    inp = check_inputs(scores, prox, tokens, mask, table, ids, clusters, docs, budget)
    keep = np.zeros(scores.shape, np.bool_) if keep is None else check_keep(keep, scores).numpy()
    batch, width = scores.shape
    order = np.empty((batch, width), np.int64)
    phase = np.empty((batch, width), np.int8)
    utility = np.empty((batch, width), np.float64)
    counts, steps, used = np.empty(batch, np.int64), np.empty(batch, np.int64), np.empty(batch, np.int64)
    reals = np.zeros(batch, np.int64)
    status = np.zeros(batch, np.int8)
    p = params

    def arr(t: torch.Tensor, dtype) -> np.ndarray:
        return np.ascontiguousarray(t.numpy(), dtype)

    parallel_rows(_select_rows, batch, arr(inp.scores, np.float64), arr(inp.prox, np.float64),
                  arr(inp.tokens, np.int64), arr(inp.mask, np.bool_), table.numpy(), arr(ids, np.int64),
                  arr(inp.clusters, np.int64), arr(inp.docs, np.int64), arr(inp.budget, np.int64), int(p.core_size),
                  float(p.a), float(p.b), float(p.c), float(p.d), float(p.lam), float(p.rho),
                  float(p.precision_floor), bool(p.backfill), float(p.backfill_floor), float(p.stop_floor),
                  np.ascontiguousarray(keep), order,
                  phase, utility, counts, steps, reals, used, status, threads=threads)
    if status.any():
        raise ValueError("embeddings must be finite at the candidates' rows (the [n, d] table with ids)")
    k = int(counts.max(initial=0))
    selected = np.zeros((batch, width + 1), np.bool_)
    np.put_along_axis(selected, np.where(order[:, :k] >= 0, order[:, :k], width), True, axis=1)
    valid_max = int(reals.max()) if batch and width else 0  # real candidates above the evidence cut
    n_steps = min(p.core_size, valid_max) + int(steps.max(initial=0)) if valid_max else 0
    return SelectResult(order=torch.from_numpy(order[:, :k].copy()), selected=torch.from_numpy(selected[:, :width].copy()),
                        used_tokens=torch.from_numpy(used), phase=torch.from_numpy(phase[:, :k].copy()),
                        utility=torch.from_numpy(utility[:, :k].copy()), n_steps=n_steps)
