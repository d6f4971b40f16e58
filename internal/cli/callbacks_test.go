package cli_test

import (
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/pkg/api"
)

// status shows each state of a completion callback: waiting, pending with
// its next attempt and last error, delivered, failed with the last error
// and how to retry it.
func TestCallbackText(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	u := "https://hooks.example.com/done"
	for _, tc := range []struct {
		c    api.Callback
		want string
	}{
		{api.Callback{State: api.CallbackWaiting, URL: u}, u + ", when the group ends"},
		{api.Callback{State: api.CallbackPending, URL: u, Attempts: 2, NextAttemptAt: &at, LastError: "HTTP 503"},
			"pending to " + u + ", 2 attempts so far, next at 2026-11-27T09:00:00Z; last error: HTTP 503"},
		{api.Callback{State: api.CallbackDelivered, URL: u, Attempts: 3, StatusCode: 204, DeliveredAt: &at},
			"delivered to " + u + " at 2026-11-27T09:00:00Z (HTTP 204, attempt 3)"},
		{api.Callback{State: api.CallbackFailed, URL: u, Attempts: 7, LastError: "HTTP 503"},
			"FAILED to " + u + " after 7 attempts: HTTP 503 (retry: bulkaction callback retry)"},
	} {
		if got := cli.CallbackText(&tc.c); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.c.State, got, tc.want)
		}
	}
}
