"""Tests for spectrag.kernels.pagerank (batched personalized PageRank) against NetworkX and an
exact dense solve, on the ``device`` fixture's devices (results compared on the CPU; float64 is
float64 on any device, so the tolerances are the same)."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import to_cpu

from spectrag.kernels.pagerank import (
    PageRankNotConverged,
    PageRankResult,
    personalized_pagerank,
    personalized_pagerank_dense_batched,
    random_walk_operator,
)

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")



def random_digraph(n, n_edges, seed, dangling_every=6, self_loops=True):
    """Random weighted DiGraph on nodes 0..n-1; every ``dangling_every``-th node has no out-edges."""
    rng = np.random.default_rng(seed)
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    for _ in range(n_edges):
        i, j = (int(v) for v in rng.integers(0, n, 2))
        if i % dangling_every == 0 or (i == j and not self_loops):
            continue
        G.add_edge(i, j, weight=float(rng.uniform(0.1, 3.0)))
    return G


def adjacency(G, n):
    return nx.to_scipy_sparse_array(G, nodelist=range(n), weight="weight", dtype=float).tocsr()


def to_torch_csr(M, dtype=torch.float64, device=torch.device("cpu")):
    M = sp.csr_array(M)
    return torch.sparse_csr_tensor(
        torch.from_numpy(M.indptr.astype(np.int64)),
        torch.from_numpy(M.indices.astype(np.int64)),
        torch.from_numpy(M.data).to(dtype),
        size=M.shape,
        check_invariants=True,
    ).to(device)


def on(device, *arrays):
    return tuple(torch.from_numpy(a).to(device) for a in arrays)


def exact_ppr(A, p, damping):
    """Dense linear solve of x = d (P^T x + (dangling . x) p) + (1 - d) p with P = D^{-1} A.

    Since every iterate sums to 1 this is (I - d (P^T + p 1_dang^T)) x = (1 - d) p.
    """
    A = np.asarray(A.toarray() if sp.issparse(A) else A, dtype=float)
    n = A.shape[0]
    deg = A.sum(axis=1)
    dangling = deg == 0
    P = np.divide(A, deg[:, None], out=np.zeros_like(A), where=~dangling[:, None])
    p = p / p.sum()
    M = np.eye(n) - damping * (P.T + np.outer(p, dangling.astype(float)))
    return np.linalg.solve(M, (1 - damping) * p)


def restart_matrix(n, B, seed, density=0.2):
    rng = np.random.default_rng(seed)
    X = rng.random((n, B)) * (rng.random((n, B)) < density)
    X[rng.integers(0, n, B), np.arange(B)] += 1.0  # no zero column
    return X


@pytest.fixture(scope="module")
def problem():
    n = 80
    G = random_digraph(n, 300, seed=0)
    A = adjacency(G, n)
    X = restart_matrix(n, 5, seed=1)
    return G, A, X


def test_graph_has_dangling_nodes(problem):
    _, A, _ = problem
    assert (np.asarray(A.sum(axis=1)).ravel() == 0).sum() >= 10


@pytest.mark.parametrize("damping", [0.5, 0.85, 0.95])
def test_matches_networkx_and_exact_solve(problem, damping, device):
    G, A, X = problem
    n, B = X.shape
    tol = 1e-10
    res = to_cpu(personalized_pagerank(to_torch_csr(A, device=device), *on(device, X), damping=damping, tol=tol, max_iter=500))
    assert isinstance(res, PageRankResult)
    assert res.converged and res.scores.shape == (n, B) and res.residual.shape == (B,)
    assert torch.all(res.residual < n * tol)
    S = res.scores.numpy()
    for b in range(B):
        pers = {i: float(X[i, b]) for i in range(n)}
        ref_nx = nx.pagerank(G, alpha=damping, personalization=pers, tol=tol, max_iter=500, weight="weight")
        ref_nx = np.array([ref_nx[i] for i in range(n)])
        # same iteration, same start, same stopping rule -> essentially identical iterates
        np.testing.assert_allclose(S[:, b], ref_nx, atol=1e-12, rtol=0)
        # exact fixed point: L1 error <= d/(1-d) * n * tol
        exact = exact_ppr(A, X[:, b], damping)
        assert np.abs(S[:, b] - exact).sum() <= damping / (1 - damping) * n * tol + 1e-12
        np.testing.assert_allclose(S[:, b], exact, atol=1e-6, rtol=0)


def test_default_tolerance_close_to_tight_networkx(problem, device):
    G, A, X = problem
    n = X.shape[0]
    res = to_cpu(personalized_pagerank(to_torch_csr(A, device=device), *on(device, X)))  # tol=1e-8
    for b in range(X.shape[1]):
        ref = nx.pagerank(G, personalization={i: float(X[i, b]) for i in range(n)}, tol=1e-13, max_iter=1000)
        np.testing.assert_allclose(res.scores[:, b].numpy(), [ref[i] for i in range(n)], atol=1e-6, rtol=0)


def test_columns_sum_to_one_and_nonnegative(problem, device):
    _, A, X = problem
    S = personalized_pagerank(to_torch_csr(A, device=device), *on(device, X * 7.5)).scores.cpu()
    torch.testing.assert_close(S.sum(dim=0), torch.ones(X.shape[1], dtype=S.dtype), rtol=0, atol=1e-12)
    assert torch.all(S >= 0)


def test_batched_equals_loop_of_single_columns(problem, device):
    _, A, X = problem
    At, (Xt,) = to_torch_csr(A, device=device), on(device, X)
    res = personalized_pagerank(At, Xt, tol=1e-10)
    for b in range(X.shape[1]):
        single = personalized_pagerank(At, Xt[:, b : b + 1], tol=1e-10)
        torch.testing.assert_close(res.scores[:, b : b + 1], single.scores, rtol=0, atol=1e-14)
        assert int(res.column_iters[b]) == single.n_iter
        torch.testing.assert_close(res.residual[b : b + 1], single.residual, rtol=1e-6, atol=1e-15)
    assert res.n_iter == int(res.column_iters.max())
    # 1-D input gives a 1-D result
    r1 = personalized_pagerank(At, Xt[:, 3], tol=1e-10)
    assert r1.scores.shape == (X.shape[0],)
    torch.testing.assert_close(r1.scores, res.scores[:, 3], rtol=0, atol=1e-14)


def test_layouts_and_prepared_operator_agree(problem, device):
    _, A, X = problem
    (Xt,) = on(device, X)
    Acsr = to_torch_csr(A, device=device)
    ref = personalized_pagerank(Acsr, Xt).scores
    Acoo = Acsr.to_sparse_coo()
    torch.testing.assert_close(personalized_pagerank(Acoo, Xt).scores, ref, rtol=0, atol=1e-14)
    torch.testing.assert_close(personalized_pagerank(Acsr.to_dense(), Xt).scores, ref, rtol=0, atol=1e-14)
    op = random_walk_operator(Acsr)
    torch.testing.assert_close(personalized_pagerank(op, Xt).scores, ref, rtol=0, atol=0)
    # duplicate COO entries are summed (networkx multigraph semantics)
    coo = A.tocoo()
    idx = torch.from_numpy(np.hstack([np.vstack([coo.row, coo.col])] * 2))
    vals = torch.from_numpy(np.hstack([coo.data / 2] * 2))
    dup = torch.sparse_coo_tensor(idx, vals, A.shape, check_invariants=True).to(device)
    torch.testing.assert_close(personalized_pagerank(dup, Xt).scores, ref, rtol=0, atol=1e-14)
    # integer weights are accepted (converted to X's dtype)
    Aint = np.ceil(A.toarray())
    res_int = personalized_pagerank(torch.from_numpy(Aint).long().to_sparse_csr().to(device), Xt).scores
    res_flt = personalized_pagerank(torch.from_numpy(Aint).to_sparse_csr().to(device), Xt).scores
    torch.testing.assert_close(res_int, res_flt, rtol=0, atol=1e-14)


def test_float32(problem, device):
    _, A, X = problem
    res = to_cpu(personalized_pagerank(to_torch_csr(A, torch.float32, device), torch.from_numpy(X).float().to(device), tol=1e-6))
    assert res.scores.dtype == torch.float32
    for b in range(X.shape[1]):
        exact = exact_ppr(A, X[:, b], 0.85)
        np.testing.assert_allclose(res.scores[:, b].double().numpy(), exact, atol=1e-5, rtol=0)


def test_no_dangling_nodes_and_all_dangling(device):
    n = 30
    G = nx.DiGraph(nx.cycle_graph(n))
    for i in range(n):
        G.add_edge(i, (i + 7) % n, weight=2.0)
    A = adjacency(G, n)
    X = restart_matrix(n, 3, seed=4)
    res = to_cpu(personalized_pagerank(to_torch_csr(A, device=device), *on(device, X), tol=1e-12, max_iter=1000))
    for b in range(3):
        np.testing.assert_allclose(res.scores[:, b].numpy(), exact_ppr(A, X[:, b], 0.85), atol=1e-10)
    # empty graph: everything dangling -> PPR equals the restart distribution
    empty = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (n, n), check_invariants=True)
    res = to_cpu(personalized_pagerank(empty.to(device), *on(device, X), tol=1e-12))
    torch.testing.assert_close(res.scores, torch.from_numpy(X / X.sum(axis=0)), rtol=0, atol=1e-12)


def test_non_convergence_raises_with_partial_result(problem, device):
    _, A, X = problem
    At, (Xt,) = to_torch_csr(A, device=device), on(device, X)
    with pytest.raises(PageRankNotConverged, match="max_iter=3") as info:
        personalized_pagerank(At, Xt, max_iter=3)
    assert isinstance(info.value, RuntimeError)
    partial = info.value.result
    assert partial.n_iter == 3 and not partial.converged
    assert not bool(partial.column_converged.any())
    assert torch.all(partial.residual >= X.shape[0] * 1e-8)
    res = personalized_pagerank(At, Xt, max_iter=3, raise_on_failure=False)
    assert res.converged is False and res.n_iter == 3
    torch.testing.assert_close(res.scores, partial.scores, rtol=0, atol=0)
    # the partial iterate is still a distribution per column
    torch.testing.assert_close(res.scores.sum(0).cpu(), torch.ones(X.shape[1], dtype=torch.float64), rtol=0, atol=1e-12)


def test_mixed_convergence_freezes_converged_columns(device):
    # column 0 restarts on a dangling node (converges fast), column 1 needs more iterations
    n = 40
    G = random_digraph(n, 160, seed=7, dangling_every=5)
    A = adjacency(G, n)
    X = np.zeros((n, 2))
    X[0, 0] = 1.0  # node 0 is dangling: p = e_0, PPR is concentrated
    X[:, 1] = restart_matrix(n, 1, seed=8)[:, 0]
    res = to_cpu(personalized_pagerank(to_torch_csr(A, device=device), *on(device, X), tol=1e-12, max_iter=1000))
    assert res.converged and bool(res.column_converged.all())
    for b in range(2):
        np.testing.assert_allclose(res.scores[:, b].numpy(), exact_ppr(A, X[:, b], 0.85), atol=1e-9)


def test_bad_inputs(problem):
    _, A, X = problem
    At, Xt = to_torch_csr(A), torch.from_numpy(X)
    n = X.shape[0]
    with pytest.raises(ValueError, match=r"shape mismatch.*X has 79 rows"):
        personalized_pagerank(At, Xt[:-1])
    for d in (0.0, 1.0, 1.5, -0.2):
        with pytest.raises(ValueError, match=rf"damping must be in the open interval \(0, 1\), got {d}"):
            personalized_pagerank(At, Xt, damping=d)
    with pytest.raises(ValueError, match="tol must be"):
        personalized_pagerank(At, Xt, tol=0)
    with pytest.raises(ValueError, match="max_iter must be >= 1"):
        personalized_pagerank(At, Xt, max_iter=0)
    with pytest.raises(TypeError, match="max_iter must be an integer"):
        personalized_pagerank(At, Xt, max_iter=2.5)
    Xz = Xt.clone()
    Xz[:, 2] = 0
    with pytest.raises(ValueError, match="X column 2 sums to zero"):
        personalized_pagerank(At, Xz)
    Xneg = Xt.clone()
    Xneg[4, 1] = -0.5
    with pytest.raises(ValueError, match=r"non-negative.*X\[4, 1\] = -0.5"):
        personalized_pagerank(At, Xneg)
    Xnan = Xt.clone()
    Xnan[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"X contains NaN.*X\[0, 0\] = nan"):
        personalized_pagerank(At, Xnan)
    Ad = torch.from_numpy(A.toarray())
    Ad[3, 5] = -1.25
    with pytest.raises(ValueError, match=r"non-negative edge weights; A\[3, 5\] = -1.25"):
        personalized_pagerank(Ad, Xt)
    Ad[3, 5] = float("nan")
    for M in (Ad, Ad.to_sparse_csr(), Ad.to_sparse_coo()):
        with pytest.raises(ValueError, match=r"A contains NaN.*A\[3, 5\] = nan"):
            personalized_pagerank(M, Xt)
    with pytest.raises(ValueError, match="square"):
        personalized_pagerank(torch.zeros(n, n + 1), Xt)
    with pytest.raises(TypeError, match="floating"):
        personalized_pagerank(At, Xt.long())
    with pytest.raises(ValueError, match=r"shape mismatch: A is \[80, 80\]"):
        personalized_pagerank(random_walk_operator(At), Xt[:10])


# ---------------------------------------------------------------------------------------------
# dense batched (induced subgraphs)
# ---------------------------------------------------------------------------------------------


def padded_blocks(sizes, P, C, seed):
    junk = np.random.default_rng(seed + 99)
    B = len(sizes)
    A = junk.random((B, P, P)) * 3 - 1  # garbage (even negative) in padding: must be masked
    X = junk.random((B, P, C)) * 2 - 1
    mask = np.zeros((B, P), dtype=bool)
    blocks = []
    for b, nb in enumerate(sizes):
        G = random_digraph(nb, 3 * nb, seed=seed + b, dangling_every=4)
        Ab = adjacency(G, nb).toarray()
        xb = restart_matrix(nb, C, seed=seed + 50 + b)
        A[b, :nb, :nb] = Ab
        X[b, :nb] = xb
        mask[b, :nb] = True
        blocks.append((G, Ab, xb))
    return A, X, mask, blocks


def test_dense_batched_matches_sparse_per_block(device):
    P, C = 24, 3
    A, X, mask, blocks = padded_blocks([24, 9, 16, 4], P, C, seed=20)
    At, Xt, mt = on(device, A, X, mask)
    res = to_cpu(personalized_pagerank_dense_batched(At, Xt, mask=mt, tol=1e-10))
    assert res.converged and res.scores.shape == (4, P, C) and res.residual.shape == (4, C)
    for b, (G, Ab, xb) in enumerate(blocks):
        nb = Ab.shape[0]
        sparse = to_cpu(personalized_pagerank(to_torch_csr(Ab, device=device), *on(device, xb), tol=1e-10))
        np.testing.assert_allclose(res.scores[b, :nb].numpy(), sparse.scores.numpy(), atol=1e-13, rtol=0)
        assert res.column_iters[b].tolist() == sparse.column_iters.tolist()
        assert torch.all(res.scores[b, nb:] == 0)
        for c in range(C):
            ref = nx.pagerank(G, personalization={i: float(xb[i, c]) for i in range(nb)}, tol=1e-10)
            np.testing.assert_allclose(res.scores[b, :nb, c].numpy(), [ref[i] for i in range(nb)], atol=1e-12)
    torch.testing.assert_close(res.scores.sum(dim=1), torch.ones(4, C, dtype=torch.float64), rtol=0, atol=1e-12)


def test_dense_batched_2d_and_no_mask(device):
    P = 12
    A, X, mask, blocks = padded_blocks([12, 12, 12], P, 1, seed=30)
    res = to_cpu(personalized_pagerank_dense_batched(*on(device, A, X[:, :, 0].copy())))
    assert res.scores.shape == (3, P) and res.residual.shape == (3,)
    for b, (_, Ab, xb) in enumerate(blocks):
        np.testing.assert_allclose(res.scores[b].numpy(), exact_ppr(Ab, xb[:, 0], 0.85), atol=1e-6)


def test_dense_batched_non_convergence_and_bad_inputs(device):
    A, X, mask, _ = padded_blocks([10, 6], 10, 2, seed=40)
    At, Xt, mt = on(device, A, X, mask)
    with pytest.raises(PageRankNotConverged):
        personalized_pagerank_dense_batched(At, Xt, mask=mt, max_iter=2)
    res = personalized_pagerank_dense_batched(At, Xt, mask=mt, max_iter=2, raise_on_failure=False)
    assert not res.converged and res.n_iter == 2
    with pytest.raises(ValueError, match="non-negative"):
        personalized_pagerank_dense_batched(At, Xt)  # garbage padding without a mask
    Xz = Xt.clone()
    Xz[1, :, 1] = 0
    with pytest.raises(ValueError, match=r"X \[block, column\] \(1, 1\) sums to zero"):
        personalized_pagerank_dense_batched(At, Xz, mask=mt)
    with pytest.raises(ValueError, match="X block 0 sums to zero"):
        personalized_pagerank_dense_batched(At, torch.zeros(2, 10, dtype=torch.float64, device=device), mask=mt)
    with pytest.raises(ValueError, match="shape mismatch"):
        personalized_pagerank_dense_batched(At, Xt[:, :5], mask=mt)
    with pytest.raises(ValueError, match="damping"):
        personalized_pagerank_dense_batched(At, Xt, mask=mt, damping=1.0)


# --- the Chebyshev solver (method="chebyshev"): the same fixed point in fewer products ---------


def symmetric_padded_blocks(sizes, P, seed):
    """Undirected weighted blocks (isolated nodes included: dangling), garbage in the padding."""
    rng = np.random.default_rng(seed)
    B = len(sizes)
    A = rng.random((B, P, P)) * 3 - 1
    X = rng.random((B, P)) * 2 - 1
    mask = np.zeros((B, P), dtype=bool)
    for b, nb in enumerate(sizes):
        w = rng.random((nb, nb)) * (rng.random((nb, nb)) < 0.15)
        w = np.maximum(w, w.T)
        w[: nb // 5] = 0.0  # isolated nodes, some of them seeds
        w[:, : nb // 5] = 0.0
        A[b, :nb, :nb] = w
        X[b, :nb] = rng.random(nb) * (rng.random(nb) < 0.2)
        X[b, nb - 1] += 1.0  # no zero restart
        mask[b, :nb] = True
    return A, X, mask


def test_chebyshev_weights():
    from spectrag.kernels.pagerank import chebyshev_weights

    w = chebyshev_weights(0.85, 60)
    assert w[0] == 1.0 and w[1] == pytest.approx(1 / (1 - 0.85**2 / 2))
    limit = 2 / (1 + np.sqrt(1 - 0.85**2))  # the optimal over-relaxation the weights tend to
    assert w[-1] == pytest.approx(limit, rel=1e-12) and all(1 <= v < 2 for v in w)


@pytest.mark.parametrize("spmm", ["dense", "sparse"])
def test_chebyshev_reaches_the_power_iteration_fixed_point(device, spmm):
    """Both methods against the exact solve of networkx's model (dangling mass back along the
    restart) on symmetric blocks: the error bound of the shared test (L1 change below
    ``n_b tol``, so the L1 error is below ``n_b tol / (1 - d)``), and fewer products."""
    sizes, P, tol = [40, 17, 33, 5], 40, 1e-8
    A, X, mask = symmetric_padded_blocks(sizes, P, seed=3)
    At, Xt, mt = on(device, A, X, mask)
    runs = {m: to_cpu(personalized_pagerank_dense_batched(At, Xt, mask=mt, tol=tol, method=m, spmm=spmm))
            for m in ("power", "chebyshev")}
    for b, nb in enumerate(sizes):
        want = exact_ppr(A[b, :nb, :nb], X[b, :nb], 0.85)
        for method, res in runs.items():
            got = res.scores[b].numpy()
            assert np.abs(got[:nb] - want).sum() <= nb * tol / 0.15, (method, b)
            assert np.all(got[nb:] == 0) and np.all(got >= 0)
    assert runs["chebyshev"].converged
    assert runs["chebyshev"].column_iters.sum() < runs["power"].column_iters.sum()


def test_chebyshev_batch_invariant_and_blocks_agree(device):
    """A block's result is the same alone as in its batch (one weight sequence for every
    column, each frozen at its own convergence), and the sparse-block kernel agrees."""
    from spectrag.kernels.blocks import BlockGraph
    from spectrag.kernels.pagerank import personalized_pagerank_blocks

    A, X, mask = symmetric_padded_blocks([30, 12, 25], 30, seed=8)
    A = np.where(mask[:, :, None] & mask[:, None, :], A, 0.0)
    X = np.where(mask, X, 0.0)
    At, Xt, mt = on(device, A, X, mask)
    batch = to_cpu(personalized_pagerank_dense_batched(At, Xt, mask=mt, method="chebyshev"))
    blocks = to_cpu(personalized_pagerank_blocks(BlockGraph.from_dense(At), Xt, mask=mt, method="chebyshev"))
    torch.testing.assert_close(blocks.scores, batch.scores, rtol=1e-12, atol=1e-15)
    assert torch.equal(blocks.column_iters, batch.column_iters)
    for b in range(3):
        alone = to_cpu(personalized_pagerank_dense_batched(At[b:b + 1], Xt[b:b + 1], mask=mt[b:b + 1],
                                                           method="chebyshev"))
        torch.testing.assert_close(alone.scores[0], batch.scores[b], rtol=1e-12, atol=1e-15)
        assert alone.column_iters[0] == batch.column_iters[b]


def test_chebyshev_non_convergence_and_bad_method(device):
    A, X, mask = symmetric_padded_blocks([10, 6], 10, seed=4)
    At, Xt, mt = on(device, A, X, mask)
    with pytest.raises(PageRankNotConverged):
        personalized_pagerank_dense_batched(At, Xt, mask=mt, max_iter=2, method="chebyshev")
    res = personalized_pagerank_dense_batched(At, Xt, mask=mt, max_iter=2, method="chebyshev", raise_on_failure=False)
    assert not res.converged and res.n_iter == 2
    torch.testing.assert_close(res.scores.sum(dim=1).cpu(), torch.ones(2, dtype=torch.float64))  # the last step, normalized
    with pytest.raises(ValueError, match="method must be one of"):
        personalized_pagerank_dense_batched(At, Xt, mask=mt, method="jacobi")


# --- the PPR matrix of a small graph ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_pagerank_matrix_equals_networkx(seed, device):
    """x = M p / 1^T M p, M = (I - d P^T)^-1: networkx's fixed point (dangling mass along p) to
    rounding, for several restart sets at once, full vectors and read at candidates."""
    import networkx as nx

    from spectrag.kernels.pagerank import PageRankMatrix

    g = torch.Generator().manual_seed(seed)
    n = 40
    A = torch.rand(n, n, generator=g, dtype=torch.float64) * (torch.rand(n, n, generator=g) < 0.12)
    A = torch.maximum(A, A.T)
    A.fill_diagonal_(0)
    A[3], A[:, 3] = 0.0, 0.0  # a dangling node, also used as a restart node below
    walk = random_walk_operator(A.to_sparse_csr().to(device))
    mat = PageRankMatrix.build(walk, 0.6)
    nodes = torch.tensor([[1, 5, -1], [3, 2, 8], [0, 0, 9]], device=device)
    weights = torch.tensor([[1.0, 0.5, 0.0], [1.0, 1.0, 2.0], [0.3, 0.2, 0.0]], dtype=torch.float64, device=device)
    got = mat.scores(nodes, weights).cpu()
    G = nx.from_numpy_array(A.numpy())
    for b in range(nodes.shape[0]):
        pers: dict[int, float] = {}
        for s, w in zip(nodes[b].tolist(), weights[b].tolist()):
            if s >= 0 and w > 0:
                pers[s] = pers.get(s, 0.0) + w
        ref = nx.pagerank(G, alpha=0.6, personalization=pers, tol=1e-15, max_iter=2000, weight="weight")
        assert max(abs(got[b, i].item() - ref[i]) for i in range(n)) < 1e-12
    at = torch.tensor([[0, 1, 2, -1], [5, 3, 9, 11], [9, 0, -1, -1]], device=device)
    want = torch.where(at.cpu() >= 0, got.gather(1, at.cpu().clamp(min=0)), torch.zeros((), dtype=torch.float64))
    torch.testing.assert_close(mat.scores(nodes, weights, at=at).cpu(), want, rtol=0, atol=1e-15)
