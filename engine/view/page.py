"""One self-contained HTML page of the chunk graph (SpectRAG's graph view, its Fig. 5).

The page inlines its data (JSON) and the vendored force-graph library (``vendor/``, MIT), so it
opens from a file with no network. Nodes are drawn at the positions computed in Python
(:mod:`spectrag.view.layout`; no simulation runs in the browser): size = weighted degree, colour =
spectral cluster; edges coloured by their dominant signal; hover shows title, section, document,
degree and cluster. With a query, its selected context, seeds and candidates are ringed and the
other chunks dimmed (a chunk may have several roles: one ring each). ``<body data-nodes data-edges>``
say what was handed to the renderer, ``data-rendered`` (the node count) that frames were drawn.
"""

from __future__ import annotations

import json
import re
from html import escape
from importlib import resources
from typing import Any

# edge colours by signal (colour-blind-safe Okabe-Ito hues)
SIGNAL_COLOURS = {"semantic": "#0072B2", "section": "#009E73", "entity": "#CC79A7", "adjacency": "#999999",
                  "citation": "#D55E00", "utility": "#E69F00"}
ROLE_COLOURS = {"selected": "#d62728", "seed": "#ff7f0e", "candidate": "#bcbd22"}


def _library() -> str:
    return resources.files("spectrag.view").joinpath("vendor/force-graph.min.js").read_text(encoding="utf-8")


def _script_json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")


TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>spectrag view: __TITLE__</title>
<style>
 html, body { margin: 0; height: 100%; font: 13px/1.35 system-ui, sans-serif; color: #222; background: #fff; }
 #graph { position: absolute; left: 0; top: 0; right: 300px; bottom: 0; }
 #legend { position: absolute; top: 0; right: 0; width: 284px; bottom: 0; overflow: auto; padding: 8px;
           border-left: 1px solid #ddd; background: #fafafa; }
 #legend h2 { font-size: 14px; margin: 4px 0 6px; } #legend h3 { font-size: 12px; margin: 10px 0 4px; }
 .row { display: flex; align-items: center; gap: 6px; margin: 2px 0; }
 .sw { width: 14px; height: 14px; border-radius: 7px; flex: none; } .ln { width: 18px; height: 3px; flex: none; }
 .ring { width: 10px; height: 10px; border-radius: 7px; border: 3px solid; flex: none; }
 .muted { color: #666; } .clusters { display: flex; flex-wrap: wrap; gap: 3px; }
</style></head>
<body>
<div id="graph"></div>
<div id="legend"></div>
<script type="application/json" id="spectrag-data">__DATA__</script>
<script>__LIBRARY__</script>
<script>
(function () {
  const data = JSON.parse(document.getElementById('spectrag-data').textContent);
  const SIG = __SIGNAL_COLOURS__, ROLE = __ROLE_COLOURS__;
  const PALETTE = ['#4e79a7','#f28e2b','#e15759','#76b7b2','#59a14f','#edc948','#b07aa1','#ff9da7','#9c755f',
                   '#bab0ac','#1f77b4','#aec7e8','#ffbb78','#98df8a','#c5b0d5','#c49c94','#f7b6d2','#dbdb8d','#9edae5','#17becf'];
  const esc = s => String(s).replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
  const signals = data.signals.map(s => s.name);
  const S = 1000, q = data.query;
  const nodes = data.nodes.map(n => Object.assign({}, n, {x: (n.x - 0.5) * S, y: (n.y - 0.5) * S,
                                                        fx: (n.x - 0.5) * S, fy: (n.y - 0.5) * S}));
  const links = data.edges.map(e => ({source: e[0], target: e[1], signal: signals[e[2]], w: e[3]}));
  const colour = n => PALETTE[n.cluster % PALETTE.length] + (q && !n.role ? '55' : '');
  const el = document.getElementById('graph');
  let frames = 0;
  const fg = ForceGraph()(el)
    .width(el.clientWidth).height(el.clientHeight).backgroundColor('#ffffff')
    .graphData({nodes: nodes, links: links})
    .nodeId('id').nodeVal(n => n.size).nodeRelSize(2.2).nodeColor(colour)
    .nodeLabel(n => '<b>' + esc(n.title || n.doc) + '</b>' + (n.section ? '<br>' + esc(n.section) : '') +
                    '<br>doc ' + esc(n.doc) + ' &middot; chunk ' + n.id + '<br>degree ' + n.degree +
                    ' (weighted ' + n.wdeg.toFixed(2) + ') &middot; cluster ' + n.cluster +
                    (n.role ? '<br><b>' + esc(n.role) + '</b>' : ''))
    .linkColor(l => (SIG[l.signal] || '#888888') + (q ? '40' : '70'))
    .linkWidth(l => 0.4 + 1.2 * l.w)
    .nodeCanvasObjectMode(n => n.role ? 'after' : undefined)
    .nodeCanvasObject((n, ctx) => {  // rings, innermost first: selected, seed, candidate
      let r = Math.sqrt(n.size) * 2.2 + 1.5;
      [['selected', 2.4], ['seed', 2.0], ['candidate', 1.0]].forEach(([name, width]) => {
        if (!n.role.split(' ').includes(name)) return;
        ctx.beginPath(); ctx.arc(n.x, n.y, r, 0, 2 * Math.PI);
        ctx.lineWidth = width; ctx.strokeStyle = ROLE[name]; ctx.stroke(); r += width + 1;
      });
    })
    .enableNodeDrag(false).cooldownTicks(0)
    .onRenderFramePost(() => { if (++frames === 3) document.body.dataset.rendered = String(nodes.length); });
  // the window may settle its size after load (headless browsers do): follow it, and fit the graph
  new ResizeObserver(() => { fg.width(el.clientWidth).height(el.clientHeight); fg.zoomToFit(0, 24); }).observe(el);
  document.body.dataset.nodes = String(nodes.length);
  document.body.dataset.edges = String(links.length);

  const counts = {};
  nodes.forEach(n => { counts[n.cluster] = (counts[n.cluster] || 0) + 1; });
  let html = '<h2>Chunk graph</h2><div class="muted">' + esc(data.index) + '</div>' +
    '<div>' + nodes.length.toLocaleString() + ' of ' + data.total_nodes.toLocaleString() + ' chunks' +
    (data.sampled ? ' (sampled: the query\\'s chunks and a seeded uniform sample)' : '') + ', ' +
    links.length.toLocaleString() + ' of ' + data.total_edges.toLocaleString() + ' edges</div>' +
    '<div class="muted">size = weighted degree, colour = spectral cluster</div>' +
    '<h3>Edges by dominant signal</h3>';
  data.signals.forEach(s => { html += '<div class="row signal" data-signal="' + esc(s.name) + '"><span class="ln" style="background:' +
    (SIG[s.name] || '#888') + '"></span>' + esc(s.name) + ' <span class="muted">' + s.edges.toLocaleString() + '</span></div>'; });
  if (q) {
    html += '<h3>Query (' + esc(q.mode) + ')</h3><div>' + esc(q.text) + '</div>';
    [['selected', q.selected, 'selected context'], ['seed', q.seeds, 'seeds'], ['candidate', q.candidates, 'expanded candidates']]
      .forEach(r => { html += '<div class="row role" data-role="' + r[0] + '"><span class="ring" style="border-color:' +
        ROLE[r[0]] + '"></span>' + r[2] + ' <span class="muted">' + r[1] + '</span></div>'; });
  }
  html += '<h3>Spectral clusters (' + data.clusters + ')</h3><div class="clusters">';
  Object.keys(counts).sort((a, b) => a - b).forEach(c => { html += '<span class="row"><span class="sw" style="background:' +
    PALETTE[c % PALETTE.length] + '"></span>' + c + ' <span class="muted">' + counts[c] + '</span></span>'; });
  document.getElementById('legend').innerHTML = html + '</div>';
})();
</script>
</body></html>
"""


def render_page(data: dict[str, Any], title: str = "chunk graph") -> str:
    """The HTML page for :func:`spectrag.view.graph.view_data`'s ``data`` (one pass over the
    template's placeholders, so nothing inserted is read as one)."""
    parts = {"__TITLE__": escape(title), "__SIGNAL_COLOURS__": json.dumps(SIGNAL_COLOURS),
             "__ROLE_COLOURS__": json.dumps(ROLE_COLOURS), "__DATA__": _script_json(data),
             "__LIBRARY__": _library().replace("</script", "<\\/script")}
    return re.sub("|".join(parts), lambda m: parts[m.group(0)], TEMPLATE)
