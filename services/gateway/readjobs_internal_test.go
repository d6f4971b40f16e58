package gateway

import (
	"strings"
	"testing"
)

// TestReadingAJobAllocatesItsStringsOnly: reading a job of the common form
// from an NDJSON body allocates its id and type strings and nothing else,
// so a tenant's upload of millions of jobs costs the gateway no garbage
// beyond them (the job itself stays off the heap).
func TestReadingAJobAllocatesItsStringsOnly(t *testing.T) { //nolint:paralleltest // AllocsPerRun
	line := `{"jobId":"e123456","type":"sleep","payload":{"ms":1}}` + "\n"
	src := newNDJSONSource(strings.NewReader(strings.Repeat(line, 3000)), 1<<20)
	n := testing.AllocsPerRun(1000, func() {
		j, _, err := src.next()
		if err != nil || j.JobID != "e123456" {
			t.Fatalf("%+v %v", j, err)
		}
	})
	if n > 2 {
		t.Errorf("%.1f allocations per job read, want at most 2 (its id and type)", n)
	}
}
