package builtin

import (
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"  ", 0, false},
		{"120", 2 * time.Minute, true},
		{" 5 ", 5 * time.Second, true},
		{"0", 0, true},
		{"86401", 24 * time.Hour, true},
		{"18446744073709551616", 24 * time.Hour, true},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1.5", 0, false},
		{"Sat, 01 Mar 2025 12:00:30 GMT", 30 * time.Second, true}, // IMF-fixdate
		{"Saturday, 01-Mar-25 12:01:00 GMT", time.Minute, true},   // RFC 850
		{"Sat Mar  1 12:00:10 2025", 10 * time.Second, true},      // asctime
		{"Sat, 01 Mar 2025 11:00:00 GMT", 0, true},                // past
		{"Mon, 01 Mar 2027 12:00:00 GMT", 24 * time.Hour, true},   // capped
		{"tomorrow", 0, false},
	} {
		got, ok := parseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestHTTPDefaults(t *testing.T) {
	t.Parallel()
	h := HTTP(Options{}).(*httpProcessor)
	if h.now == nil || h.client == nil || h.client.Timeout != 0 || h.ownTimeout != DefaultHTTPTimeout || h.retryAfter != DefaultRetryAfter {
		t.Fatalf("defaults not applied: %+v", h)
	}
}
