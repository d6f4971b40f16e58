// Groups: a live table of every group the key reaches, newest first,
// filtered by tenant (admin) and state. The list is polled every 2 s (one
// GET /v1/groups?limit=1000 page per thousand groups, the cheap summary
// view); the live status of a group (rate, ETA, position, congestion, why
// it waits) is read only for the rows on screen that have not ended,
// since it costs a few Redis round trips per group. Only the visible rows
// exist in the DOM (fixed-height rows, absolutely placed), so a thousand
// groups or ten render the same few dozen elements.
import {api, session, groupPath} from './api.js';
import {el, setText, num, rate, dur, bar, setBar, holds, place, ENDED, toast, confirmDialog, setLive} from './util.js';

const STATES = ['CREATED', 'RUNNING', 'PAUSED', 'AGGREGATING', 'COMPLETED', 'CANCELLED'];
const MAX_GROUPS = 5000;
const POLL_MS = 2000;
const STATUS_TTL = 2000;
const OVERSCAN = 4;

// stats of the last load and render, for the end-to-end test and for
// anyone curious (window.__bulkaction.groups).
const stats = (window.__bulkaction = window.__bulkaction || {}).groups = {loads: 0, renders: 0, lastLoadMs: 0, lastRenderMs: 0, rows: 0};

export function mount(root, {query}) {
  const ac = new AbortController();
  let tenant = session.admin ? (query.get('tenant') || '') : '';
  let state = STATES.includes(query.get('state')) ? query.get('state') : '';
  let groups = [];
  const status = new Map(); // key -> {view, at}
  const busy = new Set();

  const tenantIn = el('input', {id: 'filter-tenant', list: 'tenant-list', value: tenant, placeholder: 'every tenant', 'data-filter': true,
    spellcheck: 'false', autocapitalize: 'off', size: 14});
  const tenantList = el('datalist', {id: 'tenant-list'});
  const stateSel = el('select', {id: 'filter-state', 'data-filter': session.admin ? null : true},
    el('option', {value: '', text: 'every state'}), ...STATES.map(s => el('option', {value: s, text: s})));
  stateSel.value = state;
  const count = el('span', {class: 'count', id: 'groups-count', 'aria-live': 'polite'});
  const spacer = el('div', {class: 'gspacer'});
  const body = el('div', {class: 'gbody', id: 'groups-body', tabindex: 0, role: 'rowgroup', 'aria-label': 'groups'}, spacer);
  const empty = el('p', {class: 'empty', hidden: true, text: 'No group matches.'});
  root.append(el('h1', {text: 'Groups'}),
    el('form', {class: 'filters', onsubmit: e => e.preventDefault()},
      session.admin ? el('label', {}, 'Tenant', tenantIn, tenantList) : null,
      el('label', {}, 'State', stateSel), count),
    el('div', {class: 'gtable', role: 'table', 'aria-label': 'Groups'},
      el('div', {class: 'ghead', role: 'row'}, ...['Group', 'State', 'Progress', 'Rate', 'ETA', 'Position', 'Congestion', 'Why waiting', ''].map(
        (t, i) => el('div', {role: 'columnheader', class: [3, 4].includes(i) ? 'num' : '', text: t}))),
      body, empty));

  const key = g => g.tenant + '/' + g.groupId;
  const rowH = () => parseFloat(getComputedStyle(document.documentElement).getPropertyValue('--row-h')) || 52;

  // rows on screen, by index
  const live = new Map();
  const spare = [];

  function makeRow() {
    const c = {};
    c.link = el('a');
    c.tn = el('span', {class: 'tn'});
    c.badge = el('span', {class: 'badge'});
    c.bar = bar();
    c.ptxt = el('span', {class: 'txt'});
    c.rate = el('span'); c.eta = el('span'); c.pos1 = el('span', {class: 'p1'}); c.pos2 = el('span', {class: 'p2'}); c.cong = el('span');
    c.pause = el('button', {type: 'button', class: 'small secondary', 'data-act': 'pause', text: 'Pause'});
    c.cancel = el('button', {type: 'button', class: 'small secondary', 'data-act': 'cancel', text: 'Cancel'});
    c.retry = el('button', {type: 'button', class: 'small secondary', 'data-act': 'retry', text: 'Retry failed'});
    c.root = el('div', {class: 'grow', role: 'row'},
      el('div', {class: 'gid', role: 'cell'}, c.link, c.tn),
      el('div', {class: 'st', role: 'cell'}, c.badge),
      el('div', {class: 'prog', role: 'cell'}, c.bar, c.ptxt),
      el('div', {class: 'num rate', role: 'cell'}, el('span', {class: 'c-label', text: 'rate '}), c.rate),
      el('div', {class: 'num eta', role: 'cell'}, el('span', {class: 'c-label', text: 'ETA '}), c.eta),
      c.pos = el('div', {class: 'pos', role: 'cell'}, c.pos1, c.pos2),
      el('div', {class: 'cong', role: 'cell'}, c.cong),
      c.why = el('div', {class: 'why', role: 'cell'}),
      el('div', {class: 'acts', role: 'cell'}, c.pause, c.cancel, c.retry));
    c.root._c = c;
    return c;
  }

  function fill(c, g, i) {
    const k = key(g);
    c.key = k;
    c.root.dataset.key = k;
    c.root.dataset.state = g.state;
    c.root.setAttribute('aria-rowindex', i + 1);
    const href = '#/group/' + encodeURIComponent(g.tenant) + '/' + encodeURIComponent(g.groupId);
    if (c.link.getAttribute('href') !== href) c.link.setAttribute('href', href);
    setText(c.link, g.groupId);
    setText(c.tn, g.tenant);
    setText(c.badge, g.state);
    if (c.badge.className !== 'badge ' + g.state) c.badge.className = 'badge ' + g.state;
    const total = g.total ?? g.jobs;
    const done = g.done + g.cancelled;
    setBar(c.bar, total ? done / total : (ENDED.has(g.state) ? 1 : 0), 'progress of ' + g.groupId);
    c.bar.classList.toggle('ok', g.state === 'COMPLETED');
    c.bar.classList.toggle('gone', g.state === 'CANCELLED');
    setText(c.ptxt, `${num(done)} / ${g.total === null ? num(g.jobs) + '+' : num(total)}` + (g.failed ? ` · ${num(g.failed)} failed` : ''));
    const s = status.get(k);
    const st = s && s.view.status;
    const ended = ENDED.has(g.state);
    setText(c.rate, st ? rate(st.rate) : '—');
    setText(c.eta, ended ? '—' : st && st.etaSeconds !== null ? dur(st.etaSeconds) : '—');
    const pl = ended ? null : place(st, g.tenant);
    setText(c.pos1, pl ? pl.tenant : st && !ended ? 'not in line' : '');
    setText(c.pos2, pl ? pl.group : '');
    c.pos.title = pl ? pl.sentence : '';
    const cong = st ? st.congestion : '';
    setText(c.cong, cong || '—');
    c.cong.className = cong ? 'cong-' + cong : '';
    const why = ended ? '' : holds(st);
    setText(c.why, why || (ended ? '' : st ? 'not held' : ''));
    c.why.title = why;
    const paused = g.state === 'PAUSED';
    setText(c.pause, paused ? 'Resume' : 'Pause');
    c.pause.dataset.act = paused ? 'resume' : 'pause';
    c.pause.style.visibility = ended ? 'hidden' : '';
    c.cancel.style.visibility = ended ? 'hidden' : '';
    c.retry.style.visibility = g.failed > 0 ? '' : 'hidden';
    const b = busy.has(k);
    c.pause.disabled = c.cancel.disabled = c.retry.disabled = b;
    c.pause.setAttribute('aria-label', `${paused ? 'Resume' : 'Pause'} ${g.groupId}`);
    c.cancel.setAttribute('aria-label', `Cancel ${g.groupId}`);
    c.retry.setAttribute('aria-label', `Retry the failed jobs of ${g.groupId}`);
  }

  let frame = 0;
  function schedule() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; render(); });
  }

  function visibleRange() {
    const h = rowH();
    const first = Math.max(0, Math.floor(body.scrollTop / h) - OVERSCAN);
    const last = Math.min(groups.length, Math.ceil((body.scrollTop + body.clientHeight) / h) + OVERSCAN);
    return [first, last, h];
  }

  function render() {
    const t0 = performance.now();
    const [first, last, h] = visibleRange();
    const height = groups.length * h + 'px';
    if (spacer.style.height !== height) spacer.style.height = height;
    for (const [i, c] of live) {
      if (i < first || i >= last || !groups[i] || key(groups[i]) !== c.key) {
        live.delete(i);
        c.root.remove();
        spare.push(c);
      }
    }
    for (let i = first; i < last; i++) {
      let c = live.get(i);
      if (!c) {
        c = spare.pop() || makeRow();
        live.set(i, c);
        c.root.style.transform = `translateY(${i * h}px)`;
        body.append(c.root);
      } else if (c.root.style.transform !== `translateY(${i * h}px)`) {
        c.root.style.transform = `translateY(${i * h}px)`;
      }
      fill(c, groups[i], i);
    }
    empty.hidden = groups.length > 0;
    stats.renders++;
    stats.rows = groups.length;
    stats.lastRenderMs = performance.now() - t0;
  }

  async function loadList() {
    const t0 = performance.now();
    const out = [];
    let cursor = '';
    do {
      const q = new URLSearchParams({limit: '1000'});
      if (state) q.set('state', state);
      if (tenant) q.set('tenant', tenant);
      if (cursor) q.set('cursor', cursor);
      const page = await api('/v1/groups?' + q, {signal: ac.signal});
      out.push(...page.groups);
      cursor = page.next || '';
    } while (cursor && out.length < MAX_GROUPS);
    groups = out;
    stats.loads++;
    stats.lastLoadMs = performance.now() - t0;
    setText(count, `${num(groups.length)} group${groups.length === 1 ? '' : 's'}${cursor ? ' (first ' + num(MAX_GROUPS) + ')' : ''}`);
    count.dataset.total = groups.length;
    count.dataset.loads = stats.loads;
    render();
  }

  // statuses reads the live status of the visible groups not ended (and
  // once of those ended), four at a time.
  async function statuses() {
    const [first, last] = visibleRange();
    const now = Date.now();
    const todo = [];
    for (let i = first; i < last && i < groups.length; i++) {
      const g = groups[i], s = status.get(key(g));
      if (!s || (!ENDED.has(s.view.state) && now - s.at > STATUS_TTL) || (s.view.state !== g.state && !ENDED.has(s.view.state))) todo.push(g);
    }
    let changed = false;
    async function worker() {
      while (todo.length && !ac.signal.aborted) {
        const g = todo.shift();
        try {
          const v = await api(groupPath(g.tenant, g.groupId), {signal: ac.signal});
          status.set(key(g), {view: v, at: Date.now()});
          changed = true;
        } catch (e) {
          if (e.status === 404) status.delete(key(g));
        }
      }
    }
    await Promise.all([worker(), worker(), worker(), worker()]);
    if (changed) schedule();
  }

  let timer = 0;
  async function poll() {
    try {
      await loadList();
      await statuses();
      setLive(true);
    } catch (e) {
      if (ac.signal.aborted) return;
      setLive(false);
      if (e.status === 400) setText(count, e.message);
    }
    if (!ac.signal.aborted) timer = setTimeout(poll, POLL_MS);
  }

  function refilter() {
    tenant = session.admin ? tenantIn.value.trim() : '';
    state = stateSel.value;
    const q = new URLSearchParams();
    if (tenant) q.set('tenant', tenant);
    if (state) q.set('state', state);
    history.replaceState(null, '', '#/groups' + (q.toString() ? '?' + q : ''));
    clearTimeout(timer);
    body.scrollTop = 0;
    poll();
  }
  stateSel.addEventListener('change', refilter);
  tenantIn.addEventListener('change', refilter);

  body.addEventListener('scroll', () => {
    schedule();
    clearTimeout(body._st);
    body._st = setTimeout(() => statuses(), 150);
  }, {passive: true});
  const onResize = () => schedule();
  window.addEventListener('resize', onResize);

  body.addEventListener('click', async e => {
    const b = e.target.closest('button[data-act]');
    if (!b) return;
    const c = b.closest('.grow')._c;
    const g = groups.find(x => key(x) === c.key);
    if (!g) return;
    const act = b.dataset.act;
    const k = key(g);
    if (act === 'cancel' && !(await confirmDialog(`Cancel group ${g.groupId} of ${g.tenant}? Its queued and backed-off jobs are dropped; running jobs finish.`, 'Cancel group'))) {
      b.focus();
      return;
    }
    busy.add(k);
    schedule();
    try {
      const path = groupPath(g.tenant, g.groupId, act === 'retry' ? '/retry-failed' : '/' + act);
      const res = await api(path, {method: 'POST', signal: ac.signal});
      toast(act === 'retry' ? `Retrying ${num(res.jobs)} failed jobs as group ${res.groupId}` : `${act[0].toUpperCase() + act.slice(1)} sent to ${g.groupId}`);
      status.delete(k);
    } catch (err) {
      if (!ac.signal.aborted) toast(`${act} ${g.groupId}: ${err.message}`);
    } finally {
      busy.delete(k);
      schedule();
      clearTimeout(timer);
      if (!ac.signal.aborted) timer = setTimeout(poll, 300);
    }
    b.focus();
  });

  if (session.admin) {
    api('/v1/tenants', {signal: ac.signal}).then(l => {
      tenantList.replaceChildren(...l.tenants.map(t => el('option', {value: t.tenant})));
    }).catch(() => {});
  }
  poll();
  return () => {
    ac.abort();
    clearTimeout(timer);
    cancelAnimationFrame(frame);
    window.removeEventListener('resize', onResize);
  };
}
