package telemetry

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestWarnLimiter(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := &WarnLimiter{Interval: time.Hour}
	l.Warn(log, "first")
	l.Warn(log, "second")
	l.Warn(log, "third")
	l.last = time.Now().Add(-2 * time.Hour)
	l.Warn(log, "fourth")
	out := buf.String()
	if strings.Count(out, "level=WARN") != 2 || strings.Count(out, "level=DEBUG") != 2 {
		t.Fatalf("levels:\n%s", out)
	}
	if !strings.Contains(out, `level=WARN msg=fourth suppressed=2`) {
		t.Fatalf("suppressed count missing:\n%s", out)
	}
}
