package cli

import (
	"fmt"
	"time"

	"github.com/bulkaction/bulkaction/pkg/api"
)

// CallbackText describes a callback's delivery on one line, as `bulkaction
// status` shows it.
func CallbackText(c *api.Callback) string {
	ts := func(t *time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case c.State == api.CallbackWaiting:
		return fmt.Sprintf("%s, when the group ends", c.URL)
	case c.State == api.CallbackDelivered && c.DeliveredAt != nil:
		return fmt.Sprintf("delivered to %s at %s (HTTP %d, attempt %d)", c.URL, ts(c.DeliveredAt), c.StatusCode, c.Attempts)
	case c.State == api.CallbackFailed:
		return fmt.Sprintf("FAILED to %s after %d attempts: %s (retry: bulkaction callback retry)", c.URL, c.Attempts, c.LastError)
	}
	s := fmt.Sprintf("pending to %s, %d attempts so far", c.URL, c.Attempts)
	if c.NextAttemptAt != nil {
		s += ", next at " + ts(c.NextAttemptAt)
	}
	if c.LastError != "" {
		s += "; last error: " + c.LastError
	}
	return s
}
