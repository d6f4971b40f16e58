package gateway

import (
	"context"
	"io"
	"runtime"
	"sync"
)

// readTurns lets at most readersPerTenant() jobs requests of one tenant
// read and parse their bodies at once on a replica; the tenant's others
// wait for a turn, in order of arrival. A request holds its turn for a
// stretch of its body (the pacer's: paceEvery jobs or paceBytes bytes) and
// gives it back between stretches, while it waits for its tenant's rates
// and while it waits for its body to arrive (turnBody), so the tenant's
// requests take turns stretch by stretch and a slow body holds none. Parsing is
// most of the gateway's CPU: a tenant's flood of uploads in its burst then
// takes at most half of the replica's CPUs, and another tenant's request is
// parsed on the rest without waiting behind it. A tenant loses nothing it
// is allowed: one CPU parses several hundred thousand jobs a second, far
// above the default job rate. Admin keys take no turn.
type readTurns struct {
	mu sync.Mutex
	m  map[string]*tenantTurns
}

type tenantTurns struct {
	slots chan struct{} // a token per turn held
	users int           // requests holding or waiting for a turn
}

// readersPerTenant is how many jobs requests of a tenant read at once on a
// replica: half its CPUs, at least one.
func readersPerTenant() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// take waits for a turn of tenant; false when ctx ended first (no turn is
// then held). A free turn is taken even if ctx has ended.
func (t *readTurns) take(ctx context.Context, tenant string) bool {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[string]*tenantTurns{}
	}
	tt := t.m[tenant]
	if tt == nil {
		tt = &tenantTurns{slots: make(chan struct{}, readersPerTenant())}
		t.m[tenant] = tt
	}
	tt.users++
	t.mu.Unlock()
	select {
	case tt.slots <- struct{}{}:
		return true
	default:
	}
	select {
	case tt.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		t.leave(tenant, tt)
		return false
	}
}

// give gives back a turn of tenant that take gave.
func (t *readTurns) give(tenant string) {
	t.mu.Lock()
	tt := t.m[tenant]
	t.mu.Unlock()
	<-tt.slots
	t.leave(tenant, tt)
}

func (t *readTurns) leave(tenant string, tt *tenantTurns) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tt.users--; tt.users == 0 {
		delete(t.m, tenant)
	}
}

// turnBody is a jobs request's body that gives back the request's turn
// while it waits for the network: a turn is for parsing, so a body that
// arrives slowly does not keep its tenant's other requests from reading.
type turnBody struct {
	r io.Reader
	p *jobPacer
}

func (b turnBody) Read(buf []byte) (int, error) {
	held := b.p.turn
	b.p.endRead()
	n, err := b.r.Read(buf)
	if held && !b.p.takeTurn() {
		return n, context.Cause(b.p.r.Context())
	}
	return n, err
}
