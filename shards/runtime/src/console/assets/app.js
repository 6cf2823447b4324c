// The console's entry: the hash router (`#/runs?kind=action`), the namespace box and the
// token dialog. Each page is a function that renders into `main` and returns its stop
// (polls end when the page is left).

import { namespace, onTokenNeeded, setNamespace, setToken } from './api.js';
import { clear, errorBox } from './dom.js';
import { overviewPage } from './overview.js';
import { runsPage } from './runs.js';
import { runPage } from './run.js';
import {
  actionsPage, schedulesPage, streamsPage, workersPage, workflowPage, workflowsPage,
} from './catalog.js';

const routes = [
  [/^\/?$/, 'overview', () => overviewPage],
  [/^\/runs$/, 'runs', () => runsPage],
  [/^\/runs\/(workflow|action)\/(.+)$/, 'runs', (m) => (main, params) => runPage(main, m[1], m[2], params)],
  [/^\/workflows$/, 'workflows', () => workflowsPage],
  [/^\/workflows\/(.+)$/, 'workflows', (m) => (main, params) => workflowPage(main, m[1], params)],
  [/^\/actions$/, 'actions', () => actionsPage],
  [/^\/workers$/, 'workers', () => workersPage],
  [/^\/streams$/, 'streams', () => streamsPage],
  [/^\/schedules$/, 'schedules', () => schedulesPage],
];

let stopPage = null;

function route() {
  if (stopPage) stopPage();
  stopPage = null;
  const main = clear(document.getElementById('main'));
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  const params = Object.fromEntries(new URLSearchParams(query || ''));
  for (const [pattern, page, make] of routes) {
    const m = path.match(pattern);
    if (!m) continue;
    for (const a of document.querySelectorAll('#nav a')) {
      a.classList.toggle('active', a.dataset.page === page);
    }
    const decoded = m.map((part) => (part ? decodeURIComponent(part) : part));
    try {
      stopPage = make(decoded)(main, params) || null;
    } catch (e) {
      main.append(errorBox(e));
    }
    return;
  }
  main.append(errorBox(`no page ${path}`));
}

// Asks for a token (the API answered 401); resolves once one is given.
function askForToken(message) {
  const dialog = document.getElementById('token-dialog');
  const input = document.getElementById('token-input');
  document.getElementById('token-error').textContent = message || '';
  return new Promise((resolve) => {
    const form = document.getElementById('token-form');
    const done = (event) => {
      event.preventDefault();
      if (!input.value) return;
      setToken(input.value.trim());
      input.value = '';
      form.removeEventListener('submit', done);
      dialog.close();
      resolve();
    };
    form.addEventListener('submit', done);
    if (!dialog.open) dialog.showModal();
    input.focus();
  });
}

function start() {
  onTokenNeeded(askForToken);
  const box = document.getElementById('namespace');
  box.value = namespace();
  box.addEventListener('change', () => {
    setNamespace(box.value.trim());
    box.value = namespace();
    route();
  });
  window.addEventListener('hashchange', route);
  route();
}

start();
