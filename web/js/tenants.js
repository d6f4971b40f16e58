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
      el('colgroup', {}, el('col', {style: 'width: 13%'}), el('col', {style: 'width: 8%'}), el('col', {style: 'width: 23%'}),
        el('col', {style: 'width: 10%'}), el('col', {style: 'width: 9%'}), el('col', {style: 'width: 8%'}), el('col', {style: 'width: 8%'}),
        el('col', {style: 'width: 21%'})),
      el('thead', {}, el('tr', {},
        el('th', {text: 'Tenant'}), el('th', {class: 'num', text: 'Weight'}), el('th', {text: 'Share of the rate'}),
        el('th', {class: 'num', text: 'Limit per window'}), el('th', {class: 'num', text: 'Queued'}), el('th', {class: 'num', text: 'In flight'}),
        el('th', {class: 'num', text: 'Groups'}), el('th', {text: 'Quota use'}))),
      tbody))));
  const rows = new Map();

  function row(t) {
    let r = rows.get(t.tenant);
    if (!r) {
      const share = bar();
      const c = {
        name: el('a', {href: '#/groups?tenant=' + encodeURIComponent(t.tenant), text: t.tenant}),
        weight: el('td', {class: 'num'}), shareText: el('div', {class: 'share-text'}), limit: el('td', {class: 'num'}),
        queued: el('td', {class: 'num'}), inflight: el('td', {class: 'num'}), groups: el('td', {class: 'num'}),
        quota: el('div', {class: 'quota'}), share, quotaKey: '',
      };
      c.tr = el('tr', {'data-tenant': t.tenant}, el('td', {}, c.name, ' ', c.activeMark = el('span', {class: 'muted'})), c.weight,
        el('td', {}, share, c.shareText), c.limit, c.queued, c.inflight, c.groups, el('td', {}, c.quota));
      r = c;
      rows.set(t.tenant, r);
    }
    setText(r.activeMark, t.active ? '' : '(idle)');
    setText(r.weight, num(t.weight));
    // The rate now is the tenant's part of the jobs admitted in the last
    // window; its part of the limit, what the fair queue gives it when
    // every active tenant has work (the active tenants' parts add up to
    // 100%).
    setBar(r.share, t.rateShare || 0, 'share of the rate ' + pct(t.rateShare));
    setText(r.shareText, t.active ? `${pct(t.rateShare || 0)} of the rate now · ${pct(t.limitShare)} of the limit`
      : `idle · would get ${pct(t.limitShare)} of the limit`);
    r.shareText.title = 'its part of the jobs admitted in the last window; its part of the limit when every active tenant has work (weight / the active tenants\' weights)';
    setText(r.limit, num(t.rateLimit));
    setText(r.queued, num(t.queuedJobs));
    setText(r.inflight, num(t.inFlightJobs));
    setText(r.groups, num(t.activeGroups));
    quota(r, t.quotas);
    return r.tr;
  }

  // quota shows each quota's use with a bar, or says it is unlimited
  // (an unlimited quota has nothing to fill).
  function quota(r, q) {
    const lines = [['queued jobs', q.maxQueuedJobs, q.queuedJobsUse], ['active groups', q.maxActiveGroups, q.activeGroupsUse]];
    const key = lines.map(([, max]) => (max ? 'n' : 'u')).join('');
    if (r.quotaKey !== key) {
      r.quotaKey = key;
      r.quotaParts = lines.map(([name, max]) => {
        const text = el('span', {text: max ? '' : 'unlimited'});
        const b = max ? bar() : null;
        return {name, b, text, nodes: [el('span', {text: name}), max ? el('span', {}, b, text) : text]};
      });
      r.quota.replaceChildren(...r.quotaParts.flatMap(p => p.nodes));
    }
    lines.forEach(([name, max, use], i) => {
      const p = r.quotaParts[i];
      if (!max) return;
      setBar(p.b, use || 0, `${name} quota ${pct(use)}`);
      p.b.classList.toggle('warn', (use || 0) >= 0.9);
      setText(p.text, `${pct(use)} of ${num(max)}`);
    });
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
