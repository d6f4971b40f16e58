package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestParseKeysNamesTheLine: a keys file with a bad line is an error naming
// the line; comments and blank lines are skipped; * is an admin.
func TestParseKeysNamesTheLine(t *testing.T) {
	a, b := HashKey("bak_a"), HashKey("bak_b")
	keys, err := ParseKeys(strings.NewReader("# keys\n\n" + a + " acme billing\n" + b + " *\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := keys[a]; p.Tenant != "acme" || p.Admin || p.Name != "billing" {
		t.Errorf("acme key: %+v", p)
	}
	if p := keys[b]; !p.Admin || p.Tenant != "" {
		t.Errorf("admin key: %+v", p)
	}
	for _, c := range []struct{ body, want string }{
		{a + " acme\nbak_plaintext acme\n", "line 2"},
		{a + " acme\n" + a + " hooli\n", "line 2: the same key"},
		{a + " a:b\n", "line 1"},
		{a + "\n", "line 1"},
	} {
		if _, err := ParseKeys(strings.NewReader(c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.body, err, c.want)
		}
	}
}

// TestKeysFileIsReloaded: a changed keys file is read again (a new key
// works, a removed one stops working), its bad lines skipped and counted;
// a file that cannot be read leaves the keys in use.
func TestKeysFileIsReloaded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	write := func(body string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // as a Secret update does
			t.Fatal(err)
		}
	}
	write(KeyLine("bak_one", "acme", "") + "\n")
	k, err := LoadKeys(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.watch(ctx, 10*time.Millisecond)
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, ok := k.Lookup("bak_one"); !ok {
		t.Fatal("bak_one unknown")
	}
	write(KeyLine("bak_two", "hooli", "") + "\n")
	eventually("reload", func() bool { _, ok := k.Lookup("bak_two"); return ok })
	if _, ok := k.Lookup("bak_one"); ok {
		t.Error("a removed key still works")
	}
	// A bad line is skipped; every other line is applied, a deletion too.
	write("not a keys line\n" + KeyLine("bak_three", "acme", "") + "\n" + KeyLine("bak_four", "acme", "") + "\n" +
		KeyLine("bak_four", "hooli", "") + "\n")
	eventually("reload with bad lines", func() bool { _, ok := k.Lookup("bak_three"); return ok })
	if _, ok := k.Lookup("bak_two"); ok {
		t.Error("a key deleted in an edit with a bad line still works")
	}
	if _, ok := k.Lookup("bak_four"); ok {
		t.Error("a key listed twice works")
	}
	if n := k.BadLines(); n != 2 {
		t.Errorf("BadLines = %d, want 2", n)
	}
	// A file that cannot be read leaves the keys in use.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := k.Reload(); err == nil {
		t.Error("a missing keys file was accepted")
	}
	if _, ok := k.Lookup("bak_three"); !ok {
		t.Error("an unreadable file replaced the keys in use")
	}
}

// TestAuthenticateHeaderForms: only a Bearer key is accepted.
func TestAuthenticateHeaderForms(t *testing.T) {
	k := StaticKeys(map[string]Principal{HashKey("bak_x"): {Tenant: "acme"}})
	for h, ok := range map[string]bool{"Bearer bak_x": true, "bearer bak_x": true, "Bearer  bak_x ": true,
		"": false, "Basic bak_x": false, "Bearer": false, "Bearer bak_y": false, "bak_x": false} {
		r := httptest.NewRequest("GET", "/v1/groups", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		p, err := k.authenticate(r)
		if (err == nil) != ok || (ok && p.Tenant != "acme") {
			t.Errorf("Authorization %q: %+v, %v", h, p, err)
		}
	}
}

// TestKeysBadLinesGauge: the gauge counts the bad lines of the file last
// read.
func TestKeysBadLinesGauge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	body := KeyLine("bak_one", "acme", "") + "\nbad\n# comment\nsha256:00 acme\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := LoadKeys(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "bad_lines"})
	k.setGauge(g)
	if v := gaugeValue(t, g); v != 2 {
		t.Fatalf("gauge %v, want 2", v)
	}
	if err := os.WriteFile(path, []byte(KeyLine("bak_one", "acme", "")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := k.Reload(); err != nil {
		t.Fatal(err)
	}
	if v := gaugeValue(t, g); v != 0 {
		t.Fatalf("gauge %v after a clean file, want 0", v)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
