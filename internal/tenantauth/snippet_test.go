package tenantauth_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/bulkaction/bulkaction/internal/tenantauth"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TestConfigSnippetIsAcceptedByTheServer writes a server configuration with the service user and
// the rendered users of two tenants, one with a variable reference as password and one with a
// literal, and checks that nats-server reads the permissions of Permissions from it and enforces
// them.
func TestConfigSnippetIsAcceptedByTheServer(t *testing.T) {
	t.Parallel()
	for name, n := range installations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			acme, err := tenantauth.ConfigSnippet(n, "acme", tenantUser("acme"), "$ACME_PASSWORD")
			if err != nil {
				t.Fatal(err)
			}
			// A literal with a '$' stays a literal between quotes.
			globexPassword := "pw-glo$ex"
			globex, err := tenantauth.ConfigSnippet(n, "globex", tenantUser("globex"), globexPassword)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			conf := fmt.Sprintf(`# written by TestConfigSnippetIsAcceptedByTheServer
host: "127.0.0.1"
port: -1
jetstream: { store_dir: %q }
ACME_PASSWORD: %q
authorization {
  users: [
    { user: %q, password: %q }
%s
%s
  ]
}
`, filepath.Join(dir, "js"), tenantPassword("acme"), svcUser, svcPassword, indent(acme, "    "), indent(globex, "    "))
			path := filepath.Join(dir, "nats.conf")
			if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			opts, err := server.ProcessConfigFile(path)
			if err != nil {
				t.Fatalf("ProcessConfigFile: %v\n%s", err, conf)
			}
			want := map[string]struct {
				password string
				perms    *server.Permissions
			}{
				svcUser:              {svcPassword, nil},
				tenantUser("acme"):   {tenantPassword("acme"), mustPermissions(t, n, "acme")},
				tenantUser("globex"): {globexPassword, mustPermissions(t, n, "globex")},
			}
			if len(opts.Users) != len(want) {
				t.Fatalf("the configuration has %d users, want %d", len(opts.Users), len(want))
			}
			for _, u := range opts.Users {
				w, ok := want[u.Username]
				if !ok {
					t.Fatalf("unexpected user %q", u.Username)
				}
				if u.Password != w.password {
					t.Errorf("user %q: password %q, want %q", u.Username, u.Password, w.password)
				}
				if !reflect.DeepEqual(u.Permissions, w.perms) {
					t.Errorf("user %q: permissions from the configuration\n%s\nwant\n%s", u.Username, show(u.Permissions), show(w.perms))
				}
			}

			// The server started from that file enforces them.
			opts.NoLog, opts.NoSigs = true, true
			b := startBus(t, n, opts)
			c := b.connect(t, tenantUser("globex"), globexPassword, "globex")
			if _, err := c.js.Publish(testContext(t, 5*time.Second), n.Submit(globexG1), jobsBody("j1")); err != nil {
				t.Fatalf("globex: publish to its own group: %v", err)
			}
			if _, err := c.js.Publish(testContext(t, refusedWait), n.Submit(acmeG1), jobsBody("j1")); err == nil {
				t.Fatal("globex: publish to acme's group succeeded")
			}
			c.expectViolationOn(t, "Publish", n.Submit(acmeG1))
			if got := b.subjectCounts(t, n.StreamSubmit()); len(got) != 1 || got[n.Submit(globexG1)] != 1 {
				t.Fatalf("%s holds %v, want globex's submission only", n.StreamSubmit(), got)
			}
		})
	}
}

func mustPermissions(t *testing.T, n contracts.Names, tenant string) *server.Permissions {
	t.Helper()
	p, err := tenantauth.Permissions(n, tenant)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func show(p *server.Permissions) string {
	if p == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("  responses %+v\n", p.Response)
	if p.Publish != nil {
		s += fmt.Sprintf("  publish allow %q deny %q\n", p.Publish.Allow, p.Publish.Deny)
	}
	if p.Subscribe != nil {
		s += fmt.Sprintf("  subscribe allow %q deny %q\n", p.Subscribe.Allow, p.Subscribe.Deny)
	}
	return s
}

func indent(s, by string) string {
	return by + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+by)
}
