// A run whole: a workflow run's input, output, state, steps (and their attempts), its
// history timeline and its workflow's graph with the run's steps marked; an action run's
// attempts, input, output and error. And what a user does to it: signal, cancel, pause,
// resume or continue a workflow run, cancel an action run, retry a dead-lettered one.
// Polled while not final.

import { api } from './api.js';
import { add, ago, badge, clear, errorBox, every, h, link, pre, table, time, toast } from './dom.js';
import { drawGraph } from './graph.js';

const POLL_MS = 1500;
const FINAL = new Set(['completed', 'failed', 'cancelled', 'timed_out']);

export function runPage(main, kind, id) {
  const root = h('div', { id: 'run', 'data-kind': kind });
  main.append(root);
  const path = `/api/${kind}-runs/${encodeURIComponent(id)}`;
  const state = { graphKey: null, graph: null, actions: null, final: false, refresh: () => {} };
  const show = async () => {
    if (state.final) return;
    const run = await api(path);
    if (kind === 'workflow') await showWorkflowRun(root, run, path, state);
    else showActionRun(root, run, path, state);
    state.final = FINAL.has(run.status);
  };
  const failed = (e) => clear(root).append(errorBox(e));
  // After an action on the run: shown again at once, not at the next poll.
  state.refresh = () => show().catch(failed);
  const stop = every(POLL_MS, show, failed);
  return () => stop();
}

function facts(pairs) {
  return h('dl', { class: 'facts' },
    pairs.filter(([, v]) => v !== null && v !== undefined && v !== '').map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// The parts that are rebuilt on each poll; the forms (signal, cancel) stay as typed.
function sections(root, header, actions) {
  if (!root.querySelector('.run-body')) {
    clear(root).append(h('div', { class: 'title-row run-title' }), h('div', { class: 'run-actions' }),
      h('div', { class: 'run-body' }));
  }
  add(clear(root.querySelector('.run-title')), header);
  const box = root.querySelector('.run-actions');
  if (actions && !box.firstChild) box.append(actions);
  if (!actions) clear(box);
  return clear(root.querySelector('.run-body'));
}

async function showWorkflowRun(root, run, path, state) {
  const header = [h('h1', {}, 'Workflow run ', h('span', { class: 'mono' }, run.run_id)),
    h('span', { id: 'run-status' }, badge(run.status)), controlButtons(run, path, state)];
  const final = FINAL.has(run.status);
  const body = sections(root, header, final ? null : workflowActions(run, path, state));
  add(body, h('div', { class: 'grid2' },
    h('div', { class: 'panel' }, facts([
      ['workflow', h('a', { href: link(`/workflows/${encodeURIComponent(run.name)}`, { version: run.version }) },
        `${run.name} (version ${run.version})`)],
      ['status', run.status],
      ['current step', run.current_step],
      ['waiting for', run.waiting_for],
      ['branches', run.branches.length ? run.branches.map((b) => `${b.step}: ${b.waiting_for || b.status}`).join('; ') : null],
      ['terminal', run.terminal],
      ['error', run.error],
      ['parent run', run.parent_run_id ? h('a', { href: link(`/runs/workflow/${encodeURIComponent(run.parent_run_id)}`) }, run.parent_run_id) : null],
      ['idempotency key', run.idempotency_key],
      ['created', time(run.created_at_ms)],
      ['updated', `${time(run.updated_at_ms)} (${ago(run.updated_at_ms)})`],
    ])),
    h('div', { class: 'panel' }, h('h2', {}, 'Steps'), table([
      ['step', (s) => s.name],
      ['outcome', (s) => s.outcome || ''],
      ['attempts', (s) => s.executions, 'num'],
    ], run.steps, { empty: 'no step ran yet' }))),
  h('div', { class: 'grid2' },
    h('div', {}, h('h2', {}, 'Input'), pre(run.input)),
    h('div', {}, h('h2', {}, 'Output'), pre(run.output))),
  run.state ? [h('h2', {}, 'State'), pre(run.state)] : null,
  run.search_attributes ? [h('h2', {}, 'Search attributes'), pre(run.search_attributes)] : null);
  const graphBox = h('div', { class: 'panel graph-box', id: 'run-graph' });
  const historyBox = h('div', { class: 'panel', id: 'run-history' });
  body.append(h('h2', {}, 'Graph'), graphBox, h('h2', {}, 'History'), historyBox);
  const [graph, history] = await Promise.all([
    definitionGraph(run, state).catch((e) => e),
    historyEvents(path).catch((e) => e),
  ]);
  if (graph instanceof Error) graphBox.append(errorBox(graph));
  else if (graph.error) graphBox.append(h('div', { class: 'muted' }, graph.error));
  else graphBox.append(drawGraph(graph, marks(run)));
  if (history instanceof Error) historyBox.append(errorBox(history));
  else historyBox.append(timeline(history));
}

async function definitionGraph(run, state) {
  const key = `${run.name}@${run.version}`;
  if (state.graphKey !== key) {
    const def = await api(`/api/workflows/${encodeURIComponent(run.name)}`, { params: { version: run.version } });
    state.graph = def.graph;
    state.graphKey = key;
  }
  return state.graph;
}

function marks(run) {
  const visited = new Set(run.steps.map((s) => s.name));
  return { visited, current: run.status && !FINAL.has(run.status) ? run.current_step : null, reached: run.terminal };
}

// Every event, a page at a time (bounded: at most 20 pages of 500).
async function historyEvents(path) {
  const events = [];
  let after = null;
  for (let page = 0; page < 20; page++) {
    const doc = await api(`${path}/history`, { params: { after } });
    events.push(...doc.events);
    if (doc.next_after === null || doc.next_after === undefined) return events;
    after = doc.next_after;
  }
  return events;
}

function eventClass(type) {
  if (type.includes('signal')) return 'signal';
  if (/failed|timed_out|cancelled|timeout|exhausted/.test(type)) return 'bad';
  if (type.startsWith('workflow_completed')) return 'end';
  return '';
}

function timeline(events) {
  if (!events.length) return h('div', { class: 'empty' }, 'no events yet');
  const first = events[0].at_ms;
  return h('ol', { class: 'timeline' }, events.map((e) => h('li', {
    class: `event ${eventClass(e.type)}`, 'data-type': e.type, 'data-seq': e.seq,
  },
  h('span', { class: 'type' }, e.type),
  e.step ? [' ', h('span', { class: 'mono' }, e.step)] : null,
  h('span', { class: 'when' }, `${time(e.at_ms)} (+${((e.at_ms - first) / 1000).toFixed(3)} s)`),
  e.detail ? h('div', { class: 'detail' }, e.detail) : null)));
}

// What `continue` starts again: a step waiting for an action run or a child run, or
// sleeping before a retry (the engine's `stuck_steps`, as `waiting_for` words it).
const CONTINUABLE = /^(action run|workflow run|timer at) /;

// Pause or resume, and continue when a step is stuck where continue applies: beside the
// run's title, rebuilt on each poll (what applies changes as the run moves).
function controlButtons(run, path, state) {
  if (FINAL.has(run.status)) return null;
  const waits = [run.waiting_for, ...run.branches.map((b) => b.waiting_for)];
  const buttons = [run.status === 'on_hold'
    ? controlButton('Resume', 'resume', path, state, 'primary')
    : controlButton('Pause', 'pause', path, state, '')];
  if (waits.some((w) => w && CONTINUABLE.test(w))) {
    buttons.push(controlButton('Continue', 'continue', path, state, ''));
  }
  return h('span', { class: 'buttons run-control', id: 'run-control' }, buttons);
}

const CONTROL_DONE = { pause: 'paused: no step starts until resumed', resume: 'resumed', continue: 'continued' };

function controlButton(text, what, path, state, cls) {
  const button = h('button', { class: cls, id: `run-${what}`, title: `flo workflow ${what}` }, text);
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await api(`${path}/${what}`, { method: 'POST', body: {} });
      toast(CONTROL_DONE[what]);
      state.final = false;
      state.refresh();
    } catch (e) {
      toast(e.message, 'bad');
      button.disabled = false;
    }
  });
  return button;
}

// The signal and cancel forms of a run that is not final.
function workflowActions(run, path, state) {
  const waited = /^signal (.+)$/.exec(run.waiting_for || '');
  const type = h('input', { id: 'signal-type', value: waited ? waited[1] : '', placeholder: 'signal type' });
  const payload = h('textarea', { id: 'signal-payload', spellcheck: 'false' }, '{}');
  const reason = h('input', { id: 'cancel-reason', placeholder: 'reason (optional)' });
  const send = async (button, what, body) => {
    let parsed;
    button.disabled = true;
    try {
      parsed = body();
      await api(`${path}/${what}`, { method: 'POST', body: parsed });
      toast(what === 'signal' ? `signal ${parsed.type} sent` : 'cancel asked');
      state.final = false;
      state.refresh();
    } catch (e) {
      toast(e.message, 'bad');
    } finally {
      button.disabled = false;
    }
  };
  const signalButton = h('button', { class: 'primary', id: 'signal-send' }, 'Send signal');
  signalButton.addEventListener('click', () => send(signalButton, 'signal', () => {
    let value;
    try {
      value = JSON.parse(payload.value || '{}');
    } catch (e) {
      throw new Error(`the payload is not JSON: ${e.message}`);
    }
    return { type: type.value.trim(), payload: value };
  }));
  const cancelButton = h('button', { class: 'danger', id: 'cancel-run' }, 'Cancel run');
  cancelButton.addEventListener('click', () => send(cancelButton, 'cancel',
    () => ({ reason: reason.value.trim() || null })));
  return h('div', { class: 'grid2' },
    h('div', { class: 'panel', id: 'signal-form' }, h('h2', {}, 'Signal'),
      h('label', {}, 'type ', type), h('div', { class: 'muted' }, 'payload (JSON)'), payload,
      h('div', { class: 'buttons' }, signalButton)),
    h('div', { class: 'panel' }, h('h2', {}, 'Cancel'), reason, h('div', { class: 'buttons' }, cancelButton)));
}

function showActionRun(root, run, path, state) {
  const header = [h('h1', {}, 'Action run ', h('span', { class: 'mono' }, run.run_id)),
    h('span', { id: 'run-status' }, badge(run.status)),
    run.dead_lettered ? badge('dead letter', 'bad') : null];
  const final = FINAL.has(run.status);
  const buttons = [];
  if (!final) buttons.push(actionButton('Cancel run', 'cancel', path, state, 'danger'));
  if (run.dead_lettered) buttons.push(actionButton('Retry (redrive)', 'retry', path, state, 'primary'));
  const actions = buttons.length ? h('div', { class: 'buttons' }, buttons) : null;
  const box = root.querySelector('.run-actions');
  if (box) clear(box);
  const body = sections(root, header, actions);
  add(body, h('div', { class: 'panel' }, facts([
    ['action', h('a', { href: link('/runs', { kind: 'action', name: run.name }) }, `${run.name} (version ${run.action_version})`)],
    ['status', run.status],
    ['attempt', run.attempt],
    ['outcome', run.outcome],
    ['error', run.error],
    ['error code', run.error_code],
    ['workflow run', run.workflow_run_id ? h('a', { href: link(`/runs/workflow/${encodeURIComponent(run.workflow_run_id)}`) }, run.workflow_run_id) : null],
    ['priority', run.priority],
    ['idempotency key', run.idempotency_key],
    ['created', time(run.created_at_ms)],
    ['updated', `${time(run.updated_at_ms)} (${ago(run.updated_at_ms)})`],
    ['available at', run.status === 'pending' ? time(run.available_at_ms) : null],
  ])), h('div', { class: 'grid2' },
    h('div', {}, h('h2', {}, 'Input'), pre(run.input)),
    h('div', {}, h('h2', {}, 'Output'), pre(run.output))),
  run.labels ? [h('h2', {}, 'Labels'), pre(run.labels)] : null);
  // Final runs are not polled; a retried one is polled again.
  state.final = final && !run.dead_lettered;
}

function actionButton(text, what, path, state, cls) {
  const button = h('button', { class: cls, id: `run-${what}` }, text);
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await api(`${path}/${what}`, { method: 'POST' });
      toast(what === 'retry' ? 'queued again' : 'cancel asked');
      state.final = false;
      state.refresh();
    } catch (e) {
      toast(e.message, 'bad');
      button.disabled = false;
    }
  });
  return button;
}
