"""Two-hop expansion of every query's seeds over a CSR graph, compiled, one query at a time
over the frontier's CSR rows: the work is the edges the walk touches, not ``n``.

The rules are :func:`spectrag.expand.pool.expand_torch`'s (the reference): walk mass pushed
``hops`` times from the seeds along ``W`` (``F_{h+1} = W^T F_h``, float64, each frontier visited
in ascending node order so every sum adds its terms in the order of a CSR product), ``reach =
sum_h 0.5^h F_{h+1}`` rounded to float32 and divided by its maximum (float32 reciprocal); seeds
get ``2 + weight``; nodes of zero priority are dropped; the top ``P`` by priority, ties to the
smaller id.
"""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.order import U32, top_by_value_then_id
from spectrag.kernels.compiled.runtime import jit, parallel_rows

SEED_BONUS = np.float32(2.0)


def _expand_rows(lo, hi, seed_ids, seed_w, indptr, indices, data, hops, allowed, masked, out_ids, out_pri):
    n = indptr.shape[0] - 1
    width = out_ids.shape[1]
    front = np.zeros(n, np.float64)
    nxt = np.zeros(n, np.float64)
    reach = np.zeros(n, np.float64)
    seed_mass = np.zeros(n, np.float64)
    priority = np.zeros(n, np.float32)
    state = np.zeros(n, np.uint8)  # bit 1: seed, 2: in the union, 4: in the next frontier, 8: in this one
    union = np.empty(n, np.int64)
    cur = np.empty(n, np.int64)
    new = np.empty(n + 1, np.int64)  # + 1: the write past the last first visit (a frontier of every node)
    values = np.empty(n, np.float32)
    nodes = np.empty(n, np.int64)
    keys = np.empty(n, np.uint64)
    for b in range(lo, hi):
        n_union = 0
        n_cur = 0
        for s in range(seed_ids.shape[1]):
            v = seed_ids[b, s]
            if v < 0:
                continue
            if state[v] & 1 == 0:
                state[v] |= 3
                union[n_union] = v
                n_union += 1
                cur[n_cur] = v
                n_cur += 1
            seed_mass[v] += np.float64(seed_w[b, s])
        for i in range(n_cur):
            front[cur[i]] = seed_mass[cur[i]]
        scale = 1.0
        for _ in range(hops):
            # ascending sources: each target sums its terms in CSR-product order
            if n <= 32 * n_cur:  # a large frontier of a small graph: one pass over the nodes beats a sort
                for i in range(n_cur):
                    state[cur[i]] |= 8
                k = 0
                for v in range(n):
                    if state[v] & 8:
                        state[v] &= np.uint8(7)
                        cur[k] = v
                        k += 1
            else:
                cur[:n_cur].sort()
            n_new = 0
            for i in range(n_cur):
                u = cur[i]
                fu = front[u]
                for e in range(indptr[u], indptr[u + 1]):
                    v = indices[e]
                    if masked and not allowed[b, v]:  # filtered out: the walk neither stops nor passes there
                        continue
                    new[n_new] = v  # kept (the count moves on) only at v's first visit: no branch
                    n_new += 1 - ((state[v] >> 2) & 1)
                    state[v] |= 4
                    nxt[v] += np.float64(data[e]) * fu
            for i in range(n_cur):
                front[cur[i]] = 0.0
            for i in range(n_new):
                v = new[i]
                reach[v] += scale * nxt[v]
                front[v] = nxt[v]
                nxt[v] = 0.0
                state[v] &= np.uint8(3)
                if state[v] & 2 == 0:
                    state[v] |= 2
                    union[n_union] = v
                    n_union += 1
                cur[i] = v
            n_cur = n_new
            scale *= 0.5
        for i in range(n_cur):
            front[cur[i]] = 0.0
        peak = np.float32(0.0)
        for i in range(n_union):
            r = np.float32(reach[union[i]])
            if r > peak:
                peak = r
        inv = np.float32(1.0 / np.float64(peak)) if peak > 0 else np.float32(1.0)
        count = 0
        for i in range(n_union):
            v = union[i]
            if state[v] & 1:
                p = np.float32(seed_mass[v]) + SEED_BONUS
            else:
                p = np.float32(reach[v]) * inv
            if p != 0:  # never reached (as a sparse product stores no entry for it)
                values[count] = p
                nodes[count] = v
                priority[v] = p
                count += 1
            reach[v] = 0.0
            seed_mass[v] = 0.0
            state[v] = 0
        order = top_by_value_then_id(values, nodes, count, width, keys)
        for j in range(width):
            if j < count:
                v = np.int64(order[j] & U32)
                out_ids[b, j] = v
                out_pri[b, j] = priority[v]
            else:
                out_ids[b, j] = -1
                out_pri[b, j] = 0.0
        for i in range(count):
            priority[nodes[i]] = 0.0


_expand_rows = jit(_expand_rows)


def expand_compiled(seed_ids: np.ndarray, seed_weights: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
                    data: np.ndarray, *, max_candidates: int, hops: int, allowed: np.ndarray | None = None,
                    threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pools of every query (``allowed [B, n]`` bool: the walk stays on each query's
    allowed nodes; its seeds must be allowed). Shapes: ``seed_ids [B, S]`` (int64, -1 padded),
    ``seed_weights [B, S]`` (float32), CSR ``[n, n]`` -> ids ``[B, P']`` (int64, -1 padded,
    ``P' = min(P, n)``) and priorities ``[B, P']`` (float32)."""
    n = len(indptr) - 1
    if n >= 1 << 32:
        raise ValueError(f"the compiled expansion handles graphs of fewer than 2**32 nodes, got {n}")
    batch = seed_ids.shape[0]
    width = min(max_candidates, n)
    out_ids = np.empty((batch, width), np.int64)
    out_pri = np.empty((batch, width), np.float32)
    masked = allowed is not None
    if masked and allowed.shape != (batch, n):
        raise ValueError(f"allowed must be [B, n] = {(batch, n)}, got {allowed.shape}")
    allowed = np.ascontiguousarray(allowed, np.bool_) if masked else np.ones((1, 1), np.bool_)
    parallel_rows(_expand_rows, batch, np.ascontiguousarray(seed_ids, np.int64),
                  np.ascontiguousarray(seed_weights, np.float32), indptr, indices, data, int(hops), allowed, masked,
                  out_ids, out_pri, threads=threads)
    return out_ids, out_pri
