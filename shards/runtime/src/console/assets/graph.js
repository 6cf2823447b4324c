// A workflow definition's graph as SVG: steps in layers from the start step (breadth
// first), terminals in a last layer, an arrow per transition labelled with its outcome;
// an arrow back up (a loop) bends round the side. A run's steps can be marked on it.

import { h } from './dom.js';

const NODE_W = 176;
const NODE_H = 46;
const GAP_X = 34;
const LAYER_H = 96;
const MARGIN = 30;
// Room at the sides for the arrows that go round other nodes.
const MARGIN_X = 80;

// Layers of node ids: breadth first from `start` over the edges, terminals last, nodes
// nothing reaches after the rest.
function layers(graph) {
  const terminal = new Set(graph.nodes.filter((n) => n.kind === 'terminal').map((n) => n.id));
  const out = new Map(graph.nodes.map((n) => [n.id, []]));
  for (const e of graph.edges) if (out.has(e.from)) out.get(e.from).push(e.to);
  const depth = new Map([[graph.start, 0]]);
  const queue = [graph.start];
  while (queue.length) {
    const id = queue.shift();
    for (const to of out.get(id) || []) {
      if (depth.has(to) || terminal.has(to)) continue;
      depth.set(to, depth.get(id) + 1);
      queue.push(to);
    }
  }
  let deepest = Math.max(0, ...depth.values());
  for (const n of graph.nodes) {
    if (!terminal.has(n.id) && !depth.has(n.id)) depth.set(n.id, ++deepest);
  }
  for (const id of terminal) depth.set(id, deepest + 1);
  const rows = [];
  for (const n of graph.nodes) {
    const d = depth.get(n.id);
    (rows[d] = rows[d] || []).push(n.id);
  }
  return rows.filter(Boolean);
}

// `marks`: {visited: Set of step ids, current: id, reached: terminal id}.
export function drawGraph(graph, marks = {}) {
  const rows = layers(graph);
  const widest = Math.max(...rows.map((r) => r.length));
  const width = Math.max(2 * MARGIN_X + widest * NODE_W + (widest - 1) * GAP_X, 320);
  const height = 2 * MARGIN + (rows.length - 1) * LAYER_H + NODE_H;
  const at = new Map();
  rows.forEach((row, i) => {
    const rowW = row.length * NODE_W + (row.length - 1) * GAP_X;
    row.forEach((id, j) => {
      at.set(id, { x: (width - rowW) / 2 + j * (NODE_W + GAP_X), y: MARGIN + i * LAYER_H, layer: i });
    });
  });
  const svg = h('svg:svg', {
    class: 'graph', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': 'workflow graph',
  }, h('svg:defs', {}, h('svg:marker', {
    id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse',
  }, h('svg:path', { d: 'M 0 0 L 10 5 L 0 10 z' }))));
  graph.edges.forEach((e, i) => {
    const a = at.get(e.from);
    const b = at.get(e.to);
    if (a && b) svg.append(edge(e, a, b, i));
  });
  for (const n of graph.nodes) svg.append(node(n, at.get(n.id), marks));
  return svg;
}

function edge(e, a, b, i) {
  const tx = b.x + NODE_W / 2;
  const ty = b.y;
  let d;
  let label;
  if (b.layer === a.layer + 1) {
    // Down one layer: a curve from bottom to top, its label a third of the way.
    const sx = a.x + NODE_W / 2;
    const sy = a.y + NODE_H;
    const my = (sy + ty) / 2;
    d = `M ${sx} ${sy} C ${sx} ${my}, ${tx} ${my}, ${tx} ${ty}`;
    label = bezier([sx, sy], [sx, my], [tx, my], [tx, ty], 0.3);
  } else if (b.layer > a.layer) {
    // Down past other layers: out of the side facing the target, round the nodes between.
    const left = tx < a.x + NODE_W / 2;
    const sx = left ? a.x : a.x + NODE_W;
    const sy = a.y + NODE_H / 2;
    const cx = left ? Math.min(sx, tx) - 40 : Math.max(sx, tx) + 40;
    d = `M ${sx} ${sy} C ${cx} ${sy}, ${cx} ${ty - LAYER_H / 2}, ${tx} ${ty}`;
    label = bezier([sx, sy], [cx, sy], [cx, ty - LAYER_H / 2], [tx, ty], 0.25);
  } else {
    // Back up (a loop) or sideways: out of the right side, round, into the target's side.
    const off = 40 + (i % 3) * 12;
    const x1 = a.x + NODE_W;
    const y1 = a.y + NODE_H / 2;
    const x2 = b.x + NODE_W;
    const y2 = b.y + NODE_H / 2;
    const cx = Math.max(x1, x2) + off;
    d = `M ${x1} ${y1} C ${cx} ${y1}, ${cx} ${y2}, ${x2} ${y2}`;
    label = [cx - 8, (y1 + y2) / 2];
  }
  return h('svg:g', { class: 'edge', 'data-from': e.from, 'data-to': e.to },
    h('svg:path', { d, 'marker-end': 'url(#arrow)' }),
    h('svg:text', { x: label[0], y: label[1] - 3 }, e.label));
}

// The point at `t` of a cubic Bézier curve.
function bezier(p0, p1, p2, p3, t) {
  const u = 1 - t;
  const at = (k) => u * u * u * p0[k] + 3 * u * u * t * p1[k] + 3 * u * t * t * p2[k] + t * t * t * p3[k];
  return [at(0), at(1)];
}

function node(n, p, marks) {
  const classes = ['node', n.kind];
  if (n.status) classes.push(n.status);
  if (marks.visited && marks.visited.has(n.id)) classes.push('visited');
  if (marks.current === n.id) classes.push('current');
  if (marks.reached === n.id) classes.push('reached', 'visited');
  const sub = n.kind === 'terminal' ? n.status : n.target;
  return h('svg:g', { class: classes.join(' '), 'data-id': n.id, transform: `translate(${p.x},${p.y})` },
    h('svg:title', {}, `${n.label}${sub ? ' — ' + sub : ''}`),
    h('svg:rect', { width: NODE_W, height: NODE_H, rx: n.kind === 'terminal' ? 23 : 7 }),
    h('svg:text', { x: NODE_W / 2, y: sub ? 19 : 27 }, clip(n.label, 24)),
    sub ? h('svg:text', { class: 'sub', x: NODE_W / 2, y: 35 }, clip(sub, 28)) : null);
}

function clip(text, n) {
  return text.length > n ? text.slice(0, n - 1) + '…' : text;
}
