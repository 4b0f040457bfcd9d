"""The benchmarks' records say how much of the machine other processes used during a run
(bench/_common.py: ``others_cpu``), so a timing taken on a shared machine is flagged, and how fast
the machine ran at the run's start and end (``speed_probe``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def common():
    spec = importlib.util.spec_from_file_location("bench_common_under_test", ROOT / "bench" / "_common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_others_share_is_busy_time_less_our_own_over_the_room(common):
    start = {"busy": 100.0, "steal": 5.0, "own": 10.0, "wall": 50.0}
    end = {"busy": 103.0, "steal": 5.5, "own": 11.0, "wall": 52.0}  # 2 s on 2 CPUs: 4 CPU-seconds of room
    assert common.others_cpu(start, end, 2) == {"others": 0.5, "steal": 0.125}
    # our own work is not the others': never below zero (counters read at slightly different times)
    assert common.others_cpu(start, {**end, "own": 14.0}, 2)["others"] == 0.0
    assert common.others_cpu(None, end, 2) is None and common.others_cpu(start, start, 2) is None


def test_the_machine_line_states_the_share(common):
    info = {"cpu": "x", "logical_cpus": 2, "affinity_cpus": 2, "memory_gib": 1.0, "torch_threads": 1,
            "omp_threads": "1", "omp_wait_policy": "unset", "load_average_start": [1.0, 1.0, 1.0],
            "others_cpu": {"others": 0.42, "steal": 0.03}}
    line = common.machine_line(info)
    assert "other processes kept 42% of the CPUs busy and the hypervisor took 3%" in line
    assert "others_cpu" not in line


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="needs /proc/stat")
def test_a_process_burning_cpu_beside_the_run_is_counted_and_flagged(common, capsys):
    # unreaped until the record is finished: its CPU time is another process's, not a child's of ours
    record = common.new_record("one busy loop beside")
    other = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.0: pass"])
    time.sleep(1.2)
    common.finish_record(record)
    other.wait(timeout=60)
    share = record["machine"]["others_cpu"]
    cpus = record["machine"]["affinity_cpus"]
    assert share["others"] * cpus >= 0.3  # about one CPU-second per second while it ran (less on a crowded runner)
    assert "cpu_counters_start" not in record
    if share["others"] + share["steal"] > common.BUSY_WARNING:
        assert "shared the machine" in capsys.readouterr().err


def test_a_record_carries_the_speed_probe_at_its_start_and_end(common):
    record = common.finish_record(common.new_record("nothing timed"))
    machine = record["machine"]
    for key in ("speed_start", "speed_end"):
        assert machine[key]["gemm_GFLOPs"] > 0 and machine[key]["copy_GBps"] > 0
    line = common.machine_line(machine)
    assert f"float32 GEMM on one thread {machine['speed_start']['gemm_GFLOPs']:.1f} GFLOP/s" in line
    assert "speed_start" not in line and "at the end" in line


def test_the_speed_probe_leaves_mkl_to_the_embedders_strict_mode():
    """MKL fixes its reproducibility mode at its first product: a probe on torch (MKL) run before
    the first embedder took the torch query recipe's batch invariance in a benchmark run. The
    probe runs on numpy's BLAS, so a process that probes, then embeds, keeps row-invariant products
    (on a CPU where MKL's default mode is not, the probe on torch makes this fail)."""
    code = ("import sys; sys.path.insert(0, 'bench'); import _common; _common.speed_probe()\n"
            "from spectrag.index.embed import _rows_invariant, reproducible_products\n"
            "reproducible_products()\n"
            "print(_rows_invariant(((384, 384), (384, 1536), (1536, 384))))")
    env = {k: v for k, v in __import__("os").environ.items() if k != "MKL_CBWR"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True"


def _bench_trees(monkeypatch):
    """bench/bench_trees.py as a module, the thread variables it pins at import restored afterwards."""
    import os

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        monkeypatch.setenv(var, os.environ.get(var, ""))
        if not os.environ[var]:
            monkeypatch.delenv(var)
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_trees_under_test", ROOT / "bench" / "bench_trees.py")
    trees = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trees)
    return trees


def test_the_engine_trees_comparison_counts_bytes_not_values(monkeypatch):
    """bench/bench_trees.py compares two engines' answers byte for byte: a zero's sign or a dtype
    counts as a difference, equal arrays do not, and differing question counts are refused."""
    import numpy as np

    trees = _bench_trees(monkeypatch)
    row = {"scores": np.array([0.0, 1.5], np.float32), "ranking": np.array([3, 1])}
    key = ("musique", "spectral", 2000)
    same = trees.compare({key: [row]}, {key: [{k: v.copy() for k, v in row.items()}]})
    assert same == [{"set": "musique", "mode": "spectral", "budget": 2000, "questions": 1, "scores": 0, "ranking": 0}]
    signed = {"scores": np.array([-0.0, 1.5], np.float32), "ranking": row["ranking"].astype(np.int32)}
    assert trees.compare({key: [row]}, {key: [signed]})[0] | {} == {**same[0], "scores": 1, "ranking": 1}
    with pytest.raises(SystemExit, match="questions"):
        trees.compare({key: [row]}, {key: [row, row]})


def test_the_engine_trees_table_has_a_column_per_timed_mode(monkeypatch):
    """bench/bench_trees.py --modes: one q/s column and one after / before ratio per mode, the
    peer compared with the first; spectral / hybrid only where both are timed."""
    trees = _bench_trees(monkeypatch)
    monkeypatch.setattr(trees._common, "results_header", lambda title, record: [f"# {title}", ""])

    def tree(a, c):
        return {"activation": a, "combined": c, "peer": 100.0, "x_peer": a / 100, "x_peer_rounds": [a / 100],
                "stages_ms": {"activation": {"activate": 1.0}, "combined": {"activate": 2.0}}}

    record = {"before": "abc", "batch": 256, "budget": 2000, "modes": ["activation", "combined"], "equality": [],
              "speed": {"musique": {"chunks": 1939, "before": tree(2000.0, 1000.0), "after": tree(3000.0, 1200.0)}}}
    text = trees.markdown(record)
    assert "| tree | activation q/s | combined q/s | peer q/s | activation x the peer |" in text
    assert "| after | 3,000.0 | 1,200.0 | 100.0 | 30.0 |" in text
    assert "After / before: activation 1.500, combined 1.200." in text and "spectral / hybrid" not in text
