package jspub_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/jspub"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func setup(t *testing.T, opts ...jetstream.JetStreamOpt) jetstream.JetStream {
	t.Helper()
	_, nc, js := testenv.NATS(t)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	if len(opts) == 0 {
		return js
	}
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func msgs(count int) []*nats.Msg {
	out := make([]*nats.Msg, count)
	for i := range out {
		m := nats.NewMsg(fmt.Sprintf("t.%d", i))
		m.Data = []byte(fmt.Sprint(i))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprint(i))
		out[i] = m
	}
	return out
}

// checkStored asserts every error is nil and the stream holds the messages
// in publish order.
func checkStored(t *testing.T, js jetstream.JetStream, errs []error, count int) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	st, err := js.Stream(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != uint64(count) {
		t.Fatalf("stream holds %d messages, want %d", got, count)
	}
	for _, seq := range []uint64{1, uint64(count)} {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint(seq - 1); string(m.Data) != want {
			t.Fatalf("message %d = %q, want %q", seq, m.Data, want)
		}
	}
}

func TestPublishWindow(t *testing.T) {
	t.Parallel()
	for _, window := range []int{0, 1, 7, 1000} {
		t.Run(fmt.Sprint("window=", window), func(t *testing.T) {
			t.Parallel()
			js := setup(t)
			const count = 300
			checkStored(t, js, jspub.PublishWindow(context.Background(), js, msgs(count), window), count)
		})
	}
}

// A handle whose own async window is smaller than the batch must not make
// messages fail: PublishWindow waits for room instead.
func TestPublishWindowHandleLimit(t *testing.T) {
	t.Parallel()
	js := setup(t, jetstream.WithPublishAsyncMaxPending(4))
	const count = 500
	checkStored(t, js, jspub.PublishWindow(context.Background(), js, msgs(count), 0), count)
}

func TestPublishWindowReplySubjectIsPerMessageError(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ms := msgs(3)
	ms[1].Reply = "not.allowed"
	errs := jspub.PublishWindow(context.Background(), js, ms, 0)
	if errs[0] != nil || errs[2] != nil || errs[1] == nil {
		t.Fatalf("errs = %v, want only the second to fail", errs)
	}
}

// Messages nobody answers keep the handle's window full (the client retries
// them), so later publishes stall; each must still get its own outcome
// rather than jetstream.ErrTooManyStalledMsgs.
func TestPublishWindowStalledHandle(t *testing.T) {
	t.Parallel()
	js := setup(t, jetstream.WithPublishAsyncMaxPending(2))
	ms := make([]*nats.Msg, 6)
	for i := range ms {
		ms[i] = nats.NewMsg("uncovered.subject")
	}
	for i, err := range jspub.PublishWindow(context.Background(), js, ms, 0) {
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			t.Errorf("message %d: err = %v, want ErrNoStreamResponse", i, err)
		}
	}
}

// PublishWindowSeq reports the highest sequence acknowledged; publishing
// the same messages again (duplicates by Nats-Msg-Id) reports the
// sequence of the messages stored first.
func TestPublishWindowSeq(t *testing.T) {
	t.Parallel()
	js := setup(t)
	const count = 120
	errs, last := jspub.PublishWindowSeq(context.Background(), js, msgs(count), 16)
	checkStored(t, js, errs, count)
	if last != count {
		t.Fatalf("last sequence %d, want %d", last, count)
	}
	errs, last = jspub.PublishWindowSeq(context.Background(), js, msgs(10), 0)
	checkStored(t, js, errs, count)
	if last != 10 {
		t.Fatalf("duplicates' last sequence %d, want 10 (the first copies')", last)
	}
}
