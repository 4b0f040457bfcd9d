"""What the index format documents about its values, recomputed plainly with numpy / scipy from
the files of an index folder: the reference the loader's vectorized checks
(:mod:`spectrag.util.checks`) are held to by the tests and ``bench/bench_fuzz.py``. Whole arrays
in memory, dense comparisons: for small indexes only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spectrag.generations import current_folder

UNIT_TOL = 0.0099  # a little inside the loader's 0.01 (its test is on the squared norm)
WEIGHT_TOL = 1e-4


def broken_invariants(folder: str | Path) -> list[str]:
    """The documented value invariants the index at ``folder`` breaks (empty: none). Reads the
    embeddings, the FAISS file's vectors, the BM25 scores, the fused and relational graphs, the
    signals' weights, the eigenvalues and the chunk table's token counts."""
    from spectrag.index.dense import _FLAT

    folder = Path(folder)
    folder = current_folder(folder)  # an index folder: its current generation (a generation folder: itself)
    broken = []
    emb32 = np.load(folder / "embeddings.npy")
    norms = np.linalg.norm(emb32.astype(np.float64), axis=1)
    if not (np.isfinite(norms).all() and (np.abs(norms - 1) <= UNIT_TOL).all()):
        broken.append("embeddings: rows L2-normalized")
    stored = np.frombuffer((folder / "dense.faiss").read_bytes()[_FLAT.size :], np.float32)
    if stored.size != emb32.size or not np.array_equal(stored.reshape(emb32.shape), emb32):
        broken.append("dense.faiss: the embeddings' vectors")
    if not (np.load(folder / "bm25/data.npy") >= 0).all():
        broken.append("bm25: scores >= 0")
    n = emb32.shape[0]
    manifest = json.loads((folder / "manifest.json").read_text())
    if manifest.get("graph"):
        weights = manifest["config"]["graph"]["weights"]
        for name, hi in (("weights", sum(weights.values()) + WEIGHT_TOL), ("relations", 1 + WEIGHT_TOL)):
            if not (folder / f"graph/{name}.data.npy").exists():
                continue
            parts = [np.load(folder / f"graph/{name}.{p}.npy") for p in ("data", "indices", "indptr")]
            dense = sp.csr_matrix(tuple(parts), shape=(n, n)).toarray()
            if not (np.isfinite(dense).all() and (dense >= 0).all() and (dense <= hi).all()):
                broken.append(f"graph/{name}: weights in [0, {hi:g}]")
            if not np.array_equal(dense, dense.T) or np.diag(dense).any():
                broken.append(f"graph/{name}: symmetric, no self-loops")
        eig = np.load(folder / "graph/eigenvalues.npy")
        if not ((eig >= -1e-3) & (eig <= 2 + 1e-3)).all():
            broken.append("graph/eigenvalues: in [0, 2]")
        for path in (folder / "graph/signals").glob("*.weights.npy"):
            w = np.load(path)
            if not ((w >= 0) & (w <= 1 + WEIGHT_TOL)).all():
                broken.append(f"graph/signals/{path.name}: in [0, 1]")
    with (folder / "chunks.jsonl").open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    if min(row["n_tokens"] for row in rows) < 1:
        broken.append("chunks: n_tokens >= 1")
    if not all(isinstance(row.get("metadata", {}), dict) for row in rows):  # optional; absent: {}
        broken.append("chunks: metadata a JSON object")
    return broken
