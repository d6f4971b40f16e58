// A small line chart in SVG: fixed height, scaled to the panel's width,
// axis labels in HTML (an SVG stretched to the width would distort text).
import {el, setText, num, time} from './util.js';

const NS = 'http://www.w3.org/2000/svg';
const W = 1000, H = 100;

// lineChart returns {root, update(series, opts), label(cls, text)};
// series is [{cls, values: [number|null], xs?, ref?, axis?, span?}], drawn
// across the width; opts {from, to} label the x axis, yMax (optional) the
// least top, fmt the axis labels.
//
// The y scale fits the data, not the references: a series with ref set (a
// limit) takes part in the scale only when it lies within twice the data's
// top (or when there is no data); otherwise it is not drawn and update
// returns its class in offScale, for the caller to say where it is. A
// series with axis 'right' (another unit) has its own scale, labelled on
// the right. A series with span set joins its known points across nulls.
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
  const ymaxr = el('span', {class: 'axis ymaxr'}), yminr = el('span', {class: 'axis yminr', text: '0'});
  const xfrom = el('span', {class: 'axis xfrom'}), xto = el('span', {class: 'axis xto'});
  const plot = el('div', {class: 'plot'});
  plot.append(svg);
  const items = new Map(legend.map(([cls, text]) => [cls, el('span', {class: cls}, el('i'), text)]));
  const chart = el('div', {class: 'chart'}, ymax, ymin, ymaxr, yminr, plot, xfrom, xto);
  const root = el('div', {}, el('div', {class: 'legend'}, ...items.values()), chart);
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
  const known = v => v !== null && v !== undefined;
  const most = vs => vs.reduce((m, v) => (known(v) && v > m ? v : m), 0);
  function update(series, opts = {}) {
    let data = opts.yMax || 0, right = 0;
    for (const s of series) {
      if (s.ref) continue;
      if (s.axis === 'right') right = Math.max(right, most(s.values));
      else data = Math.max(data, most(s.values));
    }
    let top = nice(data);
    for (const s of series) {
      const m = most(s.values);
      if (s.ref && m > 0 && (data === 0 || m <= 2 * top)) top = Math.max(top, nice(m));
    }
    const topR = nice(right);
    const offScale = [];
    // With opts.from/to and a series' xs (times, ms), points go by time;
    // otherwise evenly across the width.
    const t0 = opts.from ? +opts.from : 0, span = opts.to ? Math.max(1, +opts.to - t0) : 0;
    for (const s of series) {
      const vs = s.values, scale = s.axis === 'right' ? topR : top;
      const dx = vs.length > 1 ? W / (vs.length - 1) : W;
      let d = '', pen = false;
      if (s.ref && most(vs) > top) {
        offScale.push(s.cls);
      } else {
        for (let i = 0; i < vs.length; i++) {
          const v = vs[i];
          if (!known(v)) { if (!s.span) pen = false; continue; }
          const x = s.xs && span ? ((s.xs[i] - t0) / span) * W : vs.length > 1 ? i * dx : W;
          const y = H - (v / scale) * H;
          d += (pen ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(2);
          pen = true;
        }
        if (vs.length === 1 && d && !s.xs) d += 'L0 ' + (H - (vs[0] / scale) * H).toFixed(2); // a single point: a flat line
      }
      const p = path(s.cls);
      if (p.getAttribute('d') !== d) p.setAttribute('d', d);
    }
    const fmt = opts.fmt || num;
    setText(ymax, fmt(top));
    setText(ymaxr, num(topR));
    chart.classList.toggle('right', series.some(s => s.axis === 'right'));
    for (const [cls, it] of items) it.hidden = !series.some(s => s.cls === cls); // a legend for what is drawn only
    setText(xfrom, opts.from ? time(opts.from) : '');
    setText(xto, opts.to ? time(opts.to) : '');
    return {top, offScale};
  }
  // label changes a legend item's text (and marks it off the scale).
  function label(cls, text, off) {
    const it = items.get(cls);
    if (!it) return;
    if (it.lastChild.textContent !== text) it.lastChild.textContent = text;
    it.classList.toggle('off', !!off);
  }
  return {root, update, label};
}

// nice rounds up to 1, 2, 2.5 or 5 times a power of ten.
function nice(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}
