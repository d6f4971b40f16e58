package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultBullMQDir is the directory of the BullMQ peer (peer.mjs,
// package.json and package-lock.json), relative to package bench's
// directory, where `go test` runs.
const DefaultBullMQDir = "bullmq"

// ErrNoNode is returned by [StartBullMQ] when node or npm is not on PATH.
var ErrNoNode = errors.New("bench: the BullMQ peer needs Node.js 20+ and npm on PATH (or leave it out: -e2e.only pipeline,asynq)")

// BullMQOptions configure a [BullMQ] peer.
type BullMQOptions struct {
	// RedisURL is the redis:// URL of BullMQ's database. Required (the
	// benchmark passes [Env.RedisURL]([BullMQDB])).
	RedisURL string
	// Concurrency is the Worker's concurrency; 0 means [DefaultWorkers].
	Concurrency int
	// Dir holds peer.mjs and its package files; "" means
	// [DefaultBullMQDir].
	Dir string
	// Progress, when set, is called with a line when the peer installs its
	// packages and when it is ready.
	Progress func(string)
}

// BullMQ runs the benchmark's workloads through BullMQ
// (https://docs.bullmq.io): a Node.js process (peer.mjs) with one Queue and
// one Worker whose processor does nothing but count, driven by one JSON
// request per line on its stdin. Start it with [StartBullMQ]; runs must not
// overlap.
type BullMQ struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte   // stdout, one line each; closed at EOF
	exited chan struct{} // closed when the process has exited
	stderr *tailBuffer

	mu sync.Mutex // one request at a time
}

// bullmqReply is every field a peer.mjs answer may carry.
type bullmqReply struct {
	Op    string `json:"op"`
	Error string `json:"error"`
	// ready
	BullMQ      string `json:"bullmq"`
	Node        string `json:"node"`
	Concurrency int    `json:"concurrency"`
	// throughput, million
	ElapsedMs   float64 `json:"elapsed_ms"`
	SubmittedMs float64 `json:"submitted_ms"`
	// hol
	DelayMs          float64 `json:"delay_ms"`
	BacklogDoneFirst int64   `json:"backlog_done_first"`
	// latency
	Sent        int       `json:"sent"`
	DurationMs  float64   `json:"duration_ms"`
	LatenciesUs []float64 `json:"latencies_us"`
	// cpu
	CPUUs float64 `json:"cpu_us"`
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// StartBullMQ installs the peer's packages with `npm ci` when its
// node_modules directory is missing, starts `node peer.mjs` and returns once
// it has connected to Redis. It returns an error wrapping [ErrNoNode] when
// node or npm is missing.
func StartBullMQ(ctx context.Context, o BullMQOptions) (*BullMQ, error) {
	if o.RedisURL == "" {
		return nil, errors.New("bench: BullMQOptions.RedisURL is required")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultWorkers
	}
	if o.Dir == "" {
		o.Dir = DefaultBullMQDir
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoNode, err)
	}
	if err := installBullMQ(ctx, dir, o.Progress); err != nil {
		return nil, err
	}
	b := &BullMQ{lines: make(chan []byte, 1), exited: make(chan struct{}), stderr: &tailBuffer{max: 8 << 10}}
	b.cmd = exec.Command(node, "peer.mjs", "--redis", o.RedisURL, "--concurrency", strconv.Itoa(o.Concurrency))
	b.cmd.Dir = dir
	b.cmd.Stderr = b.stderr
	if b.stdin, err = b.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the BullMQ peer: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 256<<20) // latency answers carry every sample
		for sc.Scan() {
			b.lines <- bytes.Clone(sc.Bytes())
		}
		close(b.lines)
		_ = b.cmd.Wait() // only after the last read: Wait closes the pipe
		close(b.exited)
	}()
	r, err := b.read(ctx, 60*time.Second)
	if err == nil && r.Op != "ready" {
		err = fmt.Errorf("bench: BullMQ peer: first line %q, want ready", r.Op)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	o.Progress(fmt.Sprintf("bullmq: peer ready (BullMQ %s, Node.js %s, Worker concurrency %d)", r.BullMQ, r.Node, r.Concurrency))
	return b, nil
}

// installBullMQ runs `npm ci` in dir unless dir/node_modules/bullmq exists
// (npm missing then is [ErrNoNode]).
func installBullMQ(ctx context.Context, dir string, progress func(string)) error {
	if _, err := os.Stat(filepath.Join(dir, "peer.mjs")); err != nil {
		return fmt.Errorf("bench: BullMQ peer: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "bullmq", "package.json")); err == nil {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoNode, err)
	}
	progress("bullmq: npm ci in " + dir)
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: npm ci --no-audit --no-fund in %s: %w\n%s", dir, err, tail(out, 4<<10))
	}
	return nil
}

// Close ends the peer: it closes its stdin, on which it exits, and kills it
// if it has not exited within 10 s.
func (b *BullMQ) Close() {
	_ = b.stdin.Close()
	go func() { // unread answers must not hold up the reader
		for range b.lines {
		}
	}()
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
}

// read returns the next answer, failing when the peer exits, ctx ends or
// timeout passes (0 = none).
func (b *BullMQ) read(ctx context.Context, timeout time.Duration) (bullmqReply, error) {
	var r bullmqReply
	var tc <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	select {
	case line, ok := <-b.lines:
		if !ok {
			<-b.exited
			return r, fmt.Errorf("bench: BullMQ peer exited (%v): %s", b.cmd.ProcessState, b.stderr.String())
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return r, fmt.Errorf("bench: BullMQ peer: line %q: %w", tail(line, 200), err)
		}
		if r.Error != "" {
			return r, fmt.Errorf("bench: BullMQ peer: %s: %s", r.Op, r.Error)
		}
		return r, nil
	case <-ctx.Done():
		return r, ctx.Err()
	case <-tc:
		return r, fmt.Errorf("bench: BullMQ peer: no answer within %s: %s", timeout, b.stderr.String())
	}
}

// call sends one request and returns its answer. A request cut short by ctx
// leaves the peer unusable (its answer would be read by the next call):
// close it.
func (b *BullMQ) call(ctx context.Context, req map[string]any) (bullmqReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		return bullmqReply{}, err
	}
	if _, err := b.stdin.Write(append(line, '\n')); err != nil {
		return bullmqReply{}, fmt.Errorf("bench: BullMQ peer: %w: %s", err, b.stderr.String())
	}
	r, err := b.read(ctx, 0)
	if err == nil && r.Op != req["op"] {
		err = fmt.Errorf("bench: BullMQ peer: answer %q to %q", r.Op, req["op"])
	}
	return r, err
}

// CPU returns the CPU time (user + system) the Node.js process has used:
// its producer, its Worker, ioredis and the runtime.
func (b *BullMQ) CPU(ctx context.Context) (time.Duration, error) {
	r, err := b.call(ctx, map[string]any{"op": "cpu"})
	return time.Duration(r.CPUUs * float64(time.Microsecond)), err
}

// Throughput adds jobs jobs with addBulk (1000 per call) while the Worker
// runs and waits until the processor has run for every one.
func (b *BullMQ) Throughput(ctx context.Context, jobs int) (ThroughputResult, error) {
	r, err := b.call(ctx, map[string]any{"op": "throughput", "jobs": jobs})
	if err != nil {
		return ThroughputResult{}, err
	}
	return ThroughputResult{Jobs: jobs, Elapsed: msDuration(r.ElapsedMs), Submitted: msDuration(r.SubmittedMs)}, nil
}

// Million is the million run's workload: [BullMQ.Throughput] at a larger
// size, in a queue of its own (peer.mjs's "million" operation).
func (b *BullMQ) Million(ctx context.Context, jobs int) (ThroughputResult, error) {
	r, err := b.call(ctx, map[string]any{"op": "million", "jobs": jobs})
	if err != nil {
		return ThroughputResult{}, err
	}
	return ThroughputResult{Jobs: jobs, Elapsed: msDuration(r.ElapsedMs), Submitted: msDuration(r.SubmittedMs)}, nil
}

// HeadOfLine adds backlog jobs while no Worker runs, then starts the Worker
// and adds small jobs of another tenant to the same queue (BullMQ's open
// source edition has no groups), and measures until the processor has run
// for the small ones. It returns after the backlog has drained too.
func (b *BullMQ) HeadOfLine(ctx context.Context, backlog, small int) (HoLResult, error) {
	r, err := b.call(ctx, map[string]any{"op": "hol", "backlog": backlog, "small": small})
	if err != nil {
		return HoLResult{}, err
	}
	return HoLResult{Backlog: backlog, Small: small, Delay: msDuration(r.DelayMs), BacklogDoneFirst: r.BacklogDoneFirst}, nil
}

// Latency adds rate jobs per second for d and returns each job's time from
// its add call until its processor started, leaving out the jobs added
// during warmup.
func (b *BullMQ) Latency(ctx context.Context, rate float64, d, warmup time.Duration) (LatencyResult, error) {
	r, err := b.call(ctx, map[string]any{"op": "latency", "rate": rate, "duration_ms": Ms(d), "warmup_ms": Ms(warmup)})
	if err != nil {
		return LatencyResult{}, err
	}
	total := make([]time.Duration, len(r.LatenciesUs))
	for i, us := range r.LatenciesUs {
		total[i] = time.Duration(us * float64(time.Microsecond))
	}
	return LatencyResult{Rate: rate, Sent: r.Sent, Duration: msDuration(r.DurationMs), Total: sorted(total)}, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// tail returns the last n bytes of b as a string.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
