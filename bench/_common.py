"""What the benchmark scripts share: thread pinning, the import shim, machine facts, timing,
the copy-bandwidth ceiling, byte models, synthetic graphs and results files.

Import it BEFORE numpy / scipy / torch / faiss and call :func:`pin_threads` first: those
libraries read their thread counts when they load. For the same reason this module imports
numpy, scipy and torch only inside the functions that need them.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository: engine/ is `spectrag`, kernels/ `spectrag.kernels`


# ---------------------------------------------------------------------------------------------
# set-up
# ---------------------------------------------------------------------------------------------


def pin_threads(default: str, *, passive: bool = False) -> str:
    """Set OMP/OpenBLAS/MKL threads from ``--threads N`` in argv (else ``default``); returns it.

    ``passive`` lets idle OpenMP workers sleep instead of spin: on a loaded machine spinning
    workers made 2-thread sparse products many times slower than one thread.
    """
    threads = default
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            threads = sys.argv[i + 1]
        elif arg.startswith("--threads="):
            threads = arg.split("=", 1)[1]
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = threads
    if passive:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return threads


def bench_parser(doc: str, out_name: str, *, threads: str | None = None):
    """An argument parser (description: the first line of ``doc``) with the flags the kernel
    benchmarks share: ``--repeats``, ``--seed``, ``--out`` (default ``bench/results/<out_name>``,
    without extension) and, when ``threads`` is given, ``--threads`` with that default."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per figure (default: 3)")
    if threads is not None:
        ap.add_argument("--threads", type=int, default=int(threads), help=f"torch intra-op threads (default: {threads})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / out_name), help="results path without extension")
    return ap


def limit_threads(threads: int):
    """torch, FAISS (when installed) and the BLAS / OpenMP pools (threadpoolctl) limited to
    ``threads``. Returns the threadpoolctl context: hold it for the run (``with``)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    if importlib.util.find_spec("faiss") is not None:
        importlib.import_module("faiss").omp_set_num_threads(threads)
    return threadpool_limits(limits=threads)


def ensure_spectrag() -> None:
    """Make ``import spectrag`` work from a bare checkout, where nothing is pip-installed (the
    GPU machine): ``spectrag`` is mapped to ``<repo>/engine`` and ``spectrag.kernels`` to
    ``<repo>/kernels``, the layout ``pyproject.toml`` installs. A no-op where it imports."""
    try:
        importlib.import_module("spectrag")
        return
    except ImportError:
        pass
    modules = []
    for name, folder in (("spectrag", ROOT / "engine"), ("spectrag.kernels", ROOT / "kernels")):
        spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # registered before it runs: its own imports find the package
        modules.append((spec, module))
    modules[0][1].kernels = modules[1][1]  # the attribute `import spectrag.kernels` binds
    try:  # the kernels first: they import nothing of spectrag outside spectrag.kernels
        for spec, module in reversed(modules):
            spec.loader.exec_module(module)
    except BaseException:
        for spec, _ in modules:
            sys.modules.pop(spec.name, None)
        raise


# ---------------------------------------------------------------------------------------------
# machine facts (every results file names the machine, threads and load average)
# ---------------------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name, for results tables."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (empty where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return []


def cpu_counters() -> dict | None:
    """Seconds of CPU time since boot, summed over the machine's CPUs, from ``/proc/stat``:
    ``busy`` (user, nice, system, irq, softirq), ``steal`` (taken by other virtual machines on
    the host) and ``own`` (this process and its waited-for children, ``os.times``). None where
    there is no ``/proc/stat``."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    t = os.times()
    return {"busy": (user + nice + system + irq + softirq) / hz, "steal": steal / hz,
            "own": t.user + t.system + t.children_user + t.children_system, "wall": time.monotonic()}


def others_cpu(start: dict | None, end: dict | None, cpus: int) -> dict | None:
    """The share of ``cpus`` CPUs that other processes kept busy between two :func:`cpu_counters`
    (``others``: busy time not this process's nor its children's), and that other virtual
    machines took (``steal``): what a timing shares the machine with."""
    if not start or not end or end["wall"] <= start["wall"]:
        return None
    room = (end["wall"] - start["wall"]) * max(cpus, 1)
    others = (end["busy"] - start["busy"]) - (end["own"] - start["own"])
    return {"others": round(max(others, 0.0) / room, 3), "steal": round((end["steal"] - start["steal"]) / room, 3)}


def _version(module: str) -> str:
    try:
        return str(getattr(importlib.import_module(module), "__version__", "?"))
    except ImportError:
        return "absent"


def machine_info(device=None, packages: tuple[str, ...] = ()) -> dict:
    """CPU (and GPU when ``device`` is CUDA), cores, memory, threads, load average and versions
    (numpy, scipy, torch and ``packages``), taken now: call it before the timed runs, so the
    load average is the background's."""
    import torch

    info = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "torch_threads": torch.get_num_threads(),
        "omp_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "load_average_start": load_average(),
        "python": platform.python_version(),
        **{name: _version(name) for name in ("torch", "numpy", "scipy", *packages)},
    }
    if device is not None and str(device).startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
        info["cuda"] = torch.version.cuda
    return info


def machine_line(info: dict) -> str:
    """One Markdown line naming the machine, threads, load average and versions of ``info``."""
    what = f"{info['gpu']} (CUDA {info['cuda']}) with " if "gpu" in info else ""
    load = ", ".join(f"{x:.2f}" for x in info["load_average_start"]) or "n/a"
    if info.get("load_average_end"):
        load += " at the start, " + ", ".join(f"{x:.2f}" for x in info["load_average_end"]) + " at the end"
    if info.get("others_cpu"):
        share = info["others_cpu"]
        load += (f"; during the run other processes kept {100 * share['others']:.0f}% of the CPUs busy"
                 f" and the hypervisor took {100 * share['steal']:.0f}%")
    if info.get("speed_start"):
        s, e = info["speed_start"], info.get("speed_end")
        load += (f"; speed probe (`_common.speed_probe`): float32 GEMM on one thread {s['gemm_GFLOPs']:.1f} GFLOP/s, "
                 f"copy {s['copy_GBps']:.1f} GB/s at the start")
        if e:
            load += f", {e['gemm_GFLOPs']:.1f} GFLOP/s and {e['copy_GBps']:.1f} GB/s at the end"
    skip = {"cpu", "logical_cpus", "affinity_cpus", "memory_gib", "torch_threads", "omp_threads",
            "omp_wait_policy", "load_average_start", "load_average_end", "gpu", "cuda", "others_cpu",
            "speed_start", "speed_end"}
    versions = ", ".join(f"{k} {v}" for k, v in info.items() if k not in skip)
    return (f"Machine: {what}{info['cpu']}, {info['logical_cpus']} logical CPUs (affinity {info['affinity_cpus']}), "
            f"{info['memory_gib']} GiB RAM; threads: torch {info['torch_threads']}, OMP/MKL/OpenBLAS "
            f"{info['omp_threads']} (OMP_WAIT_POLICY {info['omp_wait_policy']}); load average (1/5/15 min) {load}; "
            f"{versions}.")


def speed_probe() -> dict:
    """How fast this machine runs now: float32 matrix products of the query encoder's
    feed-forward shape (``[256, 384] @ [384, 1536]``) in GFLOP/s on one thread (the best of 25
    products) and numpy's 64 MiB copy in GB/s (read + write, :func:`copy_bandwidth`), about 0.3 s
    in all. A VM's speed can drift by tens of percent within an hour while its load average and
    steal time stay low, so a record carries this probe at its start and its end: figures of two
    records are comparable only where their probes are. numpy's own BLAS, not torch's MKL: MKL fixes its
    reproducibility mode at its first product, which must stay the product's to make
    (:func:`spectrag.index.embed.reproducible_products`)."""
    import numpy as np

    def best(fn, runs: int) -> float:
        fn()  # first touch: allocation and page faults are not the machine's speed
        out = float("inf")
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            out = min(out, time.perf_counter() - start)
        return out

    try:
        from threadpoolctl import threadpool_limits

        one_thread = threadpool_limits(1, user_api="blas")
    except ImportError:  # then the BLAS threads pin_threads set
        from contextlib import nullcontext

        one_thread = nullcontext()
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((256, 384), dtype=np.float32), rng.standard_normal((384, 1536), dtype=np.float32)
    out = np.empty((256, 1536), dtype=np.float32)
    with one_thread:
        gemm = 2 * 256 * 384 * 1536 / best(lambda: np.matmul(a, w, out=out), 25) / 1e9
    copy = copy_bandwidth(mib=64, repeats=5)["numpy_GBps"]
    return {"gemm_GFLOPs": round(gemm, 1), "copy_GBps": round(copy, 2)}


def new_record(runs: str, *, device=None, packages: tuple[str, ...] = ()) -> dict:
    """The start of a results record: command, date, :func:`machine_info` and
    :func:`speed_probe` (now, before the timed runs) and ``runs`` (how each figure is measured,
    e.g. "median of 3 after one warm-up")."""
    machine = machine_info(device, packages)
    machine["speed_start"] = speed_probe()
    return {"command": command_line(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": machine, "runs": runs, "started": time.time(),
            "cpu_counters_start": cpu_counters()}


BUSY_WARNING = 0.10  # other processes' share of the CPUs above which a timing is flagged


def finish_record(record: dict) -> dict:
    """``record`` with the wall time, the load average at the end of the run and the share of
    the CPUs other processes used meanwhile (:func:`others_cpu`; a warning on stderr above
    :data:`BUSY_WARNING`: the timings shared the machine)."""
    record["wall_seconds"] = time.time() - record["started"]
    record["machine"]["load_average_end"] = load_average()
    share = None
    if "cpu_counters_start" in record:  # the probe's own CPU time is not the run's
        share = others_cpu(record.pop("cpu_counters_start"), cpu_counters(), record["machine"]["affinity_cpus"])
    record["machine"]["speed_end"] = speed_probe()
    if share is not None:
        record["machine"]["others_cpu"] = share
        if share["others"] + share["steal"] > BUSY_WARNING:
            print(f"warning: other processes kept {100 * share['others']:.0f}% of the CPUs busy during this run "
                  f"(the hypervisor took {100 * share['steal']:.0f}%): its timings shared the machine",
                  file=sys.stderr)
    return record


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------


def save_record(out, record: dict, markdown) -> str:
    """Write ``record`` as ``out``.json and its ``markdown(record)`` as ``out``.md; returns the text."""
    import json
    from pathlib import Path

    out = Path(out)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2, default=float))
    text = markdown(record)
    out.with_suffix(".md").write_text(text)
    return text


def sync(device=None) -> None:
    """Wait for the device's queued kernels (CUDA); nothing on the CPU."""
    if device is not None and str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(torch.device(device))


def median_runs(repeats: int, slow_s: float = 4.0) -> str:
    """How :func:`median_seconds` with ``slow_s`` measured, for the results' ``Runs:`` line."""
    return f"median of {repeats} after one warm-up (one run when the warm-up took over {slow_s:g} s)"


def median_seconds(fn, repeats: int, *, warmup: bool = True, device=None, slow_s: float | None = None):
    """Median wall seconds of ``repeats`` calls of ``fn`` and the last call's result, after one
    untimed warm-up call (unless ``warmup`` is false). With a CUDA ``device`` every call is
    synchronized, so the time covers the kernels and not just their launch. ``slow_s``: when the
    warm-up took longer than this, one timed call only (long runs vary little, and time is short)."""
    runs, out = repeats, None
    if warmup:
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        if slow_s is not None and time.perf_counter() - t0 > slow_s:
            runs = 1
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


# ---------------------------------------------------------------------------------------------
# the ceiling: copy bandwidth, and byte models of a CSR product
# ---------------------------------------------------------------------------------------------


def copy_bandwidth(device="cpu", *, mib: int = 512, repeats: int = 7) -> dict:
    """GB/s of ``dst.copy_(src)`` over ``mib`` MiB of float32 on ``device`` (bytes = read +
    write), median of ``repeats``; on the CPU also numpy's ``copyto``. Keys: ``torch_GBps``,
    ``numpy_GBps`` (CPU only), ``MiB``."""
    import numpy as np
    import torch

    a = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device).normal_()
    b = torch.empty_like(a)
    nbytes = 2 * a.numel() * 4
    out = {"torch_GBps": nbytes / median_seconds(lambda: b.copy_(a), repeats, device=device)[0] / 1e9, "MiB": mib}
    if a.device.type == "cpu":
        an, bn = a.numpy(), b.numpy()
        out["numpy_GBps"] = nbytes / median_seconds(lambda: np.copyto(bn, an), repeats)[0] / 1e9
    return out


def between_copies(measure, *, mib: int = 512, repeats: int = 7) -> tuple[object, dict]:
    """``measure(provisional ceiling GB/s)`` between two copy measurements (the bandwidth of a
    shared machine drifts). Returns its result and ``{copy_start, copy_end, ceiling_GBps}``, the
    ceiling being the median of the two torch figures."""
    start = copy_bandwidth(mib=mib, repeats=repeats)
    print(f"copy bandwidth at the start: torch {start['torch_GBps']:.2f} GB/s", flush=True)
    result = measure(start["torch_GBps"])
    end = copy_bandwidth(mib=mib, repeats=repeats)
    ceiling = statistics.median([start["torch_GBps"], end["torch_GBps"]])
    print(f"copy bandwidth at the end: torch {end['torch_GBps']:.2f} GB/s; ceiling used {ceiling:.2f} GB/s", flush=True)
    return result, {"copy_start": start, "copy_end": end, "ceiling_GBps": ceiling}


def ceiling_text(copies: dict) -> str:
    """The Markdown sentence that states the ceiling of :func:`between_copies`."""
    s, e = copies["copy_start"], copies["copy_end"]
    return (f"Ceiling: `dst.copy_(src)` of {s['MiB']} MiB float32 (bytes = read + write), torch {s['torch_GBps']:.2f} GB/s "
            f"at the start and {e['torch_GBps']:.2f} GB/s at the end of the run; **{copies['ceiling_GBps']:.2f} GB/s used** "
            "(their median); every ratio is against it.")


BYTES_MODEL = ("Bytes (s = bytes per value, i = per index): CSR = nnz (s + i) + (n + 1) i; **gather** = CSR + nnz B s "
               "(every nonzero reads its row of X) + n B s (Y written); **compulsory** = CSR + 2 n B s (X read once, "
               "Y written once). FLOPs = 2 nnz B.")


def csr_bytes(nnz: int, n: int, s: int, i: int) -> int:
    """Values + column indices + row pointers of a CSR matrix with ``n`` rows."""
    return nnz * (s + i) + (n + 1) * i


def gather_bytes(nnz: int, n: int, B: int, s: int, i: int) -> int:
    """``Y = A X`` when X does not stay in cache: every nonzero reads its row of ``X [n, B]``."""
    return csr_bytes(nnz, n, s, i) + nnz * B * s + n * B * s


def compulsory_bytes(nnz: int, n: int, B: int, s: int, i: int) -> int:
    """``Y = A X`` with X read once and Y written once: the least any kernel moves."""
    return csr_bytes(nnz, n, s, i) + 2 * n * B * s


def spmm_rows(A, B: int, variants: list[str], repeats: int, graph: str, seed: int, *, ceiling: float) -> list[dict]:
    """Median time of ``Y = A X`` (``X [n, B]`` float32) for each variant and its bytes and
    FLOPs per second. Variants: ``torch i32`` / ``torch i64`` (index width), ``colmajor`` (X
    column-major), ``reduce-sum`` (torch's ``reduce="sum"`` kernel), ``scipy``. ``rel_err``: max
    relative difference to the first variant. ``ceiling`` only scales the printed percentages."""
    import numpy as np
    import torch

    n, nnz = A.shape[0], A.nnz
    X = torch.randn(n, B, generator=torch.Generator().manual_seed(seed))  # (n, B), row-major
    rows, ref, mats = [], None, {}
    for v in variants:
        if v.startswith("torch"):
            idx = torch.int64 if "i64" in v else torch.int32
            M = mats.setdefault(idx, torch_csr(A, idx))
            Xv = X.t().contiguous().t() if "colmajor" in v else X
            args = (M, Xv, "sum") if "reduce" in v else (M, Xv)
            fn, ib = (lambda args=args: torch.sparse.mm(*args)), (8 if idx == torch.int64 else 4)
        elif v == "scipy":
            A32, Xn = A.astype(np.float32), X.numpy()
            fn, ib = (lambda A32=A32, Xn=Xn: A32 @ Xn), A.indices.dtype.itemsize
        else:
            raise ValueError(f"variant must be torch i32|i64 [colmajor|reduce-sum] or scipy, got {v!r}")
        out = torch.as_tensor(fn())
        ref = out if ref is None else ref
        sec = median_seconds(fn, repeats, slow_s=4.0)[0]
        g, c = gather_bytes(nnz, n, B, 4, ib) / sec / 1e9, compulsory_bytes(nnz, n, B, 4, ib) / sec / 1e9
        rows.append(dict(graph=graph, n=n, nnz=nnz, B=B, variant=v, ms=sec * 1e3, GFLOPs=2 * nnz * B / sec / 1e9,
                         gather_GBps=g, compulsory_GBps=c,
                         rel_err=float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-30))))
        print(f"  {graph:<20} n={n:>9,} B={B:>4} {v:<22} {sec * 1e3:9.1f} ms  gather {g:5.2f} GB/s ({g / ceiling:4.0%})"
              f"  compulsory {c:5.2f} GB/s ({c / ceiling:4.0%})", flush=True)
    return rows


def spmm_columns(ceiling: float) -> list[tuple]:
    """The :func:`md_table` columns of :func:`spmm_rows`, ratios against ``ceiling``."""
    return [("graph", "graph", ""), ("n", "n", ","), ("B", "B", "d"), ("variant", "variant", ""), ("ms", "ms", ".1f"),
            ("GFLOP/s", "GFLOPs", ".2f"), ("gather GB/s", "gather_GBps", ".2f"),
            ("gather / ceiling", lambda r: r["gather_GBps"] / ceiling, ".0%"),
            ("compulsory GB/s", "compulsory_GBps", ".2f"),
            ("compulsory / ceiling", lambda r: r["compulsory_GBps"] / ceiling, ".0%")]


# ---------------------------------------------------------------------------------------------
# synthetic graphs (scipy CSR, float32, symmetric, sorted indices, no self-loops)
# ---------------------------------------------------------------------------------------------


def _symmetric(r, c, w, n: int):
    """CSR ``[n, n]`` holding each edge ``(r, c, w)`` in both directions, duplicates summed."""
    import numpy as np
    import scipy.sparse as sp

    A = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([r, c]), np.concatenate([c, r]))), shape=(n, n)).tocsr()
    A.sum_duplicates()
    A.sort_indices()
    return A


def random_graph(n: int, degree: float, seed: int, *, unit: bool = False):
    """``n * degree / 2`` uniformly random undirected edges (self-loops dropped, duplicates
    summed): about ``degree`` nonzeros per row, no locality at all (the worst case for caches).
    Weights uniform in [0.05, 1), or 1 with ``unit`` (a 0/1 adjacency). Shapes: -> ``[n, n]``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    m = int(n * degree / 2)
    r, c = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = r != c
    r, c = r[keep], c[keep]
    w = np.ones(r.size, np.float32) if unit else (0.05 + 0.95 * rng.random(r.size)).astype(np.float32)
    A = _symmetric(r, c, w, n)
    if unit:
        A.data[:] = 1.0
    return A


def locality_graph(n: int, seed: int, *, window: int = 100, k: int = 10, order: str = "natural"):
    """Each node linked to ``k`` nodes within ``+-window`` positions (symmetrised, ~2k nonzeros
    per row), with the nodes in ``order``: ``natural`` (banded), ``random`` (a random relabelling:
    the locality is there but hidden) or ``rcm`` (that relabelling reordered by reverse
    Cuthill-McKee). Shapes: -> ``[n, n]``."""
    import numpy as np
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    if order not in ("natural", "random", "rcm"):
        raise ValueError(f"order must be natural, random or rcm, got {order!r}")
    rng = np.random.default_rng(seed)
    r = np.repeat(np.arange(n), k)
    c = (r + rng.integers(1, window + 1, r.size)) % n
    A = _symmetric(r, c, (0.05 + 0.95 * rng.random(r.size)).astype(np.float32), n)
    if order != "natural":
        A = permute(A, np.random.default_rng(seed).permutation(n))
    if order == "rcm":
        A = permute(A, reverse_cuthill_mckee(A, symmetric_mode=True))
    return A


def permute(A, order):
    """``A[order][:, order]`` as CSR with sorted indices: node ``order[i]`` becomes node ``i``."""
    P = A[order][:, order].tocsr()
    P.sort_indices()
    return P


def mean_band(A) -> float:
    """Mean ``|i - j|`` over the nonzeros: how far a row's reads of X are from the row itself."""
    import numpy as np

    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return float(np.abs(rows - A.indices).mean())


def torch_csr(A, index_dtype=None, dtype=None):
    """A scipy CSR matrix as a torch CSR tensor (CPU) with ``index_dtype`` indices (default
    int32) and ``dtype`` values (default float32)."""
    import numpy as np
    import torch

    index_dtype = index_dtype or torch.int32
    return torch.sparse_csr_tensor(
        torch.from_numpy(A.indptr.astype(np.int64)).to(index_dtype),
        torch.from_numpy(A.indices.astype(np.int64)).to(index_dtype),
        torch.from_numpy(np.asarray(A.data)).to(dtype or torch.float32),
        size=A.shape,
        check_invariants=False,
    )


def quiet_sparse_warnings() -> None:
    """Silence torch's beta warnings on sparse CSR tensors (one per call otherwise)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
    warnings.filterwarnings("ignore", message=".*Sparse invariant checks are implicitly disabled.*")


# ---------------------------------------------------------------------------------------------
# results files
# ---------------------------------------------------------------------------------------------


def command_line() -> str:
    """How this script was called, relative to the repository: ``python bench/x.py --flag``."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    return " ".join(["python", str(script), *sys.argv[1:]])


def md_table(rows: list[dict], cols: list[tuple]) -> list[str]:
    """Markdown table lines. ``cols``: ``(header, key or function of the row, format)``; an empty
    format writes ``str(value)`` left-aligned, any other right-aligns ``format(value, fmt)``; a
    missing key gives an empty cell."""
    out = ["| " + " | ".join(c[0] for c in cols) + " |", "|" + "|".join("---:" if c[2] else "---" for c in cols) + "|"]
    for r in rows:
        cells = []
        for _, key, fmt in cols:
            value = key(r) if callable(key) else r.get(key)
            cells.append("" if value is None else (format(value, fmt) if fmt else str(value)))
        out.append("| " + " | ".join(cells) + " |")
    return out


def results_header(title: str, record: dict) -> list[str]:
    """The first lines of a results file: title, command, machine (threads, load average) and
    runs. ``record`` holds ``command``, ``machine`` (:func:`machine_info`), ``runs`` (a phrase:
    how each figure was measured) and ``wall_seconds``."""
    return [f"# {title}", "", f"Command: `{record['command']}`  ", machine_line(record["machine"]) + "  ",
            f"Runs: {record['runs']}. Wall time {record['wall_seconds'] / 60:.1f} min.", ""]


def write_results(stem: str | Path, lines: list[str], record: dict) -> None:
    """``<stem>.md`` (the lines) and ``<stem>.json`` (the record); a ``.md`` suffix on the
    stem is dropped."""
    stem = Path(stem)
    if stem.suffix == ".md":
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".md").write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"written to {stem}.md and {stem}.json", flush=True)
