#!/usr/bin/env bash
# GPU check (bench/gpu_check.py): kernels vs the CPU reference, stage timings at 10^6 chunks for
# B = 256 and 1,024, end-to-end queries/s; results in $OUT (or bench/results). Under 8 minutes.
#
#   bash bench/gpu_check.sh            # on the CUDA machine
#   bash bench/gpu_check.sh --small    # anywhere: n = 10^4, about a minute on 2 CPU cores
#
# Needs only torch, numpy and scipy (Triton, CuPy, faiss-gpu used when present); nothing is
# installed or downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv || true
python -c "import kernels, sys; heavy = {'sentence_transformers', 'faiss', 'engine'} & set(sys.modules); assert not heavy, heavy" \
  || { echo "error: 'import kernels' pulls in sentence-transformers/faiss/engine" >&2; exit 1; }
# a hard stop before 8 minutes; gpu_check.py itself stops starting new timings after --budget-s (420 s)
exec timeout 470 python bench/gpu_check.py "$@"
