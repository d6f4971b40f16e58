package natsutil_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

type wantStream struct {
	name      string
	subject   string
	retention jetstream.RetentionPolicy
	maxAge    time.Duration
}

func wantStreams(n contracts.Names, maxAge time.Duration) []wantStream {
	return []wantStream{
		{n.StreamSubmit(), n.SubmitAll(), jetstream.LimitsPolicy, 0},
		{n.StreamReady(), n.ReadyAll(), jetstream.WorkQueuePolicy, 0},
		{n.StreamResult(), n.ResultAll(), jetstream.WorkQueuePolicy, 0},
		{n.StreamEvents(), n.EventsAll(), jetstream.LimitsPolicy, maxAge},
		{n.StreamDLQ(), n.DLQAll(), jetstream.LimitsPolicy, maxAge},
	}
}

func TestStreamConfigsDefaults(t *testing.T) {
	cfgs := natsutil.StreamConfigs(contracts.Names{}, natsutil.StreamSettings{})
	want := []wantStream{
		{"BULKACTION_SUBMIT", "bulkaction.submit.>", jetstream.LimitsPolicy, 0},
		{"BULKACTION_READY", "bulkaction.ready.>", jetstream.WorkQueuePolicy, 0},
		{"BULKACTION_RESULT", "bulkaction.result.>", jetstream.WorkQueuePolicy, 0},
		{"BULKACTION_EVENTS", "bulkaction.events.>", jetstream.LimitsPolicy, 7 * 24 * time.Hour},
		{"BULKACTION_DLQ", "bulkaction.dlq.>", jetstream.LimitsPolicy, 7 * 24 * time.Hour},
	}
	if len(cfgs) != len(want) {
		t.Fatalf("%d configs, want %d", len(cfgs), len(want))
	}
	for i, w := range want {
		c := cfgs[i]
		if c.Name != w.name || !slices.Equal(c.Subjects, []string{w.subject}) || c.Retention != w.retention || c.MaxAge != w.maxAge {
			t.Errorf("config %d = %s %v %v %s, want %s [%s] %v %s", i, c.Name, c.Subjects, c.Retention, c.MaxAge, w.name, w.subject, w.retention, w.maxAge)
		}
		if c.Storage != jetstream.FileStorage || c.Replicas != 1 || c.Duplicates != 2*time.Minute || c.MaxMsgSize != 1<<20 {
			t.Errorf("%s: storage %v replicas %d duplicates %s max msg %d, want file 1 2m 1MiB", c.Name, c.Storage, c.Replicas, c.Duplicates, c.MaxMsgSize)
		}
	}
}

func TestStreamConfigsSettings(t *testing.T) {
	n := contracts.Names{Prefix: "acme"}
	s := natsutil.StreamSettings{
		Storage:         jetstream.MemoryStorage,
		Replicas:        3,
		MaxAge:          time.Minute,
		DuplicateWindow: 5 * time.Minute,
		MaxMsgSize:      4096,
	}
	for i, c := range natsutil.StreamConfigs(n, s) {
		w := wantStreams(n, time.Minute)[i]
		if c.Name != w.name || c.Subjects[0] != w.subject || c.MaxAge != w.maxAge {
			t.Errorf("config %d = %s %v %s, want %s %s %s", i, c.Name, c.Subjects, c.MaxAge, w.name, w.subject, w.maxAge)
		}
		if !strings.HasPrefix(c.Name, "ACME_") {
			t.Errorf("stream %s does not carry the prefix", c.Name)
		}
		if c.Storage != jetstream.MemoryStorage || c.Replicas != 3 || c.MaxMsgSize != 4096 {
			t.Errorf("%s: settings not applied: %+v", c.Name, c)
		}
		// The server rejects a duplicate window longer than MaxAge.
		wantDup := 5 * time.Minute
		if w.maxAge > 0 {
			wantDup = time.Minute
		}
		if c.Duplicates != wantDup {
			t.Errorf("%s: duplicates %s, want %s", c.Name, c.Duplicates, wantDup)
		}
	}
}

func TestEnsureStreamsCreatesFiveStreams(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	for _, w := range wantStreams(n, natsutil.DefaultMaxAge) {
		st, err := js.Stream(ctx, w.name)
		if err != nil {
			t.Fatalf("stream %s: %v", w.name, err)
		}
		c := st.CachedInfo().Config
		if !slices.Equal(c.Subjects, []string{w.subject}) || c.Retention != w.retention || c.MaxAge != w.maxAge || c.Duplicates != natsutil.DefaultDuplicateWindow {
			t.Errorf("%s: subjects %v retention %v max age %s duplicates %s; want [%s] %v %s %s",
				w.name, c.Subjects, c.Retention, c.MaxAge, c.Duplicates, w.subject, w.retention, w.maxAge, natsutil.DefaultDuplicateWindow)
		}
	}
}

// TestEnsureStreamsCreatesTheTenantsBucket: the bucket is made with the
// streams' storage, keeps one value per key, and a second call keeps it and
// its entries.
func TestEnsureStreamsCreatesTheTenantsBucket(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{Prefix: "acme.bulk"}
	s := natsutil.StreamSettings{Storage: jetstream.MemoryStorage}
	if err := natsutil.EnsureStreams(ctx, js, n, s); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "ACME_BULK_TENANTS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "t1.windows", []byte("[]")); err != nil {
		t.Fatal(err)
	}
	if err := natsutil.EnsureStreams(ctx, js, n, s); err != nil {
		t.Fatalf("second EnsureStreams: %v", err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	if info.Config.Storage != jetstream.MemoryStorage || st.History() != 1 || st.Values() != 1 {
		t.Errorf("bucket: storage %v, history %d, values %d; want memory, 1, 1", info.Config.Storage, st.History(), st.Values())
	}
}

func TestEnsureStreamsIsIdempotentAndUpdates(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{Prefix: "idem"}
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, n.Events(contracts.Group("t1", "g1")), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, n.Submit(contracts.Group("t1", "g1")), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	before := streamInfos(t, js, n)

	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{}); err != nil {
		t.Fatalf("second EnsureStreams: %v", err)
	}
	after := streamInfos(t, js, n)
	for name, b := range before {
		a := after[name]
		if !a.Created.Equal(b.Created) || a.State.Msgs != b.State.Msgs || a.Config.MaxAge != b.Config.MaxAge ||
			a.Config.Duplicates != b.Config.Duplicates || a.Config.MaxMsgSize != b.Config.MaxMsgSize {
			t.Errorf("%s changed by a second EnsureStreams: before %+v %+v, after %+v %+v", name, b.Config, b.State, a.Config, a.State)
		}
	}
	if got := after[n.StreamEvents()].State.Msgs; got != 1 {
		t.Errorf("EVENTS holds %d messages after the second call, want 1", got)
	}

	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{MaxAge: time.Hour}); err != nil {
		t.Fatalf("EnsureStreams with a new MaxAge: %v", err)
	}
	updated := streamInfos(t, js, n)
	for _, w := range wantStreams(n, time.Hour) {
		u := updated[w.name]
		if u.Config.MaxAge != w.maxAge {
			t.Errorf("%s: MaxAge %s after update, want %s", w.name, u.Config.MaxAge, w.maxAge)
		}
		if !u.Created.Equal(before[w.name].Created) {
			t.Errorf("%s was re-created instead of updated", w.name)
		}
	}
	if got := updated[n.StreamSubmit()].State.Msgs; got != 1 {
		t.Errorf("SUBMIT holds %d messages after the update, want 1", got)
	}
}

func streamInfos(t *testing.T, js jetstream.JetStream, n contracts.Names) map[string]*jetstream.StreamInfo {
	t.Helper()
	infos := map[string]*jetstream.StreamInfo{}
	for _, w := range wantStreams(n, 0) {
		st, err := js.Stream(context.Background(), w.name)
		if err != nil {
			t.Fatalf("stream %s: %v", w.name, err)
		}
		infos[w.name] = st.CachedInfo()
	}
	return infos
}

func TestEnsureStreamsErrorNamesStream(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	// A foreign stream already owns the result subjects.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FOREIGN", Subjects: []string{n.ResultAll()}}); err != nil {
		t.Fatal(err)
	}
	err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{})
	if err == nil {
		t.Fatal("EnsureStreams succeeded over overlapping subjects")
	}
	if !strings.Contains(err.Error(), n.StreamResult()) {
		t.Fatalf("error %q does not name %s", err, n.StreamResult())
	}
	if _, err := js.Stream(ctx, n.StreamSubmit()); err != nil {
		t.Fatalf("streams before the failing one: %v", err)
	}
}

func TestEnsureStreamsRejectsNegativeSettings(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	for _, s := range []natsutil.StreamSettings{
		{Replicas: -1}, {MaxAge: -time.Second}, {DuplicateWindow: -time.Second}, {MaxMsgSize: -1},
	} {
		if err := natsutil.EnsureStreams(context.Background(), js, contracts.Names{}, s); err == nil {
			t.Errorf("EnsureStreams(%+v) succeeded", s)
		}
	}
	if _, err := js.Stream(context.Background(), contracts.Names{}.StreamSubmit()); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("invalid settings created streams: %v", err)
	}
}

func TestStreamMsgs(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, n.DLQ("acme", "bad_json"), []byte{byte('0' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := natsutil.StreamMsgs(ctx, js, n.StreamDLQ())
	if err != nil || got != 3 {
		t.Fatalf("StreamMsgs = %d, %v; want 3", got, err)
	}
	if _, err := natsutil.StreamMsgs(ctx, js, "MISSING"); !errors.Is(err, jetstream.ErrStreamNotFound) || !strings.Contains(err.Error(), "MISSING") {
		t.Fatalf("missing stream: err = %v", err)
	}
}

// TestSettledThrough: SUBMIT's messages are settled through a sequence
// once every durable consumer has acknowledged or terminated each message
// up to it; not while there is no durable consumer, nor while one has the
// message unacknowledged or not yet delivered.
func TestSettledThrough(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	settled := func(seq uint64) bool {
		t.Helper()
		ok, err := natsutil.SettledThrough(ctx, js, n.StreamSubmit(), seq)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	var last uint64
	for i := range 3 {
		ack, err := js.Publish(ctx, n.Submit(contracts.Group("t", "g")), []byte{byte('0' + i)})
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
	}
	if settled(0) {
		t.Fatal("settled with no durable consumer")
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, n.StreamSubmit(), jetstream.ConsumerConfig{
		Durable: "d", FilterSubject: n.SubmitAll(), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if settled(1) {
		t.Fatal("settled through 1 before any delivery")
	}
	b, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 3 {
		t.Fatalf("fetched %d messages, want 3 (%v)", len(msgs), b.Error())
	}
	// The first terminated, the last acknowledged (the server has handled
	// the termination when it confirms the later acknowledgement): the
	// floor stays below the second, which is still unacknowledged.
	if err := msgs[0].TermWithReason("test"); err != nil {
		t.Fatal(err)
	}
	if err := msgs[2].DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if !settled(1) || settled(2) || settled(last) {
		t.Fatalf("settled through 1, 2, %d: %v %v %v; want true false false", last, settled(1), settled(2), settled(last))
	}
	if err := msgs[1].DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if !settled(last) {
		t.Fatalf("not settled through %d with every message settled", last)
	}
	if _, err := natsutil.SettledThrough(ctx, js, "MISSING", 1); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("missing stream: err = %v", err)
	}
}

// TestEnsureStreamsRefusesAWorkQueueSubmit: a SUBMIT created as a work queue
// (by an older version) cannot become a retained log in place; EnsureStreams
// says so and what to do, and changes nothing.
func TestEnsureStreamsRefusesAWorkQueueSubmit(t *testing.T) {
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: n.StreamSubmit(), Subjects: []string{n.SubmitAll()},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{})
	if !errors.Is(err, natsutil.ErrSubmitWorkQueue) || !strings.Contains(err.Error(), "nats stream rm "+n.StreamSubmit()) {
		t.Fatalf("EnsureStreams = %v, want ErrSubmitWorkQueue naming the way out", err)
	}
	st, err := js.Stream(ctx, n.StreamSubmit())
	if err != nil || st.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
		t.Fatalf("SUBMIT changed: %v", err)
	}
}
