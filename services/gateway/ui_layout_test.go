package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// The dashboard is checked at two widths: a desktop's and a phone's.
var dashboardWidths = []int64{1400, 420}

// size sets the viewport's width (and a fixed height).
func (b *browser) size(w int64) {
	b.t.Helper()
	b.do(fmt.Sprintf("a %d px wide screen", w), chromedp.EmulateViewport(w, 900))
}

// js runs body inside a function with the layout helpers in scope and
// returns what it returns as a string (objects as JSON):
//   - clipped(e): e's content does not fit in its box (cut or ellipsised);
//   - shown(e): e takes room on the page;
//   - overlap(a, b): the boxes of a and b intersect;
//   - inside(a, b): a's box lies within b's (1 px of slack);
//   - dd(label): the value of the <dt> named label in a <dl>.
func (b *browser) js(body string) string {
	b.t.Helper()
	return b.eval(`(() => {
		const clipped = e => e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1;
		const shown = e => !!e && e.getClientRects().length > 0 && e.getBoundingClientRect().width > 0;
		const overlap = (a, b) => { const r = a.getBoundingClientRect(), s = b.getBoundingClientRect();
			return r.width > 0 && s.width > 0 && r.left < s.right - 0.5 && s.left < r.right - 0.5 && r.top < s.bottom - 0.5 && s.top < r.bottom - 0.5; };
		const inside = (a, b) => { const r = a.getBoundingClientRect(), s = b.getBoundingClientRect();
			return r.left >= s.left - 1 && r.right <= s.right + 1 && r.top >= s.top - 1 && r.bottom <= s.bottom + 1; };
		const dd = label => { const dt = [...document.querySelectorAll('dt')].find(d => d.textContent === label); return dt ? dt.nextElementSibling : null; };
		const out = (() => {` + body + `})();
		return typeof out === 'string' ? out : JSON.stringify(out);
	})()`)
}

// TestDashboardSignInShowsOnlyTheForm: before anyone signs in, the page
// shows the sign-in form and neither the views' links nor "Log out".
func TestDashboardSignInShowsOnlyTheForm(t *testing.T) {
	s := newServer(t, nil)
	b := newBrowser(t, s)
	for _, w := range dashboardWidths {
		b.size(w)
		b.do("open the dashboard", chromedp.Navigate(s.base+"/ui/"))
		b.wait("the sign-in form", `!document.getElementById('login').hidden && document.getElementById('key').getBoundingClientRect().width > 0`, 20*time.Second)
		if got := b.js(`return [...document.querySelectorAll('#nav a, #who, #logout')].filter(shown).map(e => e.id || e.textContent)`); got != "[]" {
			t.Errorf("at %d px the sign-in page shows %s", w, got)
		}
		b.screenshot(fmt.Sprintf("sign-in-%d", w))
	}
}

// trickle submits about perSecond jobs a second to tenant's group gid
// until the test ends.
func trickle(t *testing.T, s *server, tenant, gid string, perSecond int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			body := ndjson(fmt.Sprintf("t%d-", i), perSecond/4, `{"ms":1}`)
			req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/v1/groups/"+gid+"/jobs", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+s.keys[tenant])
			req.Header.Set("Content-Type", "application/x-ndjson")
			if resp, err := s.httpc.Do(req); err == nil {
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// TestDashboardOverviewScale: with a limit of 10,000/s and 40 jobs/s
// admitted, the overview's chart is scaled to the data (the admitted line
// reaches the upper half of the chart) and says where the limit is; a
// tenant of weight 2 is never shown a limit above the global one; the
// worker types' table cuts no cell, at 1400 and 420 px.
func TestDashboardOverviewScale(t *testing.T) {
	s := newServer(t, func(c *config.Config) { c.GlobalRps = 10000 })
	if err := s.st.Conns.Queue.SetTenantWeight(context.Background(), "acme", 2); err != nil {
		t.Fatal(err)
	}
	trickle(t, s, "acme", "trickle", 40)
	b := newBrowser(t, s)
	b.login("*")
	var ov gateway.Overview
	testkit.WaitFor(t, "five windows with jobs admitted", 30*time.Second, func() bool {
		s.do("GET", "/v1/overview", "*", nil).json(t, &ov)
		n := 0
		for _, a := range ov.Rate.History.Admitted {
			if a != nil && *a > 0 {
				n++
			}
		}
		return n >= 5
	})
	for _, w := range append([]int64{1280}, dashboardWidths...) { // 1280: three tables share the row most narrowly
		b.size(w)
		b.wait("the chart", `document.getElementById('view').dataset.ready === 'true' && (document.querySelector('path.s-admitted')?.getAttribute('d') || '').split(/[ML]/).length > 5`, 20*time.Second)
		time.Sleep(1500 * time.Millisecond) // a redraw at this width
		var c struct {
			Top, Height float64
			Limit       string
			LimitTop    *float64
			Legend      string
		}
		if err := json.Unmarshal([]byte(b.js(`
			const p = document.querySelector('path.s-admitted'), bb = p.getBBox(), l = document.querySelector('path.s-limit');
			const ld = l ? l.getAttribute('d') || '' : '';
			return {top: bb.y, height: bb.height, limit: ld, limitTop: ld ? l.getBBox().y : null,
				legend: document.querySelector('.chart').parentElement.innerText};`)), &c); err != nil {
			t.Fatal(err)
		}
		t.Logf("at %d px: admitted line from y=%.1f (of 0..100, 0 at the top), limit %q, legend %q", w, c.Top, c.Limit, c.Legend)
		if c.Top > 55 {
			t.Errorf("at %d px the admitted line (40/s of a 10,000/s limit) peaks at y=%.1f of 100: flat at the bottom", w, c.Top)
		}
		if c.Limit != "" && (c.LimitTop == nil || *c.LimitTop < 0) {
			t.Errorf("at %d px the limit line is drawn outside the chart (d=%q)", w, c.Limit)
		}
		if c.Limit == "" && !strings.Contains(c.Legend, "10,000/s") {
			t.Errorf("at %d px the chart neither draws the limit nor says it: %q", w, c.Legend)
		}
		if cut := b.js(`
			const panel = [...document.querySelectorAll('section.panel')].find(s => s.querySelector('h2')?.textContent === 'Worker types');
			return [...panel.querySelectorAll('th, td')].filter(shown).filter(e => clipped(e) || !inside(e, panel)).map(e => e.textContent);`); cut != "[]" {
			t.Errorf("at %d px the worker types' table cuts %s", w, cut)
		}
		if ww := b.eval(`String(document.documentElement.scrollWidth)`); ww != fmt.Sprint(w) {
			t.Errorf("at %d px the overview is %s px wide", w, ww)
		}
		// the tables' panels fill their row: no column of it is left empty
		if gap := b.js(`
			const ps = [...document.querySelectorAll('.panels > section.panel')].filter(shown), row = ps[0].parentElement.getBoundingClientRect();
			const right = Math.max(...ps.map(p => p.getBoundingClientRect().right));
			return String(Math.round(row.right - right));`); gap != "0" {
			t.Errorf("at %d px the tables' row ends %s px before its right edge", w, gap)
		}
		b.screenshot(fmt.Sprintf("overview-%d", w))
	}

	// acme (weight 2) is alone: its limit is the global limit, not twice it
	var tov gateway.Overview
	s.do("GET", "/v1/overview", "acme", nil).json(t, &tov)
	if tov.Rate.Limit > 10000 || tov.Rate.LimitPerSecond > 10000 {
		t.Errorf("acme's overview: limit %d (%v/s), above the global 10,000", tov.Rate.Limit, tov.Rate.LimitPerSecond)
	}
	for i, l := range tov.Rate.History.Limit {
		if l != nil && *l > 10000 {
			t.Errorf("acme's limit history [%d] = %d, above the global 10,000", i, *l)
			break
		}
	}
	b.size(1400)
	b.do("log out", chromedp.Click(chromedp.CSS("#logout")))
	b.login("acme")
	b.wait("acme's chart", `document.getElementById('view').dataset.ready === 'true' && (document.querySelector('path.s-admitted')?.getAttribute('d') || '') !== ''`, 20*time.Second)
	if txt := b.eval(`document.getElementById('view').innerText`); strings.Contains(txt, "20,000") || !strings.Contains(txt, "10,000/s") {
		t.Errorf("acme's overview: %q", txt)
	}
	b.screenshot("overview-tenant")
	b.noReload()
}

// TestDashboardTenantsShares: with weights 3 and 1, the tenants' shares of
// the limit add up to 100% (never above), no tenant's limit is above the
// global one, and unlimited quotas say so instead of drawing empty bars,
// at 1400 and 420 px.
func TestDashboardTenantsShares(t *testing.T) {
	s := newServer(t, func(c *config.Config) { c.GlobalRps = 60 })
	ctx := context.Background()
	if err := s.st.Conns.Queue.SetTenantWeight(ctx, "acme", 3); err != nil {
		t.Fatal(err)
	}
	s.submit("acme", "big", "?total=1200", ndjson("a", 1200, `{"ms":1}`))
	s.submit("hooli", "big", "?total=1200", ndjson("h", 1200, `{"ms":1}`))
	var tl gateway.TenantList
	testkit.WaitFor(t, "two active tenants with jobs admitted", 30*time.Second, func() bool {
		s.do("GET", "/v1/tenants", "*", nil).json(t, &tl)
		n := 0
		for _, v := range tl.Tenants {
			if v.Active && v.Admitted != nil && *v.Admitted > 0 {
				n++
			}
		}
		return n == 2
	})
	var limitShares, rateShares float64
	for _, v := range tl.Tenants {
		if v.RateLimit > tl.GlobalLimit {
			t.Errorf("%s's limit %d per window is above the global %d", v.Tenant, v.RateLimit, tl.GlobalLimit)
		}
		if v.Active {
			limitShares += v.LimitShare
		}
		if v.RateShare != nil {
			rateShares += *v.RateShare
		}
	}
	if limitShares > 1.0001 || rateShares > 1.0001 {
		t.Errorf("the active tenants' shares of the limit add up to %.4f and of the rate to %.4f: %+v", limitShares, rateShares, tl.Tenants)
	}
	if a := tl.Tenants[0]; a.Tenant != "acme" || math.Abs(a.LimitShare-0.75) > 0.01 {
		t.Errorf("acme (weight 3 of 4) gets %+v, want a share of 75%%", a)
	}

	b := newBrowser(t, s)
	b.login("*")
	b.do("open the tenants", chromedp.Click(chromedp.CSS(`#nav a[data-view="tenants"]`)))
	b.wait("the tenants", `document.querySelector('#tenants-table tr[data-tenant="hooli"]') !== null`, 20*time.Second)
	for _, w := range dashboardWidths {
		b.size(w)
		time.Sleep(2500 * time.Millisecond) // a refresh at this width
		var rows []struct {
			Tenant string
			Bars   int
			Quota  string
			Cut    []string
		}
		if err := json.Unmarshal([]byte(b.js(`
			return [...document.querySelectorAll('#tenants-table tbody tr')].map(tr => ({
				tenant: tr.dataset.tenant,
				bars: tr.lastElementChild.querySelectorAll('.bar').length,
				quota: tr.lastElementChild.innerText,
				cut: [...tr.querySelectorAll('td')].filter(clipped).map(e => e.innerText)}));`)), &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Bars > 0 || !strings.Contains(r.Quota, "unlimited") {
				t.Errorf("at %d px %s's unlimited quotas: %d bars, %q", w, r.Tenant, r.Bars, r.Quota)
			}
			if len(r.Cut) > 0 {
				t.Errorf("at %d px %s's row cuts %q", w, r.Tenant, r.Cut)
			}
		}
		if cut := b.js(`return [...document.querySelectorAll('#tenants-table th')].filter(clipped).map(e => e.innerText)`); cut != "[]" {
			t.Errorf("at %d px the tenants' headers cut %s", w, cut)
		}
		if ww := b.eval(`String(document.documentElement.scrollWidth)`); ww != fmt.Sprint(w) {
			t.Errorf("at %d px the tenants view is %s px wide", w, ww)
		}
		b.screenshot(fmt.Sprintf("tenants-%d", w))
	}
	b.noReload()
}

// TestDashboardGroupsAndDetail: the groups' rows say a waiting group's
// place in plain words and why a group waits in full; at 420 px a row's
// progress bar covers no name and its buttons are whole; a group's
// "Counts over time" draws its failures from its start; a cancelled
// group's finished time is when its last job ended (its last event).
func TestDashboardGroupsAndDetail(t *testing.T) {
	s := newServer(t, func(c *config.Config) { c.GlobalRps = 60 })
	fails := func(prefix string, n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			p := `{"ms":5}`
			if i%3 == 0 {
				p = `{"ms":5,"permanentFailRate":1}`
			}
			fmt.Fprintf(&b, `{"jobId":"%s%d","type":"sleep","payload":%s}`+"\n", prefix, i, p)
		}
		return b.String()
	}
	s.submit("acme", "flaky", "?total=150", fails("f", 150))
	// stop: four long jobs running when the group is cancelled
	s.submit("acme", "stop", "?total=4", ndjson("s", 4, `{"ms":4000}`))
	testkit.WaitFor(t, "stop's four jobs in flight", 30*time.Second, func() bool {
		r := s.do("GET", "/v1/groups/stop", "acme", nil)
		var v gateway.GroupView
		if r.code == http.StatusOK {
			r.json(t, &v)
		}
		return v.InFlight == 4
	})
	time.Sleep(500 * time.Millisecond)
	if r := s.do("POST", "/v1/groups/stop/cancel", "acme", nil); r.code != http.StatusAccepted {
		t.Fatalf("cancel stop: %d %s", r.code, r.body)
	}
	s.waitState("acme", "flaky", "COMPLETED")
	// waiting groups: one held by its in-flight limit, two tenants' big
	// groups held by the rate limit
	s.submit("acme", "held", "?total=30&maxInFlight=1", ndjson("h", 30, `{"ms":1500}`))
	s.submit("acme", "bulk", "?total=2000", ndjson("b", 2000, `{"ms":1}`))
	s.submit("hooli", "bulk", "?total=2000", fails("b", 2000)) // three buttons: it has failures

	b := newBrowser(t, s)
	b.login("*")
	b.do("open the groups", chromedp.Click(chromedp.CSS(`#nav a[data-view="groups"]`)))
	row := func(key string) string { return `document.querySelector('.grow[data-key="` + key + `"]')` }
	for _, w := range append(dashboardWidths, 390) { // 390: a small phone's screen
		b.size(w)
		b.wait("the waiting groups' status", row("acme/bulk")+`?.querySelector('.pos')?.textContent.trim().length > 1 && `+
			row("hooli/bulk")+`?.querySelector('.pos')?.textContent.trim().length > 1 && `+
			row("acme/held")+`?.querySelector('.why')?.textContent.includes('in-flight')`, 30*time.Second)
		b.screenshot(fmt.Sprintf("groups-%d", w))
		var rows []struct {
			Key, Pos, Why              string
			PosCut, WhyCut, WhyShown   bool
			BarOverName, ButtonsCut    bool
			PosShown, RowFitsTheScreen bool
		}
		if err := json.Unmarshal([]byte(b.js(`
			return [...document.querySelectorAll('.grow')].map(r => {
				const pos = r.querySelector('.pos'), why = r.querySelector('.why'), bar = r.querySelector('.bar');
				const names = [...r.querySelectorAll('.gid a, .gid .tn')];
				const buttons = [...r.querySelectorAll('button')].filter(b => getComputedStyle(b).visibility !== 'hidden' && shown(b));
				return {key: r.dataset.key, pos: pos.innerText, why: why.innerText,
					posCut: shown(pos) && clipped(pos), whyCut: shown(why) && clipped(why), whyShown: shown(why), posShown: shown(pos),
					barOverName: names.some(n => overlap(bar, n)),
					buttonsCut: buttons.some(b => !inside(b, r) || !inside(b, b.parentElement) || b.getBoundingClientRect().right > innerWidth || clipped(b)),
					rowFitsTheScreen: r.getBoundingClientRect().right <= innerWidth + 1};
			});`)), &rows); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, r := range rows {
			seen[r.Key] = true
			if r.BarOverName || r.ButtonsCut || !r.RowFitsTheScreen {
				t.Errorf("at %d px row %s: bar over its name %v, buttons cut %v, fits the screen %v", w, r.Key, r.BarOverName, r.ButtonsCut, r.RowFitsTheScreen)
			}
			if r.WhyCut || r.PosCut {
				t.Errorf("at %d px row %s cuts its position %q (%v) or why it waits %q (%v)", w, r.Key, r.Pos, r.PosCut, r.Why, r.WhyCut)
			}
			if strings.Contains(r.Pos, "#") || strings.Contains(r.Pos, "· t") {
				t.Errorf("at %d px row %s: position %q is not in words", w, r.Key, r.Pos)
			}
			if r.Key == "acme/held" && (!r.WhyShown || !strings.Contains(r.Why, "in-flight limit reached")) {
				t.Errorf("at %d px the held group's row says why it waits: %q (shown %v)", w, r.Why, r.WhyShown)
			}
			if (r.Key == "acme/bulk" || r.Key == "hooli/bulk") && (!r.PosShown || !strings.Contains(r.Pos, "line")) {
				t.Errorf("at %d px row %s: position %q (shown %v)", w, r.Key, r.Pos, r.PosShown)
			}
		}
		if n := b.eval(`String([...document.querySelectorAll('.grow[data-key="hooli/bulk"] button')].filter(b => getComputedStyle(b).visibility !== 'hidden').length)`); n != "3" {
			t.Errorf("at %d px hooli/bulk (running, with failures) shows %s buttons, want 3", w, n)
		}
		for _, k := range []string{"acme/held", "acme/bulk", "hooli/bulk", "acme/stop", "acme/flaky"} {
			if !seen[k] {
				t.Errorf("at %d px no row for %s", w, k)
			}
		}
		if ww := b.eval(`String(document.documentElement.scrollWidth)`); ww != fmt.Sprint(w) {
			t.Errorf("at %d px the groups view is %s px wide", w, ww)
		}
	}

	// the failed line of "Counts over time" runs from the group's start
	s.waitState("acme", "stop", "CANCELLED")
	for _, w := range dashboardWidths {
		b.size(w)
		b.do("open flaky", chromedp.Evaluate[chromedp.Void](`location.hash = '#/group/acme/flaky'`))
		b.wait("flaky's chart", `document.getElementById('view').dataset.state === 'COMPLETED' && (document.querySelector('path.s-failed')?.getAttribute('d') || '').includes('L') && document.querySelectorAll('#events li').length > 0`, 30*time.Second)
		time.Sleep(time.Second) // the progress samples and the first event are both in
		var c struct {
			X, Width float64
			D        string
			Cut      []string
		}
		if err := json.Unmarshal([]byte(b.js(`
			const p = document.querySelector('path.s-failed'), bb = p.getBBox();
			return {x: bb.x, width: bb.width, d: p.getAttribute('d'),
				cut: [...document.querySelectorAll('dd')].filter(clipped).map(e => e.innerText)};`)), &c); err != nil {
			t.Fatal(err)
		}
		if c.X > 10 || c.Width < 900 || strings.Count(c.D, "M") != 1 {
			t.Errorf("at %d px the failed line spans x %.0f..%.0f of 0..1000 (%s)", w, c.X, c.X+c.Width, c.D)
		}
		if len(c.Cut) > 0 {
			t.Errorf("at %d px the status cuts %q", w, c.Cut)
		}
		if gap := b.js(`
			const ps = [...document.querySelectorAll('.panels > section.panel')].slice(0, 2), row = ps[0].parentElement.getBoundingClientRect();
			return String(Math.round(row.right - Math.max(...ps.map(p => p.getBoundingClientRect().right))));`); gap != "0" {
			t.Errorf("at %d px the status and the chart end %s px before the row's right edge", w, gap)
		}
		if ww := b.eval(`String(document.documentElement.scrollWidth)`); ww != fmt.Sprint(w) {
			t.Errorf("at %d px the group's page is %s px wide", w, ww)
		}
		b.screenshot(fmt.Sprintf("detail-flaky-%d", w))
	}

	// the cancelled group finished when its last running job did
	v := s.group("acme", "stop")
	ectx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, resp := s.sse(ectx, "acme", "stop", "")
	last, ok := <-ch
	resp.Body.Close()
	if !ok {
		t.Fatal("no event of the cancelled group")
	}
	lastAt, _ := last.data["at"].(string)
	t.Logf("stop: cancelled (finishedAt) %v, last event %s %s", v.FinishedAt, last.name, lastAt)
	b.size(1400)
	b.do("open stop", chromedp.Evaluate[chromedp.Void](`location.hash = '#/group/acme/stop'`))
	b.wait("stop's events", `document.getElementById('view').dataset.state === 'CANCELLED' && document.querySelectorAll('#events li').length > 0`, 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	want := b.eval(`new Date('` + lastAt + `').toLocaleString()`)
	if got := b.js(`return dd('Finished').innerText`); !strings.HasPrefix(got, want) {
		t.Errorf("the cancelled group shows Finished %q, its last event was at %q", got, want)
	}
	b.screenshot("detail-cancelled")
	b.noReload()
}
