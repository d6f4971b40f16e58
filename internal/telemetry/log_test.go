package telemetry

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewLoggerJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("job admitted", "groupId", "g1", "attempt", 2)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1 (debug filtered): %q", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("line %q is not JSON: %v", lines[0], err)
	}
	if rec["msg"] != "job admitted" || rec["level"] != "INFO" || rec["groupId"] != "g1" || rec["attempt"] != float64(2) {
		t.Errorf("record = %v", rec)
	}
	if _, ok := rec["time"]; !ok {
		t.Errorf("record has no time: %v", rec)
	}
}

func TestNewLoggerText(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "TEXT", "Debug")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("cycle", "moved", 3)
	out := buf.String()
	if !strings.Contains(out, "level=DEBUG msg=cycle moved=3") {
		t.Errorf("text output = %q", out)
	}
	if strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Errorf("text format wrote JSON: %q", out)
	}
}

func TestNewLoggerLevels(t *testing.T) {
	tests := []struct {
		level    string
		wantInfo bool
		wantWarn bool
	}{
		{"", true, true},
		{"info", true, true},
		{"warn", false, true},
		{"WARNING", false, true},
		{"error", false, false},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		log, err := NewLogger(&buf, "", tt.level)
		if err != nil {
			t.Fatalf("level %q: %v", tt.level, err)
		}
		log.Info("i")
		log.Warn("w")
		out := buf.String()
		if got := strings.Contains(out, `"msg":"i"`); got != tt.wantInfo {
			t.Errorf("level %q: info logged = %v, want %v", tt.level, got, tt.wantInfo)
		}
		if got := strings.Contains(out, `"msg":"w"`); got != tt.wantWarn {
			t.Errorf("level %q: warn logged = %v, want %v", tt.level, got, tt.wantWarn)
		}
	}
}

func TestNewLoggerBadValues(t *testing.T) {
	tests := []struct{ format, level, want string }{
		{"yaml", "info", `"yaml"`},
		{"json", "verbose", `"verbose"`},
		{"text", "info+2", `"info+2"`},
	}
	for _, tt := range tests {
		log, err := NewLogger(&bytes.Buffer{}, tt.format, tt.level)
		if err == nil || log != nil {
			t.Errorf("NewLogger(%q, %q) = %v, %v; want an error", tt.format, tt.level, log, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %q does not name %s", err, tt.want)
		}
	}
}
