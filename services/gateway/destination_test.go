package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// A job's explicit destination sent through the jobs API reaches the
// pipeline: the job is stored with it, and the tenant's destinations name
// it (docs/ARCHITECTURE.md §5), on the JSON and the NDJSON paths alike.
func TestJobDestinationThroughTheAPI(t *testing.T) {
	s := newServer(t, nil)
	ctx := context.Background()
	keys := redisq.NewKeys(s.cfg.RedisPrefix)
	s.submit("acme", "dest-ndjson", "?total=1",
		`{"jobId":"j1","type":"sleep","destination":"partner.example","payload":{"ms":1}}`+"\n")
	r := s.do("POST", "/v1/groups/dest-json/jobs?total=1", "acme",
		strings.NewReader(`[{"jobId":"j1","type":"sleep","destination":"mail.example","payload":{"ms":1}}]`),
		"Content-Type: application/json")
	if r.code != 202 {
		t.Fatalf("JSON submit: %d %s", r.code, r.body)
	}
	for gid, want := range map[string]string{"dest-ndjson": "partner.example", "dest-json": "mail.example"} {
		s.waitState("acme", gid, "COMPLETED")
		h, err := redisq.ReadJob(ctx, s.st.Conns.Redis, keys, contracts.GroupRef{Tenant: "acme", ID: gid}, "j1")
		if err != nil {
			t.Fatal(err)
		}
		if h["dest"] != want {
			t.Errorf("group %s: job stored with destination %q, want %q (%v)", gid, h["dest"], want, h)
		}
	}
	n, err := s.st.Conns.Redis.ZCard(ctx, keys.TenantDestinations("acme")).Result()
	if err != nil || n != 2 {
		t.Errorf("acme's destinations: %d (%v), want 2", n, err)
	}
}
