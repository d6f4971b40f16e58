package builtin

import (
	"encoding/json"
	"strings"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Destination derives the destination of an "http" job that names none (docs/ARCHITECTURE.md
// §5): the host of its payload's "url", lower-cased, without port or trailing dot. ok is false
// when the payload has no valid http or https URL (a job using Options.DefaultURL), or when the
// host is not a valid destination ([contracts.ValidateDestination]: an IPv6 literal, or longer
// than [contracts.MaxDestinationLen]); the job's destination is then its type. Ingest (the
// fetcher) calls it for every http job without a destination, before the job is stored, so
// admission gates the job by its host's learned rate.
func Destination(payload []byte) (dest string, ok bool) {
	if !isObject(payload) {
		return "", false
	}
	var p struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(payload, &p) != nil || p.URL == "" {
		return "", false
	}
	u, err := parseURL(p.URL)
	if err != nil {
		return "", false
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if contracts.ValidateDestination(host) != nil {
		return "", false
	}
	return host, true
}
