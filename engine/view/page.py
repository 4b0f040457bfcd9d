"""One self-contained HTML page of the chunk graph (SpectRAG's graph view, its Fig. 5).

The page inlines its data (JSON) and the vendored force-graph library (``vendor/``, MIT), so it
opens from a file with no network. Nodes are drawn at the positions computed in Python
(:mod:`spectrag.view.layout`; no simulation runs in the browser): size = weighted degree, colour =
spectral cluster, each cluster named at its centre by its main documents; edges coloured by their
dominant signal; hover shows title, section, document, degree, cluster and score. With a query,
the context's chunks are filled red and labelled with their rank and document title, the seeds
ringed orange and labelled, the query's edges drawn strong and everything else faded; the side
panel lists the context in order (title, section, score). ``<body data-nodes data-edges>``
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
 #graph { position: absolute; left: 0; top: 0; right: 360px; bottom: 0; }
 #legend { position: absolute; top: 0; right: 0; width: 344px; bottom: 0; overflow: auto; padding: 8px;
           border-left: 1px solid #ddd; background: #fafafa; }
 #legend h2 { font-size: 14px; margin: 4px 0 6px; } #legend h3 { font-size: 12px; margin: 12px 0 4px; }
 .row { display: flex; align-items: center; gap: 6px; margin: 2px 0; }
 .sw { width: 12px; height: 12px; border-radius: 6px; flex: none; } .ln { width: 18px; height: 3px; flex: none; }
 .ring { width: 9px; height: 9px; border-radius: 7px; border: 3px solid; flex: none; }
 .muted { color: #666; } .query { background: #fff; border: 1px solid #e4b5b5; border-radius: 4px; padding: 6px; }
 .query .text { font-weight: 600; margin-bottom: 2px; }
 ol.context { margin: 0; padding: 0; list-style: none; }
 ol.context li { display: grid; grid-template-columns: 22px 1fr auto; gap: 0 6px; padding: 3px 0;
                 border-bottom: 1px solid #eee; }
 ol.context .rank { background: #d62728; color: #fff; border-radius: 9px; text-align: center; font-size: 11px;
                    height: 17px; line-height: 17px; }
 ol.context .title { font-weight: 600; } ol.context .section { grid-column: 2; color: #666; font-size: 12px; }
 ol.context .score { font-variant-numeric: tabular-nums; color: #444; }
 .cluster { display: grid; grid-template-columns: 12px 1fr auto; gap: 6px; align-items: center; margin: 2px 0; }
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
  const has = (n, role) => n.role.split(' ').includes(role);
  const signals = data.signals.map(s => s.name);
  const S = 1000, q = data.query;
  // the query's chunks are drawn last (on top): background, candidates, seeds, selected
  const order = n => !q ? 0 : has(n, 'selected') ? 3 : has(n, 'seed') ? 2 : has(n, 'candidate') ? 1 : 0;
  const nodes = data.nodes.map(n => Object.assign({}, n, {x: (n.x - 0.5) * S, y: (n.y - 0.5) * S,
                                                        fx: (n.x - 0.5) * S, fy: (n.y - 0.5) * S}))
                          .sort((a, b) => order(a) - order(b));
  const byId = new Map(nodes.map(n => [n.id, n]));
  const links = data.edges.map(e => ({source: e[0], target: e[1], signal: signals[e[2]], w: e[3],
                                      query: q && order(byId.get(e[0])) >= 2 && order(byId.get(e[1])) >= 2}));
  const colour = n => has(n, 'selected') ? ROLE.selected :
    PALETTE[n.cluster % PALETTE.length] + (!q ? '' : has(n, 'seed') ? '' : has(n, 'candidate') ? '88' : '30');
  const radius = n => Math.sqrt(Math.max(n.size, 1)) * 2.2;
  const el = document.getElementById('graph');
  let frames = 0;

  // cluster names at their nodes' centroid
  const centres = {};
  nodes.forEach(n => { const c = centres[n.cluster] || (centres[n.cluster] = {x: 0, y: 0, k: 0}); c.x += n.x; c.y += n.y; c.k++; });
  const names = Object.fromEntries((data.cluster_names || []).map(c => [c.id, c.name]));
  const overlaps = (box, boxes) => boxes.some(b => box[0] < b[2] && box[2] > b[0] && box[1] < b[3] && box[3] > b[1]);
  function drawClusterNames(ctx, scale, boxes) {  // after the labels: a name that would cover one is left out
    ctx.save(); ctx.textAlign = 'center'; ctx.textBaseline = 'middle';
    const size = 13 / scale;
    ctx.font = `italic ${size}px system-ui, sans-serif`;
    Object.entries(centres).forEach(([id, c]) => {
      if (c.k < 3 || !names[id]) return;
      const x = c.x / c.k, y = c.y / c.k, w = ctx.measureText(names[id]).width;
      const box = [x - w / 2, y - size * 0.6, x + w / 2, y + size * 0.6];
      if (overlaps(box, boxes)) return;
      boxes.push(box);
      ctx.fillStyle = PALETTE[id % PALETTE.length] + (q ? 'aa' : 'dd');
      ctx.fillText(names[id], x, y);
    });
    ctx.restore();
  }
  // labels of the query's chunks: the context (its rank and document title), then seeds of other
  // documents; a label that would overlap one already drawn is left out (hover still shows it)
  function drawLabels(ctx, scale) {
    const boxes = [], seen = new Set();
    if (!q) return boxes;
    const todo = nodes.filter(n => has(n, 'selected')).sort((a, b) => a.rank - b.rank)
      .concat(nodes.filter(n => has(n, 'seed') && !has(n, 'selected')).sort((a, b) => (b.score || 0) - (a.score || 0)));
    ctx.save(); ctx.textBaseline = 'middle'; ctx.lineJoin = 'round';
    todo.forEach(n => {
      const sel = has(n, 'selected'), title = n.title || n.doc;
      if (!sel && seen.has(title)) return;
      const text = sel ? n.rank + '  ' + title : title;
      const size = (sel ? 12 : 10.5) / scale;
      ctx.font = `${sel ? 600 : 400} ${size}px system-ui, sans-serif`;
      const w = ctx.measureText(text).width, x = n.x + radius(n) + 4 / scale, y = n.y;
      const box = [x, y - size * 0.6, x + w, y + size * 0.6];
      if (overlaps(box, boxes)) return;
      boxes.push(box); seen.add(title);
      ctx.lineWidth = 3 / scale; ctx.strokeStyle = 'rgba(255,255,255,0.9)'; ctx.strokeText(text, x, y);
      ctx.fillStyle = sel ? '#8b1a1a' : '#444'; ctx.fillText(text, x, y);
    });
    ctx.restore();
    return boxes;
  }

  const fg = ForceGraph()(el)
    .width(el.clientWidth).height(el.clientHeight).backgroundColor('#ffffff')
    .graphData({nodes: nodes, links: links})
    .nodeId('id').nodeVal(n => has(n, 'selected') ? Math.max(n.size, 4) : n.size).nodeRelSize(2.2).nodeColor(colour)
    .nodeLabel(n => '<b>' + esc(n.title || n.doc) + '</b>' + (n.section ? '<br>' + esc(n.section) : '') +
                    '<br>doc ' + esc(n.doc) + ' &middot; chunk ' + n.id + '<br>degree ' + n.degree +
                    ' (weighted ' + n.wdeg.toFixed(2) + ') &middot; cluster ' + n.cluster +
                    (n.score !== undefined ? '<br>score ' + n.score.toFixed(4) : '') +
                    (n.role ? '<br><b>' + esc(n.role) + (n.rank ? ' #' + n.rank : '') + '</b>' : ''))
    .linkColor(l => (SIG[l.signal] || '#888888') + (!q ? '70' : l.query ? '90' : '14'))
    .linkWidth(l => (l.query ? 0.8 : 0.4) + 1.2 * l.w)
    .nodeCanvasObjectMode(n => n.role && (has(n, 'seed') || has(n, 'selected')) ? 'after' : undefined)
    .nodeCanvasObject((n, ctx, scale) => {  // rings: a white edge and a red ring for the context, orange for seeds
      const r = Math.sqrt(has(n, 'selected') ? Math.max(n.size, 4) : n.size) * 2.2;
      if (has(n, 'selected')) {
        ctx.beginPath(); ctx.arc(n.x, n.y, r, 0, 2 * Math.PI);
        ctx.lineWidth = 1.5 / scale; ctx.strokeStyle = '#ffffff'; ctx.stroke();
      }
      let out = r + 2 / scale;
      [['selected', 2.4], ['seed', 2.0]].forEach(([name, width]) => {
        if (!has(n, name)) return;
        ctx.beginPath(); ctx.arc(n.x, n.y, out, 0, 2 * Math.PI);
        ctx.lineWidth = width / scale; ctx.strokeStyle = ROLE[name]; ctx.stroke(); out += (width + 1) / scale;
      });
    })
    .enableNodeDrag(false).cooldownTicks(0)
    .onRenderFramePost((ctx, scale) => {
      drawClusterNames(ctx, scale, drawLabels(ctx, scale));
      if (++frames === 3) document.body.dataset.rendered = String(nodes.length);
    });
  // the window may settle its size after load (headless browsers do): follow it, and fit the graph
  new ResizeObserver(() => { fg.width(el.clientWidth).height(el.clientHeight); fg.zoomToFit(0, 24); }).observe(el);
  document.body.dataset.nodes = String(nodes.length);
  document.body.dataset.edges = String(links.length);

  let html = '<h2>Chunk graph</h2><div class="muted">' + esc(data.index) + '</div>' +
    '<div>' + nodes.length.toLocaleString() + ' of ' + data.total_nodes.toLocaleString() + ' chunks' +
    (data.sampled ? ' (sampled: the query\\'s chunks and a seeded uniform sample)' : '') + ', ' +
    links.length.toLocaleString() + ' of ' + data.total_edges.toLocaleString() + ' edges</div>';
  if (q) {
    html += '<h3>Query (' + esc(q.mode) + ')</h3><div class="query"><div class="text">' + esc(q.text) + '</div>' +
      '<div class="muted">' + q.selected + ' chunks in the context, ' + (q.used_tokens || 0).toLocaleString() +
      (q.budget ? ' of ' + q.budget.toLocaleString() : '') + ' tokens</div></div>';
    html += '<h3>Context, in order (title, section, score)</h3><ol class="context">';
    (q.context || []).forEach((c, i) => { html += '<li data-chunk="' + c.id + '"><span class="rank">' + (i + 1) +
      '</span><span class="title">' + esc(c.title) + '</span><span class="score">' + c.score.toFixed(3) + '</span>' +
      '<span class="section">' + esc(c.section || '(no section)') + ' &middot; ' + c.tokens + ' tokens</span></li>'; });
    html += '</ol><h3>Roles</h3>';
    const marks = {selected: '<span class="ring" style="border-color:' + ROLE.selected + ';background:' + ROLE.selected + '"></span>',
                   seed: '<span class="ring" style="border-color:' + ROLE.seed + '"></span>',
                   candidate: '<span class="sw" style="background:#999999"></span>'};
    [['selected', q.selected, 'selected context (red, labelled with its rank)'], ['seed', q.seeds, 'seeds (orange ring)'],
     ['candidate', q.candidates, 'expanded candidates (cluster colour)']]
      .forEach(r => { html += '<div class="row role" data-role="' + r[0] + '">' + marks[r[0]] + r[2] +
        ' <span class="muted">' + r[1] + '</span></div>'; });
    html += '<div class="muted">other chunks and edges faded; hover a node for its title, section and score</div>';
  }
  html += '<h3>Edges by dominant signal</h3>';
  data.signals.forEach(s => { html += '<div class="row signal" data-signal="' + esc(s.name) + '"><span class="ln" style="background:' +
    (SIG[s.name] || '#888') + '"></span>' + esc(s.name) + ' <span class="muted">' + s.edges.toLocaleString() + '</span></div>'; });
  html += '<h3>Spectral clusters (' + data.clusters + '), by their main documents</h3>' +
    '<div class="muted">node colour = cluster, size = weighted degree</div>';
  (data.cluster_names || []).forEach(c => { html += '<div class="cluster" data-cluster="' + c.id + '"><span class="sw" style="background:' +
    PALETTE[c.id % PALETTE.length] + '"></span><span>' + esc(c.name) + '</span><span class="muted">' + c.size + '</span></div>'; });
  document.getElementById('legend').innerHTML = html;
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
