// Group detail: state and live status, counts over time (the progress
// samples the aggregators keep, then the group's own events as they
// come), its failures with their errors, the submissions the pipeline
// refused after accepting them, and its events, live over
// GET /v1/groups/{id}/events.
import {api, groupPath, stream} from './api.js';
import {el, setText, num, rate, dur, time, pct, holds, place, bar, setBar, ENDED, toast, confirmDialog, setLive} from './util.js';
import {lineChart} from './chart.js';

const MAX_EVENTS = 200;
const MAX_POINTS = 600;

export function mount(root, {params}) {
  const ac = new AbortController();
  const [tenant, id] = params;
  if (!tenant || !id) {
    root.append(el('p', {class: 'empty', text: 'No group named.'}));
    return null;
  }
  const badge = el('span', {class: 'badge', id: 'detail-state', text: '…'});
  const pauseBtn = el('button', {type: 'button', class: 'secondary', text: 'Pause'});
  const cancelBtn = el('button', {type: 'button', class: 'secondary', text: 'Cancel'});
  const retryBtn = el('button', {type: 'button', class: 'secondary', text: 'Retry failed'});
  const cbBtn = el('button', {type: 'button', class: 'secondary', id: 'retry-callback', text: 'Retry callback', hidden: true});
  const gone = el('p', {class: 'error', role: 'alert', id: 'detail-gone'});
  const progress = bar();
  const progText = el('span', {class: 'muted'});
  const kv = {};
  const dl = el('dl', {class: 'kv'});
  for (const [k, label] of [['jobs', 'Jobs'], ['queued', 'Queued'], ['inFlight', 'In flight'], ['backingOff', 'Backing off'],
    ['succeeded', 'Succeeded'], ['failed', 'Failed'], ['cancelled', 'Cancelled'], ['rate', 'Rate'], ['eta', 'ETA'],
    ['position', 'Position'], ['congestion', 'Congestion'], ['waiting', 'Why waiting'], ['schedule', 'Schedule'], ['priority', 'Priority'],
    ['created', 'Created'], ['finished', 'Finished'], ['links', 'Retries'],
    ['callback', 'Callback']]) {
    kv[k] = el('dd', {text: '—'});
    dl.append(el('dt', {text: label}), kv[k]);
  }
  kv.waiting.id = 'detail-waiting';
  kv.schedule.id = 'detail-schedule';
  const ch = lineChart('Jobs done over time', [['done', 'done + cancelled'], ['failed', 'failed'], ['total', 'total']]);
  const chartNote = el('p', {class: 'muted'});
  const failBody = el('tbody');
  const failNote = el('p', {class: 'empty', text: 'No failures.'});
  const refBody = el('tbody');
  const refNote = el('p', {class: 'muted'});
  const refPanel = el('section', {class: 'panel wide', id: 'refused', hidden: true}, el('h2', {text: 'Refused submissions'}), refNote,
    el('div', {class: 'scroll-x'}, el('table', {},
      el('colgroup', {}, el('col', {style: 'width:14%'}), el('col', {style: 'width:14%'}), el('col', {style: 'width:8%'}), el('col', {style: 'width:64%'})),
      el('thead', {}, el('tr', {}, el('th', {text: 'At'}), el('th', {text: 'Reason'}), el('th', {class: 'num', text: 'Jobs'}), el('th', {text: 'Error'}))),
      refBody)));
  const evList = el('ol', {id: 'events'});
  const evNote = el('p', {class: 'muted', text: 'Connecting…'});
  root.append(
    el('div', {class: 'head'}, el('a', {href: '#/groups', text: '← Groups'}), el('h1', {text: id}), el('span', {class: 'muted', text: 'tenant ' + tenant}), badge,
      el('div', {class: 'acts'}, pauseBtn, cancelBtn, retryBtn, cbBtn)),
    gone,
    el('div', {class: 'panels two'},
      el('section', {class: 'panel'}, el('h2', {text: 'Status'}), el('div', {style: 'margin-bottom:8px'}, progress, progText), dl),
      el('section', {class: 'panel'}, el('h2', {text: 'Counts over time'}), ch.root, chartNote),
      el('section', {class: 'panel wide'}, el('h2', {text: 'Failures'}),
        el('div', {class: 'scroll-x'}, el('table', {id: 'failures'},
          el('colgroup', {}, el('col', {style: 'width:22%'}), el('col', {style: 'width:10%'}), el('col', {style: 'width:14%'}), el('col', {style: 'width:54%'})),
          el('thead', {}, el('tr', {}, el('th', {text: 'Job'}), el('th', {class: 'num', text: 'Attempts'}), el('th', {text: 'At'}), el('th', {text: 'Error'}))),
          failBody)), failNote),
      refPanel,
      el('section', {class: 'panel wide'}, el('h2', {text: 'Events'}), evNote, el('div', {class: 'events'}, evList))));

  let view = null;
  let lastChange = 0; // the time of the newest event that moved a count or the state
  const pts = {t: [], done: [], failed: [], total: []};
  let failedShown = -1;

  // point adds a sample in time order (the samples read at the start
  // may come after the stream's first events).
  function point(at, done, failed, total) {
    const t = +new Date(at);
    let i = pts.t.length;
    while (i > 0 && pts.t[i - 1] > t) i--;
    if (i > 0 && pts.t[i - 1] === t) return;
    pts.t.splice(i, 0, t); pts.done.splice(i, 0, done); pts.failed.splice(i, 0, failed); pts.total.splice(i, 0, total);
    if (pts.t.length > MAX_POINTS) for (const k of Object.keys(pts)) pts[k].shift();
  }

  function drawChart() {
    if (!pts.t.length) { setText(chartNote, 'No progress recorded yet.'); return; }
    const from = pts.t[0], to = Math.max(pts.t[pts.t.length - 1], from + 1000);
    // The progress samples count done and cancelled jobs only: the failed
    // count is known at the group's creation (0), at its events and now,
    // and its line joins those points.
    ch.update([{cls: 'done', values: pts.done, xs: pts.t}, {cls: 'failed', values: pts.failed, xs: pts.t, span: true},
      {cls: 'total', values: pts.total, xs: pts.t}], {from, to});
    setText(chartNote, `${pts.t.length} points from ${time(from)}; failed is known at the events and now, its line joins them.`);
  }

  function renderView(v) {
    view = v;
    setText(badge, v.state);
    badge.className = 'badge ' + v.state;
    root.dataset.state = v.state;
    const total = v.total ?? v.jobs, done = v.done + v.cancelled;
    setBar(progress, total ? done / total : ENDED.has(v.state) ? 1 : 0, 'progress');
    progress.classList.toggle('ok', v.state === 'COMPLETED');
    setText(progText, `${num(done)} of ${v.total === null ? num(v.jobs) + ' so far (not sealed)' : num(total)} · ${pct(total ? done / total : 0)}`);
    for (const k of ['jobs', 'queued', 'inFlight', 'backingOff', 'succeeded', 'failed', 'cancelled']) setText(kv[k], num(v[k]));
    const s = v.status || {};
    setText(kv.rate, rate(s.rate) + (s.rateWindowSeconds ? ` over ${s.rateWindowSeconds}s` : ''));
    setText(kv.eta, ENDED.has(v.state) ? '—' : s.etaSeconds !== null && s.etaSeconds !== undefined ? dur(s.etaSeconds) + ' (' + time(s.eta) + ')' : 'no rate yet');
    const pl = ENDED.has(v.state) ? null : place(s, tenant);
    setText(kv.position, pl ? pl.sentence : v.state === 'PAUSED' ? 'paused: not in line until resumed' : 'not in line');
    setText(kv.congestion, s.congestion ? `${s.congestion} (backoff ${num(s.backoffMs)} ms, ${count(s.retries, 'retry', 'retries')}, ${count(s.throttles, 'throttle', 'throttles')})` : '—');
    kv.congestion.className = s.congestion ? 'cong-' + s.congestion : '';
    setText(kv.waiting, holds(s) || (ENDED.has(v.state) ? '—' : 'nothing holds it'));
    setText(kv.schedule, schedule(v, s));
    setText(kv.priority, `${v.priority} (base ${v.basePriority})${v.maxInFlight ? ', at most ' + num(v.maxInFlight) + ' in flight' : ''}`);
    setText(kv.created, v.createdAt ? new Date(v.createdAt).toLocaleString() : '—');
    // A cancelled group's finishedAt is the cancel; jobs already running
    // then still finish, and its last event says when the last one did.
    const fin = v.finishedAt ? Math.max(+new Date(v.finishedAt), lastChange) : 0;
    setText(kv.finished, !fin ? '—' : new Date(fin).toLocaleString() +
      (v.state === 'CANCELLED' && fin - new Date(v.finishedAt) >= 1000 ? ` (cancelled at ${time(v.finishedAt)}; the jobs already running finished after)` : ''));
    kv.finished.dataset.at = fin ? new Date(fin).toISOString() : '';
    kv.links.replaceChildren();
    if (v.retryOf) kv.links.append('retry of ', el('a', {href: `#/group/${encodeURIComponent(tenant)}/${encodeURIComponent(v.retryOf)}`, text: v.retryOf}), ' ');
    for (const r of v.retries || []) kv.links.append(el('a', {href: `#/group/${encodeURIComponent(tenant)}/${encodeURIComponent(r)}`, text: r}), ' ');
    if (!kv.links.childNodes.length) kv.links.textContent = '—';
    const ended = ENDED.has(v.state);
    pauseBtn.textContent = v.state === 'PAUSED' ? 'Resume' : 'Pause';
    pauseBtn.disabled = ended;
    cancelBtn.disabled = ended;
    retryBtn.disabled = !(v.failed > 0);
    setText(kv.callback, callback(v.callback));
    kv.callback.dataset.state = v.callback ? v.callback.state : '';
    cbBtn.hidden = !(v.callback && v.callback.state === 'failed');
    if (v.failed !== failedShown) loadFailures();
    renderRefused(v.refused);
  }

  // renderRefused lists what the pipeline refused of the group's
  // submissions after accepting them (the panel is hidden when nothing).
  function renderRefused(r) {
    refPanel.hidden = !r;
    if (!r) return;
    const by = (r.byReason || []).map(c => `${c.reason} ${num(c.messages)}`).join(', ');
    setText(refNote, `${num(r.messages)} message${r.messages === 1 ? '' : 's'} (${num(r.jobs)} job${r.jobs === 1 ? '' : 's'}) refused: ${by}. ` +
      'Refused jobs were not stored: submit them again (the same request will do).');
    refBody.replaceChildren(...(r.recent || []).map(e => el('tr', {},
      el('td', {text: time(e.at)}), el('td', {text: e.reason}), el('td', {class: 'num', text: num(e.jobs)}), el('td', {class: 'err', text: e.error}))));
  }

  async function loadView() {
    try {
      renderView(await api(groupPath(tenant, id), {signal: ac.signal}));
      setText(gone, '');
    } catch (e) {
      if (ac.signal.aborted) return;
      if (e.status === 404) {
        const r = e.problem && e.problem.refused;
        setText(gone, r ? `No such group: the pipeline refused its submissions (${r.lastReason}: ${r.lastError}).` : 'No such group (or not one your key reaches).');
        renderRefused(r || null);
        root.dataset.state = 'NOT_FOUND';
      }
    }
  }

  async function loadFailures() {
    failedShown = view ? view.failed : 0;
    try {
      const l = await api(groupPath(tenant, id, '/failures', {limit: '50'}), {signal: ac.signal});
      failBody.replaceChildren(...l.failures.map(f => el('tr', {},
        el('td', {text: f.jobId, title: f.type || ''}), el('td', {class: 'num', text: num(f.attempts)}),
        el('td', {text: time(f.finishedAt)}), el('td', {class: 'err', text: f.error}))));
      setText(failNote, l.failures.length ? `newest ${l.failures.length} of ${num(view ? view.failed : l.kept)} failed (${num(l.kept)} kept)` : 'No failures.');
    } catch { /* shown on the next change */ }
  }

  async function loadProgress() {
    try {
      const p = await api(groupPath(tenant, id, '/progress'), {signal: ac.signal});
      const total = p.total ?? p.jobs;
      if (view && view.createdAt) point(view.createdAt, 0, 0, total);
      for (const s of p.samples) point(s.at, s.count, null, total);
      point(p.at, p.done + p.cancelled, p.failed, total);
      drawChart();
    } catch { /* the events fill the chart */ }
  }

  function addEvent(ev) {
    const d = ev.data;
    const li = el('li', {'data-event': ev.event, 'data-state': d.state},
      el('span', {class: 'muted', text: time(d.at)}), el('strong', {text: ev.event}),
      el('span', {text: `${d.state} · ${num(d.succeeded)} ok · ${num(d.failed)} failed · ${num(d.cancelled)} cancelled of ${num(d.total || d.jobs)}` + (d.notice ? ' · ' + d.notice : '')}));
    evList.prepend(li);
    while (evList.children.length > MAX_EVENTS) evList.lastChild.remove();
    point(d.at, d.succeeded + d.failed + d.cancelled, d.failed, d.total || d.jobs);
    if (!d.notice) lastChange = Math.max(lastChange, +new Date(d.at));
    if (d.refused) loadView();
    drawChart();
  }

  async function act(what) {
    if (what === 'cancel' && !(await confirmDialog(`Cancel group ${id} of ${tenant}? Its queued and backed-off jobs are dropped; running jobs finish.`, 'Cancel group'))) return;
    try {
      const path = {retry: '/retry-failed', callback: '/callback/retry'}[what] || '/' + what;
      const res = await api(groupPath(tenant, id, path), {method: 'POST', signal: ac.signal});
      if (what === 'retry') {
        toast(`Retrying ${num(res.jobs)} failed jobs as group ${res.groupId}`);
        location.hash = `#/group/${encodeURIComponent(tenant)}/${encodeURIComponent(res.groupId)}`;
      } else {
        toast(what === 'callback' ? 'Callback delivery retried' : `${what} sent`);
        setTimeout(loadView, 300);
      }
    } catch (e) {
      if (!ac.signal.aborted) toast(`${what}: ${e.message}`);
    }
  }
  pauseBtn.addEventListener('click', () => act(view && view.state === 'PAUSED' ? 'resume' : 'pause'));
  cancelBtn.addEventListener('click', () => act('cancel'));
  retryBtn.addEventListener('click', () => act('retry'));
  cbBtn.addEventListener('click', () => act('callback'));

  loadView().then(loadProgress);
  stream(groupPath(tenant, id, '/events'), {
    signal: ac.signal,
    onState: on => { setLive(on); if (on) setText(evNote, 'Live: events appear as they happen.'); },
    onGone: () => setText(evNote, 'No events: no such group.'),
    onEvent: ev => {
      addEvent(ev);
      loadView();
      if (ENDED.has(ev.data.state)) { setText(evNote, 'The group has ended: no more events.'); return true; }
      return false;
    },
  });
  // status (rate, ETA, position) changes between events too, and a
  // completion callback's delivery after the group's last event
  const timer = setInterval(() => {
    if (!view || !ENDED.has(view.state) || (view.callback && view.callback.state === 'pending')) loadView();
  }, 2000);
  return () => { clearInterval(timer); ac.abort(); };
}

// count is "1 retry" or "3 retries" ("—" when unknown).
function count(n, one, many) {
  return `${num(n)} ${n === 1 ? one : many}`;
}

// callback says where a group's completion callback goes and how its
// delivery stands ("—" without one).
function callback(c) {
  if (!c) return '—';
  const tries = count(c.attempts, 'attempt', 'attempts');
  const last = c.lastError ? ` · last: ${c.lastError}` : '';
  switch (c.state) {
    case 'delivered':
      return `delivered ${c.deliveredAt ? time(c.deliveredAt) : ''} after ${tries} · to ${c.url}`;
    case 'failed':
      return `failed ${c.failedAt ? time(c.failedAt) : ''} after ${tries}${last} · to ${c.url}`;
    case 'pending':
      return `pending: ${tries} so far${c.nextAttemptAt ? ', next at ' + time(c.nextAttemptAt) : ''}${last} · to ${c.url}`;
  }
  return `sent when the group ends · to ${c.url}`;
}

// schedule says when a group may start and when it may send: its notBefore,
// its sending windows, and the next start while one of them holds it.
function schedule(v, s) {
  const parts = [];
  if (v.notBefore) parts.push('starts at ' + new Date(v.notBefore).toLocaleString());
  if (v.windows && v.windows.length) {
    parts.push('sends within ' + v.windows.map(w => `${w.days.join(',')} ${w.from}–${w.to} ${w.zone}`).join('; '));
  }
  if (parts.length === 0) return '—';
  const held = (s.waiting || []).find(h => h.reason === 'scheduled' || h.reason === 'outside_window');
  if (held && held.until && !ENDED.has(v.state)) parts.push('next start ' + new Date(held.until).toLocaleString());
  return parts.join(' · ');
}
