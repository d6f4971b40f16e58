package redisq

import (
	"sort"
	"strconv"
	"strings"
)

// The job hash P job:<tenant>:<gid>:<jid> ([Keys.Job], docs/ARCHITECTURE.md
// §3.1) keeps every value within Redis's default hash-max-listpack-value
// (64 bytes) so that it stays a compact listpack rather than a hashtable:
// its tenant, group and id are in its key, an attempt of 0 is not stored
// (absent = 0), and its payload is
//   - absent when it is empty;
//   - the field "payload" when it has at most [PayloadChunk] bytes, or more
//     than [PayloadChunk] × [PayloadChunksMax] (a listpack could not hold it);
//   - otherwise cut into fields "p1", "p2", … of [PayloadChunk] bytes each
//     (the last one shorter).
//
// lua/lib.lua (payload_fields, job_read) writes and reads this layout.
const (
	// PayloadChunk is the most bytes of a payload in one field of a job hash.
	PayloadChunk = 64
	// PayloadChunksMax is the most fields a payload is cut into; a larger
	// payload is stored whole in the field "payload".
	PayloadChunksMax = 100
)

// JobPayload puts together the payload of a job hash read with HGETALL
// (nil when it has none).
func JobPayload(h map[string]string) []byte {
	if p, ok := h["payload"]; ok {
		return []byte(p)
	}
	type part struct {
		n int
		v string
	}
	var parts []part
	for k, v := range h {
		s, ok := strings.CutPrefix(k, "p")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			parts = append(parts, part{n, v})
		}
	}
	if len(parts) == 0 {
		return nil
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].n < parts[j].n })
	var b []byte
	for _, p := range parts {
		b = append(b, p.v...)
	}
	return b
}
