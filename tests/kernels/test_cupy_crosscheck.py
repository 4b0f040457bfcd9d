"""The GPU check's CuPy second opinion (bench/gpu_check.py ``array_ppr``), run here with numpy /
scipy.sparse in CuPy's place (the same API): it must agree with ``kernels.pagerank`` before it
can judge it on a GPU, dangling nodes included."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.kernels.pagerank import personalized_pagerank

ROOT = Path(__file__).resolve().parents[2]


def _array_ppr():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("gpu_check_under_test", ROOT / "bench" / "gpu_check.py")
        module = importlib.util.module_from_spec(spec)
        argv, sys.argv = sys.argv, ["gpu_check.py"]
        try:
            spec.loader.exec_module(module)
        finally:
            sys.argv = argv
        return module.array_ppr
    finally:
        sys.path.remove(str(ROOT / "bench"))


def _graph(n: int, seed: int, dangling: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=6 / n, random_state=rng, format="csr")
    A = (A + A.T).tolil()
    A[:dangling, :] = 0  # nodes with no edges: their mass goes to the restart
    A[:, :dangling] = 0
    A = A.tocsr()
    A.eliminate_zeros()
    return A


def test_array_ppr_matches_the_kernel():
    array_ppr = _array_ppr()
    for seed in range(3):
        A = _graph(400, seed, dangling=seed * 3)
        X = np.random.default_rng(seed).random((400, 5))
        ours = personalized_pagerank(torch.sparse_csr_tensor(torch.from_numpy(A.indptr).long(),
                                                             torch.from_numpy(A.indices).long(),
                                                             torch.from_numpy(A.data), size=A.shape),
                                     torch.from_numpy(X)).scores.numpy()
        theirs = array_ppr(np, sp, A, X)
        np.testing.assert_allclose(theirs, ours, rtol=1e-10, atol=1e-14)
        assert np.allclose(theirs.sum(axis=0), 1.0)


def test_array_ppr_is_not_the_plain_walk():
    """A different damping gives a different answer (the comparison above can fail)."""
    array_ppr = _array_ppr()
    A = _graph(300, 7, dangling=2)
    X = np.random.default_rng(7).random((300, 2))
    assert not np.allclose(array_ppr(np, sp, A, X, damping=0.5), array_ppr(np, sp, A, X, damping=0.85))
