"""``spectrag index --ray``: :func:`spectrag.build.build_index` with its chunk, embed and graph
steps on a Ray cluster (:class:`spectrag.build.BuildStages`), the same index directory written
atomically on the driver."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from spectrag.build import BuildStages, build_index
from spectrag.config import ChunkConfig, EmbedConfig, IndexConfig
from spectrag.distributed.cluster import LOCAL, quiet_data_context, ray_cluster, require_ray
from spectrag.distributed.embed import RayEmbedder
from spectrag.distributed.graph import RayGraph
from spectrag.index.chunk import chunk_document
from spectrag.generations import generation_folder
from spectrag.store import MANIFEST, Index, current_generation
from spectrag.types import Chunk, Document

#: manifest fields that differ between two builds of one corpus: when, how long, how much memory, where
TIMING_FIELDS = ("created", "history", "seconds", "cpu_seconds", "memory", "distributed", "graph.seconds",
                 "graph.cpu_seconds", "graph.peak_rss_mib", "graph.spectrum.seconds")

#: documents per Ray Data block of the chunk stage
CHUNK_DOCS = 2_048
_DOC_FIELDS = ("doc_id", "title", "text", "url", "markup", "kind")  # what chunking reads (not metadata)


def _chunk_batch(batch: dict[str, Any], config: ChunkConfig) -> dict[str, list]:
    """Ray Data batch of documents -> their chunks, tagged (document position, chunk number)."""
    out: dict[str, list] = {k: [] for k in ("pos", "j", "doc_id", "title", "section", "url", "text", "n_tokens",
                                            "start", "end")}
    for i, pos in enumerate(batch["pos"]):
        doc = Document(**{f: str(batch[f][i]) for f in _DOC_FIELDS})
        for j, c in enumerate(chunk_document(doc, config)):
            for key, value in (("pos", int(pos)), ("j", j), ("doc_id", c.doc_id), ("title", c.title),
                               ("section", json.dumps(list(c.section), ensure_ascii=False)), ("url", c.url),
                               ("text", c.text), ("n_tokens", c.n_tokens), ("start", c.start), ("end", c.end)):
                out[key].append(value)
    return out


def chunk_on_ray(docs: list[Document], config: ChunkConfig, *, workers: int, block: int = CHUNK_DOCS) -> list[Chunk]:
    """:func:`spectrag.index.chunk.chunk_corpus` as a Ray Data ``map_batches`` over blocks of
    documents; the chunks come back in corpus order (sorted by document, then chunk number)."""
    ray = require_ray()
    quiet_data_context(ray)
    if not docs:
        return []
    rows = [{"pos": i, **{f: getattr(d, f) for f in _DOC_FIELDS}} for i, d in enumerate(docs)]
    blocks = max(1, min(len(rows), max(workers, -(-len(rows) // block))))
    ds = ray.data.from_items(rows, override_num_blocks=blocks).map_batches(
        _chunk_batch, fn_kwargs={"config": config}, batch_size=None, batch_format="numpy")
    tagged = []
    for b in ds.iter_batches(batch_format="numpy", batch_size=None):
        for i in range(len(b["pos"])):
            tagged.append(((int(b["pos"][i]), int(b["j"][i])), Chunk(
                str(b["doc_id"][i]), str(b["title"][i]), tuple(json.loads(str(b["section"][i]))), str(b["url"][i]),
                str(b["text"][i]), int(b["n_tokens"][i]), int(b["start"][i]), int(b["end"][i]),
                docs[int(b["pos"][i])].metadata)))  # metadata stays here: it is not chunked
    tagged.sort(key=lambda t: t[0])
    return [c for _, c in tagged]


def ray_stages(cluster, workers: int, *, graph_tasks: dict[str, int] | None = None) -> BuildStages:
    """The :class:`~spectrag.build.BuildStages` of a build on ``cluster`` with ``workers``."""
    embedder: Callable[[EmbedConfig], RayEmbedder] = lambda config: RayEmbedder(  # noqa: E731
        config, workers=workers, gpus=cluster.gpus)
    return BuildStages(
        chunk=lambda docs, config, progress: chunk_on_ray(docs, config, workers=workers),
        embedder=embedder,
        graph=RayGraph(workers, **(graph_tasks or {})),
        facts=cluster.facts(workers),
    )


def build_index_ray(
    source: str | Path,
    out_dir: str | Path,
    config: IndexConfig | None = None,
    *,
    address: str | None = LOCAL,
    workers: int = 0,
    fmt: str = "auto",
    overwrite: bool = False,
    skip_empty: bool = False,
    progress: bool = False,
    embeddings: np.ndarray | None = None,
    graph_tasks: dict[str, int] | None = None,
    **options: Any,
) -> Index:
    """:func:`spectrag.build.build_index` on Ray: same arguments, same index directory (the
    manifest adds a ``distributed`` entry; timings differ). ``address``: ``"local"`` (a cluster
    started for this build), ``"auto"`` or ``"ray://host:port"``, or the Ray this process already
    initialized; ``workers``: actors and task fan-out (0: one per cluster CPU); ``graph_tasks``:
    task sizes (``knn_rows``, ``entity_rows``, ``extract_texts``; :class:`RayGraph`); ``options``:
    :func:`~spectrag.build.build_index`'s other keywords (``llm``, ``skip_invalid``, ...)."""
    with ray_cluster(address) as cluster:
        stages = ray_stages(cluster, cluster.workers(workers), graph_tasks=graph_tasks)
        return build_index(source, out_dir, config, fmt=fmt, overwrite=overwrite, skip_empty=skip_empty,
                           progress=progress, embeddings=embeddings, stages=stages, **options)


def index_differences(a: str | Path, b: str | Path) -> list[str]:
    """What differs between the index folders ``a`` and ``b``: files present in one only,
    files whose bytes differ, and manifest fields that differ apart from :data:`TIMING_FIELDS`
    (an empty list: the same index, as a distributed and a single-process build should be)."""
    a, b = (generation_folder(p, current_generation(p)) for p in (Path(a), Path(b)))  # the current generations
    files = lambda root: {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}  # noqa: E731
    fa, fb = files(a), files(b)
    out = [f"only in {a}: {f}" for f in sorted(fa - fb)] + [f"only in {b}: {f}" for f in sorted(fb - fa)]
    out += [f"bytes differ: {f}" for f in sorted(fa & fb - {MANIFEST}) if (a / f).read_bytes() != (b / f).read_bytes()]
    ma, mb = (json.loads((root / MANIFEST).read_text(encoding="utf-8")) for root in (a, b))
    for field in TIMING_FIELDS:
        *parents, last = field.split(".")
        for m in (ma, mb):
            for key in parents:
                m = m.get(key) or {}
            m.pop(last, None)
    out += [f"manifest differs: {key}" for key in sorted(set(ma) | set(mb)) if ma.get(key) != mb.get(key)]
    return out
