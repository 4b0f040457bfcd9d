"""Serving: a long-lived process that keeps the model and the index loaded and gathers
concurrent requests into one tensor batch.

- :mod:`spectrag.serve.batcher`: :class:`MicroBatcher`, a worker that gathers and embeds, a scorer
  and a finisher, overlapping;
- :mod:`spectrag.serve.app`: the FastAPI app and ``serve`` (``spectrag serve DIR``; the
  ``serve`` extra: ``pip install 'spectrag[serve]'``).
"""

from spectrag.serve.batcher import MicroBatcher, Stats

__all__ = ["MicroBatcher", "Stats"]
