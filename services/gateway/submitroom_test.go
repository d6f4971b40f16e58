package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/natsutil"
)

// A jobs request larger than its tenant's room on SUBMIT is refused whole,
// naming the limit, and nothing of it reaches SUBMIT; requests within the
// room go through, the tenant's and the others'.
func TestSubmitRoomRefusesRequestLargerThanTenantShare(t *testing.T) {
	t.Parallel()
	const room = 256 << 10
	s := newServer(t, func(c *config.Config) {
		c.MaxMsgSize, c.MaxPayloadBytes, c.GatewayTenantSubmitBytes = 64<<10, 16<<10, room
	})
	ctx := context.Background()
	js, names := s.st.Conns.JS, s.st.Conns.Names
	before, err := natsutil.LastSeq(ctx, js, names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	pad := `{"pad":"` + strings.Repeat("x", 1000) + `"}`
	r := s.do("POST", "/v1/groups/huge/jobs", "acme", strings.NewReader(ndjson("h", 400, pad)), "Content-Type: application/x-ndjson")
	if r.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a request of 400 KB with a room of 256 KiB: %d %s", r.code, r.body)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Field != "gateway.submitBytes" || !strings.Contains(p.Errors[0].Limit, "262144") {
		t.Errorf("problem %+v, want one naming gateway.submitBytes and its limit", p)
	}
	if after, err := natsutil.LastSeq(ctx, js, names.StreamSubmit()); err != nil || after != before {
		t.Fatalf("SUBMIT's last sequence %d → %d (%v): the refused request was published", before, after, err)
	}
	s.submit("acme", "fits", "?total=100", ndjson("f", 100, pad))
	s.submit("hooli", "other", "?total=100", ndjson("o", 100, pad))
	s.waitState("acme", "fits", "COMPLETED")
	// Its room is free again once the fetchers applied them.
	s.submit("acme", "again", "?total=200", ndjson("a", 200, pad))
}
