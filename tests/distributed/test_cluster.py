"""Connecting to Ray (spectrag.distributed.cluster): a missing Ray names the install command; a
bad worker count is a clear error; a running Ray is reused, not shut down."""

from __future__ import annotations

import sys

import pytest

from spectrag.distributed.cluster import Cluster, ray_cluster, require_ray
from spectrag.errors import SpectragError


def test_missing_ray_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'spectrag\[ray\]'"):
        require_ray()


def test_worker_counts():
    cluster = Cluster("local", cpus=6, gpus=0, started_here=False)
    assert cluster.workers(0) == 6 and cluster.workers(2) == 2
    with pytest.raises(SpectragError, match="workers must be an int >= 0"):
        cluster.workers(-1)


def test_a_running_ray_is_reused_and_left_running(ray_local):
    with ray_cluster("local") as cluster:
        assert not cluster.started_here and cluster.cpus == 2
    assert ray_local.is_initialized()
