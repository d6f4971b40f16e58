package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// row is one line of the results table.
type row struct {
	id, faults string
	jobs       int
	lost       int
	double     int
	failed     int
	dur        time.Duration
	verdict    string // PASS, FAIL or SKIP
	notes      []string
}

// run is the shape of every scenario but T8: a fresh installation, a
// workload submitted while fault() runs, the accounting, then T9.
type run struct {
	id      string
	opts    envOptions
	w       workload
	timeout time.Duration // how long the groups get to end after the faults
	// faults injects faults until ctx ends (all groups ended, or the
	// scenario's budget); it returns the faults it injected, described.
	faults func(ctx context.Context, e *env) string
	// maxFaultTime bounds the fault phase.
	maxFaultTime time.Duration
	// check adds scenario-specific checks (after the accounting).
	check func(e *env, tl *tally) []string
	// note, when set, adds a note to the row after the checks.
	note func() string
	// crashesAllowed: service exits not caused by the suite are expected
	// (T5's poison jobs).
	crashesAllowed bool
	// submit, when set, submits the workload in place of env.submit (T14
	// seals each group with the jobs its tenant's quota accepted).
	submit func(ctx context.Context, e *env, plans []*groupPlan) error
	// dlqChecked: check judges the DLQ itself (T14: the submissions a
	// quota refused are dead-lettered); otherwise it must be empty.
	dlqChecked bool
}

// execute runs r and returns its row (and the env, for checks).
func (r run) execute(t *testing.T) row {
	start := time.Now()
	e := newEnv(t, r.id, r.opts)
	// Group ids take the scenario's id: T7+ and T7- become t7plus and t7minus.
	plans := r.w.plans(strings.NewReplacer("+", "plus", "-", "minus").Replace(strings.ToLower(r.id)))
	ctx := context.Background()

	faultCtx, stopFaults := context.WithTimeout(ctx, r.maxFaultTime)
	defer stopFaults()
	var faultDesc string
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		if r.faults != nil {
			faultDesc = r.faults(faultCtx, e)
		} else {
			faultDesc = "none"
		}
	}()
	// The faults stop once everything is submitted and every group has
	// ended (or at maxFaultTime).
	var submitted atomic.Bool
	go func() {
		for faultCtx.Err() == nil {
			if submitted.Load() && e.allEnded(plans) {
				stopFaults()
				return
			}
			select {
			case <-faultCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	subCtx, cancelSub := context.WithTimeout(ctx, r.maxFaultTime+r.timeout)
	var err error
	if r.submit != nil {
		err = r.submit(subCtx, e, plans)
	} else {
		err = e.submit(subCtx, r.w, plans)
	}
	cancelSub()
	submitted.Store(true)
	<-faultsDone
	faultEnd := time.Since(start)
	tl := e.account(plans, r.timeout)
	endedAt := time.Since(start)
	rw := row{id: r.id, faults: faultDesc, jobs: tl.jobs, lost: tl.lost, double: tl.double, failed: tl.failedUnexp}
	rw.notes = append(rw.notes, tl.notes...)
	if err != nil {
		rw.notes = append(rw.notes, "submit: "+err.Error())
	}
	problems := e.t9(plans, 45*time.Second)
	rw.notes = append(rw.notes, fmt.Sprintf("phases: faults until %s, groups ended %s, T9 done %s",
		faultEnd.Round(time.Second), endedAt.Round(time.Second), time.Since(start).Round(time.Second)))
	if r.check != nil {
		problems = append(problems, r.check(e, tl)...)
	}
	if r.note != nil {
		rw.notes = append(rw.notes, r.note())
	}
	if n, desc := e.crashes(); n > 0 {
		if r.crashesAllowed {
			rw.notes = append(rw.notes, fmt.Sprintf("%d expected crashes", n))
		} else {
			problems = append(problems, fmt.Sprintf("%d unexpected process exits: %s", n, desc))
		}
	}
	if d, err := e.dlqCount(); err == nil && d > 0 && r.id != "T6" && !r.dlqChecked {
		problems = append(problems, fmt.Sprintf("%d dead letters", d))
	}
	rw.notes = append(rw.notes, problems...)
	rw.dur = time.Since(start)
	rw.verdict = "PASS"
	if rw.lost > 0 || rw.double > 0 || rw.failed > 0 || len(problems) > 0 || err != nil {
		rw.verdict = "FAIL"
	}
	return rw
}

// allEnded reports whether every group's meta says COMPLETED or CANCELLED.
func (e *env) allEnded(plans []*groupPlan) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pl := e.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(plans))
	for i, p := range plans {
		cmds[i] = pl.HGet(ctx, e.tenantKeys(p.ref.Tenant).GroupMeta(p.ref), "status")
	}
	_, _ = pl.Exec(ctx)
	for _, c := range cmds {
		if s := c.Val(); s != string(contracts.StateCompleted) && s != string(contracts.StateCancelled) {
			return false
		}
	}
	return true
}

// mixed is the default job mix: three noop jobs in four, the rest "sleep"
// for 20 ms (so kills catch jobs running).
func mixed(t, g, i int) (string, string, bool) {
	if i%4 == 3 {
		return "sleep", `{"ms":20}`, false
	}
	return "noop", fmt.Sprintf(`{"t":%d,"g":%d,"i":%d}`, t, g, i), false
}

// ---------------------------------------------------------------- T1

func t1(p profile) run {
	return run{
		id:           "T1",
		w:            workload{Tenants: 4, Groups: p.t1Groups, Jobs: p.t1Jobs / (4 * p.t1Groups), Job: mixed, Rate: p.t1Rate},
		timeout:      p.settle,
		maxFaultTime: p.t1FaultTime,
		faults: func(ctx context.Context, e *env) string {
			per := map[string]int{}
			n := 0
			for sleepRand(ctx, 2*time.Second, 5*time.Second) {
				s := e.svcs[rand.IntN(len(e.svcs))]
				if s.kill9() {
					n++
					per[strings.SplitN(s.name, "-", 2)[0]]++
				}
			}
			return fmt.Sprintf("%d× kill -9 service (%s)", n, fmtCounts(per))
		},
	}
}

func fmtCounts(m map[string]int) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// ---------------------------------------------------------------- T2

func t2(p profile) run {
	return run{
		id:           "T2",
		w:            workload{Tenants: 3, Groups: 4, Jobs: p.t2Jobs / 12, Job: mixed, Rate: p.rate},
		timeout:      p.settle,
		maxFaultTime: 5 * time.Minute,
		faults: func(ctx context.Context, e *env) string {
			n := 0
			for n < p.t2Kills && sleepRand(ctx, 2*time.Second, 4*time.Second) {
				e.redis.kill()
				n++
				time.Sleep(300 * time.Millisecond)
				if err := e.redis.start(); err != nil {
					return fmt.Sprintf("%d× kill -9 redis, restart failed: %v", n, err)
				}
			}
			return fmt.Sprintf("%d× kill -9 redis (AOF always)", n)
		},
	}
}

// ---------------------------------------------------------------- T4

func t4(p profile) run {
	return run{
		id:           "T4",
		w:            workload{Tenants: 3, Groups: 4, Jobs: p.t4Jobs / 12, Job: mixed, Rate: p.rate},
		timeout:      p.settle,
		maxFaultTime: 3 * time.Minute,
		faults: func(_ context.Context, e *env) string {
			ctx := context.Background() // both outages happen, whatever the workload does
			var done []string
			if sleepRand(ctx, time.Second, 2*time.Second) {
				e.redis.stopWith(syscall.SIGTERM)
				time.Sleep(p.t4Outage)
				if err := e.redis.start(); err != nil {
					return "redis restart failed: " + err.Error()
				}
				done = append(done, fmt.Sprintf("redis stopped %s", p.t4Outage))
			}
			if sleepRand(ctx, 3*time.Second, 4*time.Second) {
				e.redis.signal(syscall.SIGSTOP)
				time.Sleep(p.t4Outage)
				e.redis.signal(syscall.SIGCONT)
				done = append(done, fmt.Sprintf("SIGSTOP %s", p.t4Outage))
			}
			return strings.Join(done, " + ")
		},
	}
}

// ---------------------------------------------------------------- T5

// t5 runs the same paced workload twice through crash workers: without
// poison, then with 1% poison jobs that end their worker process. It
// returns one row (the poison run) with the p99 comparison in its notes.
func t5(t *testing.T, p profile) row {
	w := workload{Tenants: 2, Groups: 2, Jobs: p.t5Jobs / 4, Rate: p.t5Rate}
	// Processors run in executor processes (WORKER_ISOLATION=process): a
	// poison job crashes its executor, not its worker.
	opts := envOptions{CrashWorker: true, Settings: map[string]string{"MAX_DELIVERIES": p.t5Deliveries, "WORKER_ISOLATION": "process"}}
	base := run{id: "T5-base", opts: opts, w: w, timeout: p.settle, maxFaultTime: 10 * time.Minute}
	w.Job = func(_, g, i int) (string, string, bool) {
		if i%100 == 50 { // 1%
			return "crash", `{"poison":true}`, true
		}
		return "crash", fmt.Sprintf(`{"poison":false,"g":%d,"i":%d}`, g, i), false
	}
	base.w.Job = func(_, g, i int) (string, string, bool) {
		return "crash", fmt.Sprintf(`{"poison":false,"g":%d,"i":%d}`, g, i), false
	}
	var baseTally, poisonTally *tally
	base.check = func(_ *env, tl *tally) []string { baseTally = tl; return nil }
	br := base.execute(t)
	poison := run{id: "T5", opts: opts, w: w, timeout: p.settle + 3*time.Minute, maxFaultTime: 15 * time.Minute,
		crashesAllowed: true,
		check:          func(_ *env, tl *tally) []string { poisonTally = tl; return nil }}
	pr := poison.execute(t)
	pr.faults = fmt.Sprintf("%d poison jobs (crash the worker), MAX_DELIVERIES=%s", w.total()/100, p.t5Deliveries)
	if br.verdict != "PASS" {
		pr.notes = append(pr.notes, "baseline run: "+strings.Join(br.notes, "; "))
		pr.lost += br.lost
		pr.double += br.double
		pr.failed += br.failed
		pr.verdict = "FAIL"
	}
	if baseTally != nil && poisonTally != nil {
		b99, p99 := pct(baseTally.latencies, 99), pct(poisonTally.latencies, 99)
		ratio := float64(p99) / float64(max(b99, 1))
		verdict := "within 2×"
		if ratio > 2 {
			verdict = "OVER the 2× goal"
		}
		pr.notes = append(pr.notes, fmt.Sprintf("healthy p50 %d→%d ms, p99 %d ms without poison → %d ms with (%.1f×, %s)",
			pct(baseTally.latencies, 50), pct(poisonTally.latencies, 50), b99, p99, ratio, verdict))
	}
	pr.dur += br.dur
	return pr
}

func pct(xs []int64, p int) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// ---------------------------------------------------------------- T6

// badMessages makes n submit bodies that must each be dead-lettered, of
// many kinds, with the subject each goes to.
func badMessages(n int, names contracts.Names) (subjects []string, bodies [][]byte) {
	valid := `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"noop","payload":{"x":1}},{"jobId":"b","type":"noop","payload":[1,2,3]}]}`
	r := rand.New(rand.NewPCG(6, 6))
	kinds := 0
	for i := 0; len(bodies) < n; i++ {
		g := contracts.Group(fmt.Sprintf("tenant-%d", i%3), fmt.Sprintf("bad-%d", i%50))
		subj := names.Submit(g)
		var b []byte
		switch i % 12 {
		case 0: // truncated JSON
			b = []byte(valid[:1+r.IntN(len(valid)-2)])
		case 1: // random bytes after a brace
			b = make([]byte, 1+r.IntN(300))
			for k := range b {
				b[k] = byte(r.IntN(256))
			}
			b = append([]byte("{"), b...)
		case 2: // oversize payload (MAX_PAYLOAD_BYTES is 4096 in T6)
			b = []byte(`{"v":2,"kind":"jobs","jobs":[{"jobId":"big","type":"noop","payload":"` + strings.Repeat("x", 5000+r.IntN(20000)) + `"}]}`)
		case 3: // escape-heavy payload over the limit once decoded or not
			b = []byte(`{"v":2,"kind":"jobs","jobs":[{"jobId":"esc","type":"noop","payload":"` + strings.Repeat(`\u00e9\"\\\n`, 1000+r.IntN(2000)) + `"}]}`)
		case 4: // escape-heavy ids: control characters, not tokens
			b = []byte(`{"v":2,"kind":"jobs","jobs":[{"jobId":"\u0000\u0001\u001f` + strings.Repeat(`\ud83d\ude00`, r.IntN(50)) + `","type":"noop"}]}`)
		case 5: // deep nesting
			d := 5000 + r.IntN(20000)
			b = []byte(`{"v":2,"kind":"jobs","jobs":[{"jobId":"deep","type":"noop","payload":` + strings.Repeat("[", d) + strings.Repeat("]", d) + `}]}`)
		case 6: // wrong version
			b = []byte(strings.Replace(valid, `"v":2`, fmt.Sprintf(`"v":%d`, []int{1, 3, -1, 0}[r.IntN(4)]), 1))
		case 7: // unknown kind
			b = []byte(`{"v":2,"kind":"explode"}`)
		case 8: // subject mismatch
			b = []byte(`{"v":2,"kind":"jobs","groupId":"other","jobs":[{"jobId":"a","type":"noop"}]}`)
		case 9: // invalid UTF-8 inside strings
			b = []byte("{\"v\":2,\"kind\":\"jobs\",\"jobs\":[{\"jobId\":\"\xff\xfe\",\"type\":\"no\xc3op\"}]}")
		case 10: // bad seal
			b = []byte(fmt.Sprintf(`{"v":2,"kind":"seal","total":%d}`, -1-r.IntN(1000)))
		case 11: // too many items / repeated ids
			b = []byte(`{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"noop"},{"jobId":"a","type":"noop"}]}`)
		}
		if i%12 == 1 && json.Valid(b) {
			continue
		}
		kinds++
		subjects = append(subjects, subj)
		bodies = append(bodies, b)
	}
	return subjects, bodies
}

func t6(p profile) run {
	// Every bad message is counted in the DLQ: none of a tenant's is
	// dropped for the number of its dead letters of one reason.
	return run{
		id:           "T6",
		opts:         envOptions{Settings: map[string]string{"MAX_PAYLOAD_BYTES": "4096", "STREAM_DLQ_MAX_MSGS_PER_SUBJECT": "-1"}},
		w:            workload{Tenants: 3, Groups: 3, Jobs: p.t6Jobs / 9, Job: mixed, Rate: p.rate},
		timeout:      p.settle,
		maxFaultTime: 5 * time.Minute,
		faults: func(ctx context.Context, e *env) string {
			subjects, bodies := badMessages(p.t6Bad, e.names)
			var sent, failed int
			for i := range bodies {
				if ctx.Err() != nil {
					break
				}
				if err := retry(ctx, func(ctx context.Context) error {
					_, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: subjects[i], Data: bodies[i]})
					return err
				}); err != nil {
					failed++
					continue
				}
				sent++
			}
			badSent.Store(int64(sent))
			return fmt.Sprintf("%d bad messages (%d refused by the client)", sent, failed)
		},
		check: func(e *env, _ *tally) []string {
			want := uint64(badSent.Load())
			var got uint64
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				got, _ = e.dlqCount()
				if got >= want {
					break
				}
				time.Sleep(time.Second)
			}
			out := []string{}
			if got != want {
				out = append(out, fmt.Sprintf("DLQ holds %d, want %d", got, want))
			}
			if reasons := e.dlqReasons(); reasons != "" {
				t6Reasons.Store(reasons)
			}
			return out
		},
	}
}

var (
	badSent   atomic.Int64
	t6Reasons atomic.Value
)

// dlqReasons counts the DLQ's messages per reason (its subjects' last token:
// <prefix>.dlq.<tenant>.<reason>).
func (e *env) dlqReasons() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, e.names.StreamDLQ())
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return ""
	}
	m := map[string]int{}
	for subj, n := range info.State.Subjects {
		parts := strings.Split(subj, ".")
		m[parts[len(parts)-1]] += int(n)
	}
	return fmtCounts(m)
}

// ---------------------------------------------------------------- T3

func t3(p profile) run {
	return run{
		id:           "T3",
		opts:         envOptions{NATSNodes: 3},
		w:            workload{Tenants: 3, Groups: 4, Jobs: p.t3Jobs / 12, Job: mixed, Rate: p.rate},
		timeout:      p.settle + time.Minute,
		maxFaultTime: 10 * time.Minute,
		faults: func(_ context.Context, e *env) string {
			ctx := context.Background() // every step happens, whatever the workload does
			var done []string
			streams := []string{e.names.StreamSubmit(), e.names.StreamReady(), e.names.StreamResult(), e.names.StreamEvents(), e.names.StreamDLQ()}
			for _, st := range streams {
				if !sleepRand(ctx, 2*time.Second, 3*time.Second) {
					break
				}
				leader := e.streamLeader(st)
				n := e.node(leader)
				if n == nil {
					done = append(done, st+": no leader found")
					continue
				}
				n.kill()
				newLeader := ""
				for i := 0; i < 100; i++ {
					if l := e.streamLeader(st); l != "" && l != leader {
						newLeader = l
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				time.Sleep(2 * time.Second)
				if err := n.start(); err != nil {
					done = append(done, "restart "+n.name+": "+err.Error())
					continue
				}
				done = append(done, fmt.Sprintf("%s leader %s→%s", shortStream(st), leader, orNone(newLeader)))
			}
			if sleepRand(ctx, 2*time.Second, 3*time.Second) {
				n := e.nats[rand.IntN(len(e.nats))]
				n.kill()
				time.Sleep(p.t3NodeDown)
				if err := n.start(); err != nil {
					done = append(done, "restart "+n.name+": "+err.Error())
				} else {
					done = append(done, fmt.Sprintf("%s down %s", n.name, p.t3NodeDown))
				}
			}
			return "kill -9 leader: " + strings.Join(done, ", ")
		},
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func shortStream(s string) string {
	if i := strings.LastIndex(s, "_"); i >= 0 {
		return s[i+1:]
	}
	return s
}

func (e *env) streamLeader(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, name)
	if err != nil {
		return ""
	}
	info := s.CachedInfo()
	if info == nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

func (e *env) node(name string) *natsNode {
	for _, n := range e.nats {
		if n.name == name {
			return n
		}
	}
	return nil
}

// ---------------------------------------------------------------- T7

// goIgnoresFaketime reports whether faketime leaves a Go program's clock
// alone (it does: Go reads the vDSO clock, not libc's).
func goIgnoresFaketime(node string) (bool, string) {
	out, err := exec.Command("faketime", "-f", "+5m", node, "now").Output()
	if err != nil {
		return false, err.Error()
	}
	ts, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(out)))
	if err != nil {
		return false, err.Error()
	}
	skew := time.Until(ts).Round(time.Second)
	return skew < time.Minute && skew > -time.Minute, fmt.Sprintf("Go clock under faketime +5m is off by %s", skew)
}

// jemallocShim is the C source of a stand-in for libjemalloc.so.2 on
// glibc's allocator. libfaketime cannot run a program linked with jemalloc
// (jemalloc calls clock_gettime while libfaketime initialises, and
// libfaketime aborts: "Unexpected recursive calls to clock_gettime()",
// wolfcw/libfaketime#130), and Debian's redis-server links it dynamically:
// with the shim first on LD_LIBRARY_PATH the same redis-server runs on
// glibc malloc under faketime. It defines the jemalloc-only symbols
// redis-server imports (mallctl, nallocx, malloc_stats_print, and the *allocx
// family for good measure); malloc, free & co. come from glibc.
const jemallocShim = `#include <stddef.h>
#include <stdlib.h>
#include <malloc.h>
#include <errno.h>
int mallctl(const char *n, void *o, size_t *ol, void *nw, size_t nl) { (void)n; (void)o; (void)ol; (void)nw; (void)nl; return ENOENT; }
size_t nallocx(size_t size, int flags) { (void)flags; return size; }
void malloc_stats_print(void (*cb)(void *, const char *), void *arg, const char *opts) { (void)opts; if (cb) cb(arg, "glibc malloc\n"); }
void *mallocx(size_t size, int flags) { (void)flags; return malloc(size); }
void *rallocx(void *p, size_t size, int flags) { (void)flags; return realloc(p, size); }
size_t sallocx(const void *p, int flags) { (void)flags; return malloc_usable_size((void *)p); }
void dallocx(void *p, int flags) { (void)flags; free(p); }
void sdallocx(void *p, size_t size, int flags) { (void)size; (void)flags; free(p); }
`

var (
	shimOnce sync.Once
	shimDir  string
	shimErr  error
)

// redisFaketimeWrap is the command that runs redis-server under faketime
// with skew: env LD_LIBRARY_PATH=<shim> faketime -f skew. It builds the shim
// with gcc once per test binary.
func redisFaketimeWrap(skew string) ([]string, error) {
	shimOnce.Do(func() {
		if _, err := exec.LookPath("gcc"); err != nil {
			shimErr = fmt.Errorf("gcc not found (it builds the jemalloc stand-in faketime needs)")
			return
		}
		d, err := os.MkdirTemp("", "bulkaction-chaos-shim-")
		if err != nil {
			shimErr = err
			return
		}
		src := filepath.Join(d, "shim.c")
		if err := os.WriteFile(src, []byte(jemallocShim), 0o644); err != nil {
			shimErr = err
			return
		}
		if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-o", filepath.Join(d, "libjemalloc.so.2"), src).CombinedOutput(); err != nil {
			shimErr = fmt.Errorf("gcc: %v: %s", err, out)
			return
		}
		shimDir = d
	})
	if shimErr != nil {
		return nil, shimErr
	}
	return []string{"env", "LD_LIBRARY_PATH=" + shimDir, "faketime", "-f", skew}, nil
}

// redisUnderFaketime starts a throw-away redis-server under faketime +5m
// (with the jemalloc stand-in) and checks that it answers with a skewed
// TIME.
func redisUnderFaketime(t *testing.T) error {
	wrap, err := redisFaketimeWrap("+5m")
	if err != nil {
		return err
	}
	dir := t.TempDir()
	port := testkit.FreePort(t)
	args := append(append([]string{}, wrap[1:]...), "redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no")
	cmd := exec.Command(wrap[0], args...)
	logPath := filepath.Join(dir, "out.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	// faketime runs redis-server as its child: kill the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-exited }()
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	defer c.Close()
	for i := 0; i < 50; i++ {
		select {
		case <-exited:
			i = 50
			continue
		case <-time.After(100 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		tm, err := c.Time(ctx).Result()
		cancel()
		if err == nil {
			if time.Until(tm) < 4*time.Minute {
				return fmt.Errorf("TIME not skewed: %s", time.Until(tm).Round(time.Second))
			}
			return nil
		}
	}
	b, _ := os.ReadFile(logPath)
	msg := strings.TrimSpace(string(b))
	if i := strings.IndexByte(msg, '\n'); i > 0 {
		msg = msg[:i]
	}
	return fmt.Errorf("redis-server did not answer: %s", msg)
}

// t7 skews redis-server's clock (the clock every script reads) by skew
// against the services, and runs some services under faketime with the
// opposite skew. It watches the non-ready queue (nothing released before
// it is due, by Redis's clock) and READY (no 1 s window over GLOBAL_RPS).
func t7(p profile, id, skew string) run {
	const rps = 300
	var early atomic.Int64
	var maxWindow atomic.Int64
	var watchStop func()
	var watchDone sync.WaitGroup
	opp := "-5m"
	if strings.HasPrefix(skew, "-") {
		opp = "+5m"
	}
	redisWrap, err := redisFaketimeWrap(skew)
	if err != nil {
		redisWrap = []string{"faketime", "-f", skew} // redisUnderFaketime reported it first
	}
	return run{
		id: id,
		opts: envOptions{
			RedisWrap: redisWrap,
			Wrap: map[string][]string{
				"dispatcher-1": {"faketime", "-f", opp}, "fetcher-1": {"faketime", "-f", opp}, "worker-1": {"faketime", "-f", opp},
			},
			// 30% of attempts fail: with 20 retries a job fails for good with
			// odds of 0.3^21, so every FAILED job is unexpected.
			Settings: map[string]string{"GLOBAL_RPS": fmt.Sprint(rps), "BASE_BACKOFF_MS": "500", "MAX_BACKOFF_MS": "3000",
				"MAX_RETRY_COUNT": "20"},
		},
		w: workload{Tenants: 2, Groups: 3, Jobs: p.t7Jobs / 6, Job: func(t, g, i int) (string, string, bool) {
			return "sleep", `{"ms":5,"failRate":0.3}`, false
		}},
		timeout:      p.settle + 2*time.Minute,
		maxFaultTime: 15 * time.Minute,
		faults: func(ctx context.Context, e *env) string {
			wctx, cancel := context.WithCancel(context.Background())
			watchStop = cancel
			watchDone.Add(2)
			go func() { defer watchDone.Done(); e.watchReleases(wctx, &early) }()
			go func() { defer watchDone.Done(); e.watchRate(wctx, &maxWindow) }()
			<-ctx.Done()
			return fmt.Sprintf("redis clock %s; fetcher-1, dispatcher-1, worker-1 under faketime %s", skew, opp)
		},
		check: func(e *env, _ *tally) []string {
			if watchStop != nil {
				watchStop()
				watchDone.Wait()
			}
			var out []string
			if n := early.Load(); n > 0 {
				out = append(out, fmt.Sprintf("%d backoff entries released early", n))
			}
			limit := int64(float64(rps)*1.04) + 10
			mw := maxWindow.Load()
			if mw > limit {
				out = append(out, fmt.Sprintf("rate overshoot: %d READY messages in 1 s, GLOBAL_RPS %d", mw, rps))
			}
			t7Notes.Store(id, fmt.Sprintf("max READY per 1 s window %d (GLOBAL_RPS %d), early releases %d", mw, rps, early.Load()))
			return out
		},
		crashesAllowed: false,
	}
}

var t7Notes sync.Map

// watchReleases samples the non-ready queue with Redis's own clock every
// 20 ms: an entry gone (or re-scored) at a time before its due time was
// released early.
func (e *env) watchReleases(ctx context.Context, early *atomic.Int64) {
	due := map[string]float64{}
	for ctx.Err() == nil {
		pl := e.rdb.TxPipeline()
		tm := pl.Time(ctx)
		zs := pl.ZRangeWithScores(ctx, e.keys.NonReadyQueue(), 0, 5000)
		if _, err := pl.Exec(ctx); err == nil {
			now := float64(tm.Val().UnixMilli())
			seen := make(map[string]float64, len(zs.Val()))
			for _, z := range zs.Val() {
				seen[z.Member.(string)] = z.Score
			}
			for m, d := range due {
				if s, ok := seen[m]; !ok || s != d {
					if now < d-5 {
						early.Add(1)
					}
				}
			}
			due = seen
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchRate counts READY messages per sliding 1 s window (a plain
// subscription: it consumes nothing).
func (e *env) watchRate(ctx context.Context, maxWindow *atomic.Int64) {
	var mu sync.Mutex
	var times []time.Time
	sub, err := e.nc.Subscribe(e.names.ReadyAll(), func(*nats.Msg) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
	})
	if err != nil {
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	mu.Lock()
	defer mu.Unlock()
	j := 0
	for i := range times {
		for times[i].Sub(times[j]) >= time.Second {
			j++
		}
		if n := int64(i - j + 1); n > maxWindow.Load() {
			maxWindow.Store(n)
		}
	}
}

// ---------------------------------------------------------------- T10

// t10 snapshots Redis (BGSAVE) once part of the work is done, lets the run
// go on, then kills Redis and restarts it from the older snapshot.
func t10(p profile) run {
	return run{
		id:           "T10",
		w:            workload{Tenants: 2, Groups: 4, Jobs: p.t10Jobs / 8, Job: mixed, Rate: p.rate},
		timeout:      p.settle + 2*time.Minute,
		maxFaultTime: 5 * time.Minute,
		faults: func(ctx context.Context, e *env) string {
			total := p.t10Jobs / 8 * 8
			snap := filepath.Join(e.dir, "snapshot.rdb")
			at := 0
			for ctx.Err() == nil {
				if at = e.doneJobs(); at >= total/4 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if ctx.Err() != nil {
				return "no snapshot: the run ended first"
			}
			if err := e.bgsave(snap); err != nil {
				return "snapshot failed: " + err.Error()
			}
			later := 0
			for ctx.Err() == nil {
				if later = e.doneJobs(); later >= total*2/3 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err := e.rollback(snap); err != nil {
				return err.Error()
			}
			return fmt.Sprintf("rolled back from %d to %d jobs done (snapshot at %d)", later, at, at)
		},
	}
}

// rollback kills redis-server and starts it again from the snapshot snap
// (bgsave), its append-only file dropped: a Redis that comes back older.
func (e *env) rollback(snap string) error {
	e.redis.kill()
	_ = os.RemoveAll(filepath.Join(e.redis.dir, "appendonlydir"))
	if err := copyFile(snap, filepath.Join(e.redis.dir, "dump.rdb")); err != nil {
		return fmt.Errorf("restore failed: %w", err)
	}
	e.redis.extra = []string{"--appendonly", "no"}
	if err := e.redis.start(); err != nil {
		return fmt.Errorf("restart failed: %w", err)
	}
	if err := e.rdb.ConfigSet(context.Background(), "appendonly", "yes").Err(); err != nil {
		return fmt.Errorf("appendonly on: %w", err)
	}
	return nil
}

// doneJobs sums doneJobs over the groups' metas.
func (e *env) doneJobs() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var cursor uint64
	total := 0
	for {
		keys, next, err := e.rdb.Scan(ctx, cursor, e.prefix+"group:*:meta", 1000).Result()
		if err != nil {
			return total
		}
		for _, k := range keys {
			n, _ := e.rdb.HGet(ctx, k, "doneJobs").Int()
			total += n
		}
		if cursor = next; cursor == 0 {
			return total
		}
	}
}

// bgsave writes an RDB snapshot and copies it to dst.
func (e *env) bgsave(dst string) error {
	ctx := context.Background()
	last, err := e.rdb.LastSave(ctx).Result()
	if err != nil {
		return err
	}
	if err := e.rdb.BgSave(ctx).Err(); err != nil {
		return err
	}
	for i := 0; i < 300; i++ {
		if l, err := e.rdb.LastSave(ctx).Result(); err == nil && l != last {
			return copyFile(filepath.Join(e.redis.dir, "dump.rdb"), dst)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("BGSAVE did not finish")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
