package gateway

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// maxStages bounds the stages a request records; later ones are dropped.
const maxStages = 16

// stageClock records where a request spends its time, stage by stage, and
// the gateway sends it as the Server-Timing response header (W3C Server
// Timing), e.g. `auth;dur=0.02, door;dur=0.41, read;dur=3.2, publish;dur=1.9,
// total;dur=6.1` (milliseconds): a client, a browser's network panel or a
// load test sees which stage a slow answer waited in. A stage's time is the
// time since the previous mark; total is the time from the handler's start
// to the response's header. It is used by the request's own goroutine only.
type stageClock struct {
	start, last time.Time
	n           int
	names       [maxStages]string
	durs        [maxStages]time.Duration
}

// clockKey is the context key of a request's stageClock.
type clockKey struct{}

// withClock starts a request's clock.
func withClock(r *http.Request) (*http.Request, *stageClock) {
	now := time.Now()
	c := &stageClock{start: now, last: now}
	return r.WithContext(context.WithValue(r.Context(), clockKey{}, c)), c
}

// clock returns the request's clock, nil when it has none (a nil clock
// records nothing).
func clock(r *http.Request) *stageClock {
	c, _ := r.Context().Value(clockKey{}).(*stageClock)
	return c
}

// mark ends the stage name: the time since the previous mark is added to it.
func (c *stageClock) mark(name string) {
	if c == nil {
		return
	}
	now := time.Now()
	c.add(name, now.Sub(c.last))
	c.last = now
}

func (c *stageClock) add(name string, d time.Duration) {
	for i := range c.n {
		if c.names[i] == name {
			c.durs[i] += d
			return
		}
	}
	if c.n < maxStages {
		c.names[c.n], c.durs[c.n] = name, d
		c.n++
	}
}

// header is the Server-Timing value of the stages so far and the total.
func (c *stageClock) header() string {
	b := make([]byte, 0, 24*(c.n+1))
	for i := range c.n {
		b = appendTiming(b, c.names[i], c.durs[i])
		b = append(b, ", "...)
	}
	return string(appendTiming(b, "total", time.Since(c.start)))
}

func appendTiming(b []byte, name string, d time.Duration) []byte {
	b = append(b, name...)
	b = append(b, ";dur="...)
	return strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', -1, 64)
}
