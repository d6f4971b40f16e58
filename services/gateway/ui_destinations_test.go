package gateway_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestDashboardDestinationsInChromium: in a real headless Chromium, the
// overview's Destinations panel shows a destination whose workers report
// 429s with its learned rate now and two lines over time, the learned rate
// and the 429s per second; a tenant whose jobs do not use it does not see
// it, the tenant whose jobs do does.
func TestDashboardDestinationsInChromium(t *testing.T) {
	// Not parallel: Chromium takes much of a small machine.
	s := newServer(t, func(c *config.Config) { c.AdaptiveRateEnabled = true })
	q := s.st.Deps.Queue
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := q.EnqueueJobs(ctx, []redisq.Job{{Group: contracts.GroupRef{Tenant: "acme", ID: "partner"}, ID: "p",
		Type: "sleep", Destination: "partner.example", Payload: []byte(`{"ms":1}`)}}); err != nil {
		t.Fatal(err)
	}
	// workers' reports: the partner accepts some jobs and throttles others
	if _, err := q.ReportDestinations(ctx, []redisq.DestOutcome{{Destination: "partner.example", Accepted: 100}}); err != nil {
		t.Fatal(err)
	}
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		for ctx.Err() == nil {
			if _, err := q.ReportDestinations(ctx, []redisq.DestOutcome{{Destination: "partner.example", Accepted: 20, Throttled: 4}}); err != nil && ctx.Err() == nil {
				t.Errorf("report: %v", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { cancel(); <-reported }()

	b := newBrowser(t, s)
	b.login("*")
	dest := `document.querySelector('#destinations .dest[data-dest="partner.example"]')`
	drawn := func(cls string) string {
		return dest + `.querySelector('path.s-` + cls + `') !== null && ` + dest + `.querySelector('path.s-` + cls + `').getAttribute('d').includes('L')`
	}
	b.wait("partner.example's learned rate and 429s drawn", dest+` !== null && `+dest+`.dataset.state === 'learned' && `+
		drawn("learned")+` && `+drawn("throttled")+` && `+dest+`.querySelector('.dest-state').textContent.includes('429s')`, 60*time.Second)
	state := b.eval(dest + `.querySelector('.dest-state').textContent`)
	if !regexp.MustCompile(`^learned [0-9.,]+/s · [0-9.,]+/s 429s$`).MatchString(state) {
		t.Errorf("partner.example's state %q", state)
	}
	// both lines rise above zero somewhere (y is 100 at zero)
	for _, cls := range []string{"learned", "throttled"} {
		if v := b.eval(`String([...` + dest + `.querySelector('path.s-` + cls + `').getAttribute('d').matchAll(/[ML][-\d.]+ ([-\d.]+)/g)].some(m => +m[1] < 99))`); v != "true" {
			t.Errorf("the %s line never rises above zero: %s", cls, b.eval(dest+`.querySelector('path.s-`+cls+`').getAttribute('d')`))
		}
	}
	b.screenshot("overview-destinations")
	b.do("a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
	b.wait("the panel on a phone", dest+` !== null && `+dest+`.getBoundingClientRect().width > 0`, 20*time.Second)
	if w := b.eval(`String(document.documentElement.scrollWidth)`); w != "390" {
		t.Errorf("on a 390 px screen the overview is %s px wide", w)
	}
	b.screenshot("overview-destinations-phone")
	b.do("a laptop's screen", chromedp.EmulateViewport(1280, 860))
	b.noReload()

	b.do("log out", chromedp.Click(chromedp.CSS("#logout")))
	b.login("hooli")
	b.wait("hooli's overview", `document.getElementById('view').dataset.ready === 'true' && document.getElementById('destinations').dataset.count === '0'`, 20*time.Second)
	if txt := b.eval(`document.getElementById('destinations').innerText`); strings.Contains(txt, "partner.example") {
		t.Errorf("hooli sees acme's destination: %q", txt)
	}
	b.do("log out", chromedp.Click(chromedp.CSS("#logout")))
	b.login("acme")
	b.wait("acme's destination", dest+` !== null`, 20*time.Second)
	b.noReload()
}
