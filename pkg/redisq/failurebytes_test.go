package redisq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// failLarge enqueues n jobs of group g whose payloads have size bytes,
// dequeues them and records each as FAILED.
func failLarge(t *testing.T, q *redisq.Queue, g contracts.GroupRef, n, size int) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	payloads := map[string][]byte{}
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		id := fmt.Sprintf("j%05d", i)
		p := []byte(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", size-len(fmt.Sprintf(`{"i":%d,"pad":""}`, i)))))
		payloads[id] = p
		jobs[i] = redisq.Job{Group: g, ID: id, Type: "mail", Payload: p}
	}
	if _, err := q.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	for left := n; left > 0; {
		js, err := q.DequeueBatch(ctx, left)
		if err != nil || len(js) == 0 {
			t.Fatalf("dequeue: %d jobs, %v", len(js), err)
		}
		left -= len(js)
	}
	var rs []contracts.JobResult
	for i := 0; i < n; i++ {
		rs = append(rs, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: fmt.Sprintf("j%05d", i), Attempt: 1,
			Status: contracts.ResultFailed, Error: "boom"})
	}
	if _, err := q.RecordBatch(ctx, rs); err != nil {
		t.Fatal(err)
	}
	return payloads
}

// TestFailuresPageBoundedInBytes: a page of failures with large payloads
// stops at MaxFailuresPageBytes however many entries were asked for, and
// the pages still list every failure once, payloads whole.
func TestFailuresPageBoundedInBytes(t *testing.T) {
	t.Parallel()
	q, _ := setup(t, redisq.Config{}, true)
	g := G("big")
	const n, size = 40, 200 << 10 // 8 MB of payloads
	payloads := failLarge(t, q, g, n, size)
	fs, next, err := q.Failures(context.Background(), g, "", redisq.MaxFailuresPage)
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, f := range fs {
		read += len(f.Payload)
	}
	if next == "" || len(fs) >= n || read > redisq.MaxFailuresPageBytes+size {
		t.Fatalf("first page: %d entries, %d payload bytes, next %q; want at most %d bytes and a next page",
			len(fs), read, next, redisq.MaxFailuresPageBytes+size)
	}
	all, pages := allFailures(t, q, g, redisq.MaxFailuresPage)
	seen := map[string]bool{}
	for _, f := range all {
		if seen[f.JobID] {
			t.Errorf("%s listed twice", f.JobID)
		}
		seen[f.JobID] = true
		if !bytes.Equal(f.Payload, payloads[f.JobID]) || f.Truncated || f.PayloadBytes != size {
			t.Errorf("%s: payload of %d bytes (PayloadBytes %d, truncated %v), want %d whole", f.JobID, len(f.Payload), f.PayloadBytes, f.Truncated, size)
		}
	}
	if len(seen) != n || pages < 2 {
		t.Errorf("%d failures over %d pages, want %d over several", len(seen), pages, n)
	}
}

// TestFailuresPageHead: with Head, a payload longer than Head is cut to
// its first Head bytes and marked, a shorter one is whole; Failure reads
// one entry whole.
func TestFailuresPageHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, true)
	g := G("head")
	payloads := failLarge(t, q, g, 3, 100<<10)
	small := G("small")
	failJobs(t, q, small, 2, 2, func(int) bool { return true })
	fs, next, err := q.FailuresPage(ctx, g, redisq.FailuresQuery{Limit: 10, Head: 1000})
	if err != nil || next != "" || len(fs) != 3 {
		t.Fatalf("page: %d entries, next %q, %v", len(fs), next, err)
	}
	for _, f := range fs {
		if !f.Truncated || f.PayloadBytes != 100<<10 || !bytes.Equal(f.Payload, payloads[f.JobID][:1000]) {
			t.Errorf("%s: truncated %v, %d of %d bytes", f.JobID, f.Truncated, len(f.Payload), f.PayloadBytes)
		}
	}
	sf, _, err := q.FailuresPage(ctx, small, redisq.FailuresQuery{Limit: 10, Head: 1000})
	if err != nil || len(sf) != 2 || sf[0].Truncated || !json.Valid(sf[0].Payload) || sf[0].PayloadBytes != len(sf[0].Payload) {
		t.Fatalf("small payloads %+v %v", sf, err)
	}
	one, found, err := q.Failure(ctx, g, "j00001")
	if err != nil || !found || one.Truncated || !bytes.Equal(one.Payload, payloads["j00001"]) || one.Type != "mail" ||
		one.Error != "boom" || one.Attempts != 1 || one.PayloadBytes != 100<<10 || one.FinishedAt.IsZero() {
		t.Fatalf("Failure: %v %v, %d bytes", found, err, len(one.Payload))
	}
	if _, found, err := q.Failure(ctx, g, "nope"); found || err != nil {
		t.Fatalf("Failure of a job that did not fail: %v %v", found, err)
	}
}

// TestFailuresPageHeadReadsHeadsOnly: a listing with Head reads the heads
// kept at the failures, not the payloads: a page of payloads far larger
// in all than MaxFailuresPageBytes comes whole in one call, each entry
// with its size and first bytes.
func TestFailuresPageHeadReadsHeadsOnly(t *testing.T) {
	t.Parallel()
	q, _ := setup(t, redisq.Config{}, true)
	g := G("heads")
	const n, size = 40, 200 << 10 // 8 MB of payloads
	payloads := failLarge(t, q, g, n, size)
	fs, next, err := q.FailuresPage(context.Background(), g, redisq.FailuresQuery{Limit: redisq.MaxFailuresPage, Head: 1000})
	if err != nil || next != "" || len(fs) != n {
		t.Fatalf("page: %d of %d entries, next %q, %v: the whole payloads were read", len(fs), n, next, err)
	}
	for _, f := range fs {
		if !f.Truncated || f.PayloadBytes != size || !bytes.Equal(f.Payload, payloads[f.JobID][:1000]) ||
			f.Type != "mail" || f.Error != "boom" || f.Attempts != 1 {
			t.Errorf("%s: %+v (%d bytes)", f.JobID, f, len(f.Payload))
		}
	}
}
