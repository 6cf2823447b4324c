// The console's calls to its JSON API (same origin, `/api/...`). With an auth file the API
// wants `Authorization: Bearer TOKEN`: on a 401 the page asks for a token once, keeps it in
// this tab's session storage and asks again.

const TOKEN_KEY = 'flo.token';
const NAMESPACE_KEY = 'flo.namespace';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function namespace() {
  return sessionStorage.getItem(NAMESPACE_KEY) || 'default';
}

export function setNamespace(ns) {
  sessionStorage.setItem(NAMESPACE_KEY, ns || 'default');
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// Called when the API answers 401: resolves once the user gave a token.
let askForToken = async () => { throw new ApiError(401, 'unauthenticated', 'a token is needed'); };
export function onTokenNeeded(ask) {
  askForToken = ask;
}

async function send(path, method, params, body) {
  const url = new URL(path, location.origin);
  url.searchParams.set('ns', namespace());
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '' && v !== false) url.searchParams.set(k, String(v));
  }
  const headers = { Accept: 'application/json' };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let doc = null;
  try {
    doc = await response.json();
  } catch (_) {
    doc = null;
  }
  return { response, doc };
}

// `GET`s (no body) or `POST`s `path`; the answer's JSON, or an `ApiError`.
export async function api(path, { method = 'GET', params, body } = {}) {
  let { response, doc } = await send(path, method, params, body);
  if (response.status === 401) {
    await askForToken(doc && doc.error ? doc.error.message : '');
    ({ response, doc } = await send(path, method, params, body));
  }
  if (!response.ok) {
    const error = (doc && doc.error) || {};
    throw new ApiError(response.status, error.code || 'http_' + response.status,
      error.message || response.statusText || 'the request failed');
  }
  return doc;
}
