// The dashboard's shell: sign-in, hash routing between the views, the
// live indicator. Each view module exports mount(root, ctx) returning an
// unmount function; a view stops its streams and timers when unmounted.
import {api, session, setKey, handleUnauthorized} from './api.js';
import {setText, setLive} from './util.js';
import * as overview from './overview.js';
import * as tenants from './tenants.js';
import * as groups from './groups.js';
import * as detail from './detail.js';

const views = {overview, tenants, groups, group: detail};
const $ = id => document.getElementById(id);
let unmount = null;
let checked = false;

function showLogin(message) {
  if (unmount) { unmount(); unmount = null; }
  $('view').replaceChildren();
  $('nav').hidden = true;
  $('who').hidden = true;
  $('login').hidden = false;
  setText($('login-error'), message || '');
  $('key').focus();
}

async function signIn(key) {
  setKey(key);
  try {
    const ov = await api('/v1/overview');
    session.admin = ov.scope === 'system';
    session.tenant = ov.tenant || '';
    checked = true;
    return true;
  } catch (e) {
    setKey('');
    checked = false;
    showLogin(e.status === 401 ? 'That key is not known to this gateway.' : 'Could not sign in: ' + e.message);
    return false;
  }
}

function route() {
  if (!session.key || !checked) { showLogin(); return; }
  $('login').hidden = true;
  $('nav').hidden = false;
  $('who').hidden = false;
  setText($('who-name'), session.admin ? 'admin' : 'tenant ' + session.tenant);
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  let name = parts[0] || 'overview';
  if (!views[name]) name = 'overview';
  for (const a of document.querySelectorAll('#nav a')) {
    const on = a.dataset.view === name || (name === 'group' && a.dataset.view === 'groups');
    if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  if (unmount) unmount();
  setLive(false);
  const root = $('view');
  root.replaceChildren();
  root.dataset.view = name;
  unmount = views[name].mount(root, {params: parts.slice(1), query: new URLSearchParams(query || '')}) || null;
  document.title = (name === 'group' ? parts.slice(1).join('/') : name[0].toUpperCase() + name.slice(1)) + ' · bulkaction';
}

handleUnauthorized(() => {
  setKey('');
  checked = false;
  showLogin('The key was refused: sign in again.');
});

$('login-form').addEventListener('submit', async e => {
  e.preventDefault();
  const key = $('key').value.trim();
  if (!key) return;
  $('login-submit').disabled = true;
  const ok = await signIn(key);
  $('login-submit').disabled = false;
  if (ok) {
    $('key').value = '';
    route();
    $('main').focus();
  }
});

$('logout').addEventListener('click', () => {
  setKey('');
  checked = false;
  session.admin = false;
  session.tenant = '';
  showLogin();
});

window.addEventListener('hashchange', route);

// Keyboard: "g" then o / t / l goes to a view; "/" focuses a view's filter.
let pendingG = false;
document.addEventListener('keydown', e => {
  const t = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey || (t && (t.tagName === 'INPUT' || t.tagName === 'SELECT' || t.tagName === 'TEXTAREA'))) return;
  if (pendingG) {
    pendingG = false;
    const to = {o: 'overview', t: 'tenants', l: 'groups'}[e.key];
    if (to) { location.hash = '#/' + to; e.preventDefault(); }
    return;
  }
  if (e.key === 'g') { pendingG = true; setTimeout(() => { pendingG = false; }, 1000); return; }
  if (e.key === '/') {
    const f = document.querySelector('[data-filter]');
    if (f) { f.focus(); e.preventDefault(); }
  }
});

(async () => {
  // A link ending in #key=<key> (as `bulkaction dev` prints) signs in with
  // that key, which is then taken out of the address bar and the history.
  const linked = new URLSearchParams(location.hash.slice(1)).get('key');
  if (linked) {
    history.replaceState(null, '', location.pathname + location.search);
    setKey(linked);
  }
  if (session.key && !(await signIn(session.key))) return;
  route();
})();
