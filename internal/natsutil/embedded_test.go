package natsutil_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testkit"
)

func TestStartEmbedded(t *testing.T) {
	dir := t.TempDir()
	s, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{Dir: dir, Port: -1, MaxPayload: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	if !s.JetStreamEnabled() {
		t.Fatal("JetStream not enabled")
	}
	if got := s.StoreDir(); !strings.HasPrefix(got, dir) {
		t.Fatalf("store dir %q not under %q", got, dir)
	}
	url := s.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":4222") {
		t.Fatalf("client URL %q: want 127.0.0.1 on a random port", url)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.MaxPayload(); got != 64<<10 {
		t.Fatalf("max payload %d, want %d", got, 64<<10)
	}
}

func TestStartEmbeddedTempDirRemovedAfterShutdown(t *testing.T) {
	s, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(s.StoreDir())
	if !strings.HasPrefix(filepath.Base(dir), "bulkaction-nats-") {
		s.Shutdown()
		t.Fatalf("store dir %q is not a temporary one", s.StoreDir())
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("temp dir while running: %v", err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	testkit.WaitFor(t, "temp dir removed", 10*time.Second, func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, fs.ErrNotExist)
	})
}

func TestStartEmbeddedPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	start := time.Now()
	s, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{Dir: t.TempDir(), Port: port})
	if err == nil {
		s.Shutdown()
		s.WaitForShutdown()
		t.Fatalf("started on busy port %d", port)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("busy port reported after %s", elapsed)
	}
}

func TestStartEmbeddedRejectsNegativeMaxPayload(t *testing.T) {
	if _, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{Dir: t.TempDir(), Port: -1, MaxPayload: -1}); err == nil || !strings.Contains(err.Error(), "MaxPayload") {
		t.Fatalf("err = %v, want a MaxPayload error", err)
	}
}
