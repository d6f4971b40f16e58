// Tenants: weight, share of the rate now, queued, running, quota use.
// Refreshed every 2 s from GET /v1/tenants.
import {api} from './api.js';
import {el, setText, num, pct, bar, setBar, setLive} from './util.js';

export function mount(root) {
  const ac = new AbortController();
  const tbody = el('tbody');
  const note = el('p', {class: 'muted'});
  root.append(el('h1', {text: 'Tenants'}), note,
    el('section', {class: 'panel'}, el('div', {class: 'scroll-x'}, el('table', {id: 'tenants-table'},
      el('colgroup', {}, el('col', {style: 'width: 16%'}), el('col', {style: 'width: 7%'}), el('col', {style: 'width: 18%'}),
        el('col', {style: 'width: 10%'}), el('col', {style: 'width: 10%'}), el('col', {style: 'width: 9%'}), el('col', {style: 'width: 9%'}),
        el('col', {style: 'width: 21%'})),
      el('thead', {}, el('tr', {},
        el('th', {text: 'Tenant'}), el('th', {class: 'num', text: 'Weight'}), el('th', {text: 'Share of the rate'}),
        el('th', {class: 'num', text: 'Limit/window'}), el('th', {class: 'num', text: 'Queued'}), el('th', {class: 'num', text: 'In flight'}),
        el('th', {class: 'num', text: 'Groups'}), el('th', {text: 'Quota use'}))),
      tbody))));
  const rows = new Map();

  function row(t) {
    let r = rows.get(t.tenant);
    if (!r) {
      const share = bar(), qj = bar(), qg = bar();
      const c = {
        name: el('a', {href: '#/groups?tenant=' + encodeURIComponent(t.tenant), text: t.tenant}),
        weight: el('td', {class: 'num'}), shareText: el('span', {class: 'muted'}), limit: el('td', {class: 'num'}),
        queued: el('td', {class: 'num'}), inflight: el('td', {class: 'num'}), groups: el('td', {class: 'num'}),
        quotaText: el('span', {class: 'muted'}), share, qj, qg,
      };
      c.tr = el('tr', {'data-tenant': t.tenant}, el('td', {}, c.name, ' ', c.activeMark = el('span', {class: 'muted'})), c.weight,
        el('td', {}, share, c.shareText), c.limit, c.queued, c.inflight, c.groups,
        el('td', {}, el('div', {style: 'display:grid;grid-template-columns:1fr 1fr;gap:6px'}, qj, qg), c.quotaText));
      r = c;
      rows.set(t.tenant, r);
    }
    setText(r.activeMark, t.active ? '' : '(idle)');
    setText(r.weight, num(t.weight));
    setBar(r.share, t.rateShare || 0, 'share of the rate ' + pct(t.rateShare));
    setText(r.shareText, `${pct(t.rateShare)} now · limit ${pct(t.limitShare)}`);
    r.shareText.title = 'share of the jobs admitted in the last window; share of the limit';
    setText(r.limit, num(t.rateLimit));
    setText(r.queued, num(t.queuedJobs));
    setText(r.inflight, num(t.inFlightJobs));
    setText(r.groups, num(t.activeGroups));
    const q = t.quotas;
    setBar(r.qj, q.queuedJobsUse || 0, 'queued jobs quota ' + pct(q.queuedJobsUse));
    setBar(r.qg, q.activeGroupsUse || 0, 'active groups quota ' + pct(q.activeGroupsUse));
    r.qj.classList.toggle('warn', (q.queuedJobsUse || 0) >= 0.9);
    r.qg.classList.toggle('warn', (q.activeGroupsUse || 0) >= 0.9);
    setText(r.quotaText, `jobs ${q.maxQueuedJobs ? pct(q.queuedJobsUse) + ' of ' + num(q.maxQueuedJobs) : '∞'} · groups ${q.maxActiveGroups ? pct(q.activeGroupsUse) + ' of ' + num(q.maxActiveGroups) : '∞'}`);
    return r.tr;
  }

  async function refresh() {
    try {
      const l = await api('/v1/tenants', {signal: ac.signal});
      const trs = l.tenants.map(row);
      const seen = new Set(l.tenants.map(t => t.tenant));
      for (const k of rows.keys()) if (!seen.has(k)) rows.delete(k);
      if (trs.length !== tbody.children.length || trs.some((tr, i) => tbody.children[i] !== tr)) tbody.replaceChildren(...trs);
      setText(note, `${l.tenants.length} tenant${l.tenants.length === 1 ? '' : 's'} · global limit ${num(l.globalLimit)} jobs per ${l.windowMs} ms` +
        (l.admitted !== undefined && l.admitted !== null ? ` · ${num(l.admitted)} admitted in the last window` : ''));
      root.dataset.ready = 'true';
      setLive(true);
    } catch (e) {
      if (!ac.signal.aborted) setLive(false);
    }
  }
  refresh();
  const timer = setInterval(refresh, 2000);
  return () => { clearInterval(timer); ac.abort(); };
}
