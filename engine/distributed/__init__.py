"""Beyond one machine: the index build and batch scoring on a Ray cluster (optional ``ray`` extra:
``pip install 'spectrag[ray]'``).

It orchestrates; every stage it runs is the engine's own function:

* :func:`build_index_ray` (``spectrag index --ray``): chunking and embedding as Ray Data
  pipelines (the embedding model stays loaded in an actor pool, one GPU per actor where the
  cluster has GPUs), the graph stages that split by rows (semantic kNN tiles, entity extraction
  and entity-product tiles, section and citation signals) as Ray tasks over arrays in Ray's
  shared-memory object store, and the assembly (fusion, spectrum, BM25, the index directory) on
  the driver through :func:`spectrag.build.build_index`. The index equals a single-process build
  of the same corpus.
* :class:`RayRetriever` (``spectrag retrieve --ray``): an actor pool, each actor holding one
  memory-mapped index and a :class:`spectrag.retriever.Retriever`; query batches stream through
  Ray Data and come back in order, equal to the single-process output.
* :class:`RayDenseShards`: the exact dense top-k over embedding shards held by separate actors
  (one device each), merged as :meth:`spectrag.index.dense.DenseIndex.search` orders one index.

Actors are restarted and their tasks retried when a worker dies (``max_restarts``,
``max_task_retries``), so a killed worker costs time, not results. Ray is imported only here.
"""

from spectrag.distributed.build import build_index_ray
from spectrag.distributed.cluster import ray_cluster
from spectrag.distributed.dense import RayDenseShards
from spectrag.distributed.embed import RayEmbedder
from spectrag.distributed.score import RayRetriever

__all__ = ["RayDenseShards", "RayEmbedder", "RayRetriever", "build_index_ray", "ray_cluster"]
