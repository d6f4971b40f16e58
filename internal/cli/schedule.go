package cli

import (
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// ParseNotBeforeFlag reads a --not-before flag: an RFC 3339 date-time, or a
// duration from now ("90m", "2h30m"). It returns the notBefore to send,
// RFC 3339 ("" for ""), checked as the contract checks it.
func ParseNotBeforeFlag(v string, now time.Time) (string, error) {
	if v == "" {
		return "", nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		v = now.Add(d).Truncate(time.Millisecond).Format(time.RFC3339Nano)
	}
	if err := (contracts.GroupSettings{NotBefore: v}).Validate(); err != nil {
		return "", err
	}
	return v, nil
}
