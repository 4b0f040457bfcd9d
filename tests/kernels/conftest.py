"""Kernel tests run single-threaded: the problems are tiny, and intra-op threads only add
OpenMP overhead (severe on a loaded 2-core machine). The previous setting is restored."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
