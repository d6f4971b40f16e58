// Overview: admitted rate vs the limit, READY depth per type, backoff
// queue, active tenants and groups, worker types, dead letters, and the
// learned rate per destination beside its 429s. Live over
// GET /v1/overview/events (one event a second).
import {stream, session} from './api.js';
import {el, setText, num, rate, time, ago, bar, setBar, setLive} from './util.js';
import {lineChart} from './chart.js';

function card(label) {
  const value = el('div', {class: 'value', text: '—'}), sub = el('div', {class: 'sub'});
  return {root: el('div', {class: 'card'}, el('div', {class: 'label', text: label}), value, sub), value, sub};
}

// table returns a panel with a table whose rows are replaced on update.
function table(title, cols, empty, cls) {
  const tbody = el('tbody');
  const note = el('p', {class: 'empty', text: empty});
  const root = el('section', {class: 'panel'}, el('h2', {text: title}),
    el('div', {class: 'scroll-x'}, el('table', {class: cls}, el('thead', {}, el('tr', {}, ...cols.map(([t, c, title]) => el('th', {class: c || '', text: t, title})))), tbody)), note);
  return {root, tbody, note};
}

// destinations returns the panel of the learned rates per destination: a
// chart each, the learned rate (left scale) and the 429s per second (right
// scale) on the rate's time axis, and the state now.
function destinations() {
  const list = el('div', {class: 'dests'});
  const note = el('p', {class: 'muted'});
  const root = el('section', {class: 'panel chart-panel', id: 'destinations'},
    el('h2', {text: 'Destinations: learned rate and 429s'}), list, note);
  const byName = new Map();
  function item(name) {
    let it = byName.get(name);
    if (!it) {
      const state = el('span', {class: 'dest-state'});
      const ch = lineChart(`Learned rate and 429s per second of ${name} over the last minutes`,
        [['learned', 'learned rate/s'], ['throttled', '429s/s (right scale)']]);
      it = {state, ch, root: el('div', {class: 'dest', 'data-dest': name}, el('h3', {}, el('span', {text: name}), ' ', state), ch.root)};
      byName.set(name, it);
    }
    return it;
  }
  function update(v) {
    const shown = new Set(v.destinations.map(d => d.destination));
    for (const [name, it] of byName) if (!shown.has(name)) { it.root.remove(); byName.delete(name); }
    const items = v.destinations.map(d => {
      const it = item(d.destination);
      let text, cls;
      if (d.state === 'stopped') [text, cls] = ['stopped until ' + time(d.stoppedUntil), 'cong-HIGH'];
      else if (d.state === 'learned') [text, cls] = ['learned ' + rate(d.learnedPerSecond), 'cong-MEDIUM'];
      else [text, cls] = ['not limited', 'cong-LOW'];
      setText(it.state, text + (d.throttledPerSecond > 0 ? ` · ${rate(d.throttledPerSecond)} 429s` : ''));
      it.state.className = 'dest-state ' + cls;
      it.root.dataset.state = d.state;
      const n = d.learned.length;
      const from = n ? new Date(v.start) : null;
      const to = n ? new Date(new Date(v.start).getTime() + n * v.windowMs) : null;
      it.ch.update([{cls: 'learned', values: d.learned}, {cls: 'throttled', values: d.throttled, axis: 'right'}], {from, to});
      return it.root;
    });
    // in the order given (the most used first), moving only what moved
    items.forEach((r, i) => { if (list.children[i] !== r) list.insertBefore(r, list.children[i] || null); });
    const more = v.tracked - v.destinations.length;
    setText(note, v.destinations.length
      ? (more > 0 ? `The ${v.destinations.length} most used of ${num(v.tracked)} destinations. ` : '') + 'A destination\'s learned rate is shared by every tenant that sends to it.'
      : 'No destination has a learned rate or reported jobs (the adaptive rate is off, or nothing was reported yet).');
    root.dataset.count = String(v.destinations.length);
  }
  return {root, update};
}

export function mount(root) {
  const ac = new AbortController();
  const cards = {
    rate: card('Admitted rate'), backoff: card('Backoff queue'), tenants: card('Active tenants'),
    groups: card('Active groups'), queued: card('Queued jobs'), inflight: card('In flight'),
  };
  const ch = lineChart('Admitted jobs per second against the limit over the last minutes',
    [['admitted', 'admitted/s'], ['limit', 'limit/s'], ['backoff', 'backoff queue (jobs, right scale)']]);
  const chartNote = el('p', {class: 'muted', text: ''});
  const ready = table('READY depth per job type', [['Type'], ['Messages', 'num'], ['Of capacity']], 'READY is empty.');
  const workers = table('Worker types', [['Type'], ['Status'], ['Consumers', 'num'], ['Running', 'num'], ['Idle pulls', 'num'], ['Expires', 'hide-sm', 'when the latest announcement of the type expires']],
    'No worker has announced a job type.', 'fit');
  const dlq = table('Dead letters by reason', [['Reason'], ['Messages', 'num']], 'No dead letters.');
  const dests = destinations();
  const scopeNote = el('p', {class: 'muted'});
  // The chart has a row of its own: a panel spanning a grid's every
  // column would keep an empty column beside the tables.
  const panels = el('div', {class: 'panels'}, ready.root, workers.root, dlq.root);
  root.append(el('h1', {text: 'Overview'}), scopeNote,
    el('div', {class: 'grid'}, ...Object.values(cards).map(c => c.root)),
    el('section', {class: 'panel chart-panel'}, el('h2', {text: 'Admitted rate vs limit'}), ch.root, chartNote), dests.root, panels);
  if (!session.admin) {
    ready.root.hidden = true;
    dlq.root.hidden = true;
    setText(scopeNote, `Tenant ${session.tenant}: your admitted rate against your share of the limit, and the destinations of your jobs. READY and dead letters are shared by every tenant and shown to admins only.`);
  }
  root.dataset.ready = '';

  function render(ov) {
    const r = ov.rate;
    setText(cards.rate.value, rate(r.admittedPerSecond));
    setText(cards.rate.sub, 'limit ' + rate(r.limitPerSecond) + (ov.scope === 'tenant' ? ' (your share)' : ''));
    setText(cards.backoff.value, num(ov.backoffJobs));
    setText(cards.backoff.sub, 'jobs waiting to retry');
    setText(cards.tenants.value, num(ov.activeTenants));
    setText(cards.tenants.sub, 'sharing the limit now');
    setText(cards.groups.value, num(ov.activeGroups));
    setText(cards.groups.sub, 'not ended');
    setText(cards.queued.value, num(ov.queuedJobs));
    setText(cards.queued.sub, 'accepted, not finished');
    setText(cards.inflight.value, num(ov.inFlightJobs));
    setText(cards.inflight.sub, 'admitted, not finished');

    const h = r.history, k = 1000 / h.windowMs;
    const per = a => a.map(v => (v === null ? null : v * k));
    // The scale fits the admitted rate; the limit is a reference line
    // when it is in range and a label otherwise. The backoff queue counts
    // jobs, not jobs a second: it has the right-hand scale.
    const series = [{cls: 'admitted', values: per(h.admitted)}, {cls: 'limit', values: per(h.limit), ref: true}];
    if (ov.scope === 'system') series.push({cls: 'backoff', values: h.backoff, axis: 'right'});
    const n = h.admitted.length;
    const from = n ? new Date(h.start) : null;
    const to = n ? new Date(new Date(h.start).getTime() + n * h.windowMs) : null;
    const drawn = ch.update(series, {from, to});
    const off = drawn.offScale.includes('limit');
    ch.label('limit', off ? `limit ${rate(r.limitPerSecond)}, above this scale` : `limit ${rate(r.limitPerSecond)}`, off);
    setText(chartNote, n ? `${n} windows of ${h.windowMs} ms sampled by the gateway since ${time(from)}; gaps are windows nobody sampled.` : 'Sampling starts now: the chart fills in as windows pass.');

    dests.update(ov.destinations);

    if (ov.ready) {
      const cap = ov.ready.capacity;
      ready.tbody.replaceChildren(...ov.ready.types.map(t => {
        const b = bar(cap && t.depth >= cap ? 'warn' : '');
        setBar(b, cap ? t.depth / cap : 0, `${t.depth} of ${cap}`);
        return el('tr', {}, el('td', {text: t.type}), el('td', {class: 'num', text: num(t.depth)}),
          el('td', {}, cap ? b : el('span', {class: 'muted', text: 'no capacity set'})));
      }));
      setText(ready.note, ov.ready.error || (ov.ready.types.length ? `capacity ${num(cap)} per type, ${num(ov.ready.total)} in all` : 'READY is empty.'));
    }
    workers.tbody.replaceChildren(...ov.workers.map(w => el('tr', {},
      el('td', {text: w.type}),
      el('td', {class: w.live ? 'cong-LOW' : 'cong-HIGH', text: w.live ? 'live' : 'no worker', title: w.announcedUntil ? 'announced until ' + time(w.announcedUntil) : ''}),
      el('td', {class: 'num', text: num(w.consumers)}), el('td', {class: 'num', text: num(w.running)}),
      el('td', {class: 'num', text: num(w.waitingPulls)}),
      el('td', {class: 'hide-sm', text: w.announcedUntil ? ago(w.announcedUntil) : '—'}))));
    setText(workers.note, ov.workers.length ? 'Instances are not counted one by one: consumers, running (unacknowledged) jobs and idle pull requests stand for them.' : 'No worker has announced a job type.');
    if (ov.dlq) {
      dlq.tbody.replaceChildren(...ov.dlq.byReason.map(d => el('tr', {}, el('td', {text: d.reason}), el('td', {class: 'num', text: num(d.count)}))));
      setText(dlq.note, ov.dlq.error || (ov.dlq.total ? num(ov.dlq.total) + ' in all' : 'No dead letters.'));
    }
    root.dataset.ready = 'true';
    root.dataset.at = ov.at;
  }

  stream('/v1/overview/events', {
    signal: ac.signal,
    onState: setLive,
    onEvent: ev => { if (ev.event === 'overview') render(ev.data); },
  });
  return () => ac.abort();
}
