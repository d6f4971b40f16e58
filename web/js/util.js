// Small DOM and formatting helpers. Values from the API only ever reach
// the page through textContent and attributes, never as HTML.

// el builds an element: el('div', {class: 'x', onclick: f}, child, 'text').
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k === 'style') e.style.cssText = v; // CSSOM: allowed by the page's CSP, a style attribute is not
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// setText changes an element's text only when it differs (no needless
// layout work on every tick).
export function setText(e, s) {
  s = s === undefined || s === null ? '' : String(s);
  if (e.textContent !== s) e.textContent = s;
}

const nf = new Intl.NumberFormat();
export function num(n) { return n === null || n === undefined ? '—' : nf.format(n); }

export function rate(r) {
  if (r === null || r === undefined) return '—';
  if (r >= 100) return nf.format(Math.round(r)) + '/s';
  return (Math.round(r * 10) / 10).toFixed(1) + '/s';
}

export function pct(f) {
  if (f === null || f === undefined) return '—';
  return (Math.round(f * 1000) / 10).toFixed(1) + '%';
}

export function dur(sec) {
  if (sec === null || sec === undefined) return '—';
  sec = Math.max(0, Math.round(sec));
  if (sec < 60) return sec + 's';
  const m = Math.floor(sec / 60), s = sec % 60;
  if (m < 60) return m + 'm' + String(s).padStart(2, '0') + 's';
  const h = Math.floor(m / 60);
  return h + 'h' + String(m % 60).padStart(2, '0') + 'm';
}

export function time(t) {
  if (!t) return '—';
  const d = new Date(t);
  return d.toLocaleTimeString([], {hour: '2-digit', minute: '2-digit', second: '2-digit'});
}

export function ago(t) {
  if (!t) return '—';
  const s = (Date.now() - new Date(t).getTime()) / 1000;
  return s < 0 ? 'in ' + dur(-s) : dur(s) + ' ago';
}

// bar returns a progress bar element; update it with setBar.
export function bar(cls) {
  const b = el('div', {class: 'bar ' + (cls || ''), role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100});
  b.append(el('span'));
  return b;
}

export function setBar(b, frac, label) {
  const p = Math.max(0, Math.min(1, frac || 0)) * 100;
  const w = p.toFixed(1) + '%';
  const s = b.firstChild;
  if (s.style.width !== w) s.style.width = w;
  b.setAttribute('aria-valuenow', Math.round(p));
  if (label) b.setAttribute('aria-label', label);
}

export const ENDED = new Set(['COMPLETED', 'CANCELLED']);

// ordinal: 1st, 2nd, 3rd, 4th, 11th, 21st...
export function ordinal(n) {
  const t = n % 100, u = n % 10;
  return nf.format(n) + (t >= 11 && t <= 13 ? 'th' : u === 1 ? 'st' : u === 2 ? 'nd' : u === 3 ? 'rd' : 'th');
}

// place says where a waiting group stands, in words: the tenant's place
// among the tenants waiting for the rate limit (the fair queue serves
// tenants in turn) and the group's among its tenant's waiting groups.
// Returns {tenant, group, sentence}, or null when it does not wait.
export function place(status, tenant) {
  if (!status || !status.position) return null;
  const tp = status.tenantPosition, p = status.position;
  const t = tp === 1 ? 'tenant next in line' : `tenant ${ordinal(tp)} in line`;
  const g = p === 1 ? 'its next group' : `its ${ordinal(p)} group`;
  const sentence = `${tenant} is ${tp === 1 ? 'next' : ordinal(tp)} in line of ${num(status.waitingTenants)} waiting tenant${status.waitingTenants === 1 ? '' : 's'}, ` +
    `and this is ${p === 1 ? 'its next group' : 'its ' + ordinal(p) + ' waiting group'} (${num(status.waitingGroups)} group${status.waitingGroups === 1 ? '' : 's'} wait in all).`;
  return {tenant: t, group: g, sentence};
}

// holds says why a group waits, in one line.
export function holds(status) {
  if (!status || !status.waiting || status.waiting.length === 0) return '';
  return status.waiting.map(h => h.detail || h.reason).join('; ');
}

let toastTimer;
export function toast(msg) {
  const t = document.getElementById('toast');
  t.textContent = msg;
  t.classList.add('show');
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => t.classList.remove('show'), 3500);
}

// confirm asks in the page's dialog; resolves true on Confirm.
export function confirmDialog(text, yes) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-yes').textContent = yes || 'Confirm';
  return new Promise(resolve => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), {once: true});
    d.returnValue = '';
    d.showModal();
    document.getElementById('confirm-no').focus();
  });
}

// setLive shows whether the current view's live updates are flowing.
export function setLive(on) {
  const l = document.getElementById('live');
  l.classList.toggle('on', !!on);
  l.title = on ? 'live: receiving updates' : 'not live: reconnecting';
}
