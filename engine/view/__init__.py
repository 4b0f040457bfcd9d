"""The graph view: ``spectrag view DIR -o graph.html [--query TEXT]``, one self-contained HTML
page of the chunk graph (:mod:`spectrag.view.graph` builds what is drawn, :mod:`spectrag.view.layout`
places it, :mod:`spectrag.view.page` writes the page with the vendored force-graph library)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spectrag.view.graph import QueryRoles, query_roles, view_data, view_of
from spectrag.view.page import render_page


def write_view(index, out: str | Path, *, query: str | None = None, config=None, budget: int | None = None,
               max_nodes: int = 3000, seed: int = 0) -> dict[str, Any]:
    """Write the page of ``index``'s chunk graph to ``out`` (highlighting ``query``'s seeds,
    candidates and selection when given); returns the drawn data's counts."""
    data = view_of(index, query=query, config=config, budget=budget, max_nodes=max_nodes, seed_=seed)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(data, title=f"{Path(index.path).name}" + (f": {query}" if query else "")), encoding="utf-8")
    return {"path": str(out), "nodes": len(data["nodes"]), "edges": len(data["edges"]), "total_nodes": data["total_nodes"],
            "total_edges": data["total_edges"], "sampled": data["sampled"], "query": data["query"], "bytes": out.stat().st_size}


__all__ = ["QueryRoles", "query_roles", "render_page", "view_data", "view_of", "write_view"]
