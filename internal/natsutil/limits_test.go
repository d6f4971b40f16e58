package natsutil_test

import (
	"context"
	"errors"
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
		want [3]int64 // SUBMIT, READY, RESULT
	}{
		{"file defaults", natsutil.StreamSettings{}, [3]int64{1 << 30, 256 << 20, 256 << 20}},
		{"memory defaults", natsutil.StreamSettings{Storage: jetstream.MemoryStorage}, [3]int64{64 << 20, 32 << 20, 32 << 20}},
		{"set", natsutil.StreamSettings{SubmitMaxBytes: 5 << 20, ReadyMaxBytes: 3 << 20, ResultMaxBytes: natsutil.NoLimit},
			[3]int64{5 << 20, 3 << 20, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgs := natsutil.StreamConfigs(contracts.Names{}, tc.s)
			for i, c := range cfgs {
				switch {
				case i < 3:
					if c.MaxBytes != tc.want[i] || c.Discard != jetstream.DiscardNew {
						t.Errorf("%s: max bytes %d discard %v, want %d DiscardNew", c.Name, c.MaxBytes, c.Discard, tc.want[i])
					}
				default: // EVENTS and DLQ: bounded by age, the oldest dropped
					if c.MaxBytes != -1 || c.Discard != jetstream.DiscardOld {
						t.Errorf("%s: max bytes %d discard %v, want -1 DiscardOld", c.Name, c.MaxBytes, c.Discard)
					}
				}
			}
		})
	}
}

func TestEnsureStreamsRejectsNegativeByteLimits(t *testing.T) {
	err := natsutil.EnsureStreams(context.Background(), nil, contracts.Names{}, natsutil.StreamSettings{ReadyMaxBytes: -2})
	if err == nil || !strings.Contains(err.Error(), "ReadyMaxBytes") {
		t.Fatalf("err = %v, want one naming ReadyMaxBytes", err)
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
	if e := got["EVENTS"]; e.LimitBytes != 0 || len(us) != 5 {
		t.Errorf("EVENTS usage %+v, %d streams", e, len(us))
	}
}
