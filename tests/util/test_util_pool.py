"""The process pool of the large-corpus build (spectrag.util.pool): map_blocks gives the serial
result in order, and the worker count is checked. (Named test_util_pool: tests/expand/ holds a
test_expand_pool, and the test folders are not packages, so basenames must differ.)"""

from __future__ import annotations

import pytest

from spectrag.util.pool import map_blocks, resolve_workers


def test_map_blocks_keeps_order_and_checks_workers():
    data = list(range(103))
    assert map_blocks(lambda lo, hi: [x * 2 for x in data[lo:hi]], len(data), workers=2, block=10) == [x * 2 for x in data]
    assert map_blocks(lambda lo, hi: [], 0, workers=2, block=10) == []
    assert resolve_workers(3, 10) == 3 and resolve_workers(0, 10) == 1
    with pytest.raises(ValueError, match="workers must be an int >= 0"):
        resolve_workers(-1, 10)
