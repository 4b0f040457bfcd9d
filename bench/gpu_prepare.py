"""PREPARE step of the device check (run HERE, on the CPU machine, before ``bench/gpu_check.sh``
on the device): a real index and its questions' vectors, written into ``bench/.gpu/`` (ignored by
git, carried to the device machine), so the device needs no embedder.

    python bench/gpu_prepare.py            # docs-dev (../shared/data/docs-dev): 285 pages, 80 questions
    python bench/gpu_prepare.py --small    # the bundled sample corpus and its 12 questions (seconds)
    bash bench/gpu_wheels.sh               # then: the small wheels the device image lacks

Writes ``bench/.gpu/index/`` (the index as ``spectrag index`` writes it), ``queries.json``
(``{"ids": [...], "texts": [...]}``), ``qvecs.npy`` (``[Q, d]`` float32, the index model's query
vectors) and ``prepared.json`` (what was built, when, the command and its size). Refuses to
leave more than ``--max-mib`` (default 50 MiB: the device run carries at most 64 MiB in all,
wheels included) and says what to drop.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DOCS_DEV = ROOT.parent / "shared" / "data" / "docs-dev"


def folder_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="the bundled sample corpus instead of docs-dev")
    ap.add_argument("--data", default=str(DOCS_DEV), help="a BEIR folder (corpus.jsonl, queries.jsonl); default docs-dev")
    ap.add_argument("--out", default=str(HERE / ".gpu"), help="output folder (default bench/.gpu)")
    ap.add_argument("--max-mib", type=float, default=50.0, help="refuse a prepared folder larger than this")
    args = ap.parse_args()

    sys.path.insert(0, str(HERE))
    from _common import ensure_spectrag

    ensure_spectrag()
    from spectrag.build import build_index
    from spectrag.config import EmbedConfig, IndexConfig

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    if args.small:
        from spectrag.cli.demo import sample_corpus, sample_questions

        corpus, name = sample_corpus(), "sample corpus (bundled)"
        questions = [(f"s{i:02d}", q["question"]) for i, q in enumerate(sample_questions())]
    else:
        data = Path(args.data)
        if not (data / "corpus.jsonl").exists():
            sys.exit(f"error: {data}/corpus.jsonl is absent (docs-dev lives in ../shared/data); use --small")
        corpus, name = data / "corpus.jsonl", f"{data.name} ({data})"
        questions = [(r["_id"], r["text"]) for r in map(json.loads, (data / "queries.jsonl").read_text().splitlines())]
    index_dir = out / "index"
    if index_dir.exists():
        shutil.rmtree(index_dir)
    config = IndexConfig(embed=EmbedConfig(cache_dir=str(Path.home() / ".cache" / "spectrag")))
    index = build_index(corpus, index_dir, config, progress=False)
    t_build = time.perf_counter() - t0
    texts = [t for _, t in questions]
    qvecs = np.ascontiguousarray(index.embed_queries(texts), dtype=np.float32)
    np.save(out / "qvecs.npy", qvecs)
    (out / "queries.json").write_text(json.dumps({"ids": [i for i, _ in questions], "texts": texts}, indent=1))
    size = folder_mib(out)
    info = dict(corpus=name, chunks=len(index.chunks), documents=len({c.doc_id for c in index.chunks}),
                questions=len(texts), dim=int(qvecs.shape[1]), build_seconds=round(t_build, 1),
                seconds=round(time.perf_counter() - t0, 1), mib=round(size, 1), loadavg_start=load0,
                loadavg_end=os.getloadavg(), built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="python bench/gpu_prepare.py " + " ".join(sys.argv[1:]))
    (out / "prepared.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info, indent=1))
    if size > args.max_mib:
        sys.exit(f"error: {out} holds {size:.1f} MiB > {args.max_mib} MiB: too large to carry (drop wheels or use --small)")


if __name__ == "__main__":
    main()
