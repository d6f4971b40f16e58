package natsutil_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func submitMsgs(n contracts.Names, gid string, count int) []*nats.Msg {
	g := contracts.Group("t1", gid)
	msgs := make([]*nats.Msg, count)
	for i := range msgs {
		jid := fmt.Sprintf("j%d", i)
		m := nats.NewMsg(n.Submit(g))
		m.Data = []byte(jid)
		m.Header.Set(jetstream.MsgIDHeader, contracts.SubmitMsgID(g, jid))
		msgs[i] = m
	}
	return msgs
}

func TestPublishAllPerMessageErrors(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	n := contracts.Names{}
	if err := natsutil.EnsureStreams(ctx, js, n, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	msgs := submitMsgs(n, "g1", 50)
	const bad = 17
	msgs[bad] = nats.NewMsg("nowhere.g1") // no stream covers it

	errs := natsutil.PublishAll(ctx, js, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d errors for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if i == bad {
			if !errors.Is(err, jetstream.ErrNoStreamResponse) {
				t.Errorf("message %d on an uncovered subject: err = %v, want ErrNoStreamResponse", i, err)
			}
		} else if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	if got, _ := natsutil.StreamMsgs(ctx, js, n.StreamSubmit()); got != 49 {
		t.Fatalf("SUBMIT holds %d messages, want 49", got)
	}

	// Republishing the stored messages: duplicates count as stored.
	for i, err := range natsutil.PublishAll(ctx, js, submitMsgs(n, "g1", 50)) {
		if err != nil {
			t.Errorf("republish %d: %v", i, err)
		}
	}
	if got, _ := natsutil.StreamMsgs(ctx, js, n.StreamSubmit()); got != 50 {
		t.Fatalf("SUBMIT holds %d messages after republishing, want 50 (49 duplicates and the one missing)", got)
	}
}

func TestPublishAllCancelledContext(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	n := contracts.Names{}
	if err := natsutil.EnsureStreams(context.Background(), js, n, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range natsutil.PublishAll(ctx, js, submitMsgs(n, "g1", 5)) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("message %d: err = %v, want context.Canceled", i, err)
		}
	}
	if got, _ := natsutil.StreamMsgs(context.Background(), js, n.StreamSubmit()); got != 0 {
		t.Fatalf("SUBMIT holds %d messages, want 0", got)
	}
}

func TestPublishAllEmpty(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	if errs := natsutil.PublishAll(context.Background(), js, nil); len(errs) != 0 {
		t.Fatalf("errs = %v", errs)
	}
}
