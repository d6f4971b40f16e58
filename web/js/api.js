// The gateway's API, with the session's key as a bearer token. Server-Sent
// Events are read with fetch() streaming, since EventSource cannot send
// an Authorization header: the key never goes into a URL.

const KEY = 'bulkaction.key';

export const session = {key: sessionStorage.getItem(KEY) || '', admin: false, tenant: ''};

let onUnauthorized = () => {};
export function handleUnauthorized(f) { onUnauthorized = f; }

export function setKey(k) {
  session.key = k;
  if (k) sessionStorage.setItem(KEY, k); else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || 'HTTP ' + status);
    this.status = status;
    this.problem = problem;
  }
}

function headers(extra) {
  return Object.assign({Authorization: 'Bearer ' + session.key}, extra);
}

// api calls the gateway and returns the decoded JSON body.
export async function api(path, {method = 'GET', body, signal} = {}) {
  const h = headers({Accept: 'application/json'});
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const r = await fetch(path, {method, headers: h, signal, cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body)});
  let data = null;
  if ((r.headers.get('Content-Type') || '').includes('json')) data = await r.json().catch(() => null);
  if (r.status === 401) { onUnauthorized(); throw new ApiError(401, data); }
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

// withTenant adds ?tenant= (every group route takes it: a tenant key is
// answered 404 for another tenant's group).
export function groupPath(tenant, id, rest, query) {
  const q = new URLSearchParams(query || {});
  q.set('tenant', tenant);
  return '/v1/groups/' + encodeURIComponent(id) + (rest || '') + '?' + q.toString();
}

const sleep = (ms, signal) => new Promise(res => {
  const t = setTimeout(res, ms);
  signal && signal.addEventListener('abort', () => { clearTimeout(t); res(); }, {once: true});
});

// stream reads a text/event-stream with fetch. onEvent({id, event, data})
// returns true to end the stream (a group's final event). It reconnects
// with Last-Event-ID after a drop, until signal aborts. onState(bool)
// tells whether the stream is up; onGone() is called on a 404.
export function stream(path, {signal, onEvent, onState = () => {}, onGone = () => {}}) {
  let last = '';
  (async () => {
    let delay = 500;
    while (!signal.aborted) {
      let finished = false;
      try {
        const h = headers({Accept: 'text/event-stream'});
        if (last) h['Last-Event-ID'] = last;
        const r = await fetch(path, {headers: h, signal, cache: 'no-store'});
        if (r.status === 401) { onUnauthorized(); return; }
        if (r.status === 404) { onState(false); onGone(); return; }
        if (!r.ok) throw new ApiError(r.status, null);
        onState(true);
        delay = 500;
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const {value, done} = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const ev = parse(block);
            if (!ev) continue;
            if (ev.id) last = ev.id;
            if (onEvent(ev) === true) finished = true;
          }
        }
      } catch (e) {
        if (signal.aborted) return;
      }
      onState(false);
      if (finished || signal.aborted) return;
      await sleep(delay, signal);
      delay = Math.min(delay * 2, 8000);
    }
  })();
}

function parse(block) {
  let id = '', event = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':') || line === '') continue;
    const c = line.indexOf(':');
    const f = c < 0 ? line : line.slice(0, c);
    let v = c < 0 ? '' : line.slice(c + 1);
    if (v.startsWith(' ')) v = v.slice(1);
    if (f === 'id') id = v;
    else if (f === 'event') event = v;
    else if (f === 'data') data.push(v);
  }
  if (data.length === 0) return null;
  try {
    return {id, event, data: JSON.parse(data.join('\n'))};
  } catch {
    return null;
  }
}
