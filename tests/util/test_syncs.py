"""spectrag.util.syncs.SyncCounter: each kind of host synchronization is counted once per call
(on the CPU too), nested calls once, calls that do not wait are not counted, and every patched
method is restored afterwards (also when the block raises)."""

from __future__ import annotations

import pytest
import torch

from spectrag.util.syncs import SyncCounter


def test_counts_each_kind_once_per_call():
    x = torch.arange(6.0)
    with SyncCounter(where=True) as syncs:
        x.sum().item()
        x.tolist()
        x.numpy()
        x.cpu()
        bool(x.any())
        int(x[0])
        float(x[1])
        torch.nonzero(x)
        x.nonzero()
        x[x > 2]  # boolean-mask read
        x[x > 4] = 0.0  # boolean-mask write
        torch.unique(x)
        torch.repeat_interleave(torch.tensor([1, 2]))
        x.repeat_interleave(torch.tensor([1] * 6))
        torch.bincount(torch.tensor([0, 1]))
    assert dict(syncs.counts) == {"item": 1, "tolist": 1, "numpy": 1, "cpu": 1, "bool": 1, "int": 1, "float": 1,
                                  "nonzero": 2, "bool-index": 2, "unique": 1, "repeat_interleave": 2, "bincount": 1}
    assert syncs.total == 15 and all("test_syncs.py" in where for _, where in syncs.places)


def test_calls_that_do_not_wait_are_not_counted():
    x = torch.arange(6.0)
    with SyncCounter() as syncs:
        y = x * 2 + x.gather(0, torch.tensor([0, 5]))[0]
        x[torch.tensor([1, 2])]  # an integer index: no data-sized output
        x[1:3]
        torch.where(x > 2, x, y)
        x.repeat_interleave(2)
        torch.repeat_interleave(x, torch.tensor([1] * 6), output_size=6)
        x.masked_fill(x > 2, 0.0)
    assert syncs.total == 0, syncs.report()


def test_patches_are_restored_even_on_error():
    item, getitem = torch.Tensor.item, torch.Tensor.__getitem__
    with pytest.raises(RuntimeError, match="boom"):
        with SyncCounter():
            raise RuntimeError("boom")
    assert torch.Tensor.item is item and torch.Tensor.__getitem__ is getitem
    with SyncCounter() as syncs:
        pass
    torch.tensor(1.0).item()
    assert syncs.total == 0
