"""The ``spectrag`` command line (:mod:`spectrag.cli.main`): index, add, info, retrieve, demo, eval."""

from spectrag.cli.main import main

__all__ = ["main"]
