package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

var (
	figures   = flag.Bool("figures", false, "run the fair-queue benchmarks at their fixed sizes and print each figure as a JSON line")
	admission = flag.Bool("admission", false, "run BenchmarkAdmission (the admission load test, about a minute per admission mode)")
)

// TestMain fails the run if a benchmark leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a benchmark's private redis-server and a client of it.
type server struct {
	rdb *redis.Client
}

// startServer starts a redis-server for b alone, applies the CONFIG SET
// pairs in config, and stops the server when b ends.
func startServer(b *testing.B, config ...string) *server {
	b.Helper()
	srv, err := testenv.StartRedisServer(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 8})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for i := 0; i+1 < len(config); i += 2 {
		if err := rdb.ConfigSet(ctx, config[i], config[i+1]).Err(); err != nil {
			b.Fatalf("CONFIG SET %s %s: %v", config[i], config[i+1], err)
		}
	}
	return &server{rdb: rdb}
}

// queue returns a Queue on the server with cfg (defaults for zero fields).
func (s *server) queue(b *testing.B, cfg redisq.Config) *redisq.Queue {
	b.Helper()
	q, err := redisq.New(context.Background(), s.rdb, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return q
}

// ungated is a global limit per window no benchmark reaches: a queue with
// it takes jobs in fair order with no rate gate to speak of.
const ungated = 1 << 30

// take takes up to n jobs in fair order as the fetcher hands them on:
// Admit, then Confirm (as once they are on READY).
func take(ctx context.Context, q *redisq.Queue, n int) ([]redisq.LeasedJob, error) {
	r, err := q.Admit(ctx, n)
	if err != nil {
		return nil, err
	}
	return r.Jobs, q.Confirm(ctx, r.Jobs...)
}

// takeAll takes jobs from q, per at a time, until it has n, and returns
// how many it took; it fails b if the queue runs dry first.
func takeAll(b *testing.B, q *redisq.Queue, n, per int) int {
	b.Helper()
	got := 0
	for got < n {
		js, err := take(context.Background(), q, per)
		if err != nil {
			b.Fatal(err)
		}
		if len(js) == 0 {
			b.Fatalf("queue empty after %d of %d jobs", got, n)
		}
		got += len(js)
	}
	return got
}

// keysOf returns the key names of q's prefix, for the benchmarks that read
// or fill raw state around the queue's methods.
func keysOf(q *redisq.Queue) redisq.Keys { return redisq.NewKeys(q.Config().Prefix) }

// commandStats returns the calls of every command in INFO commandstats
// ("get", "script|load", ...). Commands that scripts call are counted too.
func (s *server) commandStats(b *testing.B) map[string]int64 {
	b.Helper()
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	stats, err := parseCommandStats(info)
	if err != nil {
		b.Fatal(err)
	}
	return stats
}

func parseCommandStats(info string) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("commandstats line %q", sc.Text())
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats line %q: %w", sc.Text(), err)
				}
				out[name] = n
			}
		}
	}
	return out, sc.Err()
}

// callsBetween sums the calls made between two commandstats snapshots,
// leaving out the commands named in skip (and their subcommands).
func callsBetween(before, after map[string]int64, skip ...string) int64 {
	var n int64
next:
	for name, calls := range after {
		for _, s := range skip {
			if name == s || strings.HasPrefix(name, s+"|") {
				continue next
			}
		}
		n += calls - before[name]
	}
	return n
}

// scriptSkips are the commands left out of "Redis calls per job": the
// script wrappers themselves and the benchmark's own INFO and SCRIPT calls.
var scriptSkips = []string{"evalsha", "eval", "info", "script"}

// usedMemory is INFO memory's used_memory in bytes.
func (s *server) usedMemory(b *testing.B) int64 {
	b.Helper()
	info, err := s.rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO memory has no used_memory")
	return 0
}

// size is a workload's size: fixed with -figures, else b.N.
func size(b *testing.B, fixed int) int {
	if *figures {
		return fixed
	}
	return b.N
}

// figure prints one figure as a JSON line (with -figures) and returns v.
func figure(name string, v float64) float64 {
	if *figures {
		line, _ := json.Marshal(struct {
			Bench string  `json:"bench"`
			Name  string  `json:"name"`
			Value float64 `json:"value"`
		}{"redisq", name, round(v)})
		fmt.Fprintln(os.Stdout, string(line))
	}
	return v
}

// round keeps four decimals (JSON lines stay short; no figure needs more).
func round(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return math.Round(v*1e4) / 1e4
}

// Realistic shapes: ids like the contracts allow, 100-byte payloads.

const payloadLen = 100

// benchTenant is the tenant of every group but the tenant scenario's.
const benchTenant = "tenant-0"

func groupID(g int) string { return fmt.Sprintf("group-%03d", g) }

// groupRef is group g of benchTenant.
func groupRef(g int) contracts.GroupRef {
	return contracts.GroupRef{Tenant: benchTenant, ID: groupID(g)}
}

func jobID(i int) string { return fmt.Sprintf("job-%06d", i) }

// payload is a 100-byte JSON document for job i.
func payload(i int) []byte {
	p := fmt.Appendf(nil, `{"target":"user-%06d","promotion":"spring-sale","channel":"push","body":"`, i)
	for len(p) < payloadLen-2 {
		p = append(p, 'x')
	}
	return append(p, '"', '}')
}

func job(g, i int) redisq.Job {
	return redisq.Job{Group: groupRef(g), ID: jobID(i), Type: "send-promotion", Payload: payload(i)}
}

// enqueueAll enqueues jobs in batches of at most 1000 and fails b unless
// every job was added.
func enqueueAll(b *testing.B, q *redisq.Queue, jobs []redisq.Job) {
	b.Helper()
	ctx := context.Background()
	for i := 0; i < len(jobs); i += 1000 {
		out, err := q.EnqueueBatch(ctx, jobs[i:min(i+1000, len(jobs))])
		if err != nil {
			b.Fatal(err)
		}
		for k, o := range out {
			if o != redisq.Added {
				b.Fatalf("job %s: %v", jobs[i+k].ID, o)
			}
		}
	}
}

// percentile is the p-th percentile (0..1) of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
