// The namespace's definitions and resources: workflows (each with its versions, graph and
// YAML), actions, workers (drain), streams and their consumer groups (lag, pending) and
// schedules (next fire; pause, resume).

import { api } from './api.js';
import { ago, badge, bytes, clear, errorBox, every, h, link, num, pre, table, time, toast } from './dom.js';
import { drawGraph } from './graph.js';

const POLL_MS = 3000;

// A page that shows `render(await load())` and polls it.
function polled(main, title, load, render, ms = POLL_MS) {
  const box = h('div', { class: 'listing' });
  main.append(h('h1', {}, title), box);
  const refresh = async () => clear(box).append(render(await load(), refresh));
  return every(ms, refresh, (e) => clear(box).append(errorBox(e)));
}

// A button that POSTs `path` and refreshes; a first click arms it, a second does it.
function confirmButton(text, path, refresh, id) {
  const button = h('button', { id }, text);
  let armed = false;
  button.addEventListener('click', async () => {
    if (!armed) {
      armed = true;
      button.textContent = `${text}: sure?`;
      button.classList.add('danger');
      return;
    }
    button.disabled = true;
    try {
      await api(path, { method: 'POST' });
      toast(`${text}: done`);
      await refresh();
    } catch (e) {
      toast(e.message, 'bad');
      button.disabled = false;
    }
  });
  return button;
}

export function workflowsPage(main) {
  return polled(main, 'Workflows', () => api('/api/workflows'), (doc) => table([
    ['workflow', (w) => h('a', { href: link(`/workflows/${encodeURIComponent(w.name)}`) }, w.name)],
    ['latest version', (w) => w.version],
    ['versions', (w) => w.versions.length, 'num'],
    ['enabled', (w) => (w.enabled ? badge('enabled', 'ok') : badge('disabled', 'paused'))],
    ['runs', (w) => h('a', { href: link('/runs', { kind: 'workflow', name: w.name }) }, 'runs →')],
    ['updated', (w) => time(w.updated_at_ms)],
  ], doc.items, { empty: 'no workflow definitions in this namespace' }));
}

export function workflowPage(main, name, params) {
  const box = h('div', { id: 'definition' });
  main.append(box);
  api(`/api/workflows/${encodeURIComponent(name)}`, { params: { version: params.version } }).then((def) => {
    const versions = h('select', { id: 'definition-version' },
      [...def.versions].reverse().map((v) => h('option', { value: v, selected: v === def.version }, v)));
    versions.addEventListener('change', () => {
      location.hash = link(`/workflows/${encodeURIComponent(name)}`, { version: versions.value });
    });
    const graph = def.graph.error ? h('div', { class: 'muted' }, def.graph.error) : drawGraph(def.graph);
    box.append(
      h('div', { class: 'title-row' }, h('h1', {}, 'Workflow ', h('span', { class: 'mono' }, def.name)),
        h('label', {}, 'version ', versions),
        def.enabled ? badge('enabled', 'ok') : badge('disabled', 'paused'),
        h('a', { href: link('/runs', { kind: 'workflow', name: def.name }) }, 'runs →')),
      h('div', { class: 'panel graph-box', id: 'definition-graph' }, graph),
      h('h2', {}, 'Definition'), pre(def.yaml),
      h('p', { class: 'muted' }, `created ${time(def.created_at_ms)}, updated ${time(def.updated_at_ms)}`));
  }).catch((e) => box.append(errorBox(e)));
}

export function actionsPage(main) {
  return polled(main, 'Actions', () => api('/api/actions'), (doc) => table([
    ['action', (a) => h('a', { href: link('/runs', { kind: 'action', name: a.name }) }, a.name)],
    ['kind', (a) => a.kind],
    ['version', (a) => a.version, 'num'],
    ['enabled', (a) => (a.enabled ? badge('enabled', 'ok') : badge('disabled', 'paused'))],
    ['timeout', (a) => `${num(a.timeout_ms)} ms`, 'num'],
    ['retries', (a) => a.max_retries, 'num'],
    ['module', (a) => (a.wasm_bytes ? bytes(a.wasm_bytes) : '')],
    ['dead letters', (a) => h('a', { href: link('/runs', { kind: 'action', name: a.name, dead_letter: 'true' }) }, 'dead letters →')],
    ['description', (a) => a.description || ''],
  ], doc.items, { empty: 'no actions in this namespace' }));
}

export function workersPage(main) {
  return polled(main, 'Workers', () => api('/api/workers'), (doc, refresh) => table([
    ['worker', (w) => h('span', { class: 'mono' }, w.worker_id)],
    ['status', (w) => badge(w.status)],
    ['load', (w) => `${w.current_load} / ${w.max_concurrency}`, 'num'],
    ['completed', (w) => num(w.tasks_completed), 'num'],
    ['failed', (w) => num(w.tasks_failed), 'num'],
    ['last heartbeat', (w) => ago(w.last_heartbeat_ms)],
    ['handles', (w) => w.processes.map((p) => p.name).join(', ')],
    ['machine', (w) => w.machine_id || ''],
    ['', (w) => (w.status === 'draining' ? ''
      : confirmButton('Drain', `/api/workers/${encodeURIComponent(w.worker_id)}/drain`, refresh, `drain-${w.worker_id}`))],
  ], doc.items, { empty: 'no workers registered in this namespace' }));
}

export function streamsPage(main) {
  const open = new Set();
  return polled(main, 'Streams', async () => {
    const doc = await api('/api/streams');
    const groups = await Promise.all(doc.items.filter((s) => open.has(s.name)).map(async (s) => [
      s.name, (await api(`/api/streams/${encodeURIComponent(s.name)}/groups`)).items]));
    return { streams: doc.items, groups: new Map(groups) };
  }, ({ streams, groups }, refresh) => {
    const rows = [];
    for (const s of streams) {
      rows.push({ stream: s });
      if (groups.has(s.name)) rows.push({ groups: groups.get(s.name), name: s.name });
    }
    if (!streams.length) return h('div', { class: 'empty panel' }, 'no streams in this namespace');
    return h('table', {}, h('thead', {}, h('tr', {},
      ['stream', 'partitions', 'records', 'bytes', 'appended', 'last id', 'groups'].map((t) => h('th', {}, t)))),
    h('tbody', {}, rows.map((r) => (r.stream ? streamRow(r.stream, open, refresh)
      : h('tr', {}, h('td', { colspan: 7 }, groupsTable(r.groups)))))));
  });
}

function streamRow(s, open, refresh) {
  const toggle = h('button', {}, open.has(s.name) ? 'hide groups' : 'groups');
  toggle.addEventListener('click', () => {
    if (open.has(s.name)) open.delete(s.name); else open.add(s.name);
    refresh().catch((e) => toast(e.message, 'bad'));
  });
  return h('tr', {}, h('td', { class: 'mono' }, s.name), h('td', { class: 'num' }, s.partitions),
    h('td', { class: 'num' }, num(s.length)), h('td', { class: 'num' }, bytes(s.bytes)),
    h('td', { class: 'num' }, num(s.appended)), h('td', { class: 'mono' }, s.last_id || ''), h('td', {}, toggle));
}

function groupsTable(groups) {
  return table([
    ['group', (g) => g.group],
    ['mode', (g) => g.mode],
    ['lag', (g) => num(g.lag), 'num'],
    ['pending', (g) => num(g.pending), 'num'],
    ['delivered', (g) => num(g.delivered), 'num'],
    ['acked', (g) => num(g.acked), 'num'],
    ['dead-lettered', (g) => num(g.dead_lettered), 'num'],
    ['consumers', (g) => g.consumers.join(', ')],
  ], groups, { empty: 'no consumer groups' });
}

export function schedulesPage(main) {
  return polled(main, 'Schedules', () => api('/api/schedules'), (doc, refresh) => table([
    ['workflow', (s) => h('a', { href: link(`/workflows/${encodeURIComponent(s.workflow)}`) }, s.workflow)],
    ['every', (s) => s.every],
    ['state', (s) => (s.paused ? badge(s.paused, 'paused') : badge('active', 'ok'))],
    ['next fire', (s) => (s.next_fire_ms ? `${time(s.next_fire_ms)} (${ago(s.next_fire_ms)})` : '–')],
    ['last tick', (s) => time(s.last_tick_ms)],
    ['running', (s) => s.running, 'num'],
    ['fired', (s) => num(s.fired), 'num'],
    ['skipped', (s) => num(s.skipped), 'num'],
    ['', (s) => scheduleButton(s, refresh)],
  ], doc.items, { empty: 'no schedules in this namespace' }));
}

function scheduleButton(s, refresh) {
  const paused = Boolean(s.paused);
  const what = paused ? 'resume' : 'pause';
  const button = h('button', { id: `schedule-${what}-${s.workflow}` }, paused ? 'Resume' : 'Pause');
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await api(`/api/schedules/${encodeURIComponent(s.workflow)}/${what}`, { method: 'POST' });
      toast(`schedule of ${s.workflow}: ${what}d`);
      await refresh();
    } catch (e) {
      toast(e.message, 'bad');
      button.disabled = false;
    }
  });
  return button;
}
