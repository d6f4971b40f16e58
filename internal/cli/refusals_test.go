package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// TestStatusShowsRefusals: a group's status carries what the pipeline
// refused of its submissions, in its JSON and in words.
func TestStatusShowsRefusals(t *testing.T) {
	q, ctx := setupQueue(t)
	g := ref("acme", "refused")
	enqueue(t, q, g, 2, contracts.PriorityNormal)
	s, err := status.Read(ctx, q, g, status.Options{})
	if err != nil || s.Refused != nil {
		t.Fatalf("status before a refusal: refused %+v, %v", s.Refused, err)
	}
	if _, err := q.RecordRefusal(ctx, g, redisq.Refusal{MsgID: "acme:refused:x", Seq: 3, Reason: "over_quota",
		Error: "jobs[0], jobs[1] of group acme/refused refused: tenant acme has 4 queued jobs", Jobs: 2}); err != nil {
		t.Fatal(err)
	}
	if s, err = status.Read(ctx, q, g, status.Options{}); err != nil || s.Refused == nil || s.Refused.Jobs != 2 {
		t.Fatalf("status: refused %+v, %v", s.Refused, err)
	}
	text := cli.RefusedText(s.Refused)
	for _, want := range []string{"1 message (2 jobs) refused", "over_quota 1", "tenant acme has 4 queued jobs", "submit the refused jobs again"} {
		if !strings.Contains(text, want) {
			t.Errorf("RefusedText = %q, want %q in it", text, want)
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Refused struct {
			Messages   int64  `json:"messages"`
			Jobs       int64  `json:"jobs"`
			LastReason string `json:"lastReason"`
		} `json:"refused"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Refused.Messages != 1 || m.Refused.Jobs != 2 || m.Refused.LastReason != "over_quota" {
		t.Errorf("status JSON refused = %+v (%v): %s", m.Refused, err, b)
	}
}
