package gateway_test

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// rewriteKeys replaces the keys file as a Secret update does, with every
// test key but those of drop, and the lines in extra.
func (s *server) rewriteKeys(drop string, extra ...string) {
	s.t.Helper()
	var lines strings.Builder
	for who, key := range s.keys {
		if who != drop {
			lines.WriteString(gateway.KeyLine(key, who, "") + "\n")
		}
	}
	for _, l := range extra {
		lines.WriteString(l + "\n")
	}
	tmp := s.cfg.GatewayKeysFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(lines.String()), 0o600); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, s.cfg.GatewayKeysFile); err != nil {
		s.t.Fatal(err)
	}
}

// reloadWithin is how soon a change of the keys file is applied.
const reloadWithin = gateway.DefaultKeysReload + 5*time.Second

// TestKeysFileBadLineDoesNotKeepDeletedKey: a key deleted from the keys
// file stops working within the reload interval even though the same edit
// left a malformed line, and the other keys keep working.
func TestKeysFileBadLineDoesNotKeepDeletedKey(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	if r := s.do("GET", "/v1/groups", "hooli", nil); r.code != http.StatusOK {
		t.Fatalf("hooli's key: %d", r.code)
	}
	s.rewriteKeys("hooli", "sha256:not-a-hash acme typo") // the same edit broke a line
	testkit.WaitFor(t, "the deleted key refused", reloadWithin, func() bool {
		return s.do("GET", "/v1/groups", "hooli", nil).code == http.StatusUnauthorized
	})
	for _, who := range []string{"acme", "globex", "*"} {
		if r := s.do("GET", "/v1/groups", who, nil); r.code != http.StatusOK {
			t.Errorf("%s's key after the reload: %d %s", who, r.code, r.body)
		}
	}
}
