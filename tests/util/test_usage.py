"""The stage meter of the build (spectrag.util.usage): wall and CPU seconds, and a peak RSS that
sees memory a stage allocates (nested measurements keep the inner peak)."""

from __future__ import annotations

import numpy as np

from spectrag.util import usage


def test_stage_meter_sees_what_a_stage_allocates():
    outer = usage.begin()
    inner = usage.begin()
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
    wall, cpu, peak = usage.end(inner)
    del block
    _, _, outer_peak = usage.end(outer)
    assert wall >= 0 and cpu >= 0
    if usage.exact():
        assert peak >= usage.rss_mib() + 48  # the freed block still counts in the stage's peak
    assert outer_peak >= peak  # nested measurements keep the inner peak
