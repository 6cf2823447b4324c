// The overview: shards, throughput, latency and runs by status, live. It polls
// `/api/overview` (totals since the server started, read from its metrics) and shows the
// rates and latencies of the last interval, from the difference of two polls.

import { api } from './api.js';
import { badge, bytes, clear, errorBox, every, h, num, table } from './dom.js';

const POLL_MS = 1500;
const HISTORY_POINTS = 60;
const STATUSES = ['completed', 'failed', 'cancelled', 'timed_out'];

// The value below which `q` of the observations fall, from per-bucket counts and their
// upper bounds (null: beyond the last).
function quantile(counts, bounds, q) {
  const total = counts.reduce((a, b) => a + b, 0);
  if (!total) return null;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i];
    if (seen >= q * total) return bounds[i] === null ? Infinity : bounds[i];
  }
  return null;
}

function latencyText(ms) {
  if (ms === null) return '–';
  if (ms === Infinity) return '> 10 s';
  return ms < 1 ? `≤ ${num(ms * 1000)} µs` : `≤ ${num(ms, 1)} ms`;
}

function finishedTotal(runs) {
  let n = 0;
  for (const kind of Object.values(runs)) for (const s of STATUSES) n += kind.finished[s] || 0;
  return n;
}

function spark(values) {
  const max = Math.max(1, ...values);
  const w = 160;
  const points = values.map((v, i) => `${(i * w) / Math.max(1, HISTORY_POINTS - 1)},${28 - (v / max) * 26}`);
  return h('svg:svg', { class: 'spark', viewBox: `0 0 ${w} 28`, preserveAspectRatio: 'none' },
    h('svg:polyline', { points: points.join(' ') }));
}

function card(label, value, sub, extra) {
  return h('div', { class: 'card' },
    h('div', { class: 'label' }, label), h('div', { class: 'value' }, value),
    sub ? h('div', { class: 'sub' }, sub) : null, extra);
}

export function overviewPage(main) {
  const root = h('div', { id: 'overview', 'data-polls': '0' });
  main.append(h('h1', {}, 'Overview'), root);
  let last = null;
  let polls = 0;
  const rates = [];
  return every(POLL_MS, async () => {
    const now = await api('/api/overview');
    const view = render(now, last, rates);
    last = now;
    polls += 1;
    clear(root).append(...view);
    root.dataset.polls = String(polls);
  }, (e) => clear(root).append(errorBox(e)));
}

function render(now, last, rates) {
  const dt = last ? Math.max(0.001, (now.at_ms - last.at_ms) / 1000) : null;
  const rate = (a, b) => (dt === null ? null : Math.max(0, a - b) / dt);
  const reqRate = last ? rate(now.requests.total, last.requests.total) : null;
  const errRate = last ? rate(now.requests.errors, last.requests.errors) : null;
  const runRate = last ? rate(finishedTotal(now.runs), finishedTotal(last.runs)) : null;
  const logRate = last ? rate(now.log.records, last.log.records) : null;
  if (reqRate !== null) {
    rates.push(reqRate);
    if (rates.length > HISTORY_POINTS) rates.shift();
  }
  // The latency of the requests answered since the last poll (all of them before that).
  const counts = now.requests.latency.map((n, i) => n - (last ? last.requests.latency[i] || 0 : 0));
  const bounds = now.requests.latency_bounds_ms;
  const serving = now.shards.filter((s) => s.serving).length;
  const cards = h('div', { class: 'cards' },
    card('shards serving', `${serving} / ${now.shards.length}`,
      now.ready ? 'ready' : 'starting', null),
    card('requests / s', reqRate === null ? '…' : num(reqRate, 1),
      errRate ? `${num(errRate, 1)} errors / s` : `${num(now.requests.total)} since start`, spark(rates)),
    card('latency p50', latencyText(quantile(counts, bounds, 0.5)), 'requests, waits excluded'),
    card('latency p99', latencyText(quantile(counts, bounds, 0.99)), 'last interval'),
    card('runs finished / s', runRate === null ? '…' : num(runRate, 1),
      `${num(finishedTotal(now.runs))} since start`),
    card('log records / s', logRate === null ? '…' : num(logRate, 1), `${num(now.log.records)} written`),
    card('client connections', num(now.connections), 'binary protocol'));
  const kinds = Object.entries(now.runs);
  const runs = table([
    ['kind', ([kind]) => kind],
    ['in memory (open or not yet archived)', ([, r]) => num(r.in_memory), 'num'],
    ...STATUSES.map((s) => [s, ([, r]) => (r.finished[s] ? badge(num(r.finished[s]), s) : '0'), 'num']),
  ], kinds);
  const shards = table([
    ['shard', (s) => s.shard],
    ['state', (s) => (s.serving ? badge('serving', 'ok') : badge('starting', 'pending'))],
    ['requests', (s) => num(s.requests), 'num'],
    ['LSN', (s) => num(s.lsn), 'num'],
    ['durable', (s) => num(s.durable_lsn), 'num'],
    ['disk', (s) => [bytes(s.disk_bytes), s.disk_full ? badge('full', 'bad') : null], 'num'],
    ['action runs', (s) => num(s.action_runs), 'num'],
    ['workflow runs', (s) => num(s.workflow_runs), 'num'],
    ['archived', (s) => num(s.archived_runs), 'num'],
    ['wasm slots', (s) => `${s.executions} / ${s.wasm_slots}`, 'num'],
    ['workers', (s) => num(s.workers.reduce((a, b) => a + b, 0)), 'num'],
    ['kv keys', (s) => num(s.kv_keys), 'num'],
    ['stream records', (s) => num(s.stream_records), 'num'],
  ], now.shards, { rowAttrs: (s) => ({ class: 'shard-row', 'data-shard': s.shard }) });
  return [cards, h('h2', {}, 'Runs by status (since the server started)'), runs,
    h('h2', {}, 'Shards'), shards];
}
