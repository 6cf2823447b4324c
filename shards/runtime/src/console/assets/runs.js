// Runs: all of them (every workflow's and action's, newest first: the default), or of a
// workflow or an action, by status, or by a query in the run query language (workflow
// runs: their search attributes; action runs: their fields and labels), a page at a time.
// The filters live in the address (`#/runs?kind=action&name=charge&status=failed`).

import { api } from './api.js';
import { add, ago, badge, clear, errorBox, h, link, table, time } from './dom.js';

const WORKFLOW_STATUSES = ['pending', 'running', 'waiting', 'on_hold', 'completed', 'failed', 'cancelled', 'timed_out'];
const ACTION_STATUSES = ['pending', 'running', 'completed', 'failed', 'cancelled', 'timed_out'];
const KINDS = [['all', 'all runs'], ['workflow', 'workflow runs'], ['action', 'action runs']];
const PAGE = 50;

export function runsPage(main, params) {
  const kind = ['workflow', 'action'].includes(params.kind) ? params.kind : 'all';
  const filters = h('div', { class: 'filters' });
  const results = h('div', { id: 'runs', 'data-kind': kind });
  main.append(h('h1', {}, 'Runs'), filters, results);
  let stopped = false;
  if (kind === 'all') {
    allFilters(filters, params);
    showPage(results, { kind, status: params.status || '' }, [], params.cursor || null);
    return () => { stopped = true; };
  }
  buildFilters(filters, kind, params).then((chosen) => {
    if (stopped) return;
    if (!chosen.name && !chosen.query) {
      results.append(h('div', { class: 'empty panel' },
        `Choose a ${kind}, or give a query.`));
      return;
    }
    showPage(results, chosen, [], params.cursor || null);
  }).catch((e) => results.append(errorBox(e)));
  return () => { stopped = true; };
}

// The filter bar; resolves to the filters in force (a name chosen by default).
async function buildFilters(box, kind, params) {
  const names = await api(kind === 'action' ? '/api/actions' : '/api/workflows');
  const list = names.items.map((x) => x.name);
  const name = params.name || (params.query ? '' : list[0] || '');
  const kindSelect = kindChoice(kind);
  const nameSelect = h('select', { id: 'runs-name' },
    h('option', { value: '' }, kind === 'action' ? 'any action (with a query)' : 'any workflow (with a query)'),
    list.map((n) => h('option', { value: n, selected: n === name }, n)));
  const statuses = kind === 'action' ? ACTION_STATUSES : WORKFLOW_STATUSES;
  const statusSelect = h('select', { id: 'runs-status' },
    h('option', { value: '' }, 'any status'),
    statuses.map((s) => h('option', { value: s, selected: s === params.status }, s)));
  const dead = h('input', { type: 'checkbox', id: 'runs-dead-letter', checked: params.dead_letter === 'true' });
  const query = h('input', {
    id: 'runs-query',
    value: params.query || '',
    placeholder: kind === 'action' ? 'attempt > 2 AND labels.region = "eu"' : 'customer_id = "c-1" AND amount > 100',
  });
  const apply = () => {
    location.hash = link('/runs', {
      kind: kindSelect.value,
      name: kindSelect.value === kind ? nameSelect.value : '',
      status: kindSelect.value === kind ? statusSelect.value : '',
      query: kindSelect.value === kind ? query.value.trim() : '',
      dead_letter: kindSelect.value === 'action' && dead.checked ? 'true' : '',
    });
  };
  kindSelect.addEventListener('change', apply);
  query.addEventListener('keydown', (e) => { if (e.key === 'Enter') apply(); });
  add(box,
    h('label', {}, 'kind', kindSelect),
    h('label', {}, kind, nameSelect),
    h('label', {}, 'status', statusSelect),
    kind === 'action' ? h('label', {}, 'dead letters only', dead) : null,
    h('label', { class: 'grow' }, 'query', query),
    h('button', { class: 'primary', id: 'runs-apply', onclick: apply }, 'Show'));
  return {
    kind,
    name,
    status: params.status || '',
    query: params.query || '',
    dead_letter: params.dead_letter === 'true',
  };
}

function kindChoice(kind) {
  return h('select', { id: 'runs-kind' },
    KINDS.map(([k, text]) => h('option', { value: k, selected: k === kind }, text)));
}

// The filter bar of all runs: the kind, and a status.
function allFilters(box, params) {
  const kindSelect = kindChoice('all');
  const statusSelect = h('select', { id: 'runs-status' },
    h('option', { value: '' }, 'any status'),
    WORKFLOW_STATUSES.map((s) => h('option', { value: s, selected: s === params.status }, s)));
  const apply = () => {
    location.hash = link('/runs', {
      kind: kindSelect.value,
      status: kindSelect.value === 'all' ? statusSelect.value : '',
    });
  };
  kindSelect.addEventListener('change', apply);
  statusSelect.addEventListener('change', apply);
  add(box, h('label', {}, 'kind', kindSelect), h('label', {}, 'status', statusSelect),
    h('span', { class: 'muted grow' }, 'newest first, across every workflow and action'));
}

// One page of runs; `back` holds the cursors of the pages before (for "previous").
async function showPage(box, chosen, back, cursor) {
  clear(box).append(h('div', { class: 'muted' }, 'loading…'));
  let page;
  try {
    page = await api('/api/runs', { params: { ...chosen, limit: PAGE, cursor } });
  } catch (e) {
    clear(box).append(errorBox(e));
    return;
  }
  const all = chosen.kind === 'all';
  const rows = table([
    ['run', (r) => h('a', { class: 'run-link mono', href: link(`/runs/${r.kind}/${encodeURIComponent(r.run_id)}`) }, r.run_id)],
    all ? ['kind', (r) => r.kind] : null,
    [all ? 'name' : r0(chosen), (r) => r.name],
    ['status', (r) => [badge(r.status), r.dead_lettered ? [' ', badge('dead letter', 'bad')] : null]],
    [all ? 'step / attempt' : chosen.kind === 'action' ? 'attempt' : 'step',
      (r) => (r.kind === 'action' ? r.attempt : r.step || '')],
    ['created', (r) => time(r.created_at_ms)],
    ['updated', (r) => ago(r.updated_at_ms)],
  ].filter(Boolean), page.runs, {
    empty: page.next_cursor ? 'none on this page (the next may hold some)' : 'no runs',
    rowAttrs: (r) => ({ class: 'run-row', 'data-run': r.run_id }),
  });
  const pager = h('div', { class: 'pager' },
    h('button', {
      disabled: !back.length,
      onclick: () => showPage(box, chosen, back.slice(0, -1), back[back.length - 1]),
    }, '← Previous'),
    h('button', {
      id: 'runs-next',
      disabled: !page.next_cursor,
      onclick: () => showPage(box, chosen, [...back, cursor], page.next_cursor),
    }, 'Next →'),
    page.scanned !== null && page.scanned !== undefined ? h('span', {}, `${page.scanned} runs looked at`) : null,
    page.workflows_left_out ? h('span', { id: 'runs-left-out' },
      `the runs of ${page.workflows_left_out} more workflows are not merged here: choose the workflow`) : null);
  clear(box).append(rows, pager);
}

function r0(chosen) {
  return chosen.kind === 'action' ? 'action' : 'workflow';
}
