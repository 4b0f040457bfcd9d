"""The ordering the compiled kernels share, (value descending, id ascending), as a sort of
uint64 keys: the float32 value's bits made monotone and inverted, above the id (ids < 2**32)."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.runtime import jit

U32 = np.uint64(0xFFFFFFFF)
SIGN = np.uint64(0x80000000)
SHIFT = np.uint64(32)
GROUP = 8  # values per group of the floor's maxima (top_by_value_then_id)


def _key(bits, index):
    """The sort key of a float32 value's ``bits`` (uint32) and its id."""
    u = np.uint64(bits)
    ordered = (u ^ U32) if (u & SIGN) else (u | SIGN)
    return ((U32 - ordered) << SHIFT) | np.uint64(index)


_key = jit(_key, inline=True)


def _select_smallest(a, n, k):
    """Move the ``k`` smallest of ``a[:n]`` (distinct uint64 keys) into ``a[:k]``, in no order:
    Hoare's quickselect with a median-of-three pivot, in place. Ours because numba's
    ``np.partition`` copies and took two thirds of the top 200 of 1,500 keys."""
    lo, hi, target = 0, n - 1, k - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        pivot = a[mid]
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if target <= j:
            hi = j
        elif target >= i:
            lo = i
        else:
            break


_select_smallest = jit(_select_smallest)


def top_by_value_then_id(values, ids, count, k, keys):
    """The best ``min(k, count)`` of ``values[:count]`` (float32, not NaN) with their ``ids``,
    by value descending then id ascending, as sorted keys (the id in the low 32 bits, ``key &
    U32``): one partition and a sort of what it keeps. ``keys``: scratch of ``count`` entries.

    Many values for few places (``count >= 32 k``, e.g. BM25's matches for its 50 seeds): the
    ``k``-th largest of the maxima of groups of :data:`GROUP` values is a floor (``k`` groups
    reach it, so the ``k``-th largest value does too), and only values at or above it are
    keyed and partitioned: the same result from a fraction of the values."""
    bits = values[:count].view(np.uint32)
    kept = 0
    if k >= 1 and count >= 32 * k:
        groups = count // GROUP
        maxima = np.empty(groups, np.float32)
        for g in range(groups):
            m = values[g * GROUP]
            for t in range(1, GROUP):
                if values[g * GROUP + t] > m:
                    m = values[g * GROUP + t]
            maxima[g] = m
        floor = np.partition(maxima, groups - k)[groups - k]
        for i in range(count):
            if values[i] >= floor:
                keys[kept] = _key(bits[i], ids[i])
                kept += 1
    else:
        for i in range(count):
            keys[i] = _key(bits[i], ids[i])
        kept = count
    if kept > k:
        _select_smallest(keys, kept, k)
    return np.sort(keys[:min(kept, k)])


top_by_value_then_id = jit(top_by_value_then_id)
