"""Shared fixtures: the bundled sample corpus, one index of it built per test session, and an
embedding cache kept in the pytest temp folder (so tests never touch ~/.cache)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Triton decides between compiled and interpreted kernels partly when it is first imported, and
# any test may import it first: without a GPU, run every Triton kernel in its CPU interpreter.
if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or not Path("/dev/nvidia0").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


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
    from spectrag import build_index
    from spectrag.cli.demo import sample_corpus

    return build_index(sample_corpus(), tmp_path_factory.mktemp("idx") / "sample", index_config)


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
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
