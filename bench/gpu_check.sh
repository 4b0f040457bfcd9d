#!/usr/bin/env bash
# GPU check (bench/gpu_check.py): kernels vs the CPU reference, the pipeline on the device vs the
# CPU, stage timings and spectrag.pipeline.run end to end at 10^6 chunks for B = 256 and 1,024;
# results in $OUT (or bench/results). Under 8 minutes.
#
#   bash bench/gpu_check.sh            # on the CUDA machine
#   bash bench/gpu_check.sh --small    # anywhere: n = 10^4, a minute or two on 2 CPU cores
#
# Needs only torch, numpy and scipy (Triton, CuPy, faiss-gpu used when present); nothing is
# installed or downloaded: where `spectrag` is not pip-installed, bench/_common.py's
# ensure_spectrag() maps it onto engine/ and kernels/ of this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv || true
python -c "
import sys
sys.path.insert(0, 'bench')
import _common
_common.ensure_spectrag()
import spectrag.kernels
loaded = {m.split('.')[0] for m, module in sys.modules.items() if module is not None}
heavy = {'sentence_transformers', 'transformers', 'faiss', 'bm25s', 'tiktoken'} & loaded
assert not heavy, heavy
print('spectrag.kernels from', spectrag.kernels.__file__)
" || { echo "error: 'import spectrag.kernels' failed or pulled in sentence-transformers/faiss/bm25s/tiktoken" >&2; exit 1; }
# a hard stop before 8 minutes; gpu_check.py itself stops starting new timings after --budget-s (420 s)
exec timeout 470 python bench/gpu_check.py "$@"
