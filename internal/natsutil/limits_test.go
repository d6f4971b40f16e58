package natsutil_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func TestStreamConfigsByteLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    natsutil.StreamSettings
		want [5]int64 // SUBMIT, READY, RESULT, EVENTS, DLQ
		per  int64    // DLQ messages per subject
	}{
		{"file defaults", natsutil.StreamSettings{}, [5]int64{1 << 30, 256 << 20, 256 << 20, 1 << 30, 1 << 30}, 1000},
		{"memory defaults", natsutil.StreamSettings{Storage: jetstream.MemoryStorage}, [5]int64{64 << 20, 32 << 20, 32 << 20, 32 << 20, 16 << 20}, 1000},
		{"set", natsutil.StreamSettings{SubmitMaxBytes: 5 << 20, ReadyMaxBytes: 3 << 20, ResultMaxBytes: natsutil.NoLimit,
			EventsMaxBytes: 7 << 20, DLQMaxBytes: natsutil.NoLimit, DLQMaxMsgsPerSubject: 50},
			[5]int64{5 << 20, 3 << 20, -1, 7 << 20, -1}, 50},
		{"no per-subject limit", natsutil.StreamSettings{DLQMaxMsgsPerSubject: natsutil.NoLimit},
			[5]int64{1 << 30, 256 << 20, 256 << 20, 1 << 30, 1 << 30}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgs := natsutil.StreamConfigs(contracts.Names{}, tc.s)
			for i, c := range cfgs {
				switch {
				case i < 3:
					if c.MaxBytes != tc.want[i] || c.Discard != jetstream.DiscardNew {
						t.Errorf("%s: max bytes %d discard %v, want %d DiscardNew", c.Name, c.MaxBytes, c.Discard, tc.want[i])
					}
				default: // EVENTS and DLQ: bounded by age and size, the oldest dropped
					if c.MaxBytes != tc.want[i] || c.Discard != jetstream.DiscardOld || c.MaxAge != natsutil.DefaultMaxAge {
						t.Errorf("%s: max bytes %d discard %v max age %s, want %d DiscardOld", c.Name, c.MaxBytes, c.Discard, c.MaxAge, tc.want[i])
					}
				}
				if i == 4 && c.MaxMsgsPerSubject != tc.per {
					t.Errorf("%s: %d messages per subject, want %d", c.Name, c.MaxMsgsPerSubject, tc.per)
				}
				if i == 3 && c.MaxMsgsPerSubject != natsutil.DefaultEventsMaxMsgsPerSubject {
					t.Errorf("%s: %d messages per subject, want %d", c.Name, c.MaxMsgsPerSubject, natsutil.DefaultEventsMaxMsgsPerSubject)
				}
			}
		})
	}
}

func TestEnsureStreamsRejectsNegativeByteLimits(t *testing.T) {
	for name, s := range map[string]natsutil.StreamSettings{
		"ReadyMaxBytes":           {ReadyMaxBytes: -2},
		"EventsMaxBytes":          {EventsMaxBytes: -2},
		"DLQMaxBytes":             {DLQMaxBytes: -3},
		"DLQMaxMsgsPerSubject":    {DLQMaxMsgsPerSubject: -2},
		"EventsMaxMsgsPerSubject": {EventsMaxMsgsPerSubject: -2},
	} {
		err := natsutil.EnsureStreams(context.Background(), nil, contracts.Names{}, s)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("err = %v, want one naming %s", err, name)
		}
	}
}

// Streams made before the limits existed (DiscardOld, no MaxBytes) take
// them at the next start.
func TestEnsureStreamsAddsLimitsToExistingStreams(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	for _, c := range natsutil.StreamConfigs(n, natsutil.StreamSettings{}) {
		c.MaxBytes, c.Discard = -1, jetstream.DiscardOld
		if _, err := js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{ReadyMaxBytes: 8 << 20}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, n.StreamReady())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxBytes != 8<<20 || c.Discard != jetstream.DiscardNew {
		t.Fatalf("READY after EnsureStreams: max bytes %d discard %v", c.MaxBytes, c.Discard)
	}
	for _, name := range []string{n.StreamEvents(), n.StreamDLQ()} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		if c.MaxBytes != 1<<30 || c.Discard != jetstream.DiscardOld || (name == n.StreamDLQ()) != (c.MaxMsgsPerSubject == 1000) {
			t.Errorf("%s after EnsureStreams: max bytes %d discard %v, %d per subject", name, c.MaxBytes, c.Discard, c.MaxMsgsPerSubject)
		}
	}
}

// The DLQ is bounded in bytes, and one tenant's flood of dead letters
// drops its own oldest ones, not another tenant's: each tenant and reason
// is a subject with its own count.
func TestDLQBoundedPerTenant(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	const limit, per = 256 << 10, 20
	s := natsutil.StreamSettings{DLQMaxBytes: limit, DLQMaxMsgsPerSubject: per, MaxMsgSize: 16 << 10}
	if err := natsutil.EnsureStreams(ctx, js, n, s); err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, i int) {
		t.Helper()
		if _, err := js.Publish(ctx, subject, []byte(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 4000)))); err != nil {
			t.Fatal(err)
		}
	}
	// The evidence of tenant good, then 300 dead letters (~1.2 MB) of
	// tenant bad, of two reasons.
	good := n.DLQOf(n.Submit(contracts.Group("good", "g1")), contracts.ReasonBadJSON)
	publish(good, 0)
	for i := range 300 {
		publish(n.DLQ("bad", []string{contracts.ReasonBadJSON, contracts.ReasonInvalidField}[i%2]), i)
	}
	st, err := js.Stream(ctx, n.StreamDLQ())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(n.DLQAll()))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Bytes > limit {
		t.Errorf("DLQ holds %d bytes, limit %d", info.State.Bytes, limit)
	}
	if got := info.State.Subjects[good]; got != 1 {
		t.Errorf("tenant good keeps %d dead letters on %s, want 1: %v", got, good, info.State.Subjects)
	}
	for _, r := range []string{contracts.ReasonBadJSON, contracts.ReasonInvalidField} {
		if got := info.State.Subjects[n.DLQ("bad", r)]; got != per {
			t.Errorf("tenant bad keeps %d dead letters of %s, want the newest %d", got, r, per)
		}
	}
	m, err := st.GetLastMsgForSubject(ctx, n.DLQ("bad", contracts.ReasonInvalidField))
	if err != nil || !strings.Contains(string(m.Data), `"i":299`) {
		t.Errorf("last kept dead letter of bad: %v, want the newest (299)", err)
	}
}

// Past its byte limit, EVENTS drops its oldest events.
func TestEventsBounded(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	const limit = 128 << 10
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{EventsMaxBytes: limit, MaxMsgSize: 16 << 10}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := js.Publish(ctx, n.Events(contracts.Group("acme", fmt.Sprintf("g%d", i))), []byte(strings.Repeat("e", 4000))); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, n.StreamEvents())
	if err != nil {
		t.Fatal(err)
	}
	if s := st.CachedInfo().State; s.Bytes > limit || s.FirstSeq == 1 || s.LastSeq != 100 {
		t.Fatalf("EVENTS holds %d bytes (limit %d), sequences %d..%d", s.Bytes, limit, s.FirstSeq, s.LastSeq)
	}
}

// A group whose events are many (a tenant pausing and resuming it in a
// loop) keeps only its newest EventsMaxMsgsPerSubject on EVENTS; another
// group's events stay.
func TestEventsBoundedPerGroup(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	const per = 25
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{EventsMaxMsgsPerSubject: per}); err != nil {
		t.Fatal(err)
	}
	quiet, busy := n.Events(contracts.Group("good", "g1")), n.Events(contracts.Group("bad", "spam"))
	for i := range 3 {
		if _, err := js.Publish(ctx, quiet, []byte(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 500 {
		if _, err := js.Publish(ctx, busy, []byte(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, n.StreamEvents())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(n.EventsAll()))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects[quiet]; got != 3 {
		t.Errorf("the quiet group keeps %d events, want 3: %v", got, info.State.Subjects)
	}
	if got := info.State.Subjects[busy]; got != per {
		t.Errorf("the busy group keeps %d events, want its newest %d", got, per)
	}
	if m, err := st.GetLastMsgForSubject(ctx, busy); err != nil || string(m.Data) != `{"i":499}` {
		t.Errorf("the busy group's last event: %v, want its newest", err)
	}
}

// A byte limit the server cannot reserve fails the start with an error that
// says so.
func TestEnsureStreamsLimitBeyondServerStore(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	err := natsutil.EnsureStreams(context.Background(), js, contracts.Names{},
		natsutil.StreamSettings{Storage: jetstream.MemoryStorage, SubmitMaxBytes: 1 << 60})
	if !errors.Is(err, natsutil.ErrStreamResources) || !strings.Contains(err.Error(), "BULKACTION_SUBMIT") {
		t.Fatalf("err = %v, want ErrStreamResources naming the stream", err)
	}
}

// SUBMIT at its byte limit refuses a submission: the client gets an error
// ([natsutil.IsStreamFull]) for exactly the jobs not stored; once the
// stream has room again the same submission is accepted.
func TestSubmitFullClientGetsError(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	const limit = 64 << 10
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{SubmitMaxBytes: limit, MaxMsgSize: 16 << 10}); err != nil {
		t.Fatal(err)
	}
	cl := client.New(js, client.Options{BatchSize: 1})
	payload := []byte(`{"pad":"` + strings.Repeat("x", 4000) + `"}`)
	var jobs []client.Job
	for i := range 40 { // 40 messages of ~4 KiB: more than 64 KiB
		jobs = append(jobs, client.Job{ID: "job-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Type: "t", Payload: payload})
	}
	err := cl.Submit(ctx, "g", jobs...)
	var se *client.SubmitError
	if !errors.As(err, &se) || !natsutil.IsStreamFull(err) {
		t.Fatalf("submit into a full SUBMIT: %v, want a *client.SubmitError for a full stream", err)
	}
	st, err := js.Stream(ctx, n.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.State.Bytes > limit || int(info.State.Msgs)+len(se.Failed) != len(jobs) {
		t.Fatalf("SUBMIT holds %d bytes in %d messages, %d jobs refused, of %d", info.State.Bytes, info.State.Msgs, len(se.Failed), len(jobs))
	}
	// Room returns (the fetchers consume): the refused jobs go in.
	for k := 0; k < len(se.Failed); k += 10 {
		if err := st.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		var again []client.Job
		for _, i := range se.Failed[k:min(k+10, len(se.Failed))] {
			again = append(again, jobs[i])
		}
		if err := cl.Submit(ctx, "g", again...); err != nil {
			t.Fatalf("submit once SUBMIT has room: %v", err)
		}
	}
	if natsutil.IsStreamFull(errors.New("maximum bytes exceeded")) || natsutil.IsStreamFull(nats.ErrTimeout) {
		t.Fatal("IsStreamFull matched an error that is not a JetStream refusal")
	}
}

func TestStreamsUsage(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{ReadyMaxBytes: 8 << 20}); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(n.Ready("t"))
	m.Data = []byte("hello")
	if err := natsutil.PublishAll(ctx, js, []*nats.Msg{m})[0]; err != nil {
		t.Fatal(err)
	}
	us, err := natsutil.StreamsUsage(ctx, js, n)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]natsutil.StreamUsage{}
	for _, u := range us {
		got[u.Stream] = u
	}
	if r := got["READY"]; r.Msgs != 1 || r.Bytes == 0 || r.LimitBytes != 8<<20 {
		t.Errorf("READY usage %+v", r)
	}
	if s := got["SUBMIT"]; s.Msgs != 0 || s.LimitBytes != natsutil.DefaultSubmitMaxBytes {
		t.Errorf("SUBMIT usage %+v", s)
	}
	if e := got["EVENTS"]; e.LimitBytes != natsutil.DefaultEventsMaxBytes || len(us) != 5 {
		t.Errorf("EVENTS usage %+v, %d streams", e, len(us))
	}
}
