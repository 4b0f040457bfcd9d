"""Throughput of retrieval on one index, as ``spectrag bench INDEX`` reports it.

For every mode, thread count and batch size: queries/s of ``Retriever.score_batch`` with the
query vectors given (BM25 tokenization, title matching, every pipeline stage; the median of
``repeats`` timed batches after a warm-up), the median ms of each stage, and the latency of
one query at a time (p50 / p99); the embedder's queries/s beside; the machine, threads, load
average and versions. Wall-clock time: what a user's job waits for.

Every figure is measured after a warm-up of its own configuration (:func:`measure`): the query
embedding at each thread count, each (mode, threads, batch size) row, each latency series. A
first call pays for loading, compiling and thread-pool start-up, so without its own warm-up a
figure depended on the order of ``--threads`` or ``--modes`` (the first one measured paid).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata

import numpy as np
import torch

from spectrag.config import RetrieverConfig
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever
from spectrag.store import Index
from spectrag.util.threads import intra_op_threads


@dataclass(frozen=True)
class BenchSettings:
    """modes: retrieval modes to time; batch_sizes: queries per batch; threads: CPU thread
    counts (each mode and batch size at each); repeats: timed batches per figure (after one
    warm-up); latency_queries: queries timed one at a time for the batch-1 latency."""

    modes: tuple[str, ...] = ("spectral", "hybrid", "dense")
    batch_sizes: tuple[int, ...] = (1, 64, 256)
    threads: tuple[int, ...] = (1,)
    repeats: int = 5
    latency_queries: int = 100

    def __post_init__(self) -> None:
        for name in ("batch_sizes", "threads"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or v < 1 for v in values):
                raise SpectragError(f"{name} must be integers >= 1, got {values!r}")
        if self.repeats < 1 or self.latency_queries < 1:
            raise SpectragError(f"repeats and latency_queries must be >= 1, got {self.repeats}, {self.latency_queries}")


def sample_queries(index: Index, n: int, seed: int = 0) -> list[str]:
    """``n`` queries made from the index itself when the user gives none: the first sentence
    (at most 30 words) of chunks drawn at random (seeded)."""
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(index.chunks), size=min(n, len(index.chunks)), replace=False)
    out = []
    for c in picks.tolist():
        words = index.chunks[c].text.split(".")[0].split()[:30]
        out.append(" ".join(words) or index.chunks[c].title or "query")
    return out


def machine() -> dict:
    """CPU, cores, memory, load average and the versions that matter, read now."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    versions = {}
    for package in ("spectrag", "torch", "numpy", "numba", "faiss-cpu", "faiss-gpu-cu12"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else 0.0
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "memory_gib": round(memory, 1),
            "torch_threads_default": torch.get_num_threads(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else [], "versions": versions}


_clock = time.perf_counter  # the timer of every figure (a test gives a fake one)


def measure(fn: Callable[[int], object], repeats: int, warmups: int = 1) -> list[float]:
    """Seconds of ``fn(i)`` for ``i`` in ``range(warmups, warmups + repeats)``, after ``warmups``
    untimed calls ``fn(0) ...`` of the same configuration (load, compile, caches, threads)."""
    for i in range(warmups):
        fn(i)
    seconds = []
    for i in range(warmups, warmups + repeats):
        t = _clock()
        fn(i)
        seconds.append(_clock() - t)
    return seconds


def _cycle(texts: Sequence[str], start: int, size: int) -> list[int]:
    return [(start + i) % len(texts) for i in range(size)]


def run_bench(index: Index, queries: Sequence[str], settings: BenchSettings, config: RetrieverConfig | None = None,
              log: Callable[[str], None] = lambda _: None) -> dict:
    """Every figure of the module docstring, as a record (``rows``: one per mode, threads and
    batch size; ``latency``: per mode and threads; ``embed``: per threads)."""
    queries = list(queries)
    if not queries:
        raise SpectragError("no queries to time")
    base = config or RetrieverConfig()
    record = {"index": str(index.path), "chunks": len(index.chunks), "queries": len(queries),
              "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in settings.__dict__.items()},
              "machine": machine(), "rows": [], "latency": [], "embed": []}
    start = _clock()
    retriever = Retriever(index, base.replace(threads=max(settings.threads)))
    for threads in settings.threads:
        with intra_op_threads(threads):
            out: dict[str, torch.Tensor] = {}
            seconds = measure(lambda i: out.__setitem__("vectors", retriever.embed(queries)), min(settings.repeats, 3))
            vectors = out["vectors"]
            record["embed"].append({"threads": threads, "queries_per_s": len(queries) / statistics.median(seconds)})
            for mode in settings.modes:
                r = Retriever(index, base.replace(mode=mode, threads=threads))
                for batch in settings.batch_sizes:
                    row = _time_batches(r, queries, vectors, batch, settings.repeats)
                    record["rows"].append({"mode": mode, "threads": threads, "batch": batch, **row})
                    log(f"{mode:>9} threads {threads} batch {batch:>5}: {row['queries_per_s']:9.1f} q/s")
                record["latency"].append({"mode": mode, "threads": threads,
                                          **_latency(r, queries, vectors, settings.latency_queries)})
    record["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else []
    record["wall_seconds"] = _clock() - start
    return record


def _time_batches(r: Retriever, queries: list[str], vectors: torch.Tensor, batch: int, repeats: int) -> dict:
    stages: list[dict] = []

    def one(rep: int) -> None:
        rows = _cycle(queries, rep * batch, batch)
        result = r.score_batch([queries[i] for i in rows], qvecs=vectors[rows])
        if rep:  # rep 0: the warm-up (compiled kernels load, caches fill)
            stages.append(result.seconds)

    median = statistics.median(measure(one, repeats))
    names = [k for k in stages[0] if k != "embed"]
    return {"queries_per_s": batch / median, "ms_per_batch": 1000 * median,
            "stage_ms": {k: 1000 * statistics.median(s.get(k, 0.0) for s in stages) for k in names}}


def _latency(r: Retriever, queries: list[str], vectors: torch.Tensor, n: int) -> dict:
    order = _cycle(queries, 0, n + 1)  # order[0]: the warm-up
    times = np.array(measure(lambda j: r.score_batch([queries[order[j]]], qvecs=vectors[order[j] : order[j] + 1]), n)) * 1000
    return {"p50_ms": float(np.percentile(times, 50)), "p99_ms": float(np.percentile(times, 99)), "queries": n}


def format_table(record: dict) -> str:
    """The record as Markdown: machine line, throughput table, stage table, latency table."""
    m = record["machine"]
    load = ", ".join(f"{x:.2f}" for x in m["load_average"])
    load_end = ", ".join(f"{x:.2f}" for x in m.get("load_average_end", []))
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    lines = [f"Index: {record['index']} ({record['chunks']:,} chunks), {record['queries']:,} queries.",
             f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, {m['memory_gib']} GiB; load average "
             f"{load} at the start, {load_end} at the end; {versions}.",
             f"Each figure: median of {record['settings']['repeats']} timed batches after a warm-up, query "
             "vectors given (embedding below), wall-clock.", "",
             "| mode | threads | batch | queries/s | ms/batch | " + " | ".join(_stage_names(record)) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(_stage_names(record))]
    for row in record["rows"]:
        stages = " | ".join(f"{row['stage_ms'].get(s, 0.0):.1f}" for s in _stage_names(record))
        lines.append(f"| {row['mode']} | {row['threads']} | {row['batch']} | {row['queries_per_s']:,.1f} | "
                     f"{row['ms_per_batch']:.1f} | {stages} |")
    lines += ["", "| mode | threads | batch-1 p50 ms | batch-1 p99 ms |", "|---|---:|---:|---:|"]
    lines += [f"| {x['mode']} | {x['threads']} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} |" for x in record["latency"]]
    lines += ["", "Query embedding: " + ", ".join(f"{e['queries_per_s']:,.0f} q/s at {e['threads']} thread(s)"
                                                  for e in record["embed"]) + "."]
    return "\n".join(lines)


def _stage_names(record: dict) -> list[str]:
    names: list[str] = []
    for row in record["rows"]:
        names += [k for k in row["stage_ms"] if k not in names]
    return names
