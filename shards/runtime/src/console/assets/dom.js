// Small helpers to build the page: elements, times, values, tables, messages.

// An element: `h('a', {href: '#/'}, 'text', child)`. `on*` attributes add listeners;
// `class` and `data-*` are attributes. Children may be strings, nodes, arrays or null.
export function h(tag, attrs, ...children) {
  const el = tag.startsWith('svg:')
    ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

// Appends children to `el` as `h` does (arrays flattened, null left out); returns `el`.
export function add(el, ...children) {
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

export function time(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  return isNaN(d) ? String(ms) : d.toLocaleString(undefined, { hour12: false });
}

// "3 s ago", "in 2 min".
export function ago(ms, now = Date.now()) {
  if (!ms) return '–';
  const s = Math.round((now - ms) / 1000);
  const abs = Math.abs(s);
  const text = abs < 60 ? `${abs} s` : abs < 3600 ? `${Math.round(abs / 60)} min`
    : abs < 86400 ? `${Math.round(abs / 3600)} h` : `${Math.round(abs / 86400)} d`;
  return s >= 0 ? `${text} ago` : `in ${text}`;
}

export function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function num(n, digits = 0) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  return Number(n).toLocaleString(undefined, { maximumFractionDigits: digits });
}

export function badge(text, kind) {
  return h('span', { class: `badge ${kind || text || ''}` }, text || '–');
}

// A JSON value shown as such.
export function pre(value) {
  const text = value === undefined || value === null ? 'null'
    : typeof value === 'string' ? value : JSON.stringify(value, null, 2);
  return h('pre', {}, text);
}

// A table: `columns` are [heading, (row) => cell, 'num'?].
export function table(columns, rows, { empty = 'nothing here', rowAttrs } = {}) {
  if (!rows.length) return h('div', { class: 'empty panel' }, empty);
  return h('table', {},
    h('thead', {}, h('tr', {}, columns.map(([title, , cls]) => h('th', { class: cls }, title)))),
    h('tbody', {}, rows.map((r) => h('tr', rowAttrs ? rowAttrs(r) : {},
      columns.map(([, cell, cls]) => h('td', { class: cls }, cell(r)))))));
}

export function errorBox(error) {
  return h('div', { class: 'error' }, error && error.message ? error.message : String(error));
}

// A short message in the corner.
export function toast(text, kind) {
  const box = document.getElementById('toast');
  const msg = h('div', { class: `msg ${kind || ''}` }, text);
  box.append(msg);
  setTimeout(() => msg.remove(), 5000);
}

// Runs `fn` now and every `ms` until the returned stop is called; a failure shows in
// `onError` and polling goes on.
export function every(ms, fn, onError) {
  let stopped = false;
  let timer = null;
  const tick = async () => {
    try {
      await fn();
    } catch (e) {
      if (onError) onError(e);
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

// A route's link: `#/runs?kind=action&name=x`.
export function link(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v) q.set(k, v);
  const s = q.toString();
  return `#${path}${s ? '?' + s : ''}`;
}
