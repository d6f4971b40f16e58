package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
)

// starts records when each job of a type starts running.
type starts struct {
	mu sync.Mutex
	at []time.Time
}

func (s *starts) mux(typ string, d time.Duration) *processor.Mux {
	m := processor.NewMux()
	m.HandleFunc(typ, func(ctx context.Context, job *processor.Job) error {
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		s.mu.Unlock()
		time.Sleep(d)
		return nil
	})
	return m
}

func (s *starts) list() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// TestNotBeforeSurvivesAFetcherRestart: a group with notBefore 3 s ahead,
// whose fetcher is replaced before then, starts within a second after it
// and not before.
func TestNotBeforeSurvivesAFetcherRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var st starts
	cfg := e.config(nil)
	e.start(cfg, []string{stack.TargetAggregator, stack.TargetWorker, stack.TargetDispatcher}, st.mux("promo", time.Millisecond))
	side := *cfg
	side.HTTPAddr = ""
	f1 := e.start(&side, []string{stack.TargetFetcher}, nil)

	nb := time.Now().Add(3 * time.Second)
	e.submitWith("promo", "promo", 20, 20, contracts.GroupSettings{NotBefore: nb.Format(time.RFC3339Nano)})
	testkit.WaitFor(t, "the jobs stored", 10*time.Second, func() bool {
		info, ok, err := f1.st.Conns.Queue.Group(context.Background(), ref("promo"))
		return err == nil && ok && info.Jobs == 20
	})
	f1.stop(t)
	e.start(&side, []string{stack.TargetFetcher}, nil)

	ev := e.wait("promo", 30*time.Second)
	if ev.State != contracts.StateCompleted || ev.Succeeded != 20 {
		t.Fatalf("final event %+v", ev)
	}
	at := st.list()
	first := at[0]
	for _, x := range at {
		if x.Before(first) {
			first = x
		}
	}
	t.Logf("first job started %v after its notBefore", first.Sub(nb))
	if first.Before(nb) || first.After(nb.Add(time.Second)) {
		t.Fatalf("first job started at %v, %v after its notBefore: want within [0, 1s]", first, first.Sub(nb))
	}
}

// TestWindowClosesMidRunAndReopens: a group whose sending window closes at
// a minute's end while its jobs run stops being admitted then (the jobs in
// flight finish: 5 s after the close every job started has succeeded and
// the rest are queued), waits outside its window, and is admitted again when
// its next window opens a minute later. Windows have minutes for unit, so
// the test waits through one.
func TestWindowClosesMidRunAndReopens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var st starts
	r := e.start(e.config(nil), stack.PipelineTargets, st.mux("send", 50*time.Millisecond))
	q := r.st.Conns.Queue

	// the window closes at the end of a minute at least 6 s away
	now := time.Now().UTC()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < 6*time.Second {
		time.Sleep(left + 100*time.Millisecond)
		now = time.Now().UTC()
	}
	open := now.Truncate(time.Minute)
	closes := open.Add(time.Minute)
	reopens := closes.Add(time.Minute)
	hm := func(t time.Time) string { return t.Format("15:04") }
	day := func(t time.Time) string { return contracts.Weekdays[t.Weekday()] }
	ws := []contracts.Window{
		{Zone: "UTC", Days: []string{day(open)}, From: hm(open), To: hm(closes)},
		{Zone: "UTC", Days: []string{day(reopens)}, From: hm(reopens), To: hm(reopens.Add(time.Minute))},
	}
	if hm(closes) == "00:00" {
		ws[0].To = "24:00"
	}
	// two in flight at most, 50 ms each: about 40 jobs a second, more
	// than the window lasts
	const n = 6000
	e.submitWith("promo", "send", n, 1000, contracts.GroupSettings{MaxInFlight: 2, Windows: ws})

	// in the closed minute, every job admitted before the close has
	// finished (succeeded, none in flight) and the rest wait
	testkit.WaitFor(t, "into the closed minute", 3*time.Minute, func() bool {
		return time.Now().After(closes.Add(5 * time.Second))
	})
	mid := group(t, q, "promo")
	startedBefore := 0
	for _, x := range st.list() {
		if x.Before(closes.Add(5 * time.Second)) {
			startedBefore++
		}
	}
	t.Logf("5 s after the close: %d jobs started, %d succeeded, %d queued of %d", startedBefore, mid.Succeeded, mid.Pending, mid.Jobs)
	if mid.Succeeded != int64(startedBefore) || mid.Done != mid.Succeeded || mid.Pending != mid.Jobs-mid.Done {
		t.Errorf("5 s after the close: %d jobs started, %d succeeded, %d done, %d queued of %d: want the ones in flight finished and the rest queued",
			startedBefore, mid.Succeeded, mid.Done, mid.Pending, mid.Jobs)
	}

	testkit.WaitFor(t, "past the reopening", 3*time.Minute, func() bool {
		return time.Now().After(reopens.Add(2 * time.Second))
	})
	info := group(t, q, "promo")
	if err := e.client.Cancel(context.Background(), "promo"); err != nil {
		t.Fatal(err)
	}
	e.wait("promo", 30*time.Second)

	var before, closed, after int
	var lastBefore time.Time
	for _, x := range st.list() {
		switch {
		case x.Before(closes):
			before++
			if x.After(lastBefore) {
				lastBefore = x
			}
		case x.Before(reopens):
			closed++
			t.Logf("a job started %v after the window closed", x.Sub(closes))
		default:
			after++
		}
	}
	t.Logf("%d jobs started in the window, the last %v before it closed; %d while closed; %d after it reopened; %d done when read",
		before, closes.Sub(lastBefore), closed, after, info.Done)
	if before == 0 || closes.Sub(lastBefore) > time.Second {
		t.Errorf("the jobs did not run up to the close: %d started, the last %v before it", before, closes.Sub(lastBefore))
	}
	// one admission round may lease up to maxInFlight jobs just before
	// the close that start just after it
	if closed > 2 {
		t.Errorf("%d jobs started while the window was closed, want at most the 2 in flight", closed)
	}
	if after == 0 {
		t.Errorf("no job started after the window reopened")
	}
}
