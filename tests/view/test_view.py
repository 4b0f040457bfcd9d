"""The graph view (spectrag.view): what is drawn (roles from the pipeline, dominant signals checked
against the stored signals, sampling, layout), and the page itself in headless Chromium: it draws
nodes (not a blank canvas) and its legend names the signals, with no network."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
import scipy.sparse as sp

from spectrag.cli.demo import sample_questions
from spectrag.retriever import Retriever
from spectrag.view import QueryRoles, query_roles, view_data, write_view
from spectrag.view.layout import force_layout, spectral_start

QUESTIONS = [q["question"] for q in sample_questions()]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]


def test_query_roles_come_from_the_pipeline(sample_index):
    retriever = Retriever(sample_index)
    roles = query_roles(retriever, QUESTIONS[0], budget=800)
    ctx = retriever.retrieve(QUESTIONS[0], budget=800)
    assert roles.selected == [c.chunk_id for c in ctx.chunks] and roles.mode == "spectral"
    assert roles.scores == dict(zip(ctx.ranking, ctx.ranking_scores)) and roles.used_tokens == ctx.used_tokens
    assert len(roles.seeds) == min(retriever.config.expand.n_seeds, len(sample_index.chunks))
    assert set(roles.seeds) <= set(roles.candidates) and set(roles.selected) <= set(roles.candidates)
    assert set(roles.candidates) == set(ctx.ranking)


def test_edges_are_coloured_by_their_dominant_signal(sample_index):
    data = view_data(sample_index, iterations=5)
    n, g = len(sample_index.chunks), sample_index.graph
    alpha = sample_index.config.graph.signal_weights()
    names = [s["name"] for s in data["signals"]]
    full = {}
    for name in names:
        rows, cols, vals = (np.asarray(a) for a in g["signals"][name])
        m = sp.coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
        full[name] = (m + m.T).tocsr()
    w = sp.csr_matrix(g["weights"])
    assert len(data["edges"]) == data["total_edges"] == w.nnz // 2 and not data["sampled"]
    for a, b, s, weight in data["edges"]:
        assert a < b and weight == pytest.approx(w[a, b], abs=1e-4)
        contrib = [alpha.get(name, 0.0) * full[name][a, b] for name in names]
        assert contrib[s] == max(contrib)
    assert sum(s["edges"] for s in data["signals"]) == len(data["edges"])


def test_context_list_labels_and_cluster_names(sample_index):
    """The query's context is listed in order with title, section and score; its chunks carry
    their rank and score; each cluster is named by its most frequent document titles."""
    roles = query_roles(Retriever(sample_index), QUESTIONS[0], budget=800)
    data = view_data(sample_index, roles=roles, iterations=5)
    table = sample_index.chunks
    listed = data["query"]["context"]
    assert [c["id"] for c in listed] == roles.selected
    for c in listed:
        chunk = table[c["id"]]
        assert c["title"] == chunk.title and c["tokens"] == chunk.n_tokens
        assert c["score"] == pytest.approx(roles.scores[c["id"]], abs=1e-4)
    by_id = {node["id"]: node for node in data["nodes"]}
    assert [by_id[c]["rank"] for c in roles.selected] == list(range(1, len(roles.selected) + 1))
    assert all("score" in by_id[c] for c in roles.candidates) and all("rank" not in by_id[c] for c in roles.seeds
                                                                       if c not in roles.selected)
    clusters = np.asarray(sample_index.graph["clusters"])
    for entry in data["cluster_names"]:
        members = [table[i].title for i in np.flatnonzero(clusters == entry["id"])]
        top = max(set(members), key=members.count)
        assert entry["size"] == len(members) and members.count(entry["name"].split(" · ")[0]) == members.count(top)
    assert sum(e["size"] for e in data["cluster_names"]) == len(table)


def test_sampling_keeps_the_query_chunks_and_the_layout_is_deterministic(sample_index):
    roles = QueryRoles("q", "spectral", seeds=[1, 2], candidates=[1, 2, 3, 50], selected=[3])
    data = view_data(sample_index, roles=roles, max_nodes=12, iterations=5)
    ids = {node["id"] for node in data["nodes"]}
    assert len(ids) == 12 and {1, 2, 3, 50} <= ids and data["sampled"]
    assert all(a in ids and b in ids for a, b, _, _ in data["edges"])
    by_id = {node["id"]: node["role"] for node in data["nodes"]}
    assert by_id[3] == "candidate selected" and by_id[1] == "candidate seed" and by_id[50] == "candidate"
    assert view_data(sample_index, roles=roles, max_nodes=12, iterations=5) == data
    pos = force_layout(spectral_start(np.asarray(sample_index.graph["coordinates"])), np.array([0, 1]), np.array([1, 2]),
                       np.ones(2, np.float32), groups=np.asarray(sample_index.graph["clusters"]), iterations=20)
    assert pos.shape == (len(sample_index.chunks), 2) and np.isfinite(pos).all() and pos.min() >= 0 and pos.max() <= 1


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install -y chromium)")
def test_page_draws_the_graph_in_headless_chromium(sample_index, tmp_path):
    from PIL import Image

    page = tmp_path / "graph.html"
    summary = write_view(sample_index, page, query=QUESTIONS[0], budget=800)
    html = page.read_text()
    assert not re.search(r"<(script|img|iframe)[^>]+src=|<link\b", html)  # everything inline: no network
    run = lambda *extra: subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,800",
                                         "--virtual-time-budget=5000", *extra, page.as_uri()],
                                        capture_output=True, text=True, timeout=120)
    dom = run("--dump-dom").stdout
    assert f'data-nodes="{summary["nodes"]}" data-edges="{summary["edges"]}"' in dom, dom[-2000:]  # the script ran
    legend = dom[dom.index('id="legend"'):]
    for name in sample_index.graph["signals"]:
        assert f'data-signal="{name}"' in legend and f">{name} <" in legend.replace("</span>", "")
    assert "selected context" in legend and "seeds" in legend and "expanded candidates" in legend
    ctx = Retriever(sample_index).retrieve(QUESTIONS[0], budget=800)
    listed = re.findall(r'<li data-chunk="(\d+)">.*?<span class="title">([^<]*)</span>', legend)
    assert [(int(i), t) for i, t in listed] == [(c.chunk_id, c.title) for c in ctx.chunks]  # the context, in order
    named = re.findall(r'<div class="cluster" data-cluster="(\d+)">', legend)  # the rendered legend, not the script
    assert sorted(map(int, named)) == sorted(set(np.asarray(sample_index.graph["clusters"]).tolist()))
    shot = tmp_path / "graph.png"
    done = run(f"--screenshot={shot}")
    assert shot.is_file(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)[:, : 1200 - 300]  # the canvas, not the legend
    drawn = (np.abs(pixels - 255).sum(axis=2) > 30).mean()
    assert drawn > 0.01, f"only {drawn:.2%} of the canvas is not background"
    red = (np.abs(pixels - np.array([0xD6, 0x27, 0x28])).sum(axis=2) < 60).sum()  # the selected-context rings
    assert red > 20


def test_view_command(sample_index, tmp_path):
    from click.testing import CliRunner

    from spectrag.cli import main

    out = tmp_path / "v.html"
    done = CliRunner().invoke(main, ["view", str(sample_index.path), "-o", str(out), "--query", QUESTIONS[1],
                                     "--max-nodes", "50", "--budget", "600"])
    assert done.exit_code == 0, done.output
    assert "wrote" in done.output and f"50 of {len(sample_index.chunks)} chunks" in done.output and out.stat().st_size > 100_000
    bad = CliRunner().invoke(main, ["view", str(sample_index.path), "-o", str(out), "--max-nodes", "0"])
    assert bad.exit_code == 2 and "error: --max-nodes must be >= 1" in bad.output
