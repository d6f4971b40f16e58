package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Sizes of the memory breakdown: one group of breakdownJobs jobs (with
// -figures; -breakdown.jobs changes it), of which MEMORY USAGE reads every
// key but the job hashes, and breakdownSample job hashes (their sum is
// scaled to all of them).
const (
	breakdownJobs   = 100_000
	breakdownSample = 2_000
)

var breakdownSize = flag.Int("breakdown.jobs", breakdownJobs, "jobs of the memory breakdown's group with -figures")

// BenchmarkRedisqMemoryBreakdown tells where the bytes of queued jobs go. It
// enqueues one group of 100,000 jobs with 100-byte payloads and prints, per
// kind of key (the group's queued records, job list, id set and meta, job
// hashes, the indexes and the fair queue's keys), the keys, their bytes by
// MEMORY USAGE (the job hashes by a sample scaled to all of them), the bytes
// per job and the encoding (OBJECT ENCODING); then the same after every job
// has left the list (take: its record became its job hash, LEASED, its id
// entered the group's id set). Each phase also prints used_memory's growth
// per job beyond the payload (memory_per_job_beyond_payload_queued_1group,
// …_dequeued_1group).
func BenchmarkRedisqMemoryBreakdown(b *testing.B) {
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Alpha: serviceAlpha, GlobalLimit: ungated})
	ctx := context.Background()
	n := size(b, *breakdownSize)
	g := contracts.GroupRef{Tenant: benchTenant, ID: "group-breakdown"}
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: jobID(i), Type: "send-promotion", Payload: payload(i)}
	}
	before := s.usedMemory(b)
	b.StartTimer()
	enqueueAll(b, q, jobs)
	b.StopTimer()
	s.breakdown(b, q, "queued", n)
	b.ReportMetric(figure("memory_per_job_beyond_payload_queued_1group",
		float64(s.usedMemory(b)-before)/float64(n)-payloadLen), "bytes/job")
	for left := n; left > 0; {
		got, err := take(ctx, q, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) == 0 {
			b.Fatalf("%d jobs left in the list, none dequeued", left)
		}
		left -= len(got)
	}
	s.breakdown(b, q, "dequeued", n)
	b.ReportMetric(figure("memory_per_job_beyond_payload_dequeued_1group",
		float64(s.usedMemory(b)-before)/float64(n)-payloadLen), "bytes/job")
}

// breakdownRow is one kind of key in the breakdown's JSON lines.
type breakdownRow struct {
	Bench       string  `json:"bench"`
	Name        string  `json:"name"`
	Phase       string  `json:"phase"`
	Kind        string  `json:"kind"`
	Keys        int     `json:"keys"`
	Bytes       int64   `json:"bytes"`
	BytesPerJob float64 `json:"bytes_per_job"`
	Encoding    string  `json:"encoding"`
	Sampled     bool    `json:"sampled,omitempty"`
}

// keyKind names the kind of a key of the queue by its key's shape.
func keyKind(k redisq.Keys, key string) string {
	rest := strings.TrimPrefix(key, k.Prefix())
	switch {
	case strings.HasPrefix(rest, "job:"):
		return "job_hash"
	case strings.HasPrefix(rest, "group:"):
		return "group_" + rest[strings.LastIndex(rest, ":")+1:]
	case strings.HasPrefix(rest, "tenant:"):
		return "tenant_" + rest[strings.LastIndex(rest, ":")+1:]
	default:
		if i := strings.IndexAny(rest, ":"); i > 0 {
			return rest[:i]
		}
		return rest
	}
}

// breakdown prints one JSON line per kind of key (with -figures) and logs
// them: keys, bytes (MEMORY USAGE), bytes per job of n and encodings.
func (s *server) breakdown(b *testing.B, q *redisq.Queue, phase string, n int) {
	b.Helper()
	ctx := context.Background()
	var keys []string
	iter := s.rdb.Scan(ctx, 0, keysOf(q).Prefix()+"*", 10_000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
	sort.Strings(keys)
	type acc struct {
		keys, read int
		bytes      int64
		encodings  map[string]bool
	}
	kinds := map[string]*acc{}
	for _, key := range keys {
		kind := keyKind(keysOf(q), key)
		a := kinds[kind]
		if a == nil {
			a = &acc{encodings: map[string]bool{}}
			kinds[kind] = a
		}
		a.keys++
		if kind == "job_hash" && a.keys%max(1, n/breakdownSample) != 0 {
			continue
		}
		// SAMPLES 0 reads every element of a key (exact for big lists and sets)
		used, err := s.rdb.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			b.Fatal(err)
		}
		enc, err := s.rdb.ObjectEncoding(ctx, key).Result()
		if err != nil {
			b.Fatal(err)
		}
		a.read++
		a.bytes += used
		a.encodings[enc] = true
	}
	names := make([]string, 0, len(kinds))
	for kind := range kinds {
		names = append(names, kind)
	}
	sort.Strings(names)
	var total int64
	for _, kind := range names {
		a := kinds[kind]
		bytes := a.bytes
		if a.read < a.keys {
			bytes = bytes * int64(a.keys) / int64(a.read)
		}
		total += bytes
		encs := make([]string, 0, len(a.encodings))
		for e := range a.encodings {
			encs = append(encs, e)
		}
		sort.Strings(encs)
		s.breakdownLine(b, breakdownRow{Phase: phase, Kind: kind, Keys: a.keys, Bytes: bytes,
			BytesPerJob: round(float64(bytes) / float64(n)), Encoding: strings.Join(encs, ","), Sampled: a.read < a.keys})
	}
	s.breakdownLine(b, breakdownRow{Phase: phase, Kind: "all", Keys: len(keys), Bytes: total,
		BytesPerJob: round(float64(total) / float64(n))})
}

func (s *server) breakdownLine(b *testing.B, r breakdownRow) {
	r.Bench, r.Name = "redisq", "memory_breakdown"
	line, err := json.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	if *figures {
		fmt.Fprintln(os.Stdout, string(line))
	} else {
		b.Log(string(line))
	}
}
