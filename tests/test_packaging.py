"""How the package installs: one import name (``spectrag``, with ``spectrag.kernels`` from the
repository's kernels/ folder), every subpackage listed, and the import layers of pyproject.toml."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _folders() -> list[str]:
    found = []
    for base, name in (("engine", "spectrag"), ("kernels", "spectrag.kernels")):
        for init in sorted((ROOT / base).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / base).parts
            found.append(".".join([name, *parts]))
    return sorted(found)


def test_every_subpackage_is_listed_in_pyproject():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert sorted(tool["packages"]) == _folders()
    assert tool["package-dir"] == {"spectrag": "engine", "spectrag.kernels": "kernels"}


def test_typed_runnable_and_a_tidy_namespace():
    """py.typed ships (package data), ``python -m spectrag --version`` runs, ``dir(spectrag)``
    is the public API, and the public ``retrieve`` has type hints."""
    import typing

    import spectrag
    from spectrag.retriever import Retriever

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in tool["package-data"]["spectrag"] and (ROOT / "engine" / "py.typed").is_file()
    done = subprocess.run([sys.executable, "-m", "spectrag", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"spectrag, version {spectrag.__version__}", done.stderr
    names = dir(spectrag)
    assert names == sorted([*spectrag.__all__, "__version__"]) and "Retriever" in names and "Hit" in names
    assert not {"os", "sys", "importlib"} & set(names)
    assert all(getattr(spectrag, n) is not None for n in spectrag.__all__)
    hints = typing.get_type_hints(Retriever.retrieve)
    assert {"queries", "k", "budget", "mode", "batch_size", "return"} <= hints.keys()


def test_import_layers_hold():
    done = subprocess.run(["bash", str(ROOT / ".ci" / "lint-imports")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


@pytest.mark.slow
def test_wheel_installs_one_name_beside_a_package_called_kernels(tmp_path):
    """The wheel holds only ``spectrag``; installed into a fresh venv next to another project's
    ``kernels`` package, both import (the engine's kernels are ``spectrag.kernels``)."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("spectrag-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"spectrag"}, tops
    assert "spectrag/py.typed" in names and "spectrag/__main__.py" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    other = site / "kernels"  # another project that owns the import name `kernels`
    other.mkdir()
    (other / "__init__.py").write_text("OWNER = 'another project'\n")
    probe = ("import kernels, spectrag, spectrag.kernels.topk, spectrag.pipeline\n"
             "assert kernels.OWNER == 'another project'\n"
             f"assert spectrag.__file__.startswith({str(site)!r}), spectrag.__file__\n"
             "assert spectrag.kernels.topk.__file__.startswith(spectrag.__file__.rsplit('/', 1)[0])\n"
             "print('ok')")
    # torch, numpy, ... from this interpreter's site-packages (PYTHONPATH: no .pth files, so not
    # the editable install of the checkout); run outside the checkout so it is not on sys.path
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    done = subprocess.run([str(python), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
