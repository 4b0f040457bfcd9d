"""Benchmark: readers loading an index in a loop while a writer edits it (spectrag.generations).

A small synthetic index (``--docs`` JSONL documents, supplied 32-d vectors, the graph on); a
writer process makes ``--edits`` edits, cycling update (one document's text changed), delete
(one document) and add (that document back); ``--readers`` processes call ``load_index`` (every
checksum verified) in a loop for the whole run. The writer logs, after each edit, the generation
it made current and its manifest's SHA-256; every load records the generation it saw and the
SHA-256 of the manifest it read. Counted:

* refusals: loads that raised (the index is healthy throughout, so every one is false);
* mixes: loads whose (generation, manifest) pair is not one the writer wrote, or whose chunk
  table disagrees with its manifest's counts;
* with ``--kills K``: the writer is killed with SIGKILL at a random moment K times (then
  restarted); every load must still be a whole generation (old or new), and after the last
  write no generation is left that CURRENT does not name and no reader holds.

Usage::

    python bench/bench_living_race.py --edits 200 --readers 2 --out bench/results/living_race
    python bench/bench_living_race.py --edits 60 --kills 20 --out bench/results/living_race_kill
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ensure_spectrag, pin_threads  # noqa: E402  (before numpy: sets thread counts)

_THREADS = pin_threads("1", passive=True)

from _common import command_line, load_average, machine_info, machine_line  # noqa: E402

ensure_spectrag()

WRITER = r"""
import hashlib, json, sys, time
import numpy as np
from spectrag import add_documents, delete_documents, update_documents
from spectrag.config import EmbedConfig, IndexConfig
from spectrag.generations import current_folder, read_pointer
from spectrag.index.chunk import chunk_corpus
from spectrag.index.load import load_documents

root, corpus_dir, start, stop, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
config = IndexConfig(embed=EmbedConfig(cache_dir=""))

def vectors(path):
    rows = []
    for c in chunk_corpus(load_documents(path), config.chunk):
        v = np.random.default_rng(int(hashlib.sha256(c.text.encode()).hexdigest()[:12], 16)).standard_normal(32)
        rows.append(v / np.linalg.norm(v))
    return np.asarray(rows, dtype=np.float32)

def doc(i, version):
    return json.dumps({"id": f"d{i:03d}", "title": f"Place {i}",
                       "text": f"# Place {i}\n\nPlace {i} lies on the river road. Version {version} of its page "
                               f"names the mill {i * 7 % 13} and the year {1800 + version}."}) + "\n"

for e in range(start, stop):
    kind, target = ("update", "delete", "add")[e % 3], 1 + (e // 3) % 30
    path = f"{corpus_dir}/edit{e}.jsonl"
    if kind == "update":
        open(path, "w").write(doc(target, e))
        update_documents(root, path, embeddings=vectors(path), compact_above=None)
    elif kind == "delete":
        delete_documents(root, [f"d{target:03d}"], compact_above=None)
    else:
        open(path, "w").write(doc(target, e))
        add_documents(root, path, embeddings=vectors(path), compact_above=None)
    gid = read_pointer(root)
    sha = hashlib.sha256((current_folder(root) / "manifest.json").read_bytes()).hexdigest()
    with open(log, "a") as fh:
        fh.write(json.dumps({"edit": e, "op": kind, "generation": gid, "manifest": sha, "t": time.time()}) + "\n")
"""

READER = r"""
import hashlib, json, sys, time
from spectrag import load_index
root, until, log = sys.argv[1], float(sys.argv[2]), sys.argv[3]
out = open(log, "a")
while time.time() < until:
    t = time.time()
    try:
        index = load_index(root, verify=True)
        sha = hashlib.sha256((index.folder / "manifest.json").read_bytes()).hexdigest()
        counts = index.manifest["counts"]
        whole = len(index.chunks) == counts["chunks"] and sum(c.n_tokens for c in index.chunks) == counts["tokens"]
        row = {"ok": True, "generation": index.generation, "manifest": sha, "whole": whole, "t": t}
        index.release()
        del index
    except Exception as exc:
        row = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300], "t": t}
    out.write(json.dumps(row) + "\n")
    out.flush()
"""


def _run(args: argparse.Namespace) -> dict:
    import numpy as np

    from spectrag import build_index
    from spectrag.config import EmbedConfig, IndexConfig
    from spectrag.generations import FOLDER, collect, read_pointer
    from spectrag.index.chunk import chunk_corpus
    from spectrag.index.load import load_documents

    tmp = Path(tempfile.mkdtemp(prefix="living-race-"))
    corpus = tmp / "base.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i:03d}", "title": f"Place {i}", "text": f"# Place {i}\n\nPlace {i} "
                                          f"lies on the river road near the mill {i * 7 % 13}."}) + "\n"
                              for i in range(args.docs)))
    config = IndexConfig(embed=EmbedConfig(cache_dir=""))
    rows = []
    for c in chunk_corpus(load_documents(corpus), config.chunk):
        v = np.random.default_rng(int(hashlib.sha256(c.text.encode()).hexdigest()[:12], 16)).standard_normal(32)
        rows.append(v / np.linalg.norm(v))
    root = tmp / "idx"
    build_index(corpus, root, config, embeddings=np.asarray(rows, dtype=np.float32))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("SPECTRAG_KILL_AT", None)
    wlog, rlogs = tmp / "writer.jsonl", [tmp / f"reader{j}.jsonl" for j in range(args.readers)]
    first = read_pointer(root)
    import hashlib as _h

    from spectrag.generations import current_folder
    wlog.write_text(json.dumps({"edit": -1, "generation": first,
                                "manifest": _h.sha256((current_folder(root) / "manifest.json").read_bytes()).hexdigest()}) + "\n")
    until = time.time() + 24 * 3600
    readers = [subprocess.Popen([sys.executable, "-c", READER, str(root), str(until), str(r)], env=env) for r in rlogs]
    time.sleep(3)  # the readers are loading before the first edit
    rng = random.Random(args.seed)
    load0, t0 = load_average(), time.time()
    done, kills = 0, 0
    while done < args.edits:
        stop = args.edits if kills >= args.kills else min(args.edits, done + rng.randint(1, 4))
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(tmp), str(done), str(stop), str(wlog)], env=env)
        if kills < args.kills:
            time.sleep(rng.uniform(0.5, args.kill_window))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
        proc.wait()
        logged = [json.loads(x) for x in wlog.read_text().splitlines()]
        done = max(e["edit"] for e in logged) + 1
        if proc.returncode not in (0, -signal.SIGKILL):
            raise SystemExit(f"writer failed with {proc.returncode}")
    seconds = time.time() - t0
    time.sleep(2)
    for r in readers:
        r.send_signal(signal.SIGTERM)
        r.wait()
    load1 = load_average()
    written = {}
    for e in (json.loads(x) for x in wlog.read_text().splitlines()):
        written[e["generation"]] = e["manifest"]
    loads = [json.loads(x) for r in rlogs for x in r.read_text().splitlines() if x.strip()]
    refusals = [x["error"] for x in loads if not x["ok"]]
    ok = [x for x in loads if x["ok"]]
    # a generation CURRENT named after a kill that the killed writer did not log is a whole one
    # when its manifest is the same across loads and its table matches; otherwise a mix
    seen: dict[str, set] = {}
    for x in ok:
        seen.setdefault(x["generation"], set()).add(x["manifest"])
    unlogged = sorted(g for g in seen if g not in written)
    mixes = [x for x in ok if not x["whole"] or (x["generation"] in written and written[x["generation"]] != x["manifest"])]
    mixes += [g for g in unlogged if len(seen[g]) > 1]
    collect(root)
    left = sorted(p.name for p in (root / FOLDER).iterdir())
    return {"edits": done, "kills": kills, "readers": args.readers, "loads": len(loads), "refusals": len(refusals),
            "refusal_examples": refusals[:5], "mixes": len(mixes), "generations_seen": len(seen),
            "unlogged_generations_seen": unlogged, "generations_left": left, "current": read_pointer(root),
            "seconds": round(seconds, 1), "load_average": [load0, load1], "docs": args.docs, "tmp": str(tmp)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--edits", type=int, default=200)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--kills", type=int, default=0, help="kill the writer with SIGKILL this many times")
    ap.add_argument("--kill-window", type=float, default=6.0, help="a kill comes 0.5 .. this many s after a writer starts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", default=_THREADS)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    result = _run(args)
    import shutil

    shutil.rmtree(result.pop("tmp"), ignore_errors=True)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out + ".json").write_text(json.dumps({"command": command_line(), "machine": machine_line(machine_info()),
                                                        "threads": _THREADS, **result}, indent=1) + "\n")
        lines = [f"# Readers while a writer edits: {result['edits']} edits, {result['kills']} kills", "",
                 f"`{command_line()}`", "", f"{machine_line(machine_info())}; threads {_THREADS}; load average "
                 f"{result['load_average'][0]} -> {result['load_average'][1]}", "",
                 "| edits | writer kills | readers | loads | false refusals | mixes | generations seen | left after the run |",
                 "|---|---|---|---|---|---|---|---|",
                 f"| {result['edits']} | {result['kills']} | {result['readers']} | {result['loads']} | {result['refusals']} | "
                 f"{result['mixes']} | {result['generations_seen']} | {', '.join(result['generations_left'])} |", ""]
        if result["refusal_examples"]:
            lines += ["Refusals:", *(f"- {r}" for r in result["refusal_examples"]), ""]
        Path(args.out + ".md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
