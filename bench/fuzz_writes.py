"""bench_fuzz.py's categories for writes that are interrupted or run at once (issue 25):

* **random kills**: ``spectrag index --overwrite`` and ``spectrag add`` (their library calls, in
  a worker process) killed with SIGKILL, as ``kill -9`` does, at a random moment of the run, or
  the moment the temporary folder of the new version appears, or the moment its manifest does
  (the file written last). Afterwards the path must load, hold the old or the new index byte for
  byte (every file's SHA-256 as the uninterrupted runs wrote them: the manifest's file table),
  leave at most one stray temporary sibling, and the next write's cleanup (``clean_stale``)
  must leave none.
* **concurrent adds**: two ``add`` runs on one index started together: both land (every
  document of both, once).

The injected kill points of issue 16 (``SPECTRAG_KILL_AT``) stay in bench_fuzz.py (``kills``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spectrag.generations import FOLDER, current_folder, read_pointer  # importable: bench_fuzz ran ensure_spectrag

KILL_WORKER = """
import sys
import numpy as np
from spectrag import build_index
from spectrag.config import EmbedConfig, GraphConfig, IndexConfig
from spectrag.incremental import add_documents
from spectrag.index.chunk import chunk_corpus
from spectrag.index.load import load_documents
mode, corpus, out, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
config = IndexConfig(embed=EmbedConfig(cache_dir=""), graph=GraphConfig(enabled=mode != "build-nograph"))
n = len(chunk_corpus(load_documents(corpus), config.chunk))
v = np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)
v /= np.linalg.norm(v, axis=1, keepdims=True)
if mode.startswith("build"):
    build_index(corpus, out, config, overwrite=True, embeddings=v)
else:
    add_documents(out, corpus, embeddings=v)
"""
SIBLING_KINDS = (".tmp-", ".new-", ".old-")


def write_corpus(path: Path, first: int, count: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": f"Document {i} is about the harbour of town {i}."}) + "\n"
                            for i in range(first, first + count)))
    return path


def _files(folder: Path) -> dict:
    """The manifest's file table of the generation CURRENT names (size and SHA-256 of every other
    file): equal tables mean the same index byte for byte, the manifest's dates and timings aside."""
    return json.loads((current_folder(folder) / "manifest.json").read_text())["files"]


def _generations(target: Path) -> list[str]:
    """The generation folders of the index at ``target`` other than the one CURRENT names (a
    killed writer's, until the next write collects them)."""
    folder = target / FOLDER
    current = read_pointer(target)
    return sorted(p.name for p in folder.iterdir() if p.name != current) if folder.is_dir() else []


def _siblings(target: Path) -> list[str]:
    """What a write leaves beside the index (hidden siblings) or in it (generations not current)."""
    hidden = sorted(p.name for p in target.parent.iterdir()
                    if p.name.startswith(f".{target.name}.") and any(k in p.name for k in SIBLING_KINDS))
    return hidden + [f"{FOLDER}/{g}" for g in _generations(target)]


def _kill_when(proc: subprocess.Popen, target: Path, how: str, delay: float) -> None:
    """SIGKILL ``proc`` after ``delay`` s (``random``), or as soon as the temporary folder
    (``tmp``) or its manifest (``manifest``) exists; nothing if it ends first."""
    deadline = time.monotonic() + (delay if how == "random" else 600)
    before = set(_generations(target))
    while proc.poll() is None and time.monotonic() < deadline:
        if how != "random":  # a write's new folder: a hidden sibling, or a generation not yet current
            tmps = [p for p in target.parent.glob(f".{target.name}.tmp-*")]
            tmps += [target / FOLDER / g for g in _generations(target) if g not in before]
            if tmps and (how == "tmp" or any((p / "manifest.json").exists() for p in tmps)):
                break
        time.sleep(0.002)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(600)


def run_random_kills(tally, n: int, seed: int) -> None:
    """``n`` kills, a third each at a random moment, at the temporary folder, at its manifest."""
    from spectrag import load_index
    from spectrag.errors import SpectragError
    from spectrag.store import clean_stale

    rng = random.Random(seed)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base, other, more = (write_corpus(tmp / "base.jsonl", 0, 6), write_corpus(tmp / "other.jsonl", 100, 9),
                             write_corpus(tmp / "more.jsonl", 200, 3))
        run = lambda mode, corpus, out: subprocess.run(  # noqa: E731
            [sys.executable, "-c", KILL_WORKER, mode, str(corpus), str(out), "1" if out.name != "seed" else "0"],
            env=env, check=True)
        run("build", base, tmp / "seed")
        # the uninterrupted results, and how long a run takes (the random kills fall within it)
        refs, seconds = {}, {}
        for mode, corpus in (("build", other), ("add", more)):
            ref = tmp / f"ref-{mode}" / "idx"
            ref.parent.mkdir()
            shutil.copytree(tmp / "seed", ref)
            start = time.monotonic()
            subprocess.run([sys.executable, "-c", KILL_WORKER, mode, str(corpus), str(ref), "1"], env=env, check=True)
            seconds[mode], refs[mode] = time.monotonic() - start, _files(ref)
        old = _files(tmp / "seed")
        for case in range(n):
            mode, how = rng.choice(["build", "add"]), ("random", "tmp", "manifest")[case % 3]
            target = tmp / f"k{case}" / "idx"
            target.parent.mkdir()
            shutil.copytree(tmp / "seed", target)
            proc = subprocess.Popen([sys.executable, "-c", KILL_WORKER, mode, str(other if mode == "build" else more),
                                     str(target), "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            delay = rng.uniform(0.3, 1.1) * seconds[mode]
            _kill_when(proc, target, how, delay)
            what = f"{mode} killed ({how}{f' after {delay:.1f} s' if how == 'random' else ''}, exit {proc.returncode})"
            try:
                strays = _siblings(target)
                files = _files(load_index(target).path)
                version = "old" if files == old else "new" if files == refs[mode] else None
                clean_stale(target)  # what the next write of this index runs first
                left = _siblings(target)
                ok = version is not None and len(strays) <= 1 and not left
                tally.detail("random kills", f"{how}, {'killed' if proc.returncode == -signal.SIGKILL else 'finished first'}")
                tally.detail("random kills", f"{version or 'neither'} index left")
                tally.detail("random kills", f"{len(strays)} stray folder(s) before cleanup")
                tally.add("random kills", "ok" if ok else "wrong",
                          f"{what}: {version or 'neither old nor new'}, stray {strays}, after cleanup {left}")
            except SpectragError as exc:
                tally.add("random kills", "wrong", f"{what}: no loadable index after the kill ({exc})")
            except Exception as exc:  # noqa: BLE001
                tally.add("random kills", "crash", f"{what}: {type(exc).__name__}: {exc}")
            shutil.rmtree(target.parent, ignore_errors=True)


def run_concurrent_adds(tally, rounds: int) -> None:
    """Two adds to one index at once, ``rounds`` times: both must land."""
    from spectrag import load_index

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = write_corpus(tmp / "base.jsonl", 0, 6)
        subprocess.run([sys.executable, "-c", KILL_WORKER, "build", str(base), str(tmp / "seed"), "0"], env=env, check=True)
        for r in range(rounds):
            target = tmp / f"r{r}" / "idx"
            target.parent.mkdir()
            shutil.copytree(tmp / "seed", target)
            parts = [write_corpus(tmp / f"r{r}-{k}.jsonl", 1000 * (r + 1) + 100 * k, 3) for k in range(2)]
            procs = [subprocess.Popen([sys.executable, "-c", KILL_WORKER, "add", str(p), str(target), str(k + 2)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                     for k, p in enumerate(parts)]
            codes = [p.wait(600) for p in procs]
            try:
                index = load_index(target)
                ids = sorted(c.doc_id for c in index.chunks)
                want = sorted([f"d{i}" for i in range(6)] + [json.loads(line)["id"] for p in parts
                                                             for line in p.read_text().splitlines()])
                ok = codes == [0, 0] and ids == want
                tally.add("concurrent adds", "ok" if ok else "wrong", f"round {r}: exits {codes}, {len(ids)} of {len(want)} ids")
            except Exception as exc:  # noqa: BLE001
                tally.add("concurrent adds", "crash", f"round {r}: {type(exc).__name__}: {exc}")
