"""Benchmark: what hard-linking unchanged files between generations saves (spectrag.generations).

A synthetic index of ``--n`` chunks (``bench/make_synthetic.py``, supplied vectors, as in
``bench/bench_incremental.py``); on fresh copies of it, interleaved, ``--repeats`` times: a
``compact`` with the row files (chunk table, embeddings, dense index, BM25) linked from the
previous generation, the same with linking switched off (every file written), and a delete of 1 %
of the documents (which changes every row file: chunk ids are positions; only files whose bytes
are equal are shared). Reported: wall seconds of the call (medians) and the bytes of the new
generation that are shared with the old one (same inode) against those written.

Usage::

    python bench/bench_living_links.py --n 10000 --out bench/results/living_links
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import ensure_spectrag, pin_threads  # noqa: E402  (before numpy: sets thread counts)

_THREADS = pin_threads("1", passive=True)

from _common import command_line, load_average, machine_info, machine_line  # noqa: E402

ensure_spectrag()


def _inodes(folder: Path) -> dict[tuple[int, int], int]:
    return {(st.st_dev, st.st_ino): st.st_size for p in folder.rglob("*") if p.is_file() for st in [p.stat()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from bench_incremental import synthetic_workload

    import spectrag.incremental.edit as edit
    from spectrag import build_index, compact_index, delete_documents
    from spectrag.config import EmbedConfig, IndexConfig
    from spectrag.generations import current_folder

    work = synthetic_workload(args.n, 0.01, 128, 0, None)
    tmp = Path(tempfile.mkdtemp(prefix="living-links-"))
    corpus = tmp / "base.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in work.base))
    base = tmp / "base"
    build_index(corpus, base, IndexConfig(embed=EmbedConfig(cache_dir="")), embeddings=work.vectors(work.base))
    linking = edit.link_file

    def run(kind: str, i: int) -> dict:
        target = tmp / f"{kind}-{i}"
        shutil.copytree(base, target)
        before = _inodes(current_folder(target))
        edit.link_file = linking if kind != "compact, no links" else (lambda src, dst: False)
        start = time.perf_counter()
        try:
            if kind == "delete 1%":
                delete_documents(target, work.deleted, compact_above=None)
            else:
                compact_index(target)
        finally:
            edit.link_file = linking
        seconds = time.perf_counter() - start
        after = _inodes(current_folder(target))
        shared = sum(size for key, size in after.items() if key in before)
        shutil.rmtree(target)
        return {"seconds": seconds, "shared_bytes": shared, "written_bytes": sum(after.values()) - shared}

    kinds = ["compact, links", "compact, no links", "delete 1%"]
    load0 = load_average()
    for kind in kinds:
        run(kind, -1)  # warm-up: imports, page cache
    rows: dict[str, list[dict]] = {k: [] for k in kinds}
    for i in range(args.repeats):
        for kind in (kinds if i % 2 == 0 else kinds[::-1]):
            rows[kind].append(run(kind, i))
    load1 = load_average()
    shutil.rmtree(tmp, ignore_errors=True)
    result = {k: {"seconds_median": round(statistics.median(r["seconds"] for r in v), 3),
                  "shared_mib": round(v[0]["shared_bytes"] / 2**20, 2), "written_mib": round(v[0]["written_bytes"] / 2**20, 2)}
              for k, v in rows.items()}
    out = {"command": command_line(), "machine": machine_line(machine_info()), "threads": _THREADS, "n": args.n,
           "repeats": args.repeats, "load_average": [load0, load1], "results": result,
           "runs": {k: [{kk: round(vv, 3) for kk, vv in r.items()} for r in v] for k, v in rows.items()}}
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(out, indent=1) + "\n")
        lines = [f"# Hard links between generations: {args.n:,} synthetic chunks", "", f"`{command_line()}`", "",
                 f"{out['machine']}; threads {_THREADS}; load average {load0} -> {load1}; medians of {args.repeats}, "
                 "interleaved", "", "| edit | seconds | shared with the old generation (MiB) | written (MiB) |",
                 "|---|---|---|---|",
                 *(f"| {k} | {v['seconds_median']} | {v['shared_mib']} | {v['written_mib']} |" for k, v in result.items()), ""]
        Path(args.out + ".md").write_text("\n".join(lines))
    os.environ.pop("SPECTRAG_KILL_AT", None)


if __name__ == "__main__":
    main()
