"""The measured thread choice (spectrag.util.threads) on simulated timings, and the thread
context manager."""

from __future__ import annotations

import torch

from spectrag.util.threads import ThreadChooser, intra_op_threads


def test_faster_choice_wins_and_the_other_is_re_timed_less_and_less():
    t = ThreadChooser([2, 1], probe_every=8, min_units=10)
    big = 100
    picks = []
    for _ in range(4):  # each choice is timed twice first
        c = t.pick(big)
        picks.append(c)
        t.record(c, big, (3.0 if c == 2 else 1.0) * big * 1e-6)
    assert sorted(picks) == [1, 1, 2, 2]
    later = []
    for _ in range(60):
        c = t.pick(big)
        later.append(c)
        t.record(c, big, (3.0 if c == 2 else 1.0) * big * 1e-6)
    # the slower choice is re-timed 8 steps after the faster one is known, then 16, then 32
    assert [i for i, c in enumerate(later) if c == 2] == [8, 24, 56]
    assert t.pick(1) == 1  # tiny steps use the best known choice, untimed
    for _ in range(3):  # the load changes: 2 threads get faster, and win at the next re-timing
        c = t.pick(big)
        t.record(c, big, (0.5 if c == 2 else 1.0) * big * 1e-6)
    later = []
    for _ in range(70):
        c = t.pick(big)
        later.append(c)
        t.record(c, big, (0.5 if c == 2 else 1.0) * big * 1e-6)
    first = later.index(2)
    assert first < 60 and later[first:].count(1) <= 2  # from then on 1 thread is only re-timed


def test_fixed_and_single_choices_never_probe():
    assert ThreadChooser.default(3).choices == [3]
    one = ThreadChooser([1])
    assert all(one.pick(100) == 1 for _ in range(20))


def test_intra_op_threads_restores_the_setting():
    before = torch.get_num_threads()
    with intra_op_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
