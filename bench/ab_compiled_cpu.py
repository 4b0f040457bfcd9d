"""The compiled CPU path of one source tree: ms per ``score_batch`` of B = 256 MuSiQue questions,
spectral and hybrid, one thread, median of REPEATS after one warm-up; prints one JSON line.
Loads ``spectrag`` from ROOT (a checkout or a ``git archive`` copy of another commit), so two
trees can be timed alternately on a busy machine (bench/results/device_path_cpu.md):

    for i in 1 2 3; do for t in /tmp/base .; do python bench/ab_compiled_cpu.py $t 5 VECTORS.npy; done; done

VECTORS.npy: the 100 MuSiQue questions embedded once (``index.embed_queries``); the index is the
MuSiQue index of bench/bench_query.py (``bench/indexes/musique``)."""
import os, sys, json, time, statistics
root = os.path.abspath(sys.argv[1])
for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[v] = "1"
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.join(root, "bench"))
import importlib.util
from pathlib import Path
mods = []
for name, folder in (("spectrag", Path(root) / "engine"), ("spectrag.kernels", Path(root) / "kernels")):
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])
    m = importlib.util.module_from_spec(spec); sys.modules[name] = m; mods.append((spec, m))
mods[0][1].kernels = mods[1][1]
for spec, m in reversed(mods):
    spec.loader.exec_module(m)
import numpy as np, torch
torch.set_num_threads(1)
from spectrag.store import load_index
from spectrag.retriever import Retriever
from spectrag.config import RetrieverConfig
assert sys.modules["spectrag"].__file__.startswith(root), sys.modules["spectrag"].__file__
index = load_index(os.path.join(os.path.dirname(os.path.abspath(__file__)), "indexes", "musique"), verify=False)
texts = [q["question"] for q in json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "musique", "musique_train.json")))]
qv = torch.from_numpy(np.load(sys.argv[3]))
B = 256
bt = (texts * 3)[:B]; bv = qv.repeat(3, 1)[:B]
r = Retriever(index, RetrieverConfig(backend="compiled"))
out = {}
for mode in ("spectral", "hybrid"):
    r.score_batch(bt, mode=mode, qvecs=bv, budget=2000)
    times = []
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
        t0 = time.perf_counter(); r.score_batch(bt, mode=mode, qvecs=bv, budget=2000); times.append(time.perf_counter() - t0)
    out[mode] = 1e3 * statistics.median(times)
print(json.dumps(dict(root=root, ms=out, load=os.getloadavg()[0])))
