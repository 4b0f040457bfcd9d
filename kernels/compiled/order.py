"""The ordering the compiled kernels share, (value descending, id ascending), as a sort of
uint64 keys: the float32 value's bits made monotone and inverted, above the id (ids < 2**32)."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.runtime import jit

U32 = np.uint64(0xFFFFFFFF)
SIGN = np.uint64(0x80000000)
SHIFT = np.uint64(32)


def top_by_value_then_id(values, ids, count, k, keys):
    """The best ``min(k, count)`` of ``values[:count]`` (float32, not NaN) with their ``ids``,
    by value descending then id ascending, as sorted keys (the id in the low 32 bits, ``key &
    U32``): one partition and a sort of what it keeps. ``keys``: scratch of ``count`` entries."""
    bits = values[:count].view(np.uint32)
    for i in range(count):
        u = np.uint64(bits[i])
        ordered = (u ^ U32) if (u & SIGN) else (u | SIGN)
        keys[i] = ((U32 - ordered) << SHIFT) | np.uint64(ids[i])
    if count <= k:
        return np.sort(keys[:count])
    return np.sort(np.partition(keys[:count], k - 1)[:k])


top_by_value_then_id = jit(top_by_value_then_id)
