// A small line chart in SVG: fixed height, scaled to the panel's width,
// axis labels in HTML (an SVG stretched to the width would distort text).
import {el, setText, num, time} from './util.js';

const NS = 'http://www.w3.org/2000/svg';
const W = 1000, H = 100;

// lineChart returns {root, update(series, opts)}; series is
// [{cls, label, values: [number|null]}], all of one length, drawn across
// the width; opts {from, to} label the x axis, yMax (optional) the top.
export function lineChart(label, legend) {
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  for (const y of [0, 25, 50, 75, 100]) {
    const l = document.createElementNS(NS, 'line');
    l.setAttribute('x1', 0); l.setAttribute('x2', W); l.setAttribute('y1', y); l.setAttribute('y2', y);
    l.setAttribute('class', 'gridline');
    svg.append(l);
  }
  const paths = new Map();
  const ymax = el('span', {class: 'axis ymax'}), ymin = el('span', {class: 'axis ymin', text: '0'});
  const xfrom = el('span', {class: 'axis xfrom'}), xto = el('span', {class: 'axis xto'});
  const plot = el('div', {class: 'plot'});
  plot.append(svg);
  const root = el('div', {},
    el('div', {class: 'legend'}, ...legend.map(([cls, text]) => el('span', {class: cls}, el('i'), text))),
    el('div', {class: 'chart'}, ymax, ymin, plot, xfrom, xto));
  function path(cls) {
    let p = paths.get(cls);
    if (!p) {
      p = document.createElementNS(NS, 'path');
      p.setAttribute('class', 's-' + cls);
      svg.append(p);
      paths.set(cls, p);
    }
    return p;
  }
  function update(series, opts = {}) {
    let top = opts.yMax || 0;
    let n = 0;
    for (const s of series) {
      n = Math.max(n, s.values.length);
      for (const v of s.values) if (v !== null && v !== undefined && v > top) top = v;
    }
    top = nice(top);
    // With opts.from/to and a series' xs (times, ms), points go by time;
    // otherwise evenly across the width.
    const t0 = opts.from ? +opts.from : 0, span = opts.to ? Math.max(1, +opts.to - t0) : 0;
    for (const s of series) {
      const vs = s.values;
      const dx = vs.length > 1 ? W / (vs.length - 1) : W;
      let d = '', pen = false;
      for (let i = 0; i < vs.length; i++) {
        const v = vs[i];
        if (v === null || v === undefined) { pen = false; continue; }
        const x = s.xs && span ? ((s.xs[i] - t0) / span) * W : vs.length > 1 ? i * dx : W;
        const y = H - (v / top) * H;
        d += (pen ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(2);
        pen = true;
      }
      if (vs.length === 1 && d && !s.xs) d += 'L0 ' + (H - (vs[0] / top) * H).toFixed(2); // a single point: a flat line
      const p = path(s.cls);
      if (p.getAttribute('d') !== d) p.setAttribute('d', d);
    }
    setText(ymax, (opts.fmt || num)(top));
    setText(xfrom, opts.from ? time(opts.from) : '');
    setText(xto, opts.to ? time(opts.to) : '');
  }
  return {root, update};
}

// nice rounds up to 1, 2, 2.5 or 5 times a power of ten.
function nice(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}
