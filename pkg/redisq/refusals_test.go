package redisq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestRecordRefusal: a refusal is counted once per message delivery
// (a redelivery of the same sequence is not counted again), by reason,
// with the newest listed first; it never creates the group; the refused
// ids lead a retry to a new message id; the record expires with GROUP_TTL.
func TestRecordRefusal(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GroupTTL: time.Hour}, true)
	g := G("refused")

	if r, err := q.GroupRefusals(ctx, g); err != nil || r != nil {
		t.Fatalf("refusals before any: %+v, %v", r, err)
	}
	rec, err := q.RecordRefusal(ctx, g, redisq.Refusal{MsgID: "t:refused:j1", Seq: 7, Reason: "over_quota", Error: "jobs[0] refused", Jobs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Recorded || rec.Exists || rec.Messages != 1 || rec.Jobs != 1 {
		t.Fatalf("first refusal: %+v", rec)
	}
	if n, _ := b.rdb.Exists(ctx, q.Keys().GroupMeta(g)).Result(); n != 0 {
		t.Fatal("recording a refusal created the group's meta")
	}
	// A redelivery of the same message is not counted again.
	if rec, err = q.RecordRefusal(ctx, g, redisq.Refusal{MsgID: "t:refused:j1", Seq: 7, Reason: "over_quota", Jobs: 1}); err != nil || rec.Recorded || rec.Messages != 1 {
		t.Fatalf("redelivery: %+v, %v", rec, err)
	}
	// The same id published again (a new sequence) is.
	b.clock.advance(time.Second)
	if _, err := q.RecordRefusal(ctx, g, redisq.Refusal{MsgID: "t:refused:j1:r1", Seq: 9, Reason: "over_quota", Jobs: 1}); err != nil {
		t.Fatal(err)
	}
	b.clock.advance(time.Second)
	if _, err := q.RecordRefusal(ctx, g, redisq.Refusal{MsgID: "t:refused:seal:1", Seq: 12, Reason: "bad_seal", Error: "1: too many"}); err != nil {
		t.Fatal(err)
	}
	r, err := q.GroupRefusals(ctx, g)
	if err != nil || r == nil {
		t.Fatalf("refusals: %+v, %v", r, err)
	}
	if r.Messages != 3 || r.Jobs != 2 || r.Last.Reason != "bad_seal" || r.Last.Error != "1: too many" || r.Last.MsgID != "t:refused:seal:1" || r.Last.Seq != 12 {
		t.Errorf("refusals: %+v", r)
	}
	if len(r.ByReason) != 2 || r.ByReason[0] != (redisq.RefusalCount{Reason: "bad_seal", Messages: 1}) ||
		r.ByReason[1] != (redisq.RefusalCount{Reason: "over_quota", Messages: 2, Jobs: 2}) {
		t.Errorf("by reason: %+v", r.ByReason)
	}
	if len(r.Recent) != 3 || r.Recent[0].MsgID != "t:refused:seal:1" || r.Recent[2].MsgID != "t:refused:j1" || r.Recent[2].Error != "jobs[0] refused" ||
		!r.Recent[0].At.After(r.Recent[2].At) || !r.FirstAt.Equal(r.Recent[2].At) {
		t.Errorf("recent: %+v", r.Recent)
	}
	ids, err := q.RefusedMsgIDs(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"t:refused:j1": "t:refused:j1:r2", "t:refused:j2": "t:refused:j2", "t:refused:seal:1": "t:refused:seal:1:r1"} {
		if got := redisq.RetryMsgID(ids, id); got != want {
			t.Errorf("RetryMsgID(%s) = %s, want %s", id, got, want)
		}
	}
	for _, k := range []string{q.Keys().GroupRefusals(g), q.Keys().GroupRefusedIDs(g), q.Keys().GroupRefusedRecent(g)} {
		if ttl, _ := b.rdb.TTL(ctx, k).Result(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s: TTL %s, want GROUP_TTL", k, ttl)
		}
	}

	// The lists are bounded.
	for i := 0; i < redisq.MaxRefusedIDs+5; i++ {
		if _, err := q.RecordRefusal(ctx, g, redisq.Refusal{MsgID: fmt.Sprintf("t:refused:m%d", i), Seq: uint64(100 + i), Reason: "group_ended", Jobs: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := b.rdb.ZCard(ctx, q.Keys().GroupRefusedIDs(g)).Result(); n != redisq.MaxRefusedIDs {
		t.Errorf("refused ids: %d, want %d", n, redisq.MaxRefusedIDs)
	}
	if r, _ := q.GroupRefusals(ctx, g); len(r.Recent) != redisq.RecentRefusalsKept || r.Messages != 3+redisq.MaxRefusedIDs+5 {
		t.Errorf("after many: %d recent, %d messages", len(r.Recent), r.Messages)
	}
}
