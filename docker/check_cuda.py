"""Build-time check of the CUDA image (docker/Dockerfile.cuda): torch, CuPy and FAISS must be
built for the CUDA of the base image, or the build stops here with what disagrees.

The rule: torch's CUDA (``torch.version.cuda``) has the base image's major.minor (``$CUDA_VERSION``,
set by the nvidia/cuda images), so the image has one driver requirement; CuPy and FAISS are the
builds for that major (``cupy-cuda12x``, ``faiss-gpu-cu12``), and ``faiss-cpu`` is gone (both
install the ``faiss`` module). No GPU is needed: only versions are read.

    python docker/check_cuda.py        # exit 0, or 1 with one line per mismatch
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata


def installed() -> dict[str, str | None]:
    """The versions the rule compares, read from this environment (None: not installed)."""

    def dist(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    try:
        import torch

        torch_cuda = torch.version.cuda
    except ImportError:
        torch_cuda = None
    cupy = next((name for name in ("cupy-cuda12x", "cupy-cuda11x", "cupy-cuda13x") if dist(name)), None)
    faiss_gpu = next((name for name in ("faiss-gpu-cu12", "faiss-gpu-cu11", "faiss-gpu-cu13") if dist(name)), None)
    return {"base": os.environ.get("CUDA_VERSION"), "torch": torch_cuda, "cupy": cupy, "faiss_gpu": faiss_gpu,
            "faiss_cpu": dist("faiss-cpu")}


def _major_minor(version: str | None) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m[1]), int(m[2])) if m else None


def _package_major(name: str | None) -> int | None:
    """12 for ``cupy-cuda12x`` or ``faiss-gpu-cu12``."""
    m = re.search(r"cu(?:da)?(\d+)x?$", name or "")
    return int(m[1]) if m else None


def mismatches(found: dict[str, str | None]) -> list[str]:
    """What breaks the rule (see the module docstring), one message each; [] when consistent."""
    out = []
    base, torch_cuda = _major_minor(found.get("base")), _major_minor(found.get("torch"))
    if base is None:
        out.append(f"the base image's CUDA_VERSION is {found.get('base')!r}: not an nvidia/cuda image?")
    if torch_cuda is None:
        out.append(f"torch has no CUDA build (torch.version.cuda = {found.get('torch')!r}): install a CUDA wheel")
    if base and torch_cuda and torch_cuda != base:
        out.append(f"torch is built for CUDA {found['torch']}, the base image has {found['base']}: use the "
                   f"cu{base[0]}{base[1]} wheel index or a {torch_cuda[0]}.{torch_cuda[1]} base image")
    for key, what in (("cupy", "CuPy"), ("faiss_gpu", "faiss-gpu")):
        major = _package_major(found.get(key))
        if major is None:
            out.append(f"{what} is not installed (found {found.get(key)!r}); the gpu extra installs it")
        elif base and major != base[0]:
            out.append(f"{found[key]} is built for CUDA {major}, the base image has {found['base']}")
    if found.get("faiss_cpu"):
        out.append(f"faiss-cpu {found['faiss_cpu']} is still installed beside faiss-gpu (both provide `faiss`)")
    return out


if __name__ == "__main__":
    found = installed()
    problems = mismatches(found)
    for line in problems:
        print(f"CUDA mismatch: {line}", file=sys.stderr)
    if not problems:
        print("CUDA versions consistent: " + ", ".join(f"{k} {v}" for k, v in found.items() if v))
    sys.exit(1 if problems else 0)
