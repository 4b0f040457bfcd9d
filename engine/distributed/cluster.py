"""Connecting to Ray: a local cluster started for one call, or an existing one (``auto``,
``ray://host:port``), and the worker counts the stages size their pools by."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from spectrag.errors import SpectragError

INSTALL = "pip install 'spectrag[ray]'  (or: pip install 'ray[data]')"
LOCAL = "local"
#: actor restarts and task retries after a worker dies (-1: unlimited)
MAX_RESTARTS = 3
MAX_TASK_RETRIES = 3


def require_ray():
    """The ``ray`` module, or an ImportError that names the install command."""
    try:
        import ray  # optional: only the distributed commands need it
        import ray.data  # noqa: F401
    except ImportError:
        raise ImportError(f"the Ray stages need Ray with Ray Data: {INSTALL}") from None
    return ray


@dataclass(frozen=True)
class Cluster:
    """What the stages need to know about the cluster: CPU and GPU counts (whole units)."""

    address: str
    cpus: int
    gpus: int
    started_here: bool

    def workers(self, requested: int = 0) -> int:
        """``requested`` workers, or for 0 one per CPU of the cluster."""
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 0:
            raise SpectragError(f"workers must be an int >= 0 (0: one per cluster CPU), got {requested!r}")
        return requested or max(1, self.cpus)

    def facts(self, workers: int) -> dict[str, Any]:
        ray = require_ray()
        return {"engine": "ray", "ray": ray.__version__, "address": self.address, "cluster_cpus": self.cpus,
                "cluster_gpus": self.gpus, "workers": workers}


@contextmanager
def ray_cluster(address: str | None = LOCAL, *, num_cpus: int | None = None) -> Iterator[Cluster]:
    """A connected Ray: the one already initialized in this process, else a local cluster
    (``address`` None or ``"local"``; ``num_cpus`` CPUs, default all) shut down on exit, else
    ``ray.init(address=address)`` (``"auto"``, ``"ray://host:port"``)."""
    ray = require_ray()
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "logging_level": "WARNING"}
        if address in (None, LOCAL):
            # workers import spectrag from where this process does (an editable install, a checkout)
            env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
            ray.init(num_cpus=num_cpus, runtime_env={"env_vars": env} if env else None, **kwargs)
        else:
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise SpectragError(f"--ray {address}: cannot connect to a Ray cluster there ({exc})") from None
        started = True
    try:
        resources = ray.cluster_resources()
        yield Cluster(address or LOCAL, int(resources.get("CPU", 1)), int(resources.get("GPU", 0)), started)
    finally:
        if started:
            ray.shutdown()


def quiet_data_context(ray) -> None:
    """Ray Data in order, without progress bars or per-run log lines (results are also put in
    order by their index, so nothing depends on the ordering option)."""
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)


def actor_options(gpus: int) -> dict[str, Any]:
    """Remote options of a plain actor: restarted when its process dies, its calls retried (Ray
    Data's actor pools do the same by default), one GPU when the cluster has any."""
    return {"max_restarts": MAX_RESTARTS, "max_task_retries": MAX_TASK_RETRIES, "num_gpus": 1 if gpus else 0}
